"""A multi-task run's frames per game, counted from the task of each trajectory."""

from __future__ import annotations

import torch

from stampede.train.games import GameFrames


def test_each_update_adds_its_trajectories_frames_to_their_games() -> None:
    counts = GameFrames(("pong", "breakout", "qbert"), [], frames_per_trajectory=80)
    assert counts.frames == [0, 0, 0]
    counts.add(torch.tensor([0, 0, 2, 1, 0]))  # 3 Pong trajectories, 1 Breakout, 1 Qbert
    assert counts.frames == [240, 80, 80]
    assert counts.of([2, 0]) == [("qbert", 80), ("pong", 240)]


def test_a_resumed_run_counts_on_from_its_checkpoint_and_sums_over_ranks() -> None:
    summed = []

    def all_reduce(t: torch.Tensor) -> None:  # two ranks with the same batch
        summed.append(True)
        t.mul_(2)

    counts = GameFrames(("pong", "breakout"), [1000, 500], 10, all_reduce=all_reduce)
    counts.add(torch.tensor([1, 1]))
    assert summed == [True]
    assert counts.frames == [1000, 540]

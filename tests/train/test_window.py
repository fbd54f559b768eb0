"""The window of updates between two log lines: means of the updates that were not skipped,
the skipped ones counted, and every finished game kept."""

from __future__ import annotations

import torch

from stampede.train.window import Window


def _batch() -> dict[str, torch.Tensor]:
    return {
        "actor_time": torch.ones(1, 5, dtype=torch.float64),
        "episode_return": torch.tensor([[float("nan")], [3.0]]),
        "episode_length": torch.tensor([[0], [7]]),
    }


def test_a_skipped_update_stays_out_of_the_interval_means() -> None:
    window = Window(frames=0, frames_per_step=1, world_size=1)
    good = {"loss/pg": 1.0, "loss/baseline": 2.0, "loss/entropy": -1.0, "learner/grad_norm": 4.0}
    good |= {"learner/skipped": 0.0}  # the learner's word on each update
    window.add(good | {"learner/explained_variance": 0.5}, _batch())
    nan = float("nan")
    skipped = {"loss/baseline": nan, "learner/grad_norm": nan, "learner/skipped": 1.0}
    window.add(good | skipped, _batch())
    window.add(good | {"learner/explained_variance": nan}, _batch())  # a NaN diagnostic only
    line = window.line(frames=300, updates=3)
    assert line["loss/baseline"] == 2.0
    assert line["learner/grad_norm"] == 4.0
    assert line["learner/explained_variance"] == 0.5
    assert line["learner/skipped_in_interval"] == 1
    assert line["env/episodes"] == 3  # the skipped update's games still count
    assert "learner/skipped" not in line  # a flag per update, not a figure

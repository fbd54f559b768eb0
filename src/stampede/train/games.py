"""A multi-task run's games (``env.games``) as the training loop counts them: the frames the
learner has consumed from each game, and each finished game's name and frames for the logs."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch


class GameFrames:
    """Each game's frames of a multi-task run, kept in ``frames`` (the checkpoint's
    ``task_frames``), from the tasks of the trajectories of each batch."""

    def __init__(
        self,
        games: Sequence[str],
        frames: list[int],
        frames_per_trajectory: int,
        all_reduce: Callable[[torch.Tensor], None] | None = None,
    ) -> None:
        self.games = tuple(games)
        self.frames = list(frames) or [0] * len(self.games)
        self.frames_per_trajectory = frames_per_trajectory  # unroll length x frame skip
        self.all_reduce = all_reduce  # sums the counts of all ranks (distributed runs)

    def add(self, task: torch.Tensor) -> None:
        """Count one update: ``task`` [B] is the task of each trajectory of this rank's batch."""
        counts = torch.bincount(task, minlength=len(self.games)).double()  # [K]
        counts *= self.frames_per_trajectory
        if self.all_reduce is not None:
            self.all_reduce(counts)
        self.frames = [f + int(c) for f, c in zip(self.frames, counts.tolist(), strict=True)]

    def of(self, tasks: Sequence[int]) -> list[tuple[str, int]]:
        """(game, its frames so far) of each task id in ``tasks`` (the games that just ended)."""
        return [(self.games[t], self.frames[t]) for t in tasks]

"""The training loop's metrics: the run's logger (``run_logger``) and the window of updates
between two log lines (``Window``). ``stampede.rundir.sinks`` writes what they give to every sink.

A line averages the updates of its interval (``loss/*``, ``vtrace/*``, ``learner/*``), gives the
throughput (``perf/*``), the actors' time budget (``time/actor/*``) and the games that ended in
it (``env/episode_return``, ``env/episode_length``); every finished game also gets its own line in
``episodes.jsonl``. A multi-task run adds, for each game, ``env/<game>/episode_return``,
``env/<game>/episode_length``, ``env/<game>/episodes`` and ``env/<game>/frames`` (the frames
the learner has consumed from that game). Key names: see the README.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch

from stampede.config.schema import Config
from stampede.rundir.sinks import MetricLogger
from stampede.train.timing import ACTOR_STAGES, fractions


def run_logger(cfg: Config, run_dir: Path, main_rank: bool, start_frames: int) -> MetricLogger:
    """The logger of a training run (rank 0 writes files and W&B; the other ranks only log)."""
    from omegaconf import OmegaConf

    w = cfg.logger.wandb
    return MetricLogger(
        run_dir,
        jsonl=cfg.logger.jsonl and main_rank,
        wandb_mode=w.mode if main_rank else "disabled",
        wandb_project=w.project,
        wandb_entity=w.entity,
        wandb_group=w.group or cfg.name,
        wandb_tags=list(w.tags),
        run_name=run_dir.name,
        config=OmegaConf.to_container(OmegaConf.structured(cfg)),  # type: ignore[arg-type]
        total_frames=cfg.total_frames,
        start_frames=start_frames,
        progress=cfg.logger.progress and main_rank,
    )


class Window:
    """Metrics of the updates since the last log line, averaged, and the games that ended.

    ``frames``: the run's frames when the window opens; ``frames_per_step`` (frame skip) and
    ``world_size`` (ranks) turn its frames per second into agent steps and frames per rank.
    ``games``: a multi-task run's games in task order (per-game metrics); () for one game.
    """

    def __init__(
        self, frames: int, frames_per_step: int, world_size: int, games: tuple[str, ...] = ()
    ) -> None:
        self.started, self.frames = time.monotonic(), frames
        self.frames_per_step, self.world_size = frames_per_step, world_size
        self.sums: dict[str, float] = defaultdict(float)
        self.counts: dict[str, int] = defaultdict(int)
        self.skipped = 0  # updates skipped for a non-finite loss or gradient in this interval
        self.actor_time = np.zeros(len(ACTOR_STAGES) + 1)  # seconds per stage, then wall
        self.games = games
        self.returns: list[float] = []
        self.lengths: list[int] = []
        self.tasks: list[int] = []  # the task of each game that ended
        self.new_episodes: tuple[list[float], list[int], list[int]] = ([], [], [])

    @property
    def age_s(self) -> float:
        return time.monotonic() - self.started

    def add(self, metrics: dict[str, float], batch: dict[str, torch.Tensor]) -> None:
        """Add an update's metrics (those of a skipped, non-finite update only to the count of
        skipped ones, so one NaN does not blank the interval) and its finished games."""
        if not metrics.get("learner/skipped"):  # the learner's word: a non-finite update
            for key, value in metrics.items():
                # not finite: e.g. the explained variance of targets that never vary
                if key != "learner/skipped" and math.isfinite(value):
                    self.sums[key] += value
                    self.counts[key] += 1
        else:
            self.skipped += 1
        self.actor_time += batch["actor_time"].sum(0).numpy()  # [S, stages + 1] -> [stages + 1]
        # Step 0 of a slot repeats the last step of the previous one: count episodes from 1 on.
        ended = batch["episode_return"][1:].isfinite()
        returns = batch["episode_return"][1:][ended].tolist()
        lengths = batch["episode_length"][1:][ended].tolist()
        tasks = batch["task"][1:][ended].tolist() if self.games else [0] * len(returns)
        self.returns += returns
        self.lengths += lengths
        self.tasks += tasks
        self.new_episodes = (returns, lengths, tasks)

    def line(
        self, frames: int, updates: int, task_frames: list[int] | None = None
    ) -> dict[str, float | int]:
        """The interval's log line, at ``frames`` and ``updates`` since the run started (and
        ``task_frames``, each game's frames so far, in a multi-task run)."""
        fps = (frames - self.frames) / max(self.age_s, 1e-9)
        line: dict[str, float | int] = {k: v / self.counts[k] for k, v in self.sums.items()}
        line["learner/skipped_in_interval"] = self.skipped
        line |= {
            "env/frames": frames,
            "learner/updates": updates,
            "perf/fps": fps,
            "perf/sps": fps / self.frames_per_step,
            "perf/fps_per_rank": fps / self.world_size,
        }
        line |= fractions("time/actor", ACTOR_STAGES, self.actor_time[:-1], self.actor_time[-1])
        if self.returns:
            line["env/episode_return"] = sum(self.returns) / len(self.returns)
            line["env/episode_length"] = sum(self.lengths) / len(self.lengths)
            line["env/episodes"] = len(self.returns)
        for task, game in enumerate(self.games):
            line |= _game_metrics(game, task, self.tasks, self.returns, self.lengths)
            if task_frames:
                line[f"env/{game}/frames"] = task_frames[task]
        return line


def _game_metrics(
    game: str, task: int, tasks: list[int], returns: list[float], lengths: list[int]
) -> dict[str, float | int]:
    """``env/<game>/*`` of the games of ``task`` among those that ended (none: no keys)."""
    mine = [i for i, t in enumerate(tasks) if t == task]
    if not mine:
        return {}
    return {
        f"env/{game}/episode_return": sum(returns[i] for i in mine) / len(mine),
        f"env/{game}/episode_length": sum(lengths[i] for i in mine) / len(mine),
        f"env/{game}/episodes": len(mine),
    }

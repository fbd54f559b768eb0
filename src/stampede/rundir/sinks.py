"""Metrics to every sink under the same names: terminal, ``metrics.jsonl`` and Weights & Biases.

Names are namespaced (``env/episode_return``, ``perf/fps``, ``loss/pg``, ...; see the README).
``metrics.jsonl`` is appended to and flushed at every line, so a resumed run keeps its history and
a ``kill -9`` loses at most the line being written. W&B runs offline unless asked otherwise and
needs no API key then; the W&B run id is stored in the run directory so a resumed run continues
the same W&B run, with ``env/frames`` as its x-axis.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from stampede.rundir.files import EPISODES_FILE, METRICS_FILE, START_KEY, WANDB_ID_FILE

log = logging.getLogger("stampede")


def _clean(metrics: Mapping[str, Any]) -> dict[str, float | int]:
    """JSON-safe numbers: non-finite values become None-free omissions."""
    out: dict[str, float | int] = {}
    for key, value in metrics.items():
        number = float(value)
        if math.isfinite(number):
            out[key] = int(value) if isinstance(value, int) else number
    return out


class JsonlSink:
    def __init__(self, path: Path) -> None:
        self.file = path.open("a", buffering=1)  # line-buffered append: history is never rewritten

    def write(self, metrics: Mapping[str, float | int], videos: Mapping[str, Path]) -> None:
        line = {**metrics, **{key: str(path) for key, path in videos.items()}}
        self.file.write(json.dumps(line) + "\n")
        self.file.flush()
        os.fsync(self.file.fileno())

    def close(self) -> None:
        self.file.close()


class WandbSink:
    """One W&B run per run directory, resumed under the same id after a restart."""

    def __init__(
        self,
        run_dir: Path,
        mode: str,
        project: str,
        entity: str | None,
        group: str | None,
        tags: list[str],
        name: str,
        config: dict[str, Any],
    ) -> None:
        import wandb

        id_file = run_dir / WANDB_ID_FILE
        if id_file.exists():
            run_id = id_file.read_text().strip()
        else:
            run_id = uuid.uuid4().hex[:12]
            id_file.write_text(run_id + "\n")
        settings = wandb.Settings(
            console="off", x_disable_stats=True, silent=True, disable_git=True, save_code=False
        )
        self.run = wandb.init(
            project=project,
            entity=entity,
            group=group,
            tags=tags,
            name=name,
            config=config,
            dir=str(run_dir),
            id=run_id,
            resume="allow",
            mode=mode,  # type: ignore[arg-type]
            settings=settings,
        )
        self.run.define_metric("env/frames")
        self.run.define_metric("*", step_metric="env/frames")

    def write(self, metrics: Mapping[str, float | int], videos: Mapping[str, Path]) -> None:
        import wandb

        media = {key: wandb.Video(str(path), format="mp4") for key, path in videos.items()}
        self.run.log({**metrics, **media})

    def close(self) -> None:
        self.run.finish()


class ProgressBar:
    """A live bar (frames done / total, fps, mean return) when stdout is a terminal; else silent."""

    def __init__(self, total_frames: int, start_frames: int, enabled: bool) -> None:
        self.bar = None
        if enabled and sys.stdout.isatty():
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeRemainingColumn,
            )

            self.bar = Progress(
                TextColumn("[bold]frames"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[info]}"),
                TimeRemainingColumn(),
            )
            self.task = self.bar.add_task(
                "train", total=total_frames, completed=start_frames, info=""
            )
            self.bar.start()

    def update(self, frames: int, info: str) -> None:
        if self.bar is not None:
            self.bar.update(self.task, completed=frames, info=info)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


class MetricLogger:
    """Fans one metrics dict out to the sinks; also prints a summary line through ``logging``."""

    def __init__(
        self,
        run_dir: Path,
        *,
        jsonl: bool,
        wandb_mode: str,
        wandb_project: str,
        wandb_entity: str | None,
        wandb_group: str | None,
        wandb_tags: list[str],
        run_name: str,
        config: dict[str, Any],
        total_frames: int,
        start_frames: int,
        progress: bool,
    ) -> None:
        self.sinks: list[JsonlSink | WandbSink] = []
        self.episodes = JsonlSink(run_dir / EPISODES_FILE) if jsonl else None
        if self.episodes is not None:
            # Where this start's games begin: a resumed run plays again from its checkpoint's
            # frames, so games the earlier start logged after them are of a discarded past
            # (readers drop them: stampede.rundir.files.surviving_rows).
            self.episodes.write({START_KEY: start_frames}, videos={})
        if jsonl:
            self.sinks.append(JsonlSink(run_dir / METRICS_FILE))
        if wandb_mode != "disabled":
            self.sinks.append(
                WandbSink(
                    run_dir,
                    wandb_mode,
                    wandb_project,
                    wandb_entity,
                    wandb_group,
                    wandb_tags,
                    run_name,
                    config,
                )
            )
        self.progress = ProgressBar(total_frames, start_frames, progress)
        self.started = time.time()

    def write(self, metrics: Mapping[str, Any], videos: Mapping[str, Path] | None = None) -> None:
        """One line of metrics to every sink and a summary to the log: the training line, or an
        evaluation's ``eval/*`` line. ``videos`` (name: mp4 file) go to W&B as media, to
        ``metrics.jsonl`` and the log as paths."""
        clean = _clean(metrics)
        videos = videos or {}
        for sink in self.sinks:
            sink.write(clean, videos)
        summary = [f"{k}={_fmt(v)}" for k, v in clean.items() if _in_summary(k)]
        log.info(" ".join(summary + [f"{k}={path}" for k, path in videos.items()]))
        if "perf/fps" in clean:  # a training line (an evaluation's line has no throughput)
            ret = clean.get("env/episode_return")
            info = f"{clean['perf/fps']:,.0f} fps" + (
                f"  return {ret:.1f}" if ret is not None else ""
            )
            self.progress.update(int(clean["env/frames"]), info)

    def write_episodes(
        self,
        frames: int,
        elapsed_s: float,
        returns: list[float],
        lengths: list[int],
        games: list[tuple[str, int]] | None = None,
    ) -> None:
        """One line per finished game in ``episodes.jsonl`` (for learning curves and tests):
        the frames and training seconds when it ended, its return and length. In a multi-task
        run ``games`` gives each game's name and that game's frames so far; its lines hold
        ``env/<game>/episode_return``, ``env/<game>/episode_length`` and ``env/<game>/frames``
        instead of the single game's keys."""
        if self.episodes is None:
            return
        for i, (ret, length) in enumerate(zip(returns, lengths, strict=True)):
            prefix, extra = "env", {}
            if games is not None:
                game, game_frames = games[i]
                prefix, extra = f"env/{game}", {f"env/{game}/frames": game_frames}
            line = {"env/frames": frames, "time/elapsed_s": round(elapsed_s, 3)}
            line |= {f"{prefix}/episode_return": ret, f"{prefix}/episode_length": length}
            self.episodes.write(line | extra, videos={})

    def close(self) -> None:
        self.progress.close()
        if self.episodes is not None:
            self.episodes.close()
        for sink in self.sinks:
            sink.close()

    def __enter__(self) -> MetricLogger:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


_SUMMARY_KEYS = (
    "env/frames",
    "perf/fps",
    "perf/sps",
    "env/episode_return",
    "loss/total",
    "learner/policy_lag",
)


def _in_summary(key: str) -> bool:
    """Whether the log line shows ``key``: the training keys above and every ``eval/*``."""
    return key in _SUMMARY_KEYS or key.startswith("eval/")


def _fmt(value: float | int) -> str:
    return f"{value:d}" if isinstance(value, int) else f"{value:.4g}"

"""The run directory's format: every file name, the atomic write, and the JSONL readers.

A run directory (``hydra.run.dir``) holds, beside Hydra's ``.hydra/``:

- ``config.yaml`` (CONFIG_FILE): the resolved training config;
- ``metrics.jsonl`` (METRICS_FILE): one line of metrics per log interval, appended;
- ``episodes.jsonl`` (EPISODES_FILE): one line per finished game, and a ``run/start_frames``
  line (START_KEY) at each (re)start of the run;
- ``checkpoints/`` (CHECKPOINT_DIR): ``ckpt_<frames>.pt`` files with a ``.sha256`` beside each;
- ``eval.json`` (EVAL_FILE) and ``eval_history.jsonl`` (EVAL_HISTORY_FILE): the last evaluation
  and every one; a multi-task run's are in ``eval/<game>/`` (MULTITASK_EVAL_DIR);
- ``wandb_id.txt`` (WANDB_ID_FILE): the W&B run's id, so a resume continues that run;
- ``.lock`` (LOCK_FILE): the flock a training run holds; ``run.log``: the log.

Files that are replaced (checkpoints, ``eval.json``, PBT's state) are written through
``write_atomic``: a crash leaves the old file or the new one, never half of one. Logs are only
appended to, and their readers (``read_jsonl``) skip a line torn by a hard kill.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

CONFIG_FILE = "config.yaml"
METRICS_FILE = "metrics.jsonl"
EPISODES_FILE = "episodes.jsonl"
START_KEY = "run/start_frames"  # episodes.jsonl: a (re)start of the run at these frames
CHECKPOINT_DIR = "checkpoints"
EVAL_FILE = "eval.json"
EVAL_HISTORY_FILE = "eval_history.jsonl"  # one line per evaluation of a run, oldest first
MULTITASK_EVAL_DIR = "eval"  # a multi-task run's results: <run_dir>/eval/<game>/eval.json
WANDB_ID_FILE = "wandb_id.txt"
LOCK_FILE = ".lock"


def write_temp(path: Path, write: Callable[[IO[bytes]], Any]) -> Path:
    """Call ``write(file)`` on a temporary file beside ``path``, fsync it, return its path."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(tmp)


def commit(tmp: Path, path: Path) -> None:
    """Rename ``tmp`` over ``path`` and make the rename durable (fsync of the directory)."""
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def write_atomic(path: Path, write: Callable[[IO[bytes]], Any]) -> None:
    """Write ``path`` through a temporary file: a crash leaves the old file or the new one."""
    tmp = write_temp(path, write)
    try:
        commit(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text_atomic(path: Path, text: str) -> None:
    """`write_atomic` of UTF-8 text."""
    write_atomic(path, lambda f: f.write(text.encode("utf-8")))


def copy_atomic(source: Path, target: Path) -> None:
    """Copy ``source`` to ``target`` through a temporary file (a crash leaves the old target or
    the whole copy)."""

    def write(f: IO[bytes]) -> None:
        with source.open("rb") as src:
            shutil.copyfileobj(src, f)

    write_atomic(target, write)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The lines of a JSONL file (none if it does not exist), skipping a line torn by a hard
    kill mid-write."""
    rows = []
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return rows


def surviving_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows (with ``env/frames``) of the history a run kept across its restarts.

    A run resumed from a checkpoint plays again from the checkpoint's frames, so lines an earlier
    start logged after those frames belong to training that was thrown away; counted as well,
    they would show those frames twice. Each start writes ``run/start_frames`` into
    ``episodes.jsonl``; logs without it (``metrics.jsonl``, older runs) show a restart as frames
    going backwards, which drops the earlier lines past the new line's frames.
    """
    kept: list[dict[str, Any]] = []
    for row in rows:
        frames, start = row.get("env/frames"), row.get(START_KEY)
        if frames is not None and kept and frames < kept[-1]["env/frames"]:
            start = frames  # a restart in a log without start lines
        if start is not None:
            while kept and kept[-1]["env/frames"] > start:
                kept.pop()
        if frames is not None:
            kept.append(row)
    return kept


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """All lines of a run's ``metrics.jsonl``."""
    return read_jsonl(Path(run_dir) / METRICS_FILE)


def read_episodes(run_dir: Path) -> list[dict[str, Any]]:
    """The lines of ``episodes.jsonl`` of the history the run kept across restarts."""
    return surviving_rows(read_jsonl(Path(run_dir) / EPISODES_FILE))

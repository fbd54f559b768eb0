"""The number a training run returns to a search, read from its run directory: what Optuna
maximises and PBT ranks members by (the key and its check: ``stampede.config.objective``).

A run that finished no game has no return: its objective is NaN (Optuna records the trial as
failed; PBT ranks the member last).
"""

from __future__ import annotations

import math
from pathlib import Path

from stampede.config.objective import EVAL_FIGURES, Objective
from stampede.eval.results import read_eval
from stampede.report.curves import episodes
from stampede.rundir.files import EVAL_FILE, MULTITASK_EVAL_DIR

WINDOW = 100  # games in the mean, as the Atari literature reports


def value(objective: Objective, run_dir: Path, since_frames: int = 0) -> float:
    """The objective of the run in ``run_dir``; for ``env/*`` only games finished after
    ``since_frames`` count (PBT's "recent" return). NaN when there is nothing to average."""
    if objective.source == "eval":
        return _eval_value(objective, Path(run_dir))
    frames, _, returns = episodes(run_dir, objective.game)
    recent = returns[frames > since_frames][-WINDOW:]
    return float(recent.mean()) if len(recent) else math.nan


def _eval_value(objective: Objective, run_dir: Path) -> float:
    """The figure of the run's end-of-training evaluation (its game's, in a multi-task run)."""
    where = run_dir / MULTITASK_EVAL_DIR / objective.game if objective.game else run_dir
    try:
        record = read_eval(where / EVAL_FILE)
    except FileNotFoundError:
        return math.nan
    return float(getattr(record, EVAL_FIGURES[objective.figure]))

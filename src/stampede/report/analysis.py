"""Analysis helpers for sweeps: find runs, load learning curves, draw the standard figures.

The notebooks in ``notebooks/`` are thin: they call these functions, so that what they show is
tested code (docs/architecture.md: no logic in a notebook). Everything reads run directories as
the runner writes them: ``config.yaml`` (the resolved training config), ``episodes.jsonl`` (one
line per finished game: ``env/frames``, ``env/episode_return``), ``metrics.jsonl`` and
``eval.json``. W&B is not needed: offline W&B runs hold the same numbers as these files.

matplotlib is imported only by the plotting functions.
"""

from __future__ import annotations

import dataclasses
import math
import os
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from stampede.envs.games import atari57
from stampede.eval.results import read_eval
from stampede.report.curves import episodes, smooth
from stampede.rundir.files import (
    CONFIG_FILE,
    EPISODES_FILE,
    EVAL_FILE,
    METRICS_FILE,
)

if TYPE_CHECKING:
    from stampede.report.hns import Table

SWEEP_DIR_ENV = "STAMPEDE_SWEEP_DIR"


class AnalysisWarning(UserWarning):
    """A run directory was skipped or is incomplete."""


# ----------------------------------------------------------------------------------- runs


@dataclasses.dataclass(frozen=True)
class RunInfo:
    """One training run directory and what it trained."""

    path: Path
    game: str  # ALE id, or gymnasium id for env.kind=gym
    env_kind: str
    seed: int
    experiment: str


def find_runs(sweep_dir: str | Path) -> list[RunInfo]:
    """Every run directory at any depth under ``sweep_dir``, sorted by game, seed, path.

    A run directory has ``episodes.jsonl`` or ``metrics.jsonl``; what it trained is read from
    its ``config.yaml``, or failing that its ``eval.json``. Others are skipped with a warning.
    """
    root = Path(sweep_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"sweep directory {str(root)!r} does not exist or is not a dir")
    dirs = {p.parent for name in (EPISODES_FILE, METRICS_FILE) for p in root.rglob(name)}
    runs = [info for info in map(_run_info, sorted(dirs)) if info is not None]
    return sorted(runs, key=lambda r: (r.game, r.seed, str(r.path)))


def _run_info(run_dir: Path) -> RunInfo | None:
    try:
        if (run_dir / CONFIG_FILE).exists():
            import yaml

            cfg = yaml.safe_load((run_dir / CONFIG_FILE).read_text(encoding="utf-8"))
            env = cfg["env"]
            kind = str(env["kind"])
            game = str(env["game"] if kind == "atari" else env["gym_id"])
            return RunInfo(run_dir, game, kind, int(cfg["seed"]), str(cfg.get("name", "")))
        if (run_dir / EVAL_FILE).exists():
            record = read_eval(run_dir / EVAL_FILE)
            return RunInfo(run_dir, record.game, record.env_kind, record.seed, record.experiment)
    except (OSError, ValueError, TypeError, KeyError) as error:
        warnings.warn(f"skipping {run_dir}: {error!r}", AnalysisWarning, stacklevel=3)
        return None
    warnings.warn(
        f"skipping {run_dir}: no {CONFIG_FILE} or {EVAL_FILE} says what it trained",
        AnalysisWarning,
        stacklevel=3,
    )
    return None


@dataclasses.dataclass(frozen=True)
class Curve:
    """The learning curve of one run: finished games' returns at the frames they were logged."""

    run: RunInfo
    frames: np.ndarray  # [N]
    returns: np.ndarray  # [N]


def learning_curves(sweep_dir: str | Path) -> list[Curve]:
    """The learning curve of every run under ``sweep_dir`` that finished at least one game."""
    curves = []
    for run in find_runs(sweep_dir):
        frames, _, returns = episodes(run.path)
        if len(frames):
            curves.append(Curve(run, frames, returns))
    return curves


# ------------------------------------------------------------------------------ smoothing


def on_grid(curve: Curve, grid: np.ndarray, window: int | None = None) -> np.ndarray:
    """The smoothed curve read at ``grid`` frames [G]; NaN before its first game and after its
    last logged frame. ``window`` defaults to 5% of the run's games."""
    window = window or max(1, len(curve.returns) // 20)
    smoothed = smooth(curve.returns, window)
    values = np.interp(grid, curve.frames, smoothed)
    values[(grid < curve.frames[0]) | (grid > curve.frames[-1])] = np.nan
    return values


@dataclasses.dataclass(frozen=True)
class SeedBand:
    """One game's curves on a common frame grid: per seed [S, G], and their mean/min/max [G]."""

    game: str
    grid: np.ndarray
    seeds: tuple[int, ...]
    per_seed: np.ndarray
    mean: np.ndarray
    low: np.ndarray
    high: np.ndarray


def seed_bands(curves: Iterable[Curve], points: int = 100) -> dict[str, SeedBand]:
    """Per game: every seed's smoothed curve on one grid of ``points`` frames, and the band
    (min to max over seeds) with its mean. Games in Atari-57 order, then others by name."""
    by_game: dict[str, list[Curve]] = {}
    for curve in curves:
        by_game.setdefault(curve.run.game, []).append(curve)
    bands = {}
    for game in sorted(by_game, key=_game_order):
        group = sorted(by_game[game], key=lambda c: c.run.seed)
        end = max(c.frames[-1] for c in group)
        grid = np.linspace(0.0, end, points)
        per_seed = np.stack([on_grid(c, grid) for c in group])  # [S, G]
        with warnings.catch_warnings():  # all-NaN columns (before any game ended) stay NaN
            warnings.simplefilter("ignore", RuntimeWarning)
            mean, low, high = (f(per_seed, axis=0) for f in (np.nanmean, np.nanmin, np.nanmax))
        bands[game] = SeedBand(
            game, grid, tuple(c.run.seed for c in group), per_seed, mean, low, high
        )
    return bands


def _game_order(game: str) -> tuple[int, str]:
    order = {g: i for i, g in enumerate(atari57())}
    return (order.get(game, len(order)), game)


# ----------------------------------------------------------------------------- the table


@dataclasses.dataclass(frozen=True)
class PaperComparison:
    """Per game: our score as a percentage of the paper's gain over random play.

    ``100 * (ours - random) / (paper - random)``: 100% = the IMPALA paper's score, 0% = random
    play. Unlike ``ours / paper`` it keeps its meaning for negative scores (Pong, Double Dunk);
    NaN where the paper is at random level (Enduro and Freeway: 0 in both).
    """

    games: tuple[str, ...]
    percent: np.ndarray  # [G]


def paper_comparison(table: Table) -> PaperComparison:
    percent = []
    for row in table.rows:
        gain = row.impala_deep - row.random
        percent.append(100.0 * (row.score - row.random) / gain if gain != 0 else math.nan)
    return PaperComparison(tuple(row.game for row in table.rows), np.array(percent))


# ---------------------------------------------------------------------- notebook plumbing


def sweep_dir_from_env(default: str | Path | None = None) -> Path:
    """The sweep directory a notebook analyses: ``$STAMPEDE_SWEEP_DIR``, else ``default``, else
    the newest sweep under ``multirun/`` (searched from the working directory upwards)."""
    chosen = os.environ.get(SWEEP_DIR_ENV) or default
    if chosen:
        return Path(chosen)
    newest = latest_sweep()
    if newest is None:
        raise FileNotFoundError(
            f"no sweep found: set {SWEEP_DIR_ENV}=<sweep dir> or run "
            "`python run.py --multirun +experiment=atari5` first (sweeps go to multirun/)"
        )
    return newest


def latest_sweep(start: str | Path = ".") -> Path | None:
    """The newest directory holding a Hydra ``multirun.yaml`` under the first ``multirun/``
    found in ``start`` or its parents; None if there is none."""
    for directory in (Path(start).resolve(), *Path(start).resolve().parents):
        root = directory / "multirun"
        if root.is_dir():
            found = sorted(root.rglob("multirun.yaml"), key=lambda p: p.stat().st_mtime)
            return found[-1].parent if found else None
    return None


def seeds_per_game(runs: Sequence[RunInfo]) -> dict[str, list[int]]:
    """{game: sorted seeds} of a list of runs (what a sweep has so far)."""
    found: dict[str, list[int]] = {}
    for run in runs:
        found.setdefault(run.game, []).append(run.seed)
    return {
        game: sorted(seeds)
        for game, seeds in sorted(found.items(), key=lambda x: _game_order(x[0]))
    }

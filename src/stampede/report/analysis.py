"""Analysis helpers for sweeps: find runs, load learning curves, draw the standard figures.

The notebooks in ``notebooks/`` are thin: they call these functions, so that what they show is
tested code (docs/architecture.md: no logic in a notebook). Everything reads run directories as
the runner writes them: ``config.yaml`` (the resolved training config), ``episodes.jsonl`` (one
line per finished game: ``env/frames``, ``env/episode_return``), ``metrics.jsonl`` and
``eval.json``. W&B is not needed: offline W&B runs hold the same numbers as these files.

matplotlib is imported only by the plotting functions (``pip install 'stampede-rl[notebooks]'``).
"""

from __future__ import annotations

import dataclasses
import math
import os
import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from stampede.envs.games import atari57
from stampede.eval.results import read_eval
from stampede.rundir.files import (
    CONFIG_FILE,
    EPISODES_FILE,
    EVAL_FILE,
    METRICS_FILE,
    read_jsonl,
    surviving_rows,
)

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from stampede.report.hns import Table

SWEEP_DIR_ENV = "STAMPEDE_SWEEP_DIR"
FIGURE_DIR_ENV = "STAMPEDE_FIGURE_DIR"


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


def load_episodes(run_dir: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """(frames [N], returns [N]) of a run's finished games, in order, without those of training
    a restart threw away (`surviving_rows`).

    From ``episodes.jsonl`` (one line per game); runs without it fall back to the per-interval
    means ``env/episode_return`` of ``metrics.jsonl``.
    """
    run_dir = Path(run_dir)
    rows = read_jsonl(run_dir / EPISODES_FILE) or read_jsonl(run_dir / METRICS_FILE)
    pairs = [
        (float(r["env/frames"]), float(r["env/episode_return"]))
        for r in surviving_rows(rows)
        if "env/episode_return" in r
    ]
    data = np.array(pairs, dtype=np.float64).reshape(-1, 2)  # [N, 2], also for N = 0
    return data[:, 0], data[:, 1]


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
        frames, returns = load_episodes(run.path)
        if len(frames):
            curves.append(Curve(run, frames, returns))
    return curves


# ------------------------------------------------------------------------------ smoothing


def smooth(returns: np.ndarray, window: int) -> np.ndarray:
    """Trailing mean over the last ``window`` games ([N] -> [N]; shorter at the start)."""
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    csum = np.concatenate([[0.0], np.cumsum(returns, dtype=np.float64)])  # [N + 1]
    n = np.arange(1, len(returns) + 1)
    start = np.maximum(n - window, 0)
    return (csum[n] - csum[start]) / (n - start)


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


# ------------------------------------------------------------------------------ plotting


def _pyplot() -> Any:
    try:
        import matplotlib.pyplot as plt
    except ImportError as error:
        raise ImportError(
            "plotting needs matplotlib: pip install 'stampede-rl[notebooks]'"
        ) from error
    return plt


def plot_learning_curves(
    bands: Mapping[str, SeedBand], columns: int | None = None, random_scores: bool = True
) -> Figure:
    """Small multiples, one panel per game: a thin line per seed, the mean over seeds, and the
    min-max band over seeds; a dotted line at random play's score for Atari-57 games.

    ``columns`` defaults to a near-square grid of at most 6 columns (57 games: 6 x 10)."""
    plt = _pyplot()
    from matplotlib.ticker import EngFormatter

    if not bands:
        raise ValueError("no learning curves to plot (no run finished a game)")
    from stampede.report.hns import load_reference

    reference = load_reference() if random_scores else {}
    columns = columns or min(6, math.ceil(math.sqrt(len(bands))))
    columns = max(1, min(columns, len(bands)))
    rows = math.ceil(len(bands) / columns)
    fig, axes = plt.subplots(
        rows, columns, figsize=(3.6 * columns, 2.8 * rows), squeeze=False, layout="constrained"
    )
    for ax, band in zip(axes.flat, bands.values(), strict=False):
        for values in band.per_seed:
            ax.plot(band.grid, values, lw=0.7, alpha=0.6, color="tab:blue")
        ax.fill_between(band.grid, band.low, band.high, alpha=0.25, color="tab:blue", lw=0)
        ax.plot(band.grid, band.mean, lw=2.0, color="tab:blue")
        if band.game in reference:
            ax.axhline(reference[band.game].random, ls=":", color="grey", lw=1.0)
        seeds = ", ".join(map(str, band.seeds))
        ax.set_title(f"{band.game} (seeds {seeds})", fontsize=10)
        ax.xaxis.set_major_formatter(EngFormatter())  # 20k, 200M
        ax.set_xlabel("frames")
        ax.set_ylabel("episode return")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(bands) :]:
        ax.set_visible(False)
    fig.suptitle("Return vs frames: mean over seeds, min-max band; dotted: random play")
    return fig


def plot_paper_comparison(table: Table, limits: tuple[float, float] = (-25.0, 150.0)) -> Figure:
    """Horizontal bars per game of ``paper_comparison`` (100% = the paper), sorted, with the
    exact value written at each bar (bars are clipped to ``limits``)."""
    plt = _pyplot()
    if not table.rows:
        raise ValueError("the table has no games to plot")
    comparison = paper_comparison(table)
    order = sorted(
        range(len(comparison.games)),
        key=lambda i: -np.inf if math.isnan(comparison.percent[i]) else comparison.percent[i],
    )
    names = [comparison.games[i] for i in order]
    values = comparison.percent[order]
    shown = np.clip(np.nan_to_num(values, nan=0.0), *limits)
    colours = ["tab:green" if v >= 100 else "tab:blue" for v in np.nan_to_num(values, nan=0.0)]
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.32 * len(names)), layout="constrained")
    y = np.arange(len(names))
    ax.barh(y, shown, color=colours)
    for yi, value, bar_end in zip(y, values, shown, strict=True):
        label = "n/a (paper = random)" if math.isnan(value) else f"{value:.1f}%"
        ax.text(
            bar_end + (2 if bar_end >= 0 else -2),
            yi,
            label,
            va="center",
            ha="left" if bar_end >= 0 else "right",
            fontsize=8,
        )
    ax.set_yticks(y, names)
    ax.axvline(0, color="black", lw=0.8)
    ax.axvline(100, color="tab:red", ls="--", lw=1.0)
    ax.set_xlim(limits[0] - 15, limits[1] + 35)
    ax.set_xlabel("score, % of the IMPALA paper's gain over random (100% = paper, 0% = random)")
    ax.set_title(
        f"{table.n_games} games: median HNS {100 * table.median_hns:.1f}% "
        f"(paper, same games: {100 * table.paper_median_hns:.1f}%)"
    )
    ax.grid(axis="x", alpha=0.3)
    return fig


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


def save_figure(fig: Figure, filename: str, directory: str | Path | None = None) -> Path | None:
    """Save ``fig`` as ``<directory>/<filename>`` (PNG, 120 dpi) when a directory is given or
    ``$STAMPEDE_FIGURE_DIR`` is set; otherwise do nothing and return None."""
    target = directory or os.environ.get(FIGURE_DIR_ENV)
    if not target:
        return None
    path = Path(target) / filename
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    return path


def seeds_per_game(runs: Sequence[RunInfo]) -> dict[str, list[int]]:
    """{game: sorted seeds} of a list of runs (what a sweep has so far)."""
    found: dict[str, list[int]] = {}
    for run in runs:
        found.setdefault(run.game, []).append(run.seed)
    return {
        game: sorted(seeds)
        for game, seeds in sorted(found.items(), key=lambda x: _game_order(x[0]))
    }

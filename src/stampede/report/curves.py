"""The learning benchmark's numbers: mean return of the last N games against frames and time.

A run's ``episodes.jsonl`` has one line per finished game (``env/frames``, ``time/elapsed_s``,
``env/episode_return``; in a multi-task run ``env/<game>/episode_return`` and
``env/<game>/frames``, the frames of that game, against which its curve is drawn). `from_run`
turns it into the curve the learning benchmark reports (``make learn``,
``benchmarks/learning.py``): after each game, the mean return of the last ``window`` games (100,
as the Atari literature reports), `crossings` reads off the frames and training seconds at which
that mean first reached given returns, `across_seeds` puts several seeds' curves on one grid
(mean and range), and `write_csv` / `plot` put them in ``docs/``.
"""

from __future__ import annotations

import csv
import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from stampede.report.plotting import pyplot
from stampede.rundir.files import EPISODES_FILE, read_episodes, read_metrics, surviving_rows

if TYPE_CHECKING:
    from matplotlib.figure import Figure

WINDOW = 100


@dataclasses.dataclass(frozen=True)
class LearningCurve:
    """After each finished game i: frames [N], training seconds [N], games so far [N] and the
    mean return of the last ``window`` games [N] (NaN until ``window`` games have ended)."""

    frames: np.ndarray
    elapsed_s: np.ndarray
    games: np.ndarray
    mean_return: np.ndarray
    window: int

    @property
    def final(self) -> float:
        """The mean return of the last ``window`` games of the run (NaN if it has fewer)."""
        return float(self.mean_return[-1]) if len(self.mean_return) else math.nan


def from_run(run_dir: str | Path, window: int = WINDOW, game: str | None = None) -> LearningCurve:
    """The learning curve of a run directory, from its ``episodes.jsonl`` (the games of the
    history it kept across restarts: `stampede.rundir.files.surviving_rows`); with ``game``, that
    game's curve in a multi-task run, against the frames of that game alone."""
    frames, elapsed, returns = episodes(run_dir, game)
    mean = smooth(returns, window) if len(returns) else returns
    games = np.arange(1, len(returns) + 1)
    mean[games < window] = math.nan  # a mean over fewer games is not the benchmark's figure
    return LearningCurve(frames, elapsed, games, mean, window)


def episodes(run_dir: str | Path, game: str | None = None) -> tuple[np.ndarray, ...]:
    """(frames [N], training seconds [N], returns [N]) of the run's finished games, in order, of
    the history it kept across restarts; with ``game``, that game's games of a multi-task run
    against the frames of that game alone. A run without ``episodes.jsonl`` (older runs) gives
    the per-interval means of ``metrics.jsonl`` instead."""
    run_dir = Path(run_dir)
    prefix = f"env/{game}" if game else "env"
    rows = read_episodes(run_dir)
    if not (run_dir / EPISODES_FILE).exists():
        rows = surviving_rows(read_metrics(run_dir))
    rows = [r for r in rows if f"{prefix}/episode_return" in r]
    frames = np.array([r[f"{prefix}/frames"] for r in rows], dtype=np.float64)
    elapsed = np.array([r.get("time/elapsed_s", math.nan) for r in rows], dtype=np.float64)
    returns = np.array([r[f"{prefix}/episode_return"] for r in rows], dtype=np.float64)
    return frames, elapsed, returns


def smooth(returns: np.ndarray, window: int) -> np.ndarray:
    """Trailing mean over the last ``window`` games ([N] -> [N]; shorter at the start)."""
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    csum = np.concatenate([[0.0], np.cumsum(returns, dtype=np.float64)])  # [N + 1]
    n = np.arange(1, len(returns) + 1)
    start = np.maximum(n - window, 0)
    return (csum[n] - csum[start]) / (n - start)


@dataclasses.dataclass(frozen=True)
class Crossing:
    """Where the curve first reached ``threshold``: frames and training seconds (None: never)."""

    threshold: float
    frames: float | None
    elapsed_s: float | None


def crossings(curve: LearningCurve, thresholds: Iterable[float]) -> list[Crossing]:
    """For each threshold, the first game after which the mean return was >= it."""
    out = []
    for threshold in thresholds:
        hits = np.flatnonzero(curve.mean_return >= threshold)  # NaN compares False
        if len(hits):
            i = int(hits[0])
            out.append(Crossing(threshold, float(curve.frames[i]), float(curve.elapsed_s[i])))
        else:
            out.append(Crossing(threshold, None, None))
    return out


def write_csv(curve: LearningCurve, path: str | Path, every_frames: int = 50_000) -> Path:
    """The curve as CSV (frames, elapsed_s, games, mean_return_last<window>), one row at the
    first game at or after each multiple of ``every_frames`` and one at the last game."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    keep = np.zeros(len(curve.frames), dtype=bool)
    if len(keep):
        bucket = (curve.frames // every_frames).astype(np.int64)
        keep[np.flatnonzero(np.diff(bucket, prepend=-1))] = True
        keep[-1] = True
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["frames", "elapsed_s", "games", f"mean_return_last{curve.window}"])
        for i in np.flatnonzero(keep):
            mean = curve.mean_return[i]
            writer.writerow(
                [
                    int(curve.frames[i]),
                    f"{curve.elapsed_s[i]:.1f}",
                    int(curve.games[i]),
                    "" if math.isnan(mean) else f"{mean:.3f}",
                ]
            )
    return path


def across_seeds(curves: Sequence[LearningCurve], points: int = 200) -> tuple[np.ndarray, ...]:
    """Several seeds' curves on one grid of frames, up to where the shortest ends: (frames [P],
    mean [P], lowest [P], highest [P]) of the seeds' mean returns, each seed interpolated
    linearly between its games (NaN before a seed's first full window)."""
    end = min(float(c.frames[-1]) for c in curves)
    grid = np.linspace(0.0, end, points)
    values = np.array([_on_grid(c, grid) for c in curves])  # [seeds, P]
    with np.errstate(invalid="ignore"):
        return grid, values.mean(axis=0), values.min(axis=0), values.max(axis=0)


def _on_grid(curve: LearningCurve, grid: np.ndarray) -> np.ndarray:
    valid = ~np.isnan(curve.mean_return)
    if not valid.any():
        return np.full(len(grid), math.nan)
    return np.interp(grid, curve.frames[valid], curve.mean_return[valid], left=math.nan)


def plot(
    curves: Mapping[str, LearningCurve | Sequence[LearningCurve]],
    title: str,
    thresholds: Sequence[float] = (),
    random_score: float | None = None,
) -> Figure:
    """One panel: each named curve's mean return of the last games against frames. A name with
    several curves (seeds) is drawn as each seed thin, their mean bold and the band between the
    lowest and the highest seed."""
    plt = pyplot()
    from matplotlib.ticker import EngFormatter

    fig, ax = plt.subplots(figsize=(7, 4.2), layout="constrained")
    window = WINDOW
    for name, runs in curves.items():
        if isinstance(runs, LearningCurve):
            ax.plot(runs.frames, runs.mean_return, lw=1.8, label=name)
            window = runs.window
            continue
        (line,) = ax.plot([], [], lw=2.2, label=f"{name} (mean of {len(runs)} seeds, range)")
        color = line.get_color()
        for run in runs:
            ax.plot(run.frames, run.mean_return, lw=0.7, alpha=0.45, color=color)
        grid, mean, low, high = across_seeds(runs)
        line.set_data(grid, mean)
        ax.fill_between(grid, low, high, color=color, alpha=0.15, lw=0)
        window = runs[0].window
    for threshold in thresholds:
        ax.axhline(threshold, ls="--", color="grey", lw=0.8)
    if random_score is not None:
        ax.axhline(random_score, ls=":", color="black", lw=1.0, label="random play")
    ax.xaxis.set_major_formatter(EngFormatter())
    ax.set_xlabel("environment frames (frame skip included)")
    ax.set_ylabel(f"mean return of the last {window} games")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    return fig

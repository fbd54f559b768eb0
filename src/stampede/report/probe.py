"""The probe table: recipes (labels) side by side on a set of games, the dev set by default.

A probe trains one label, a set of Hydra overrides, on every game of a set for the same frame
budget N and the same seed (``make probe``, ``benchmarks/probe.py``). Each label keeps, under
its directory, ``probe.json`` (the frames, seed and overrides) and one run archive per game (its
``episodes.jsonl``, as ``make learn`` keeps them). `read_label` turns them into the figures of
one row, and `markdown` into the table docs/learning.md keeps:

- each game's mean return of the last 100 games at N/2 and at N frames (the last game that
  ended at or before those frames);
- the set's interquartile mean of human-normalised scores (HNS, from the mean at N) with its
  95% interval from rliable (`stampede.report.aggregate.intervals`; with one seed per game it is
  the task bootstrap, games resampled: how much the IQM depends on which games were played);
- frames per second of training, all games' frames over all games' training seconds, so that
  a recipe's cost per wall-second stands beside its cost per frame.

The IQM is given only when every game trained N frames and ended at least 100 games by then.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from stampede.report import curves
from stampede.report.aggregate import Interval, intervals
from stampede.report.hns import table_from_scores
from stampede.rundir.files import read_metrics, surviving_rows

PROBE_FILE = "probe.json"  # a label's frames, seed and overrides, beside its games' runs
FRAMES_FILE = "frames.json"  # an archived run's trained frames (its last game ends before them)


@dataclasses.dataclass(frozen=True)
class ProbeSpec:
    """What a label trains: its Hydra overrides, for ``frames`` frames a game, on ``seed``."""

    label: str
    frames: int
    seed: int
    overrides: tuple[str, ...]

    def write(self, label_dir: Path) -> Path:
        """``probe.json`` in ``label_dir``. Raises ValueError when one already there differs:
        a label names one recipe, so a changed recipe needs a new label."""
        path = label_dir / PROBE_FILE
        if path.exists():
            kept = read_spec(label_dir)
            if kept != self:
                raise ValueError(
                    f"label {self.label!r} was probed as {_describe(kept)} ({path}); "
                    f"now asked for {_describe(self)}: give the new recipe a new label"
                )
            return path
        label_dir.mkdir(parents=True, exist_ok=True)
        fields = dataclasses.asdict(self) | {"overrides": list(self.overrides)}
        path.write_text(json.dumps(fields, indent=2) + "\n")
        return path


def _describe(spec: ProbeSpec) -> str:
    overrides = " ".join(spec.overrides) or "no overrides"
    return f"{spec.frames:,} frames, seed {spec.seed}, {overrides}"


def read_spec(label_dir: Path) -> ProbeSpec:
    """The ``probe.json`` of a label's directory."""
    fields = json.loads((label_dir / PROBE_FILE).read_text())
    return ProbeSpec(
        label=str(fields["label"]),
        frames=int(fields["frames"]),
        seed=int(fields["seed"]),
        overrides=tuple(fields["overrides"]),
    )


@dataclasses.dataclass(frozen=True)
class GameFigures:
    """One game of a label: the mean of the last 100 games at N/2 and N (NaN before 100 games);
    at the last game that ended by N: its frames, the training seconds to it and the games so
    far; and the frames the run has trained (NaN: not known)."""

    game: str
    at_half: float
    at_end: float
    frames: float
    seconds: float
    games: int
    trained: float

    def reached(self, frames: int) -> bool:
        return self.trained >= frames and not math.isnan(self.at_end)


def trained_frames(run_dir: Path) -> float:
    """The frames a run has trained: the last ``env/frames`` of its ``metrics.jsonl``, else of
    its archive's ``frames.json``; NaN when neither is there."""
    rows = surviving_rows(read_metrics(run_dir))
    if rows:
        return float(rows[-1]["env/frames"])
    if (run_dir / FRAMES_FILE).exists():
        return float(json.loads((run_dir / FRAMES_FILE).read_text())["frames"])
    return math.nan


def keep_trained_frames(run_dir: Path, kept: Path) -> Path:
    """Write the run's `trained_frames` into its archive ``kept`` (``frames.json``)."""
    path = kept / FRAMES_FILE
    path.write_text(json.dumps({"frames": trained_frames(run_dir)}) + "\n")
    return path


@dataclasses.dataclass(frozen=True)
class LabelRow:
    """One row of the table: a label's games, its IQM HNS (None until every game is done) and
    its frames per training second over all games."""

    spec: ProbeSpec
    games: dict[str, GameFigures]
    iqm: Interval | None

    @property
    def fps(self) -> float:
        seconds = sum(g.seconds for g in self.games.values())
        return sum(g.frames for g in self.games.values()) / seconds if seconds > 0 else math.nan


def game_figures(run_dir: Path, game: str, frames: int) -> GameFigures | None:
    """A run's figures at ``frames`` N (games after N are not counted); None: no games yet."""
    curve = curves.from_run(run_dir)
    if not len(curve.frames):
        return None
    upto = curve.frames <= frames
    last = int(np.flatnonzero(upto)[-1]) if upto.any() else 0
    half = curve.frames <= frames / 2
    return GameFigures(
        game=game,
        at_half=float(curve.mean_return[np.flatnonzero(half)[-1]]) if half.any() else math.nan,
        at_end=float(curve.mean_return[last]),
        frames=float(curve.frames[last]),
        seconds=float(curve.elapsed_s[last]),
        games=int(curve.games[last]),
        trained=trained_frames(run_dir),
    )


def read_label(
    label_dir: Path, games: Sequence[str], run_root: Path | None = None, reps: int = 10_000
) -> LabelRow:
    """A label's row from its directory: each game's run in ``run_root/<label>/<game>`` while it
    is there (a probe still training), else the archive ``label_dir/<game>``."""
    spec = read_spec(label_dir)
    figures = {}
    for game in games:
        sources = [label_dir / game]
        if run_root is not None:
            sources.insert(0, run_root / spec.label / game)
        for source in sources:
            found = game_figures(source, game, spec.frames)
            if found is not None:
                figures[game] = found
                break
    done = len(figures) == len(games) and all(f.reached(spec.frames) for f in figures.values())
    iqm = None
    if done:
        table = table_from_scores({game: f.at_end for game, f in figures.items()})
        iqm = intervals(table, reps=reps, task_bootstrap=True)["IQM"]
    return LabelRow(spec, figures, iqm)


def read_labels(
    probe_dir: Path,
    games: Sequence[str],
    labels: Sequence[str] | None = None,
    run_root: Path | None = None,
    reps: int = 10_000,
) -> list[LabelRow]:
    """The rows of ``labels`` (default: every label probed in ``probe_dir``, by name)."""
    if labels is None:
        labels = sorted(p.parent.name for p in probe_dir.glob(f"*/{PROBE_FILE}"))
    missing = [label for label in labels if not (probe_dir / label / PROBE_FILE).exists()]
    if missing:
        raise ValueError(f"no probe of label(s) {', '.join(missing)} in {probe_dir}")
    return [read_label(probe_dir / label, games, run_root, reps) for label in labels]


def _mean(value: float) -> str:
    return "—" if math.isnan(value) else f"{value:.1f}"


def _cell(figures: GameFigures | None, frames: int) -> str:
    if figures is None:
        return "—"
    cell = f"{_mean(figures.at_half)} / {_mean(figures.at_end)}"
    if figures.trained >= frames:
        return cell
    short = figures.frames if math.isnan(figures.trained) else figures.trained
    return f"{cell} at {short / 1e6:.2f}M"


def markdown(rows: Sequence[LabelRow], games: Sequence[str]) -> str:
    """The labels x games table: per game "mean at N/2 / mean at N" (with the frames reached
    while a run is short of N), then the IQM HNS [95% interval], frames/s and the overrides."""
    header = ["label", "frames", *games, "IQM HNS [95% CI]", "frames/s", "overrides"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        cells = [
            row.spec.label,
            f"{row.spec.frames / 1e6:g}M",
            *(_cell(row.games.get(game), row.spec.frames) for game in games),
            row.iqm.percent() if row.iqm is not None else "—",
            "—" if math.isnan(row.fps) else f"{row.fps:,.0f}",
            " ".join(f"`{o}`" for o in row.spec.overrides) or "(defaults)",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)

"""A run's learning diagnostics per stretch of frames: the figures that say why a game stalls.

docs/learning.md reads a stall from the learner's diagnostics (README, "Metrics"): the policy's
entropy, how much of the V-trace targets the baseline explains, KL(mu || pi), the advantages'
scale and the share of steps that pay a reward. `from_run` takes the median of each over every
``every_frames`` of a run's ``metrics.jsonl`` (the history the run kept across restarts; medians,
because one line in a stretch can be far off), `write_csv` / `read_csv` keep that table beside
the run's games in docs/ (a few KB in place of a log of about 1 MB per 10M frames), and
`to_markdown` prints it the way docs/learning.md shows it: one column per stretch.
"""

from __future__ import annotations

import csv
import dataclasses
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from stampede.rundir.files import read_metrics, surviving_rows

KEYS = (
    "learner/entropy",
    "learner/explained_variance",
    "learner/kl",
    "learner/adv_std",
    "learner/reward_density",
    "loss/baseline",
    "vtrace/rho_clipped_frac",
    "learner/grad_norm",
)


@dataclasses.dataclass(frozen=True)
class Diagnostics:
    """Stretch k holds the log lines with ``end[k - 1] < env/frames <= end[k]``: ``end`` [K] is a
    multiple of the stretch length, or the run's last frames for an unfinished last stretch;
    ``lines`` [K] how many log lines each holds; ``medians[key]`` [K] the median of ``key`` over
    them (NaN where none of them has ``key``, as in runs logged before it existed)."""

    end: np.ndarray
    lines: np.ndarray
    medians: dict[str, np.ndarray]


def from_run(
    run_dir: str | Path, every_frames: int = 1_000_000, keys: Sequence[str] = KEYS
) -> Diagnostics:
    """Medians of ``keys`` over each ``every_frames`` of the run's ``metrics.jsonl``."""
    if every_frames < 1:
        raise ValueError(f"every_frames must be >= 1, got {every_frames}")
    rows = surviving_rows(read_metrics(Path(run_dir)))
    frames = np.array([r["env/frames"] for r in rows], dtype=np.int64)  # [N]
    stretch = (frames - 1) // every_frames  # [N]; a line at exactly k * every ends stretch k - 1
    kept = np.unique(stretch)  # [K], the stretches with at least one line
    end = np.minimum((kept + 1) * every_frames, frames.max(initial=0))  # [K]
    medians = {}
    for key in keys:
        values = np.array([float(r.get(key, math.nan)) for r in rows])  # [N]
        medians[key] = np.array([_median(values[stretch == k]) for k in kept])  # [K]
    lines = np.array([int((stretch == k).sum()) for k in kept], dtype=np.int64)
    return Diagnostics(end, lines, medians)


def _median(values: np.ndarray) -> float:
    finite = values[np.isfinite(values)]
    return float(np.median(finite)) if len(finite) else math.nan


def write_csv(diagnostics: Diagnostics, path: str | Path) -> Path:
    """One row per stretch: ``frames`` (its end), ``lines``, then each key's median."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    keys = list(diagnostics.medians)
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["frames", "lines", *keys])
        for k, end in enumerate(diagnostics.end):
            medians = [diagnostics.medians[key][k] for key in keys]
            writer.writerow(
                [
                    int(end),
                    int(diagnostics.lines[k]),
                    *("" if math.isnan(m) else f"{m:.6g}" for m in medians),
                ]
            )
    return path


def read_csv(path: str | Path) -> Diagnostics:
    """The table `write_csv` wrote."""
    with Path(path).open() as f:
        header, *rows = list(csv.reader(f))
    columns = {name: np.array([row[i] for row in rows], dtype=str) for i, name in enumerate(header)}
    return Diagnostics(
        end=columns.pop("frames").astype(np.int64),
        lines=columns.pop("lines").astype(np.int64),
        medians={k: np.where(v == "", "nan", v).astype(np.float64) for k, v in columns.items()},
    )


def to_markdown(diagnostics: Diagnostics) -> str:
    """A markdown table: a column per stretch (headed by its end, in millions of frames), a row
    per key; empty cells where a stretch has no value."""
    ends = [f"{end / 1e6:.5g}M" for end in diagnostics.end]
    lines = [
        "| frames | " + " | ".join(ends) + " |",
        "|---|" + "---:|" * len(ends),
        "| log lines | " + " | ".join(str(n) for n in diagnostics.lines) + " |",
    ]
    for key, medians in diagnostics.medians.items():
        cells = ["" if math.isnan(m) else f"{m:.3g}" for m in medians]
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    return "\n".join(lines)

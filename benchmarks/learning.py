"""`make learn`: train one Atari game for N frames and report its learning curve.

    python benchmarks/learning.py --game pong --frames 10000000 [--threshold 0 10 18]
                                  [--label defaults] [-- <more Hydra overrides>]

Trains ``python run.py env=atari env.game=<game> total_frames=<frames>`` in a fixed run
directory (``runs/learn/<label>/<game>`` by default), so a run that was stopped resumes where
it was when the command is run again, and a finished run is only reported. Then writes, into
``--out`` (``docs/learning``):

- ``<game>_<label>.csv``: frames, training seconds, games, mean return of the last 100 games;
- ``<game>.png``: that curve beside the other labels' curves of the same game in ``--out``;

and prints the frames and wall time at which the mean of the last 100 games first reached each
``--threshold``, and the final mean. Extra Hydra overrides after ``--`` go to ``run.py`` (for
example ``+experiment=impala_paper --label paper``).
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np

from stampede import learning_curve
from stampede.learning_curve import LearningCurve

ROOT = Path(__file__).resolve().parents[1]


def _train(run_dir: Path, game: str, frames: int, overrides: list[str]) -> None:
    command = [
        sys.executable,
        str(ROOT / "run.py"),
        "env=atari",
        f"env.game={game}",
        f"total_frames={frames}",
        f"hydra.run.dir={run_dir}",
        "logger.progress=false",
        *overrides,
    ]
    print("$", " ".join(command[1:]), flush=True)
    subprocess.run(command, check=True, cwd=ROOT)


def _read_csv(path: Path) -> LearningCurve:
    """A curve written by `learning_curve.write_csv` (the other labels in docs/)."""
    with path.open() as f:
        rows = list(csv.DictReader(f))
    column = next(k for k in rows[0] if k.startswith("mean_return_last")) if rows else ""
    return LearningCurve(
        frames=np.array([float(r["frames"]) for r in rows]),
        elapsed_s=np.array([float(r["elapsed_s"]) for r in rows]),
        games=np.array([int(r["games"]) for r in rows]),
        mean_return=np.array([float(r[column]) if r[column] else math.nan for r in rows]),
        window=int(column.removeprefix("mean_return_last") or learning_curve.WINDOW),
    )


def _random_score(game: str) -> float | None:
    from stampede.hns import load_reference

    reference = load_reference()
    return reference[game].random if game in reference else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--game", default="pong", help="ALE game id, e.g. pong, breakout")
    parser.add_argument("--frames", type=int, default=10_000_000, help="environment frames")
    parser.add_argument(
        "--threshold",
        type=float,
        nargs="*",
        default=None,
        help="returns to time (default: 0 10 18 for pong, none otherwise)",
    )
    parser.add_argument("--label", default="defaults", help="name of this recipe in the plot")
    parser.add_argument(
        "--run-dir",
        type=Path,
        default=None,
        help="run directory (default runs/learn/<label>/<game>)",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "learning")
    parser.add_argument("--report-only", action="store_true", help="do not train, only report")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for run.py (after --)")
    args = parser.parse_args(argv)
    thresholds = args.threshold
    if thresholds is None:
        thresholds = [0.0, 10.0, 18.0] if args.game == "pong" else []
    run_dir = args.run_dir or ROOT / "runs" / "learn" / args.label / args.game
    if not args.report_only:
        _train(run_dir, args.game, args.frames, args.overrides)

    curve = learning_curve.from_run(run_dir)
    if not len(curve.frames):
        print(f"learning: {run_dir} has no finished games", file=sys.stderr)
        return 1
    csv_path = learning_curve.write_csv(curve, args.out / f"{args.game}_{args.label}.csv")
    curves = {args.label: curve}
    for other in sorted(args.out.glob(f"{args.game}_*.csv")):
        label = other.stem.removeprefix(f"{args.game}_")
        if label != args.label:
            curves[label] = _read_csv(other)
    fig = learning_curve.plot(
        curves,
        f"{args.game}: mean return of the last {curve.window} games",
        thresholds,
        _random_score(args.game),
    )
    png_path = args.out / f"{args.game}.png"
    fig.savefig(png_path, dpi=110)

    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs")
    print(
        f"run: {run_dir} ({int(curve.frames[-1]):,} frames, {len(curve.frames):,} games, "
        f"{curve.elapsed_s[-1] / 60:.1f} min of training)"
    )
    for c in learning_curve.crossings(curve, thresholds):
        where = (
            f"{c.frames:,.0f} frames, {c.elapsed_s / 60:.1f} min"
            if c.frames is not None and c.elapsed_s is not None
            else "not reached"
        )
        print(f"  mean of last {curve.window} >= {c.threshold:g}: {where}")
    print(f"  final mean of last {curve.window}: {curve.final:.2f}")
    print(f"wrote {csv_path.relative_to(ROOT) if csv_path.is_relative_to(ROOT) else csv_path}")
    print(f"wrote {png_path.relative_to(ROOT) if png_path.is_relative_to(ROOT) else png_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""`make learn`: train one Atari game for N frames and report its learning curve.

    python benchmarks/learning.py --game pong --frames 10000000 [--threshold 0 10 18]
                                  [--label defaults] [-- <more Hydra overrides>]
    python benchmarks/learning.py --game pong breakout --frames 10000000   # one multi-task agent

Trains ``python run.py env=atari env.game=<game> total_frames=<frames>`` in a fixed run
directory (``runs/learn/<label>/<game>`` by default), so a run that was stopped resumes where
it was when the command is run again, and a finished run is only reported. Then writes, into
``--out`` (``docs/learning``):

- ``<game>_<label>.csv``: frames, training seconds, games, mean return of the last 100 games;
- ``<game>.png``: that curve beside the other labels' curves of the same game in ``--out``;

and prints the frames and wall time at which the mean of the last 100 games first reached each
``--threshold``, and the final mean. Extra Hydra overrides after ``--`` go to ``run.py`` (for
example ``+experiment=impala_paper --label paper``).

Several games train one multi-task agent on all of them (``env.games``, the full action set,
PopArt; label ``multitask`` by default, run directory ``runs/learn/<label>/<game+game>``); then
each game's curve, drawn against that game's own frames, goes into its ``<game>_<label>.csv`` and
``<game>.png``, beside the single-game curves of the same game.
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

from stampede.report import curves as learning_curve
from stampede.report.curves import LearningCurve

ROOT = Path(__file__).resolve().parents[1]


def _train(run_dir: Path, games: list[str], frames: int, overrides: list[str]) -> None:
    if len(games) == 1:
        env = [f"env.game={games[0]}"]
    else:  # one agent for every game: one policy head over the full action set, PopArt
        env = [f"env.games=[{','.join(games)}]", "env.full_action_space=true", "vtrace.popart=true"]
    command = [
        sys.executable,
        str(ROOT / "run.py"),
        "env=atari",
        *env,
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
    from stampede.report.hns import load_reference

    reference = load_reference()
    return reference[game].random if game in reference else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--game",
        nargs="+",
        default=["pong"],
        help="ALE game id, e.g. pong; several: one multi-task agent for all",
    )
    parser.add_argument("--frames", type=int, default=10_000_000, help="environment frames")
    parser.add_argument(
        "--threshold",
        type=float,
        nargs="*",
        default=None,
        help="returns to time (default: 0 10 18 for pong, none otherwise)",
    )
    parser.add_argument(
        "--label",
        default=None,
        help="name of this recipe in the plot (default: defaults, or multitask for several games)",
    )
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
    games = list(args.game)
    label = args.label or ("defaults" if len(games) == 1 else "multitask")
    run_dir = args.run_dir or ROOT / "runs" / "learn" / label / "+".join(games)
    if not args.report_only:
        _train(run_dir, games, args.frames, args.overrides)
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs")
    status = 0
    for game in games:
        curve = learning_curve.from_run(run_dir, game=game if len(games) > 1 else None)
        if not len(curve.frames):
            print(f"learning: {run_dir} has no finished games of {game}", file=sys.stderr)
            status = 1
            continue
        thresholds = args.threshold
        if thresholds is None:
            thresholds = [0.0, 10.0, 18.0] if game == "pong" else []
        _report(game, label, curve, thresholds, run_dir, args.out)
    return status


def _report(
    game: str,
    label: str,
    curve: LearningCurve,
    thresholds: list[float],
    run_dir: Path,
    out: Path,
) -> None:
    """Write the game's curve and plot (beside its other labels' curves), print its figures."""
    csv_path = learning_curve.write_csv(curve, out / f"{game}_{label}.csv")
    curves = {label: curve}
    for other in sorted(out.glob(f"{game}_*.csv")):
        name = other.stem.removeprefix(f"{game}_")
        if name != label:
            curves[name] = _read_csv(other)
    fig = learning_curve.plot(
        curves,
        f"{game}: mean return of the last {curve.window} games",
        thresholds,
        _random_score(game),
    )
    png_path = out / f"{game}.png"
    fig.savefig(png_path, dpi=110)
    print(
        f"{game} in {run_dir} ({int(curve.frames[-1]):,} frames of {game}, "
        f"{len(curve.frames):,} games, {curve.elapsed_s[-1] / 60:.1f} min of training)"
    )
    for c in learning_curve.crossings(curve, thresholds):
        where = (
            f"{c.frames:,.0f} frames, {c.elapsed_s / 60:.1f} min"
            if c.frames is not None and c.elapsed_s is not None
            else "not reached"
        )
        print(f"  mean of last {curve.window} >= {c.threshold:g}: {where}")
    print(f"  final mean of last {curve.window}: {curve.final:.2f}")
    for path in (csv_path, png_path):
        print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")


if __name__ == "__main__":
    raise SystemExit(main())

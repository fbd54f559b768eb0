"""`make learn`: train one Atari game for N frames and report its learning curve.

    python benchmarks/learning.py --game pong --frames 10000000 [--threshold 0 10 18]
                                  [--label defaults] [-- <more Hydra overrides>]
    python benchmarks/learning.py --game pong breakout --frames 10000000   # one multi-task agent
    python benchmarks/learning.py --game pong --seeds 3                    # seeds 1, 2, 3

Trains ``python run.py env=atari env.game=<game> total_frames=<frames>`` in a fixed run
directory (``runs/learn/<label>/<game>`` by default), so a run that was stopped resumes where
it was when the command is run again, and a finished run is only reported. Then writes, into
``--out`` (``docs/learning``):

- ``<game>_<label>.csv``: frames, training seconds, games, mean return of the last 100 games;
- ``<game>.png``: that curve beside the other labels' curves of the same game in ``--out``;
- ``runs/<label>/<game>[/seed<k>]/``: the run's record of games (``episodes.jsonl``) and, where
  present, its evaluation (``eval.json``) and resolved config (Pong's 10M frames: 1,500 games,
  160 KB), so that a fresh clone still reports the run after its run directory is gone, and
  ``stampede-report docs/learning/runs/...`` aggregates the evaluations; beside them
  ``diagnostics.csv``, the medians of the learner's diagnostics per ``--diagnostics-every``
  frames of its ``metrics.jsonl`` (`stampede.report.diagnostics`);

and prints the frames and wall time at which the mean of the last 100 games first reached each
``--threshold``, the final mean, and the table of diagnostics (entropy, explained variance, KL,
advantage scale, reward density, ...: docs/learning.md reads a stall from them). A run whose
directory has no games is read from that archive, else from its CSV (one row per 50,000 frames:
crossings to that resolution). Extra Hydra overrides after ``--`` go to ``run.py`` (for example
``+experiment=impala_paper --label paper``).

``--seeds N`` trains seeds 1..N one after the other (``seed=<k>``, run directories
``runs/learn/<label>/<game>/seed<k>``, curves ``<game>_<label>_seed<k>.csv``), prints each seed's
figures and their mean and spread, and draws the seeds thin with their mean and range. On a
cluster the seeds run side by side as one sweep (``python run.py --multirun env=atari
env.game=pong seed=1,2,3 infra=slurm``), whose curves ``notebooks/learning_curves.ipynb`` draws
the same way.

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
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

from stampede.report import curves as learning_curve
from stampede.report import diagnostics
from stampede.report.curves import LearningCurve
from stampede.rundir.files import CONFIG_FILE, EPISODES_FILE, EVAL_FILE, METRICS_FILE

ROOT = Path(__file__).resolve().parents[1]
ARCHIVED = (EPISODES_FILE, EVAL_FILE, CONFIG_FILE)  # what docs/ keeps of a run, and:
DIAGNOSTICS_CSV = "diagnostics.csv"  # the medians of its metrics.jsonl per stretch of frames


def train(run_dir: Path, games: list[str], frames: int, overrides: list[str]) -> None:
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


def archive(run_dir: Path, kept: Path, every_frames: int) -> None:
    """Copy the run's `ARCHIVED` files that exist to ``kept`` and write its diagnostics there
    (unless ``kept`` is the run itself)."""
    if run_dir.resolve() == kept.resolve():
        return
    kept.mkdir(parents=True, exist_ok=True)
    for name in ARCHIVED:
        if (run_dir / name).exists():
            shutil.copyfile(run_dir / name, kept / name)
    if (run_dir / METRICS_FILE).exists():
        diagnostics.write_csv(diagnostics.from_run(run_dir, every_frames), kept / DIAGNOSTICS_CSV)


def _print_diagnostics(run_dir: Path, archive: Path, every_frames: int) -> None:
    """The run's diagnostics table, from its ``metrics.jsonl``, else from its archive."""
    if (run_dir / METRICS_FILE).exists():
        table, source = diagnostics.from_run(run_dir, every_frames), run_dir / METRICS_FILE
    elif (archive / DIAGNOSTICS_CSV).exists():
        table, source = diagnostics.read_csv(archive / DIAGNOSTICS_CSV), archive / DIAGNOSTICS_CSV
    else:
        return
    print(f"learning diagnostics, medians per stretch of frames ({_shown(source)}):")
    print(diagnostics.to_markdown(table))


def _curve(
    run_dir: Path, archive: Path, csv_path: Path, game: str | None
) -> tuple[LearningCurve, Path | None]:
    """A run's curve and where it was read from: its run directory, else its archive in docs/,
    else its CSV there; None: no games anywhere (an empty curve)."""
    for source in (run_dir, archive):
        curve = learning_curve.from_run(source, game=game)
        if len(curve.frames):
            return curve, source
    if csv_path.exists():
        return _read_csv(csv_path), csv_path
    return curve, None


def _csv_path(out: Path, game: str, label: str, seed: int) -> Path:
    """Where a run's curve goes in ``out`` (seed 0: a single run)."""
    return out / f"{game}_{label}{f'_seed{seed}' if seed else ''}.csv"


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
        "--seeds",
        type=int,
        default=0,
        help="train seeds 1..N, one after the other (default: one run)",
    )
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
        help="run directory (default runs/learn/<label>/<game>; with --seeds, its seed<k>/)",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "learning")
    parser.add_argument(
        "--diagnostics-every",
        type=int,
        default=1_000_000,
        help="frames per column of the diagnostics table (default 1,000,000)",
    )
    parser.add_argument("--report-only", action="store_true", help="do not train, only report")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for run.py (after --)")
    args = parser.parse_args(argv)
    if args.seeds < 0:
        parser.error(f"--seeds must be a positive number of seeds, got {args.seeds}")
    if args.diagnostics_every < 1:
        parser.error(f"--diagnostics-every must be >= 1 frame, got {args.diagnostics_every}")
    games = list(args.game)
    label = args.label or ("defaults" if len(games) == 1 else "multitask")
    base = args.run_dir or ROOT / "runs" / "learn" / label / "+".join(games)
    runs = {k: base / f"seed{k}" for k in range(1, args.seeds + 1)} if args.seeds else {0: base}
    kept = args.out / "runs" / label / "+".join(games)
    archives = {k: kept / f"seed{k}" if k else kept for k in runs}
    if not args.report_only:
        for seed, run_dir in runs.items():
            train(run_dir, games, args.frames, [*args.overrides, *([f"seed={seed}"] * bool(seed))])
    for seed, run_dir in runs.items():  # once per run, a multi-task run's games together
        if (run_dir / EPISODES_FILE).exists():
            archive(run_dir, archives[seed], args.diagnostics_every)
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs")
    status = 0
    for game in games:
        curves, sources = {}, {}
        for seed, run_dir in runs.items():
            csv_path = _csv_path(args.out, game, label, seed)
            curve, source = _curve(
                run_dir, archives[seed], csv_path, game if len(games) > 1 else None
            )
            if source is None:
                print(f"learning: {run_dir} has no finished games of {game}", file=sys.stderr)
                status = 1
                continue
            curves[seed], sources[seed] = curve, source
        thresholds = args.threshold
        if thresholds is None:
            thresholds = [0.0, 10.0, 18.0] if game == "pong" else []
        if curves:
            _report(game, label, curves, thresholds, sources, args.out)
    for seed, run_dir in runs.items():  # one table per run: a multi-task run's games share it
        _print_diagnostics(run_dir, archives[seed], args.diagnostics_every)
    return status


def _report(
    game: str,
    label: str,
    curves: dict[int, LearningCurve],
    thresholds: list[float],
    sources: dict[int, Path],
    out: Path,
) -> None:
    """Write each seed's curve and the plot (beside the other labels' curves of the game), print
    each seed's figures and, for several seeds, their mean and spread. Seed 0: a single run;
    ``sources``: where each seed's curve was read from."""
    written = []
    for seed, curve in curves.items():
        written.append(learning_curve.write_csv(curve, _csv_path(out, game, label, seed)))
        source = sources[seed]
        where = f"{game}{f' seed {seed}' if seed else ''} in {_shown(source)}"
        coarse = ", crossings to its 50,000-frame rows" if source.suffix == ".csv" else ""
        print(
            f"{where} ({int(curve.frames[-1]):,} frames of {game}, {int(curve.games[-1]):,} "
            f"games, {curve.elapsed_s[-1] / 60:.1f} min of training{coarse})"
        )
        for c in learning_curve.crossings(curve, thresholds):
            reached = (
                f"{c.frames:,.0f} frames, {c.elapsed_s / 60:.1f} min"
                if c.frames is not None and c.elapsed_s is not None
                else "not reached"
            )
            print(f"  mean of last {curve.window} >= {c.threshold:g}: {reached}")
        print(f"  final mean of last {curve.window}: {curve.final:.2f}")
    if len(curves) > 1:
        _print_spread(list(curves.values()), thresholds)
    mine: LearningCurve | list[LearningCurve] = (
        list(curves.values()) if len(curves) > 1 or 0 not in curves else curves[0]
    )
    fig = learning_curve.plot(
        {label: mine, **_other_labels(out, game, label)},
        f"{game}: mean return of the last {learning_curve.WINDOW} games",
        thresholds,
        _random_score(game),
    )
    png_path = out / f"{game}.png"
    fig.savefig(png_path, dpi=110)
    for path in (*written, png_path):
        print(f"wrote {_shown(path)}")


def _shown(path: Path) -> Path:
    """``path`` relative to the repository where it is inside it."""
    return path.resolve().relative_to(ROOT) if path.resolve().is_relative_to(ROOT) else path


def _print_spread(curves: list[LearningCurve], thresholds: list[float]) -> None:
    """Mean and sample standard deviation over the seeds of each figure (a threshold that some
    seed did not reach: how many did)."""

    def spread(values: list[float]) -> str:
        return f"{np.mean(values):,.2f} +- {np.std(values, ddof=1):,.2f}"

    print(f"over {len(curves)} seeds (mean +- std):")
    for threshold in thresholds:
        hits = [learning_curve.crossings(c, [threshold])[0] for c in curves]
        frames = [h.frames for h in hits if h.frames is not None]
        if len(frames) < len(curves):
            print(f"  >= {threshold:g}: reached by {len(frames)} of {len(curves)} seeds")
        else:
            print(f"  frames to >= {threshold:g}: {spread(frames)}")
    print(f"  final mean of last {curves[0].window}: {spread([c.final for c in curves])}")


def _other_labels(
    out: Path, game: str, label: str
) -> dict[str, LearningCurve | list[LearningCurve]]:
    """The curves of the game's other labels in ``out``: one per label, or its seeds."""
    found: dict[str, list[LearningCurve]] = {}
    single: dict[str, LearningCurve] = {}
    for path in sorted(out.glob(f"{game}_*.csv")):
        name = path.stem.removeprefix(f"{game}_")
        seeded = re.fullmatch(r"(.+)_seed(\d+)", name)
        other = seeded.group(1) if seeded else name
        if other == label:
            continue
        if seeded:
            found.setdefault(other, []).append(_read_csv(path))
        else:
            single[other] = _read_csv(path)
    return {**single, **found}


if __name__ == "__main__":
    raise SystemExit(main())

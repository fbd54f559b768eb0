"""`make probe`: train one recipe (a label) on every game of the dev set, and compare it.

    python benchmarks/probe.py --label lr2.5e-4 [--frames 3000000] [--games dev5] [--seed 1]
                               [--root runs/probe] [-- <Hydra overrides of the recipe>]
    python benchmarks/probe.py --report-only                       # the table of every label

Defaults are chosen on the dev set (``dev5``: pong, breakout, beam_rider, space_invaders,
robotank) and proven on the test set, Atari-5, which is never probed (docs/learning.md).

Each game trains ``python run.py env=atari env.game=<game> total_frames=<frames> seed=<seed>
<overrides>`` in the fixed run directory ``<root>/<label>/<game>``, one game after the other, so
the same command resumes a probe that was stopped and only reports a finished one (a game
stopped short of N, by SIGTERM or Ctrl-C, ends the probe there with exit 1). After each
game its run is archived as ``make learn`` does (games, config, diagnostics) in
``<out>/<label>/<game>`` (``docs/learning/probes`` by default), beside the label's
``probe.json`` (frames, seed, overrides); a label names one recipe, and asking it for other
overrides is refused. Then it prints the labels x games table of `stampede.report.probe`: each
game's mean of the last 100 games at N/2 and N frames, the IQM HNS of those games with rliable's
interval, and frames per training second. ``<out>/table.md`` always gets the table of every label
on the whole dev set, so a probe of some games first (``--games beam_rider``, a screen) leaves
the other games' columns as they were.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from pathlib import Path

from learning import ROOT, archive, train

from stampede.envs.games import GAME_SETS, atari57, games
from stampede.report import probe
from stampede.rundir.files import EPISODES_FILE

DEV_SET = "dev5"
TABLE_FILE = "table.md"
DIAGNOSTICS_EVERY = 500_000  # frames per row of an archived run's diagnostics.csv


def _games(names: list[str]) -> list[str]:
    """Game ids from set names (``dev5``) and ALE ids, in order, each once."""
    known = set(atari57())
    out: list[str] = []
    for name in names:
        if name in GAME_SETS:
            out.extend(games(name))
        elif name in known:
            out.append(name)
        else:
            raise ValueError(
                f"--games: {name!r} is neither a game set ({', '.join(GAME_SETS)}) nor an "
                f"Atari-57 ALE id (e.g. pong, beam_rider)"
            )
    return list(dict.fromkeys(out))


def _archive_label(root: Path, out: Path, label: str, game_ids: list[str]) -> None:
    """Archive the label's runs that exist under ``root`` into ``out``, as `make learn` does."""
    for game in game_ids:
        run_dir = root / label / game
        if (run_dir / EPISODES_FILE).exists():
            archive(run_dir, out / label / game, DIAGNOSTICS_EVERY)
            probe.keep_trained_frames(run_dir, out / label / game)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--label", help="name of the recipe (its overrides go after --)")
    parser.add_argument("--frames", type=int, default=3_000_000, help="frames a game")
    parser.add_argument("--seed", type=int, default=1, help="the seed of every game (default 1)")
    parser.add_argument(
        "--games", nargs="+", default=[DEV_SET], help="game sets and ALE ids (default dev5)"
    )
    parser.add_argument(
        "--root", type=Path, default=ROOT / "runs" / "probe", help="run directories' root"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "learning" / "probes")
    parser.add_argument("--labels", nargs="+", help="labels of the table (default: all in --out)")
    parser.add_argument("--report-only", action="store_true", help="do not train, only report")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for run.py (after --)")
    args = parser.parse_args(argv)
    try:
        game_ids = _games(args.games)
    except ValueError as err:
        parser.error(str(err))
    if args.frames < 1:
        parser.error(f"--frames must be >= 1, got {args.frames}")
    if args.seed < 0:
        parser.error(f"--seed must be >= 0, got {args.seed}")
    if not args.report_only:
        if not args.label:
            parser.error("--label is required to train (or give --report-only)")
        spec = probe.ProbeSpec(args.label, args.frames, args.seed, tuple(args.overrides))
        try:
            spec.write(args.out / args.label)
        except ValueError as err:
            parser.error(str(err))
        for game in game_ids:
            run_dir = args.root / args.label / game
            train(run_dir, [game], args.frames, [f"seed={args.seed}", *args.overrides])
            _archive_label(args.root, args.out, args.label, [game])
            trained = probe.trained_frames(run_dir)
            if trained < args.frames:  # stopped (SIGTERM, Ctrl-C): not on to the next game
                print(
                    f"probe: {game} stopped at {trained:,.0f} of {args.frames:,} frames; "
                    f"the same command resumes it",
                    file=sys.stderr,
                )
                return 1
    labels = args.labels or ([args.label] if args.report_only and args.label else None)
    try:
        rows = probe.read_labels(args.out, game_ids, labels, args.root)
    except ValueError as err:
        parser.error(str(err))
    for row in rows:  # what a stopped probe has trained so far, too
        _archive_label(args.root, args.out, row.spec.label, game_ids)
    table = probe.markdown(rows, game_ids)
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs")
    print(
        "mean of the last 100 games at N/2 / at N frames; IQM of HNS at N with its 95% interval "
        "(rliable, games resampled); frames per training second over all games"
    )
    print(table)
    if labels is None:  # every label on the whole dev set: the table docs/learning.md copies
        dev_ids = games(DEV_SET)
        if game_ids != dev_ids:  # a probe of some games (a screen) keeps the dev set's table
            table = probe.markdown(probe.read_labels(args.out, dev_ids, None, args.root), dev_ids)
        (args.out / TABLE_FILE).write_text(table + "\n")
        print(f"wrote {args.out / TABLE_FILE} (every label, the dev set's games)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

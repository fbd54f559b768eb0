"""``stampede-report <sweep dir>``: the Atari-57 results table of a sweep against the IMPALA
paper, printed, and as CSV or markdown on request; under it rliable's interval estimates of the
IQM, median and mean HNS and, when the Atari-5 games are present, the predicted 57-game median
(``stampede.report.aggregate``); a performance profile figure on request. Bad input is one line
and exit 2."""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import NoReturn

from stampede.report import aggregate
from stampede.report.hns import PAPER_RANDOM_OVERRIDES
from stampede.report.report import build_table, collect, format_text, write_csv, write_markdown
from stampede.rundir.files import EVAL_FILE


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """A bad command line: one line (no usage block) and exit 2."""
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="stampede-report",
        description="Atari-57 results table of a sweep against the IMPALA paper (deep).",
    )
    parser.add_argument("sweep_dir", type=Path, help="directory searched for */eval.json")
    parser.add_argument("--csv", type=Path, metavar="PATH", help="also write the table as CSV")
    parser.add_argument("--markdown", type=Path, metavar="PATH", help="also write markdown")
    parser.add_argument(
        "--profile", type=Path, metavar="PATH", help="also draw the performance profile (PNG)"
    )
    parser.add_argument(
        "--reps",
        type=int,
        default=10_000,
        metavar="N",
        help="bootstrap resamples of the interval estimates (default 10000)",
    )
    parser.add_argument(
        "--task-bootstrap",
        action="store_true",
        help="resample the games as well as the seeds (rliable's task bootstrap): how much the "
        "aggregates depend on which games were run; always used with one seed per game",
    )
    parser.add_argument(
        "--dqn-zoo-random",
        action="store_true",
        help="use the DQN Zoo random scores unchanged (video_pinball random = 16256.9) "
        "instead of the paper-compatible random = 0",
    )
    return parser


def cli(argv: list[str] | None = None) -> int:
    """Entry point of `stampede-report`; returns the exit code: 0, or 2 for bad input, with one
    line on stderr naming it. Each skipped file is one warning line on stderr."""
    args = _parser().parse_args(argv)
    if args.reps < 1:
        return _bad_input(f"--reps must be a positive number of resamples, got {args.reps}")
    overrides: Mapping[str, float] = {} if args.dqn_zoo_random else PAPER_RANDOM_OVERRIDES
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            table = build_table(collect(args.sweep_dir), random_overrides=overrides)
    except FileNotFoundError as err:
        return _bad_input(str(err))
    skipped = [str(w.message) for w in caught]
    if not table.rows:
        found = f"{len(skipped)} skipped, the first: {skipped[0]}" if skipped else "none found"
        return _bad_input(
            f"no Atari-57 result in {str(args.sweep_dir)!r} ({found}); expected "
            f"<run_dir>/{EVAL_FILE} files of Atari runs, written by evaluation, at any depth"
        )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lines = aggregate.summary_lines(table, args.reps, args.task_bootstrap)
    skipped += [str(w.message) for w in caught]
    for message in skipped:
        print(f"stampede-report: warning: {message}", file=sys.stderr)
    print(format_text(table), end="")
    print("\n".join(lines))
    profile = partial(aggregate.write_profile, task_bootstrap=args.task_bootstrap)
    for option, path, write in (
        ("--csv", args.csv, write_csv),
        ("--markdown", args.markdown, write_markdown),
        ("--profile", args.profile, profile),
    ):
        if path is not None:
            try:
                write(table, path)
            except OSError as err:
                return _bad_input(f"{option} {str(path)!r}: cannot write: {err.strerror or err}")
    return 0


def _bad_input(message: str) -> int:
    print(f"stampede-report: {message}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(cli())

"""Atari-57 results table: our evaluation scores against the IMPALA paper.

Compares per-game scores with IMPALA (deep network, one agent per game) of Espeholt et al.
2018 (arXiv 1802.01561, Table C.1) and summarises them with human-normalised scores,

    HNS = (score - random) / (human - random),

stored as fractions (1.0 = human level) and printed as percentages. Aggregates over the
games present: median and mean HNS as in the paper, and the interquartile mean (IQM) that
Agarwal et al. 2021 ("Deep RL at the Edge of the Statistical Precipice") recommend.

Per game, our score is the mean over seeds of each seed's mean evaluation return, and our
HNS is the HNS of that mean. HNS is affine in the score, so this equals the mean over seeds
of per-seed HNS: the choice does not change any number.

Random scores: the shipped random/human table (DQN Zoo) gives video_pinball a random score of
16256.9, less than 1,500 points under its human score, which turns the paper's 572,898 into an
HNS of about 39,450% and the 57-game mean into ~1592%. The IMPALA paper's means (957.6% deep)
are reproduced only with random = 0 for video_pinball, as other public copies of the table
have it; `PAPER_RANDOM_OVERRIDES` applies that by default so our means compare with the
paper's. Medians are the same either way.

Usage: `stampede-report <sweep_dir> [--csv PATH] [--markdown PATH]`, or from Python
`build_table(collect(sweep_dir))` and `table_from_scores({"pong": 20.9, ...})`.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import functools
import json
import math
import sys
import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from stampede.atari57 import IMPALA_SCORES_CSV, RANDOM_HUMAN_CSV, atari57, read_data_csv

EVAL_FILENAME = "eval.json"

# See the module docstring: the random score the IMPALA paper's aggregates imply.
PAPER_RANDOM_OVERRIDES: Mapping[str, float] = MappingProxyType({"video_pinball": 0.0})


class ReportWarning(UserWarning):
    """A result file was skipped or a result looked suspicious while building a report."""


# ---------------------------------------------------------------------------- reference data


@dataclasses.dataclass(frozen=True)
class GameReference:
    """Reference scores of one game: the paper's name, random, human and IMPALA (deep)."""

    game: str  # ALE id
    name: str  # the paper's name
    random: float
    human: float
    impala_deep: float

    def hns(self, score: float) -> float:
        """Human-normalised score of `score` as a fraction (1.0 = human level)."""
        return (score - self.random) / (self.human - self.random)


def load_reference(
    random_overrides: Mapping[str, float] = PAPER_RANDOM_OVERRIDES,
) -> dict[str, GameReference]:
    """Reference scores of the 57 games keyed by ALE id, in `atari57()` order.

    `random_overrides` replaces random scores of the shipped table (by ALE id); pass `{}` to
    use the DQN Zoo values unchanged.
    """
    return dict(_load_reference(tuple(sorted(random_overrides.items()))))


@functools.cache
def _load_reference(
    overrides: tuple[tuple[str, float], ...],
) -> tuple[tuple[str, GameReference], ...]:
    random_human = {row["game"]: row for row in read_data_csv(RANDOM_HUMAN_CSV)}
    paper = {row["ale_id"]: row for row in read_data_csv(IMPALA_SCORES_CSV)}
    games = atari57()
    if set(random_human) != set(games):
        raise ValueError(
            f"{RANDOM_HUMAN_CSV} must cover the 57 games of {IMPALA_SCORES_CSV}; "
            f"missing {sorted(set(games) - set(random_human))}, "
            f"extra {sorted(set(random_human) - set(games))}"
        )
    unknown = sorted(dict(overrides).keys() - set(games))
    if unknown:
        raise ValueError(f"random_overrides names games outside Atari-57: {unknown}")
    random_of = {g: float(random_human[g]["random"]) for g in games} | dict(overrides)
    return tuple(
        (
            g,
            GameReference(
                game=g,
                name=paper[g]["game"],
                random=random_of[g],
                human=float(random_human[g]["human"]),
                impala_deep=float(paper[g]["impala_deep_score"]),
            ),
        )
        for g in games
    )


# ------------------------------------------------------------------------------ run results


@dataclasses.dataclass(frozen=True)
class EvalResult:
    """One finished evaluation (one `eval.json`): a game, a seed and its mean return."""

    game: str
    seed: int
    mean: float  # mean episode return over the evaluation episodes
    frames: int  # training frames of the evaluated checkpoint
    episodes: int
    greedy: bool
    experiment: str
    path: Path


def collect(sweep_dir: str | Path) -> list[EvalResult]:
    """Every Atari `eval.json` at any depth under `sweep_dir`, sorted by game then seed.

    Files with another `env_kind` are skipped silently; unreadable or malformed files are
    skipped with a `ReportWarning` naming the path.
    """
    root = Path(sweep_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"sweep directory {str(root)!r} does not exist or is not a dir")
    results = []
    for path in sorted(root.rglob(EVAL_FILENAME)):
        result = _read_eval(path)
        if result is not None:
            results.append(result)
    return sorted(results, key=lambda r: (r.game, r.seed, str(r.path)))


def _read_eval(path: Path) -> EvalResult | None:
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(record, dict):
            raise TypeError(f"expected a JSON object, got {type(record).__name__}")
        if record.get("env_kind") != "atari":
            return None
        return EvalResult(
            game=str(record["game"]),
            seed=int(record["seed"]),
            mean=float(record["mean"]),
            frames=int(record.get("frames", 0)),
            episodes=int(record.get("episodes", 0)),
            greedy=bool(record.get("greedy", False)),
            experiment=str(record.get("experiment", "")),
            path=path,
        )
    except (OSError, ValueError, TypeError, KeyError) as err:
        # json.JSONDecodeError is a ValueError; a missing key is a KeyError.
        detail = f"missing key {err}" if isinstance(err, KeyError) else str(err)
        warnings.warn(f"skipping unreadable {path}: {detail}", ReportWarning, stacklevel=3)
        return None


# ------------------------------------------------------------------------------------ table


@dataclasses.dataclass(frozen=True)
class GameRow:
    """One game of the table. HNS values are fractions (1.0 = human level)."""

    game: str
    name: str
    score: float  # ours: mean over seeds
    std: float  # sample std over seeds (ddof=1); nan with one seed
    n_seeds: int
    frames: int  # fewest training frames among the seeds (0 if unknown)
    impala_deep: float
    random: float
    human: float
    hns: float
    impala_deep_hns: float

    @property
    def beats_paper(self) -> bool:
        return self.score > self.impala_deep


@dataclasses.dataclass(frozen=True)
class Table:
    """Per-game rows (Atari-57 order) for the games present, and the games missing."""

    rows: tuple[GameRow, ...]
    missing: tuple[str, ...]

    @property
    def n_games(self) -> int:
        return len(self.rows)

    @property
    def n_beat_paper(self) -> int:
        return sum(row.beats_paper for row in self.rows)

    @property
    def median_hns(self) -> float:
        return _median([row.hns for row in self.rows])

    @property
    def mean_hns(self) -> float:
        return _mean([row.hns for row in self.rows])

    @property
    def iqm_hns(self) -> float:
        return interquartile_mean([row.hns for row in self.rows])

    @property
    def paper_median_hns(self) -> float:
        """The paper's median HNS over the same games (all 57: the paper's own figure)."""
        return _median([row.impala_deep_hns for row in self.rows])

    @property
    def paper_mean_hns(self) -> float:
        return _mean([row.impala_deep_hns for row in self.rows])

    @property
    def paper_iqm_hns(self) -> float:
        return interquartile_mean([row.impala_deep_hns for row in self.rows])


def interquartile_mean(values: Sequence[float]) -> float:
    """Mean of the middle 50% (Agarwal et al. 2021): drop the lowest and highest
    floor(n / 4) values, average the rest. Same convention as `scipy.stats.trim_mean(x, 0.25)`,
    which rliable uses. nan for no values."""
    if len(values) == 0:
        return math.nan
    n_cut = len(values) // 4
    middle = sorted(values)[n_cut : len(values) - n_cut]
    return _mean(middle)


def _median(values: Sequence[float]) -> float:
    return float(np.median(values)) if len(values) else math.nan


def _mean(values: Sequence[float]) -> float:
    return float(np.mean(values)) if len(values) else math.nan


def build_table(
    results: Iterable[EvalResult],
    random_overrides: Mapping[str, float] = PAPER_RANDOM_OVERRIDES,
) -> Table:
    """Table from evaluation results: one row per Atari-57 game with at least one seed.

    Results for games outside Atari-57 are skipped with a warning; a repeated (game, seed)
    keeps the result with the most training frames, with a warning.
    """
    reference = load_reference(random_overrides)
    per_seed: dict[tuple[str, int], EvalResult] = {}
    for result in results:
        if result.game not in reference:
            warnings.warn(
                f"skipping {result.path}: game {result.game!r} is not an Atari-57 ALE id",
                ReportWarning,
                stacklevel=2,
            )
            continue
        key = (result.game, result.seed)
        if key in per_seed:
            kept = max(per_seed[key], result, key=lambda r: r.frames)
            warnings.warn(
                f"{result.game} seed {result.seed} evaluated twice ({per_seed[key].path}, "
                f"{result.path}); keeping {kept.path}",
                ReportWarning,
                stacklevel=2,
            )
            result = kept
        per_seed[key] = result
    scores: dict[str, list[float]] = {}
    frames: dict[str, int] = {}
    for (game, _), result in per_seed.items():
        scores.setdefault(game, []).append(result.mean)
        frames[game] = min(frames.get(game, result.frames), result.frames)
    return _table(scores, frames, reference)


def table_from_scores(
    scores: Mapping[str, float | Sequence[float] | np.ndarray],
    random_overrides: Mapping[str, float] = PAPER_RANDOM_OVERRIDES,
) -> Table:
    """Table straight from {ALE id: score} (or {ALE id: [score per seed]}), e.g. in notebooks.

    Raises ValueError naming any game that is not an Atari-57 ALE id.
    """
    reference = load_reference(random_overrides)
    unknown = sorted(set(scores) - set(reference))
    if unknown:
        raise ValueError(f"not Atari-57 ALE ids: {unknown} (expected ids like 'pong', 'ms_pacman')")
    # A scalar is one seed; np.atleast_1d also accepts lists, tuples and numpy arrays.
    per_game = {game: np.atleast_1d(np.asarray(s, float)).tolist() for game, s in scores.items()}
    empty = sorted(game for game, seeds in per_game.items() if not seeds)
    if empty:
        raise ValueError(f"no scores given for {empty}")
    return _table(per_game, {}, reference)


def _table(
    scores: Mapping[str, list[float]],
    frames: Mapping[str, int],
    reference: Mapping[str, GameReference],
) -> Table:
    rows = tuple(
        _row(ref, scores[game], frames.get(game, 0))
        for game, ref in reference.items()
        if game in scores
    )
    missing = tuple(game for game in reference if game not in scores)
    return Table(rows=rows, missing=missing)


def _row(ref: GameReference, seed_scores: list[float], frames: int) -> GameRow:
    score = _mean(seed_scores)
    std = float(np.std(seed_scores, ddof=1)) if len(seed_scores) > 1 else math.nan
    return GameRow(
        game=ref.game,
        name=ref.name,
        score=score,
        std=std,
        n_seeds=len(seed_scores),
        frames=frames,
        impala_deep=ref.impala_deep,
        random=ref.random,
        human=ref.human,
        hns=ref.hns(score),
        impala_deep_hns=ref.hns(ref.impala_deep),
    )


# ----------------------------------------------------------------------------------- output

_COLUMNS = ("game", "ours", "n", "IMPALA", "random", "human", "HNS %", "paper HNS %", "beat")


def _num(x: float) -> str:
    # Two decimals where scores are small (pong, tennis, double_dunk), so that e.g. 20.98 and
    # 21.0 do not print the same; one decimal elsewhere keeps the columns narrow.
    return f"{x:.2f}" if abs(x) < 100 else f"{x:.1f}"


def _cells(row: GameRow) -> tuple[str, ...]:
    spread = "" if math.isnan(row.std) else f" ± {_num(row.std)}"
    return (
        row.game,
        f"{_num(row.score)}{spread}",
        str(row.n_seeds),
        _num(row.impala_deep),
        _num(row.random),
        _num(row.human),
        f"{100 * row.hns:.1f}",
        f"{100 * row.impala_deep_hns:.1f}",
        "yes" if row.beats_paper else "no",
    )


def summary_lines(table: Table) -> list[str]:
    """Aggregate lines shared by the text and markdown outputs."""
    games = f"{table.n_games} of 57"
    lines = [
        f"games present: {games}; beat the paper on {table.n_beat_paper} of {table.n_games}",
        f"median HNS: {100 * table.median_hns:.1f}%  (paper, same games: "
        f"{100 * table.paper_median_hns:.1f}%)",
        f"mean HNS:   {100 * table.mean_hns:.1f}%  (paper, same games: "
        f"{100 * table.paper_mean_hns:.1f}%)",
        f"IQM HNS:    {100 * table.iqm_hns:.1f}%  (paper, same games: "
        f"{100 * table.paper_iqm_hns:.1f}%)",
    ]
    if table.missing:
        lines.append(f"missing ({len(table.missing)}): {', '.join(table.missing)}")
    return lines


def format_text(table: Table) -> str:
    """The table as aligned plain text, followed by the aggregates."""
    body = [_COLUMNS, *(_cells(row) for row in table.rows)]
    widths = [max(len(cells[i]) for cells in body) for i in range(len(_COLUMNS))]

    def line(cells: Sequence[str]) -> str:
        # Game names left-aligned, numbers right-aligned so digits line up.
        first = cells[0].ljust(widths[0])
        rest = (cell.rjust(width) for cell, width in zip(cells[1:], widths[1:], strict=True))
        return "  ".join([first, *rest])

    rule = "-" * len(line(_COLUMNS))
    lines = [line(_COLUMNS), rule, *(line(cells) for cells in body[1:]), rule]
    return "\n".join([*lines, *summary_lines(table)]) + "\n"


def format_markdown(table: Table) -> str:
    """The table as a GitHub-flavoured markdown table, followed by the aggregates."""
    header = "| " + " | ".join(_COLUMNS) + " |"
    align = "|:---|" + "---:|" * (len(_COLUMNS) - 1)
    rows = ["| " + " | ".join(_cells(row)) + " |" for row in table.rows]
    summary = [f"- {line}" for line in summary_lines(table)]
    return "\n".join([header, align, *rows, "", *summary]) + "\n"


CSV_FIELDS = (
    "game",
    "name",
    "n_seeds",
    "frames",
    "score_mean",
    "score_std",
    "impala_deep",
    "random",
    "human",
    "hns_pct",
    "impala_deep_hns_pct",
    "beats_paper",
)


def write_csv(table: Table, path: str | Path) -> None:
    """One line per game present; HNS columns in percent; empty score_std with one seed."""
    with Path(path).open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(CSV_FIELDS)
        for row in table.rows:
            writer.writerow(_csv_values(row))


def _csv_values(row: GameRow) -> list[Any]:
    return [
        row.game,
        row.name,
        row.n_seeds,
        row.frames,
        repr(row.score),
        "" if math.isnan(row.std) else repr(row.std),
        repr(row.impala_deep),
        repr(row.random),
        repr(row.human),
        f"{100 * row.hns:.4f}",
        f"{100 * row.impala_deep_hns:.4f}",
        int(row.beats_paper),
    ]


# -------------------------------------------------------------------------------------- CLI


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="stampede-report",
        description="Atari-57 results table of a sweep against the IMPALA paper (deep).",
    )
    parser.add_argument("sweep_dir", type=Path, help="directory searched for */eval.json")
    parser.add_argument("--csv", type=Path, metavar="PATH", help="also write the table as CSV")
    parser.add_argument("--markdown", type=Path, metavar="PATH", help="also write markdown")
    parser.add_argument(
        "--dqn-zoo-random",
        action="store_true",
        help="use the DQN Zoo random scores unchanged (video_pinball random = 16256.9) "
        "instead of the paper-compatible random = 0",
    )
    return parser


def cli(argv: list[str] | None = None) -> int:
    """Entry point of `stampede-report`; returns the exit code (1 when there is nothing to
    report)."""
    args = _parser().parse_args(argv)
    try:
        results = collect(args.sweep_dir)
    except FileNotFoundError as err:
        print(f"stampede-report: {err}", file=sys.stderr)
        return 1
    if not results:
        print(
            f"stampede-report: no Atari {EVAL_FILENAME} found under {args.sweep_dir} "
            f"(expected <run_dir>/{EVAL_FILENAME} files written by evaluation, at any depth)",
            file=sys.stderr,
        )
        return 1
    overrides: Mapping[str, float] = {} if args.dqn_zoo_random else PAPER_RANDOM_OVERRIDES
    table = build_table(results, random_overrides=overrides)
    if not table.rows:
        print("stampede-report: no result is for an Atari-57 game", file=sys.stderr)
        return 1
    print(format_text(table), end="")
    if args.csv is not None:
        write_csv(table, args.csv)
    if args.markdown is not None:
        args.markdown.write_text(format_markdown(table), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(cli())

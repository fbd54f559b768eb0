"""`stampede-report`: a sweep's evaluation results as the Atari-57 table against the IMPALA paper.

Reads every Atari ``eval.json`` under a sweep directory (``collect``), keeps one result per game
and seed (``build_table``) and prints the table of ``stampede.report.hns`` as text, markdown or CSV.
A multi-task run (one agent for several games, ``env.games``) keeps one result per game in
``<run>/eval/<game>/eval.json``; its table is the same, marked as one agent.

Usage: `stampede-report <sweep_dir> [--csv PATH] [--markdown PATH]`, or from Python
`build_table(collect(sweep_dir))`. Bad input (no such directory, no readable Atari-57 result, an
output file that cannot be written, an unknown option) prints one line naming it and exits 2.
"""

from __future__ import annotations

import csv
import dataclasses
import math
import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from stampede.envs.games import atari57
from stampede.eval.results import EvalRecord, read_eval
from stampede.report.hns import PAPER_RANDOM_OVERRIDES, GameRow, Table, table_from_scores
from stampede.rundir.files import EVAL_FILE


class ReportWarning(UserWarning):
    """A result file was skipped or a result looked suspicious while building a report."""


# ------------------------------------------------------------------------------ run results


def collect(sweep_dir: str | Path) -> list[EvalRecord]:
    """Every Atari `eval.json` at any depth under `sweep_dir`, sorted by game then seed.

    Files with another `env_kind` are skipped silently; unreadable or malformed files are
    skipped with a `ReportWarning` naming the path. FileNotFoundError if `sweep_dir` is not a
    directory.
    """
    root = Path(sweep_dir)
    if not root.is_dir():
        raise FileNotFoundError(
            f"sweep directory {str(root)!r} does not exist or is not a directory"
        )
    records = []
    for path in sorted(root.rglob(EVAL_FILE)):
        try:
            record = read_eval(path)
        except (OSError, ValueError, TypeError, KeyError) as err:
            # json.JSONDecodeError is a ValueError; a missing key is a KeyError.
            detail = f"missing key {err}" if isinstance(err, KeyError) else str(err)
            warnings.warn(f"skipping unreadable {path}: {detail}", ReportWarning, stacklevel=2)
            continue
        if record.env_kind == "atari":
            records.append(record)
    return sorted(records, key=lambda r: (r.game, r.seed, str(r.path)))


def build_table(
    results: Iterable[EvalRecord],
    random_overrides: Mapping[str, float] = PAPER_RANDOM_OVERRIDES,
) -> Table:
    """Table from evaluation results: one row per Atari-57 game with at least one seed.

    Results for games outside Atari-57 are skipped with a warning; a repeated (game, seed)
    keeps the result with the most training frames, with a warning.
    """
    games = set(atari57())
    per_seed: dict[tuple[str, int], EvalRecord] = {}
    for result in results:
        if result.game not in games:
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
    table = table_from_scores(scores, random_overrides, frames)
    agents = {r.agent_games for r in per_seed.values()}
    if len(agents) > 1:
        warnings.warn(
            "the table mixes multi-task agents with single-game agents (agent_games "
            f"{sorted(agents)} in eval.json); report them from separate directories",
            ReportWarning,
            stacklevel=2,
        )
    elif agents and max(agents) > 1:
        table = dataclasses.replace(table, multitask_games=max(agents))
    return table


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
    lines = (
        [
            f"one agent: a single multi-task agent trained on {table.multitask_games} games "
            "played every row (frames: all its games together)"
        ]
        if table.multitask_games
        else []
    )
    lines += [
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


def write_markdown(table: Table, path: str | Path) -> None:
    """The markdown table (``format_markdown``) as a file."""
    Path(path).write_text(format_markdown(table), encoding="utf-8")


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

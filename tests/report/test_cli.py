"""`stampede-report <sweep dir>` (stampede.report.cli): the table printed and written as CSV and
markdown, a warning line per skipped file, and every bad input one line and exit 2."""

from __future__ import annotations

import csv
from collections.abc import Callable
from pathlib import Path

import pytest

from stampede.report import cli as report_cli

from .conftest import eval_record, write_json


def test_cli_prints_table_and_writes_csv_and_markdown(
    sweep: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    csv_path, md_path = tmp_path / "table.csv", tmp_path / "table.md"
    code = report_cli.cli([str(sweep), "--csv", str(csv_path), "--markdown", str(md_path)])
    assert code == 0
    out = capsys.readouterr().out
    assert "games present: 3 of 57" in out
    assert "missing (54):" in out
    assert "alien" in out
    assert "pong" in out
    assert "15.00 ± 7.07" in out

    with csv_path.open() as f:
        rows = list(csv.DictReader(f))
    assert [r["game"] for r in rows] == ["breakout", "ms_pacman", "pong"]
    assert float(rows[2]["score_mean"]) == pytest.approx(15.0)
    assert rows[2]["n_seeds"] == "2"
    assert float(rows[2]["hns_pct"]) == pytest.approx(100 * (15.0 + 20.7) / 35.3, abs=1e-3)

    markdown = md_path.read_text()
    assert markdown.startswith("| game |")
    assert "| pong |" in markdown
    assert "- median HNS:" in markdown


def test_cli_warns_in_one_line_per_skipped_file(
    sweep: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (sweep / "broken").mkdir()
    (sweep / "broken" / "eval.json").write_text("{not json")
    write_json(sweep / "other" / "eval.json", eval_record("not_a_game", 1, 7.0))
    assert report_cli.cli([str(sweep)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2, err
    assert all(line.startswith("stampede-report: warning: skipping ") for line in err)
    assert str(sweep / "broken" / "eval.json") in err[0]
    assert "'not_a_game' is not an Atari-57 ALE id" in err[1]


def _no_such_dir(tmp: Path) -> list[str]:
    return [str(tmp / "nope")]


def _a_file(tmp: Path) -> list[str]:
    (tmp / "sweep").write_text("not a directory")
    return [str(tmp / "sweep")]


def _empty_dir(tmp: Path) -> list[str]:
    (tmp / "sweep" / "run0").mkdir(parents=True)
    return [str(tmp / "sweep")]


def _unreadable(tmp: Path) -> list[str]:
    (tmp / "sweep" / "run0").mkdir(parents=True)
    (tmp / "sweep" / "run0" / "eval.json").write_text("{not json")
    return [str(tmp / "sweep")]


def _not_atari(tmp: Path) -> list[str]:
    write_json(
        tmp / "sweep" / "eval.json", {**eval_record("CartPole-v1", 1, 9.0), "env_kind": "gym"}
    )
    return [str(tmp / "sweep")]


def _unknown_game(tmp: Path) -> list[str]:
    write_json(tmp / "sweep" / "eval.json", eval_record("not_a_game", 1, 7.0))
    return [str(tmp / "sweep")]


def _csv_not_writable(tmp: Path) -> list[str]:
    write_json(tmp / "sweep" / "eval.json", eval_record("pong", 1, 7.0))
    return [str(tmp / "sweep"), "--csv", str(tmp / "no" / "such" / "dir" / "t.csv")]


def _markdown_not_writable(tmp: Path) -> list[str]:
    write_json(tmp / "sweep" / "eval.json", eval_record("pong", 1, 7.0))
    return [str(tmp / "sweep"), "--markdown", str(tmp / "sweep")]


# Each: the command line, and what its one line must name.
BAD_REPORT_INPUT = {
    "no-such-dir": (_no_such_dir, "does not exist or is not a directory"),
    "a-file": (_a_file, "does not exist or is not a directory"),
    "empty-dir": (_empty_dir, "no Atari-57 result in '{tmp}/sweep' (none found)"),
    "unreadable": (_unreadable, "(1 skipped, the first: skipping unreadable {tmp}/sweep/run0"),
    "not-atari": (_not_atari, "no Atari-57 result in '{tmp}/sweep' (none found)"),
    "unknown-game": (_unknown_game, "game 'not_a_game' is not an Atari-57 ALE id"),
    "csv-not-writable": (_csv_not_writable, "--csv '{tmp}/no/such/dir/t.csv': cannot write"),
    "markdown-not-writable": (_markdown_not_writable, "--markdown '{tmp}/sweep': cannot write"),
}


@pytest.mark.parametrize(("make", "names"), BAD_REPORT_INPUT.values(), ids=BAD_REPORT_INPUT.keys())
def test_cli_bad_input_is_one_line_and_exit_2(
    make: Callable[[Path], list[str]],
    names: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert report_cli.cli(make(tmp_path)) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("stampede-report: ")
    assert names.format(tmp=tmp_path) in err[0]


@pytest.mark.parametrize(
    ("argv", "names"),
    [([], "sweep_dir"), (["sweep", "--html", "t.html"], "--html"), (["sweep", "--csv"], "--csv")],
)
def test_cli_bad_command_line_is_one_line_and_exit_2(
    argv: list[str], names: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as caught:
        report_cli.cli(argv)
    assert caught.value.code == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1, err
    assert names in err[0]


def test_dqn_zoo_random_scores_are_used_on_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """video_pinball's random score: 0 as in the paper's aggregates, or DQN Zoo's 16256.9 (then
    a score of 16256.9 is random play, 0% of human)."""
    write_json(tmp_path / "run" / "eval.json", eval_record("video_pinball", 1, 16256.9))
    csv_path = tmp_path / "table.csv"
    hns_pct = []
    for extra in ([], ["--dqn-zoo-random"]):
        assert report_cli.cli([str(tmp_path), "--csv", str(csv_path), *extra]) == 0
        with csv_path.open() as f:
            (row,) = csv.DictReader(f)
        hns_pct.append(float(row["hns_pct"]))
    assert hns_pct == [pytest.approx(100 * 16256.9 / 17667.9, abs=1e-3), pytest.approx(0.0)]
    assert capsys.readouterr().err == ""

"""The report of a sweep (stampede.report.report): every Atari eval.json at any depth, one result
per game and seed, and a warning naming each file or result it skips."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from stampede.envs.games import ATARI57
from stampede.report import hns, report

from .conftest import eval_record, write_json


def test_partial_sweep(sweep: Path) -> None:
    results = report.collect(sweep)
    assert len(results) == 6
    table = report.build_table(results)
    assert [row.game for row in table.rows] == ["breakout", "ms_pacman", "pong"]  # Atari-57 order
    by_game = {row.game: row for row in table.rows}
    assert by_game["pong"].score == pytest.approx(15.0)
    assert by_game["breakout"].score == pytest.approx(200.0)
    assert by_game["ms_pacman"].score == pytest.approx(1500.0)
    assert by_game["breakout"].std == pytest.approx(math.sqrt(2) * 100)  # sample std, ddof=1
    assert all(row.n_seeds == 2 for row in table.rows)
    assert len(table.missing) == 54
    assert set(table.missing) == set(ATARI57) - {"pong", "breakout", "ms_pacman"}
    # HNS of the mean over seeds equals the mean of per-seed HNS (HNS is affine).
    ref = hns.load_reference()["breakout"]
    assert by_game["breakout"].hns == pytest.approx((ref.hns(100.0) + ref.hns(300.0)) / 2)


def test_collect_skips_non_atari_and_warns_on_bad_files(sweep: Path) -> None:
    write_json(
        sweep / "procgen" / "eval.json", {**eval_record("coinrun", 1, 5.0), "env_kind": "procgen"}
    )
    broken = sweep / "broken" / "eval.json"
    broken.parent.mkdir()
    broken.write_text("{not json")
    incomplete = sweep / "incomplete" / "eval.json"
    write_json(incomplete, {k: v for k, v in eval_record("pong", 3, 1.0).items() if k != "mean"})
    with pytest.warns(report.ReportWarning) as caught:
        results = report.collect(sweep)
    assert len(results) == 6
    messages = " ".join(str(w.message) for w in caught)
    assert str(broken) in messages
    assert str(incomplete) in messages
    assert "'mean'" in messages


def test_build_table_warns_on_non_atari57_game_and_duplicate_seed(tmp_path: Path) -> None:
    write_json(tmp_path / "a" / "eval.json", eval_record("pong", 1, 5.0, frames=100))
    write_json(tmp_path / "b" / "eval.json", eval_record("pong", 1, 7.0, frames=200))
    write_json(tmp_path / "c" / "eval.json", eval_record("not_a_game", 1, 7.0))
    with pytest.warns(report.ReportWarning) as caught:
        table = report.build_table(report.collect(tmp_path))
    messages = " ".join(str(w.message) for w in caught)
    assert "'not_a_game' is not an Atari-57 ALE id" in messages
    assert "pong seed 1 evaluated twice" in messages
    (row,) = table.rows
    assert (row.game, row.n_seeds, row.score, row.frames) == ("pong", 1, 7.0, 200)

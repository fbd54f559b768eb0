"""The Atari-57 results table (stampede.report.hns), the report of a sweep (stampede.report.report
and stampede.report.cli: every bad input one line and exit 2) and the game list
(stampede.envs.games)."""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from stampede.envs import games as atari57_module
from stampede.envs.games import ATARI5, ATARI57, IMPALA_SCORES_CSV, RANDOM_HUMAN_CSV, read_data_csv
from stampede.report import cli as report_cli
from stampede.report import hns, report

# A partial sweep: 3 games x 2 seeds, scores chosen so means and stds are easy to check.
SWEEP_SCORES = {
    ("pong", 1): 10.0,
    ("pong", 2): 20.0,
    ("breakout", 1): 100.0,
    ("breakout", 2): 300.0,
    ("ms_pacman", 1): 1000.0,
    ("ms_pacman", 2): 2000.0,
}


def _eval_record(game: str, seed: int, mean: float, **extra: object) -> dict[str, object]:
    record: dict[str, object] = {
        "game": game,
        "env_kind": "atari",
        "seed": seed,
        "experiment": "atari5",
        "frames": 1_234_560,
        "episodes": 2,
        "greedy": False,
        "returns": [mean - 1.0, mean + 1.0],
        "mean": mean,
        "median": mean,
        "std": 1.0,
        "min": mean - 1.0,
        "max": mean + 1.0,
        "checkpoint": "checkpoints/ckpt_000001234560.pt",
    }
    record.update(extra)
    return record


def _write(path: Path, record: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    """A multirun-like tree with run directories at different depths."""
    root = tmp_path / "multirun"
    for i, ((game, seed), mean) in enumerate(SWEEP_SCORES.items()):
        # Depth varies with i: multirun/0/eval.json ... multirun/d/12-00-00/5/eval.json.
        run_dir = root.joinpath(*["2026-11-29", "12-00-00"][: i % 3], str(i))
        _write(run_dir / "eval.json", _eval_record(game, seed, mean))
    return root


def _paper_scores() -> dict[str, float]:
    return {game: ref.impala_deep for game, ref in hns.load_reference().items()}


# ---------------------------------------------------------------------------- reference data


def test_paper_scores_as_ours_reproduce_paper_median_and_mean() -> None:
    table = hns.table_from_scores(_paper_scores())
    assert table.n_games == 57
    assert table.missing == ()
    assert 100 * table.median_hns == pytest.approx(191.8, abs=0.1)
    # The paper reports 957.6%; with random = 0 for video_pinball we get 957.28%
    # (the CSV header says "within 0.3"; the gap is 0.32).
    assert 100 * table.mean_hns == pytest.approx(957.6, abs=0.5)
    # Equal to the paper is not beating it.
    assert table.n_beat_paper == 0


def test_dqn_zoo_random_changes_mean_but_not_median() -> None:
    paper = hns.table_from_scores(_paper_scores())
    dqn_zoo = hns.table_from_scores(_paper_scores(), random_overrides={})
    assert dqn_zoo.median_hns == pytest.approx(paper.median_hns)
    # video_pinball alone: (572898.27 - 16256.9) / (17667.9 - 16256.9) ~ 394.5 (39450%).
    row = next(r for r in dqn_zoo.rows if r.game == "video_pinball")
    assert row.hns == pytest.approx((572898.27 - 16256.9) / (17667.9 - 16256.9))
    assert 100 * dqn_zoo.mean_hns == pytest.approx(1592.5, abs=0.1)


def test_hns_hand_checked_for_pong() -> None:
    # Pong: random -20.7, human 14.6; a score of 0 is (0 + 20.7) / (14.6 + 20.7) of human.
    row = hns.table_from_scores({"pong": 0.0}).rows[0]
    assert (row.random, row.human) == (-20.7, 14.6)
    assert row.hns == pytest.approx(20.7 / 35.3)
    assert row.impala_deep == 20.98
    assert row.impala_deep_hns == pytest.approx((20.98 + 20.7) / 35.3)


def test_every_ale_id_in_the_csvs_is_a_rom_ale_py_ships() -> None:
    roms = pytest.importorskip("ale_py.roms")
    shipped = set(roms.get_all_rom_ids())
    paper_ids = {row["ale_id"] for row in read_data_csv(IMPALA_SCORES_CSV)}
    human_ids = {row["game"] for row in read_data_csv(RANDOM_HUMAN_CSV)}
    assert sorted((paper_ids | human_ids | set(ATARI5)) - shipped) == []
    assert paper_ids == human_ids == set(ATARI57)


def test_game_lists() -> None:
    assert len(ATARI57) == 57
    assert tuple(sorted(ATARI57)) == ATARI57
    assert len(ATARI5) == 5
    assert set(ATARI5) <= set(ATARI57)


def test_importing_atari57_reads_no_file() -> None:
    code = "import stampede.envs.games as m; print(m.atari57.cache_info().currsize)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "0"


def test_unknown_module_attribute_raises() -> None:
    with pytest.raises(AttributeError, match="ATARI58"):
        _ = atari57_module.ATARI58


# ------------------------------------------------------------------------------------- table


def test_iqm_hand_computed() -> None:
    # n=8: drop 2 lowest and 2 highest, mean of 3, 4, 5, 6.
    assert hns.interquartile_mean([8, 1, 7, 2, 6, 3, 5, 4]) == pytest.approx(4.5)
    # n=5: floor(5 / 4) = 1 dropped at each end, so the outlier 100 does not count.
    assert hns.interquartile_mean([0, 1, 2, 3, 100]) == pytest.approx(2.0)
    # n=3: nothing dropped.
    assert hns.interquartile_mean([1, 2, 6]) == pytest.approx(3.0)
    assert math.isnan(hns.interquartile_mean([]))


def test_table_iqm_uses_hns() -> None:
    # HNS 0, 1, 2, 10 (fractions) for four games -> IQM is the mean of 1 and 2.
    refs = hns.load_reference()
    games = ["pong", "breakout", "boxing", "enduro"]
    scores = {
        g: refs[g].random + k * (refs[g].human - refs[g].random)
        for g, k in zip(games, [0, 1, 2, 10], strict=True)
    }
    table = hns.table_from_scores(scores)
    assert table.iqm_hns == pytest.approx(1.5)
    assert table.median_hns == pytest.approx(1.5)
    assert table.mean_hns == pytest.approx(13 / 4)


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
    _write(
        sweep / "procgen" / "eval.json", {**_eval_record("coinrun", 1, 5.0), "env_kind": "procgen"}
    )
    broken = sweep / "broken" / "eval.json"
    broken.parent.mkdir()
    broken.write_text("{not json")
    incomplete = sweep / "incomplete" / "eval.json"
    _write(incomplete, {k: v for k, v in _eval_record("pong", 3, 1.0).items() if k != "mean"})
    with pytest.warns(report.ReportWarning) as caught:
        results = report.collect(sweep)
    assert len(results) == 6
    messages = " ".join(str(w.message) for w in caught)
    assert str(broken) in messages
    assert str(incomplete) in messages
    assert "'mean'" in messages


def test_build_table_warns_on_non_atari57_game_and_duplicate_seed(tmp_path: Path) -> None:
    _write(tmp_path / "a" / "eval.json", _eval_record("pong", 1, 5.0, frames=100))
    _write(tmp_path / "b" / "eval.json", _eval_record("pong", 1, 7.0, frames=200))
    _write(tmp_path / "c" / "eval.json", _eval_record("not_a_game", 1, 7.0))
    with pytest.warns(report.ReportWarning) as caught:
        table = report.build_table(report.collect(tmp_path))
    messages = " ".join(str(w.message) for w in caught)
    assert "'not_a_game' is not an Atari-57 ALE id" in messages
    assert "pong seed 1 evaluated twice" in messages
    (row,) = table.rows
    assert (row.game, row.n_seeds, row.score, row.frames) == ("pong", 1, 7.0, 200)


def test_beats_paper_flag() -> None:
    table = hns.table_from_scores({"pong": 21.0, "breakout": 10.0})
    assert {row.game: row.beats_paper for row in table.rows} == {"breakout": False, "pong": True}
    assert table.n_beat_paper == 1


def test_table_from_scores_accepts_seed_lists_and_rejects_unknown_games() -> None:
    row = hns.table_from_scores({"pong": [10.0, 12.0, 14.0]}).rows[0]
    assert (row.score, row.n_seeds, row.std) == (12.0, 3, pytest.approx(2.0))
    with pytest.raises(ValueError, match="Pong-v5"):
        hns.table_from_scores({"Pong-v5": 1.0})


# --------------------------------------------------------------------------------------- CLI


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
    _write(sweep / "other" / "eval.json", _eval_record("not_a_game", 1, 7.0))
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
    _write(tmp / "sweep" / "eval.json", {**_eval_record("CartPole-v1", 1, 9.0), "env_kind": "gym"})
    return [str(tmp / "sweep")]


def _unknown_game(tmp: Path) -> list[str]:
    _write(tmp / "sweep" / "eval.json", _eval_record("not_a_game", 1, 7.0))
    return [str(tmp / "sweep")]


def _csv_not_writable(tmp: Path) -> list[str]:
    _write(tmp / "sweep" / "eval.json", _eval_record("pong", 1, 7.0))
    return [str(tmp / "sweep"), "--csv", str(tmp / "no" / "such" / "dir" / "t.csv")]


def _markdown_not_writable(tmp: Path) -> list[str]:
    _write(tmp / "sweep" / "eval.json", _eval_record("pong", 1, 7.0))
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

"""stampede.report.aggregate: rliable's interval estimates over games and seeds, the performance
profile, and the Atari-5 prediction of the 57-game median (checked against the IMPALA paper)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from stampede.envs.games import ATARI5
from stampede.report import aggregate
from stampede.report.cli import cli
from stampede.report.hns import table_from_scores

from .conftest import eval_record, write_json

# CleanRL's PPO on the Atari-5 games after 40M frames (its benchmark tables, 3 seeds).
PPO = {
    "battle_zone": 24284.0,
    "double_dunk": -6.8,
    "name_this_game": 5750.0,
    "phoenix": 14474.0,
    "qbert": 17246.0,
}


def _three_seeds(scores: dict[str, float]) -> dict[str, list[float]]:
    return {game: [s * 0.9, s, s * 1.1] for game, s in scores.items()}


def test_the_weights_are_atari5s_games() -> None:
    assert tuple(aggregate.ATARI5_WEIGHTS) == ATARI5


def test_atari5_prediction_is_the_papers_regression() -> None:
    assert aggregate.atari5_median(dict.fromkeys(ATARI5, 0.0)) == 0.0
    assert aggregate.atari5_median(dict.fromkeys(ATARI5, -0.5)) == 0.0  # below random: 0
    # Equal HNS h everywhere: log10(1 + median) = (sum of the weights) log10(1 + 100 h).
    weights = sum(aggregate.ATARI5_WEIGHTS.values())
    expected = ((1 + 100 * 1.5) ** weights - 1) / 100
    assert aggregate.atari5_median(dict.fromkeys(ATARI5, 1.5)) == pytest.approx(expected)
    assert aggregate.atari5_median({"battle_zone": 1.0}) is None  # needs all five


def test_the_papers_own_scores_predict_its_median_roughly() -> None:
    """The IMPALA paper's 57-game median HNS is 191.8% (deep); its five Atari-5 games predict
    it within the spread Aitchison et al. report for single algorithms."""
    assert aggregate.paper_median() == pytest.approx(1.918, abs=0.001)
    table = table_from_scores({g: 0.0 for g in ATARI5})
    predicted = aggregate.atari5_median({r.game: r.impala_deep_hns for r in table.rows})
    assert predicted is not None
    assert 0.7 * 1.918 < predicted < 1.3 * 1.918


def test_intervals_hold_the_point_and_shrink_to_it_with_one_seed() -> None:
    table = table_from_scores(_three_seeds(PPO))
    matrix = aggregate.seed_matrix(table)
    assert matrix.shape == (3, 5)
    found = aggregate.intervals(table, reps=500)
    assert found["IQM"].point == pytest.approx(stats.trim_mean(matrix.ravel(), 0.25))
    assert found["median"].point == pytest.approx(np.median(matrix))
    for interval in found.values():
        assert interval.low < interval.point < interval.high
    single = aggregate.intervals(table_from_scores(PPO), reps=200)
    assert all(i.low == pytest.approx(i.point) == pytest.approx(i.high) for i in single.values())


def test_the_task_bootstrap_resamples_the_games() -> None:
    """With one seed per game only the games can be resampled: the interval spans the spread
    of the games' HNS; with seeds it is wider than the seeds' own (stratified) interval."""
    single = table_from_scores(PPO)
    hns = aggregate.seed_matrix(single)[0]
    found = aggregate.intervals(single, reps=500, task_bootstrap=True)
    for name, interval in found.items():
        assert hns.min() <= interval.low < interval.point < interval.high <= hns.max(), name
    seeds = table_from_scores(_three_seeds(PPO))
    stratified = aggregate.intervals(seeds, reps=500)["mean"]
    over_games = aggregate.intervals(seeds, reps=500, task_bootstrap=True)["mean"]
    assert over_games.point == pytest.approx(stratified.point)
    assert over_games.high - over_games.low > 2 * (stratified.high - stratified.low)


def test_unequal_seeds_use_the_fewest_and_say_so() -> None:
    scores: dict[str, list[float]] = {"pong": [1.0, 2.0, 3.0], "breakout": [10.0]}
    with pytest.warns(UserWarning, match="1 seed\\(s\\) per game.*pong"):
        matrix = aggregate.seed_matrix(table_from_scores(scores))
    assert matrix.shape == (1, 2)


def test_report_prints_the_intervals_and_the_prediction_and_draws_the_profile(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for game, seeds in _three_seeds(PPO).items():
        for seed, score in enumerate(seeds, 1):
            write_json(
                tmp_path / "sweep" / game / str(seed) / "eval.json", eval_record(game, seed, score)
            )
    profile = tmp_path / "profile.png"
    assert cli([str(tmp_path / "sweep"), "--reps", "300", "--profile", str(profile)]) == 0
    out = capsys.readouterr().out
    assert "rliable, 5 games x 3 seed(s), 95% intervals from the stratified bootstrap" in out
    assert "  IQM    HNS " in out
    table = table_from_scores(_three_seeds(PPO))
    predicted = aggregate.atari5_median({r.game: r.hns for r in table.rows})
    assert predicted is not None
    assert f"Atari-5 predicted 57-game median HNS: {100 * predicted:.1f}%" in out
    assert "its 57-game median is 191.8%" in out
    assert profile.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_with_one_seed_per_game_resamples_the_games(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for game, score in PPO.items():
        write_json(tmp_path / "sweep" / game / "eval.json", eval_record(game, 1, score))
    assert cli([str(tmp_path / "sweep"), "--reps", "300"]) == 0
    out = capsys.readouterr().out
    assert "5 games x 1 seed(s), 95% intervals from the task bootstrap (games resampled" in out
    iqm = next(line for line in out.splitlines() if line.startswith("  IQM"))
    found = re.search(r"HNS (-?[0-9.]+)% \[(-?[0-9.]+), (-?[0-9.]+)\]", iqm)
    assert found is not None, iqm
    point, low, high = (float(x) for x in found.groups())
    assert low < point < high


def test_report_refuses_a_bad_number_of_resamples(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli([str(tmp_path), "--reps", "0"]) == 2
    assert "--reps must be a positive number" in capsys.readouterr().err

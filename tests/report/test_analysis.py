"""The analysis helpers the notebooks rely on (stampede.report.analysis): runs found in a sweep,
curves on a common grid and bands over seeds, the comparison with the paper, and which sweep a
notebook reads."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import numpy as np
import pytest

from stampede.config.schema import Config
from stampede.envs import EnvSettings
from stampede.eval.protocol import Evaluation
from stampede.eval.results import EvalRecord, write_eval
from stampede.report import analysis, hns

from .conftest import GAMES, SEEDS


def test_find_runs_reads_game_and_seed_from_each_run(run_sweep: Path) -> None:
    runs = analysis.find_runs(run_sweep)
    assert [(r.game, r.seed) for r in runs] == sorted((g, s) for g in GAMES for s in SEEDS)
    assert {r.experiment for r in runs} == {"fixture"}
    assert analysis.seeds_per_game(runs) == {"breakout": [1, 2], "pong": [1, 2], "qbert": [1, 2]}


def test_find_runs_falls_back_to_eval_json(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "episodes.jsonl").write_text('{"env/frames": 10, "env/episode_return": 1.0}\n')
    evaluation = Evaluation(returns=(1.0,), lengths=(10,))
    cfg = Config(env=EnvSettings(game="pong"), seed=4, name="x")
    write_eval(run, EvalRecord.of(evaluation, cfg, 10, None), evaluation)
    (info,) = analysis.find_runs(tmp_path)
    assert (info.game, info.seed, info.env_kind) == ("pong", 4, "atari")


def test_seed_band_spans_the_seeds() -> None:
    info = analysis.RunInfo(Path("."), "pong", "atari", 1, "x")
    frames = np.array([0.0, 10.0])
    low = analysis.Curve(info, frames, np.array([0.0, 0.0]))
    high = analysis.Curve(dataclasses.replace(info, seed=2), frames, np.array([2.0, 2.0]))
    band = analysis.seed_bands([high, low], points=5)["pong"]
    assert band.seeds == (1, 2)
    np.testing.assert_allclose(band.grid, [0, 2.5, 5, 7.5, 10])
    np.testing.assert_allclose(band.mean, 1.0)
    np.testing.assert_allclose(band.low, 0.0)
    np.testing.assert_allclose(band.high, 2.0)


def test_curve_is_nan_outside_the_logged_frames() -> None:
    info = analysis.RunInfo(Path("."), "pong", "atari", 1, "x")
    curve = analysis.Curve(info, np.array([10.0, 20.0]), np.array([1.0, 3.0]))
    values = analysis.on_grid(curve, np.array([0.0, 10.0, 15.0, 20.0, 30.0]), window=1)
    np.testing.assert_allclose(values, [np.nan, 1.0, 2.0, 3.0, np.nan])


def test_paper_comparison_is_100_at_the_paper_and_0_at_random() -> None:
    ref = hns.load_reference()
    table = hns.table_from_scores(
        {"pong": ref["pong"].impala_deep, "breakout": ref["breakout"].random, "enduro": 5.0}
    )
    comparison = analysis.paper_comparison(table)
    percent = dict(zip(comparison.games, comparison.percent, strict=True))
    assert percent["pong"] == pytest.approx(100.0)
    assert percent["breakout"] == pytest.approx(0.0)
    assert np.isnan(percent["enduro"])  # the paper scored 0 = random there


def test_sweep_dir_from_env_and_latest_sweep(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(analysis.SWEEP_DIR_ENV, "/some/sweep")
    assert analysis.sweep_dir_from_env() == Path("/some/sweep")
    monkeypatch.delenv(analysis.SWEEP_DIR_ENV)
    older, newer = tmp_path / "multirun" / "a" / "1", tmp_path / "multirun" / "b" / "2"
    for i, d in enumerate((older, newer)):
        d.mkdir(parents=True)
        (d / "multirun.yaml").write_text("{}")
        os.utime(d / "multirun.yaml", (1000 + i, 1000 + i))
    monkeypatch.chdir(tmp_path / "multirun" / "a")  # found from a subdirectory too
    assert analysis.sweep_dir_from_env() == newer
    (tmp_path / "empty" / "multirun").mkdir(parents=True)
    assert analysis.latest_sweep(tmp_path / "empty") is None


def test_no_sweep_at_all_says_how_to_name_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(analysis.SWEEP_DIR_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    assert analysis.sweep_dir_from_env(default=tmp_path / "mine") == tmp_path / "mine"
    with pytest.raises(FileNotFoundError, match=f"set {analysis.SWEEP_DIR_ENV}=<sweep dir>"):
        analysis.sweep_dir_from_env()


def test_find_runs_of_no_directory_names_it(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"'.*/nope' does not exist"):
        analysis.find_runs(tmp_path / "nope")


def test_a_run_that_does_not_say_what_it_trained_is_skipped_with_a_warning(
    tmp_path: Path,
) -> None:
    """A gym run's game is its gym id; a directory with metrics but no config.yaml or eval.json,
    or an unreadable config.yaml, is skipped naming it."""
    gym = tmp_path / "gym"
    gym.mkdir()
    (gym / "config.yaml").write_text(
        "env: {kind: gym, game: pong, gym_id: CartPole-v1}\nseed: 3\nname: cp\n"
    )
    (gym / "metrics.jsonl").write_text(json.dumps({"env/frames": 1}) + "\n")
    unknown = tmp_path / "unknown"
    unknown.mkdir()
    (unknown / "metrics.jsonl").write_text(json.dumps({"env/frames": 1}) + "\n")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "episodes.jsonl").write_text("")
    (broken / "config.yaml").write_text("seed: 1\n")  # no env
    with pytest.warns(analysis.AnalysisWarning) as caught:
        runs = analysis.find_runs(tmp_path)
    assert runs == [analysis.RunInfo(gym, "CartPole-v1", "gym", 3, "cp")]
    messages = sorted(str(w.message) for w in caught)
    assert len(messages) == 2
    assert messages[0].startswith(f"skipping {broken}: KeyError('env')")
    assert messages[1] == f"skipping {unknown}: no config.yaml or eval.json says what it trained"


def test_learning_curves_are_of_the_runs_that_finished_a_game(
    run_sweep: Path, tmp_path: Path
) -> None:
    curves = analysis.learning_curves(run_sweep)
    assert [(c.run.game, c.run.seed) for c in curves] == sorted(
        (g, s) for g in GAMES for s in SEEDS
    )
    assert all(len(c.frames) == len(c.returns) == 40 for c in curves)
    assert all((np.diff(c.frames) >= 0).all() for c in curves)
    started = tmp_path / "started"
    started.mkdir()
    (started / "config.yaml").write_text((curves[0].run.path / "config.yaml").read_text())
    (started / "metrics.jsonl").write_text(json.dumps({"env/frames": 10}) + "\n")
    assert analysis.learning_curves(tmp_path) == []  # a run, but no game finished yet


def test_bands_come_in_atari57_order_then_other_games_by_name() -> None:
    frames, returns = np.array([0.0, 10.0]), np.array([1.0, 1.0])
    curves = [
        analysis.Curve(analysis.RunInfo(Path(game), game, "atari", 1, "x"), frames, returns)
        for game in ("zaxxon", "CartPole-v1", "alien", "Acrobot-v1", "pong")
    ]
    bands = analysis.seed_bands(curves, points=3)
    assert list(bands) == ["alien", "pong", "zaxxon", "Acrobot-v1", "CartPole-v1"]
    runs = [c.run for c in curves]
    assert list(analysis.seeds_per_game(runs)) == list(bands)


def test_a_band_is_nan_before_any_seed_finished_a_game() -> None:
    info = analysis.RunInfo(Path("."), "pong", "atari", 1, "x")
    early = analysis.Curve(info, np.array([10.0, 20.0]), np.array([1.0, 1.0]))
    late = analysis.Curve(
        dataclasses.replace(info, seed=2), np.array([15.0, 20.0]), np.array([3.0, 3.0])
    )
    band = analysis.seed_bands([early, late], points=5)["pong"]  # grid 0, 5, 10, 15, 20
    np.testing.assert_allclose(band.mean, [np.nan, np.nan, 1.0, 2.0, 2.0])
    np.testing.assert_allclose(band.per_seed[1], [np.nan, np.nan, np.nan, 3.0, 3.0])

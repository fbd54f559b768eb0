"""The notebooks run top to bottom on a small synthetic sweep (so they cannot rot), stay free of
stored outputs, and the stampede.report.analysis helpers they rely on compute what they claim."""

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
from stampede.report import analysis, curves, hns, plotting
from stampede.rundir.checkpoint_state import config_yaml

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = {
    "learning_curves.ipynb": "learning_curves.png",
    "atari57_report.ipynb": "atari57_report.png",
}
GAMES = ("pong", "breakout", "qbert")
SEEDS = (1, 2)


def make_run(run_dir: Path, game: str, seed: int, episodes: int = 40) -> None:
    """A run directory as the runner and evaluation leave it, with a rising learning curve."""
    run_dir.mkdir(parents=True)
    cfg = Config(env=EnvSettings(game=game), seed=seed, name="fixture")
    (run_dir / "config.yaml").write_text(config_yaml(cfg))
    rng = np.random.default_rng(seed)
    frames = np.sort(rng.integers(1_000, 2_000_000, episodes))
    returns = 10.0 * frames / 2_000_000 + rng.normal(0, 1, episodes) + seed
    with (run_dir / "episodes.jsonl").open("w") as f:
        for fr, ret in zip(frames, returns, strict=True):
            line = {"env/frames": int(fr), "env/episode_return": float(ret)}
            f.write(json.dumps(line | {"env/episode_length": 100}) + "\n")
    with (run_dir / "metrics.jsonl").open("w") as f:
        f.write(json.dumps({"env/frames": int(frames[-1]), "loss/total": 0.5}) + "\n")
    evaluation = Evaluation(returns=tuple(returns[-5:]), lengths=(100,) * 5)
    write_eval(run_dir, EvalRecord.of(evaluation, cfg, int(frames[-1]), None), evaluation)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("multirun") / "2026-11-29" / "12-00-00"
    for i, (game, seed) in enumerate((g, s) for g in GAMES for s in SEEDS):
        make_run(root / f"{i}_env.game={game},seed={seed}", game, seed)
    (root / "multirun.yaml").write_text("{}\n")
    return root


# ------------------------------------------------------------------------------ notebooks


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_is_stored_without_outputs(name: str) -> None:
    import nbformat

    nb = nbformat.read(ROOT / "notebooks" / name, as_version=4)
    nbformat.validate(nb)
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert code
    assert all(cell.outputs == [] and cell.execution_count is None for cell in code)
    source = "\n".join(cell.source for cell in code)
    imported = {line.split()[1] for line in source.splitlines() if line.startswith("from ")}
    assert imported <= {"stampede.report", "IPython.display"}  # the public API only


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs_on_a_sweep_and_saves_its_figure(
    name: str, sweep: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv(analysis.SWEEP_DIR_ENV, str(sweep))
    monkeypatch.setenv(plotting.FIGURE_DIR_ENV, str(tmp_path / "figures"))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(ROOT / "notebooks" / name, as_version=4)
    NotebookClient(nb, timeout=120, kernel_name="python3").execute(cwd=str(tmp_path))
    text = "".join(
        out.get("text", "") for cell in nb.cells if cell.cell_type == "code" for out in cell.outputs
    )
    figure = tmp_path / "figures" / NOTEBOOKS[name]
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"saved {figure}" in text
    if name == "atari57_report.ipynb":
        assert "games present: 3 of 57" in text


# ------------------------------------------------------------------------------- analysis


def test_find_runs_reads_game_and_seed_from_each_run(sweep: Path) -> None:
    runs = analysis.find_runs(sweep)
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


def test_load_episodes_keeps_the_kept_history_and_falls_back_to_metrics(tmp_path: Path) -> None:
    lines = [{"env/frames": 30, "env/episode_return": 3.0}, {"env/frames": 40}]
    (tmp_path / "metrics.jsonl").write_text("\n".join(map(json.dumps, lines)) + "\n{torn")
    frames, _, returns = curves.episodes(tmp_path)
    assert frames.tolist() == [30.0]
    assert returns.tolist() == [3.0]
    lines = [
        {"env/frames": 20, "env/episode_return": 2.0},
        {"env/frames": 5, "env/episode_return": 1.0},
    ]
    (tmp_path / "episodes.jsonl").write_text("\n".join(map(json.dumps, lines)) + "\n")
    frames, _, returns = curves.episodes(tmp_path)  # restarted at 5: the game at 20 was undone
    assert (frames.tolist(), returns.tolist()) == ([5.0], [1.0])


def test_smooth_is_a_trailing_mean() -> None:
    out = curves.smooth(np.array([1.0, 2.0, 3.0, 4.0]), window=2)
    np.testing.assert_allclose(out, [1.0, 1.5, 2.5, 3.5])
    np.testing.assert_allclose(curves.smooth(np.array([5.0, 7.0]), window=1), [5.0, 7.0])


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

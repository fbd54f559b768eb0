"""Optuna through Hydra's sweeper: `+experiment=tune_pong` on CartPole, trials as parallel jobs,
the study in a database that a second invocation adds to."""

from __future__ import annotations

import math
import re
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

optuna = pytest.importorskip("optuna")

ROOT = Path(__file__).resolve().parents[2]
TINY = [
    "env=cartpole",
    "model=mlp",
    "total_frames=8000",
    "runtime.num_actors=1",
    "runtime.envs_per_actor=4",
    "runtime.batch_size=8",
    "logger.wandb.mode=disabled",
]
BOUNDS = {"optim.lr": (1e-4, 3e-3), "vtrace.entropy_cost": (1e-3, 5e-2), "optim.eps": (1e-8, 1e-3)}
STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+)\]", re.M)


def tune(sweep_dir: Path, storage: str, trials: int) -> subprocess.CompletedProcess[str]:
    """`run.py +experiment=tune_pong` on CartPole: trials as submitit's local jobs, two at once."""
    return subprocess.run(
        [
            sys.executable,
            str(ROOT / "run.py"),
            "+experiment=tune_pong",
            *TINY,
            "infra=submitit_local",
            f"hydra.sweeper.n_trials={trials}",
            "hydra.sweeper.n_jobs=2",
            f"hydra.sweeper.storage={storage}",
            f"hydra.sweep.dir={sweep_dir}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=sweep_dir.parent,
    )


def _span(run_dir: Path) -> tuple[datetime, datetime]:
    """First and last timestamps of a trial's run.log."""
    stamps = STAMP.findall((run_dir / "run.log").read_text())
    first, last = (datetime.strptime(s, "%Y-%m-%d %H:%M:%S,%f") for s in (stamps[0], stamps[-1]))
    return first, last


@pytest.mark.timeout(600)
def test_optuna_study_runs_trials_in_parallel_and_a_restart_adds_to_it(tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    first = tune(tmp_path / "sweep1", storage, trials=4)
    assert first.returncode == 0, first.stderr[-3000:]

    study = optuna.load_study(study_name="tune_pong", storage=storage)
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(study.trials) == 4
    assert len(done) == 4
    for trial in done:
        assert math.isfinite(trial.value)
        assert trial.value > 5  # CartPole games last >= 8 steps: a real mean of real games
        for key, (low, high) in BOUNDS.items():
            assert low <= trial.params[key] <= high
    # Each trial's objective is the one its run logged: the mean of its finished games.
    logs = {p.parent.name: p.read_text() for p in (tmp_path / "sweep1").glob("*/run.log")}
    assert len(logs) == 4
    found = re.findall(r"objective env/episode_return = (\S+)", "".join(logs.values()))
    logged = sorted(float(m) for m in found)
    assert logged == pytest.approx(sorted(t.value for t in done), rel=1e-3)
    # The best parameters are printed and written beside the sweep.
    best = study.best_trial
    printed = first.stdout + first.stderr
    assert f"Best parameters: {best.params}" in printed
    assert (tmp_path / "sweep1" / "optimization_results.yaml").exists()
    # n_jobs=2 with submitit's local executor: the two trials of a batch ran at the same time.
    (s0, e0), (s1, e1) = _span(tmp_path / "sweep1" / "0"), _span(tmp_path / "sweep1" / "1")
    assert s1 < e0, "trial 1 started after trial 0 ended"
    assert s0 < e1, "trial 0 started after trial 1 ended"

    again = tune(tmp_path / "sweep2", storage, trials=2)
    assert again.returncode == 0, again.stderr[-3000:]
    study = optuna.load_study(study_name="tune_pong", storage=storage)
    assert len(study.trials) == 6  # added to the study, not started over
    assert [t.params for t in study.trials[:4]] == [t.params for t in done]
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in study.trials)
    assert "Using an existing study" in again.stdout + again.stderr


def test_tune_pong_composes_as_documented() -> None:
    from hydra import compose, initialize_config_dir

    from stampede.config.compose import register_configs

    register_configs()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", ["+experiment=tune_pong"], return_hydra_config=True)
    sweeper = cfg.hydra.sweeper
    assert cfg.env.game == "pong"
    assert sweeper._target_.endswith("OptunaSweeper")
    assert sweeper.direction == "maximize"
    assert set(sweeper.params) == set(BOUNDS)
    assert str(cfg.hydra.mode) == "RunMode.MULTIRUN"
    assert cfg.hydra.sweeper.storage.startswith("sqlite:///")
    assert cfg.hydra.sweeper.storage.endswith("multirun/tune_pong/optuna.db")

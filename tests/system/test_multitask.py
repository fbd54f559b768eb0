"""Multi-task runs (``env.games``): settings, game assignment, mixed vectors, per-task values, and a
whole two-game run with PopArt through ``run.py``, its metrics, evaluation and report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from stampede.envs import EnvError, EnvSettings, make_vec_env
from stampede.envs.settings import env_tasks
from stampede.models import NatureNet

ROOT = Path(__file__).resolve().parents[2]
TWO = {"games": ["pong", "breakout"], "full_action_space": True}


def test_games_are_checked_naming_the_key() -> None:
    with pytest.raises(EnvError, match=r"env.games must be two or more"):
        EnvSettings(games=["pong"], full_action_space=True)
    with pytest.raises(EnvError, match=r"distinct ALE ids \(\['pong'\] repeated\)"):
        EnvSettings(games=["pong", "pong"], full_action_space=True)
    with pytest.raises(EnvError, match=r"env.full_action_space=true"):
        EnvSettings(games=["pong", "breakout"])
    with pytest.raises(EnvError, match=r"env.game='pongg' is not an ALE game id"):
        EnvSettings(games=["pongg", "breakout"], full_action_space=True)
    with pytest.raises(EnvError, match=r"env.kind must be 'atari' with env.games"):
        EnvSettings(kind="gym", gym_id="CartPole-v1", games=["pong", "breakout"])


def test_names_and_tasks() -> None:
    two = EnvSettings(**TWO)
    assert two.name == "pong+breakout"
    assert two.tasks == ("pong", "breakout")
    assert two.task(1).game == "breakout"
    assert two.task(1).games == []
    five = EnvSettings(
        games=["pong", "breakout", "qbert", "alien", "boxing"], full_action_space=True
    )
    assert five.name == "multitask5"
    assert EnvSettings().tasks == ("pong",)
    assert EnvSettings().task(0) == EnvSettings()


def test_env_slots_are_shared_out_in_contiguous_nearly_equal_blocks() -> None:
    assert env_tasks(2, 4) == [0, 0, 1, 1]
    assert env_tasks(3, 8) == [0, 0, 0, 1, 1, 1, 2, 2]
    assert env_tasks(57, 64).count(0) >= 1
    assert set(env_tasks(57, 64)) == set(range(57))
    with pytest.raises(EnvError, match=r"every game needs one: raise runtime.envs_per_actor"):
        env_tasks(57, 32)


def test_a_mixed_vector_steps_each_env_as_its_own_game_would() -> None:
    """Env i of a [pong, pong, breakout] vector is env i of a one-game vector with the same seed:
    same observations, rewards and game ends, step after step."""
    mixed = make_vec_env(num_envs=3, seed=5, tasks=[0, 0, 1], **TWO)
    pong = make_vec_env(num_envs=2, seed=5, game="pong", full_action_space=True)
    breakout = make_vec_env(num_envs=1, seed=7, game="breakout", full_action_space=True)
    try:
        assert mixed.spec.num_actions == 18
        assert list(mixed.tasks) == [0, 0, 1]
        obs = mixed.reset(seed=11)
        np.testing.assert_array_equal(obs[:2], pong.reset(seed=11))
        np.testing.assert_array_equal(obs[2:], breakout.reset(seed=13))
        rng = np.random.default_rng(0)
        for _ in range(60):
            actions = rng.integers(0, 18, size=3)
            got = mixed.step(actions)
            for part, rows in (
                (pong.step(actions[:2]), slice(0, 2)),
                (breakout.step(actions[2:]), slice(2, 3)),
            ):
                np.testing.assert_array_equal(got.obs[rows], part.obs)
                np.testing.assert_array_equal(got.reward[rows], part.reward)
                np.testing.assert_array_equal(got.done[rows], part.done)
    finally:
        for env in (mixed, pong, breakout):
            env.close()


def test_a_multitask_network_gives_each_step_its_own_tasks_value() -> None:
    torch.manual_seed(0)
    model = NatureNet((4, 84, 84), 18, num_tasks=2)
    obs = torch.randint(0, 256, (3, 2, 4, 84, 84), dtype=torch.uint8)
    args = (
        obs,
        torch.zeros(3, 2, dtype=torch.long),
        torch.zeros(3, 2),
        torch.zeros(3, 2, dtype=torch.bool),
    )
    zeros, ones = torch.zeros(3, 2, dtype=torch.long), torch.ones(3, 2, dtype=torch.long)
    mixed = torch.tensor([[0, 1]] * 3)
    v0, v1 = model(*args, task=zeros).baseline, model(*args, task=ones).baseline
    assert not torch.allclose(v0, v1)  # two heads
    v = model(*args, task=mixed).baseline
    torch.testing.assert_close(v[:, 0], v0[:, 0])
    torch.testing.assert_close(v[:, 1], v1[:, 1])
    torch.testing.assert_close(
        model(*args, task=mixed).policy_logits, model(*args, task=zeros).policy_logits
    )
    with pytest.raises(ValueError, match=r"2 baseline outputs .* pass task"):
        model(*args)


def test_too_few_env_slots_fail_before_any_process_starts(tmp_path: Path) -> None:
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "run.py"),
            f"hydra.run.dir={tmp_path / 'run'}",
            "env.games=[pong,breakout,qbert]",
            "env.full_action_space=true",
            "runtime.num_actors=1",
            "runtime.envs_per_actor=2",
            "runtime.batch_size=4",
            "logger.wandb.mode=disabled",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert "env.games has 3 games but the run has only 2 env slots" in out.stdout + out.stderr


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_a_two_game_run_logs_evaluates_and_reports_each_game(tmp_path: Path) -> None:
    """One agent, Pong and Breakout, PopArt on: per-game metrics in every file, per-game frames that
    add up to the run's, PopArt's statistics in the log and the checkpoint, one evaluation per
    game, and the report's per-game table marked as one agent."""
    run_dir = tmp_path / "run"
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "run.py"),
            f"hydra.run.dir={run_dir}",
            "+experiment=multitask_classic5",
            "env.games=[pong,breakout]",
            "total_frames=12000",
            "runtime.num_actors=2",
            "runtime.envs_per_actor=2",
            "runtime.batch_size=4",
            "runtime.unroll_length=10",
            "env.max_episode_frames=1200",  # short games, so some end
            "eval.episodes=2",
            "eval.num_envs=2",
            "logger.interval_s=1",
            "logger.wandb.mode=disabled",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    rows = _jsonl(run_dir / "metrics.jsonl")
    train = [r for r in rows if "perf/fps" in r]
    last = train[-1]
    assert last["env/pong/frames"] + last["env/breakout/frames"] == last["env/frames"]
    assert last["env/pong/frames"] > 0
    assert last["env/breakout/frames"] > 0
    assert {"popart/pong/mu", "popart/pong/sigma", "popart/breakout/sigma"} <= set(last)
    keys = set().union(*train)
    assert {"env/pong/episode_return", "env/breakout/episode_return"} <= keys
    games = _jsonl(run_dir / "episodes.jsonl")
    assert {"env/pong/episode_return", "env/pong/frames"} <= set().union(*games)
    assert all("env/episode_return" not in g for g in games)  # no mixed-game curve
    for game in ("pong", "breakout"):
        record = json.loads((run_dir / "eval" / game / "eval.json").read_text())
        assert record["game"] == game
        assert record["agent_games"] == 2
        assert record["episodes"] == 2
        assert any(f"eval/{game}/episode_return" in r for r in rows)
    report = subprocess.run(
        [sys.executable, "-m", "stampede.report.cli", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert report.returncode == 0, report.stderr
    assert "one agent: a single multi-task agent trained on 2 games" in report.stdout
    assert report.stdout.splitlines()[2].startswith("breakout")
    state = torch.load(sorted((run_dir / "checkpoints").glob("*.pt"))[-1], weights_only=True)
    assert state["task_frames"] == [last["env/pong/frames"], last["env/breakout/frames"]]
    assert state["popart"]["mu"].shape == (2,)
    assert state["fingerprint"]["games"] == [
        "pong",
        "breakout",
    ]

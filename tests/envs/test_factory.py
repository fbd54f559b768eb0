"""Building environment vectors from ``cfg.env``'s fields (``stampede.envs.factory``): the spec
without a vector, the backend ``auto`` picks, and multi-task vectors."""

from __future__ import annotations

import pytest

from stampede.envs import EnvError, EnvSettings, env_spec, factory, make_vec_env, resolve_backend
from stampede.envs.factory import ale_vector_available
from stampede.envs.settings import env_tasks
from stampede.envs.tasks import TaskVecEnv

TWO = {"games": ["pong", "breakout"], "full_action_space": True}


def test_minimal_and_full_action_sets():
    minimal = env_spec(game="pong")
    full = env_spec(game="pong", full_action_space=True)
    assert minimal.num_actions == 6
    assert full.num_actions == 18
    assert minimal.action_meanings is not None
    assert minimal.action_meanings[0] == "NOOP"
    assert env_spec(kind="gym", gym_id="CartPole-v1").num_actions == 2


def test_auto_picks_the_c_plus_plus_vector_for_several_envs():
    expected = "ale_vector" if ale_vector_available() else "python_loop"
    assert resolve_backend(EnvSettings(), num_envs=8) == expected
    assert resolve_backend(EnvSettings(), num_envs=1) == "python_loop"
    assert resolve_backend(EnvSettings(backend="python_loop"), num_envs=8) == "python_loop"
    assert resolve_backend(EnvSettings(kind="gym", gym_id="CartPole-v1")) == "python_loop"


def test_without_the_c_plus_plus_vector_auto_uses_the_python_loop_and_asking_for_it_fails(
    monkeypatch,
):
    monkeypatch.setattr(factory, "ale_vector_available", lambda: False)
    assert resolve_backend(EnvSettings(), num_envs=8) == "python_loop"
    with pytest.raises(
        EnvError,
        match=r"env\.backend='ale_vector' needs ale-py >= 0\.12; "
        r"use env\.backend=python_loop or auto",
    ):
        resolve_backend(EnvSettings(backend="ale_vector"))
    env = make_vec_env(2, 0, game="pong")
    assert env.backend == "python_loop"
    env.close()


def test_a_multi_task_vector_shares_its_envs_out_as_a_run_does():
    """Without ``tasks`` the games get contiguous, nearly equal shares (``env_tasks``), one
    single-game vector each; the spec is the first game's, as ``env_spec`` says."""
    env = make_vec_env(4, 0, **TWO)
    try:
        assert isinstance(env, TaskVecEnv)
        assert list(env.tasks) == env_tasks(2, 4) == [0, 0, 1, 1]
        assert [part.num_envs for part in env.parts] == [2, 2]
        assert env.spec == env_spec(**TWO)
        assert env.spec.num_actions == 18
    finally:
        env.close()


def test_given_tasks_make_one_vector_per_run_of_equal_tasks():
    env = make_vec_env(3, 0, tasks=[1, 0, 0], **TWO)
    try:
        assert list(env.tasks) == [1, 0, 0]
        assert [(part.settings.game, part.num_envs) for part in env.parts] == [
            ("breakout", 1),
            ("pong", 2),
        ]
    finally:
        env.close()


@pytest.mark.parametrize("tasks", [[], [0, 2], [-1, 0]])
def test_tasks_must_be_game_indices(tasks):
    with pytest.raises(EnvError, match=r"tasks must be 2 game indices in \[0, 2\) \(one per env\)"):
        make_vec_env(2, 0, tasks=tasks, **TWO)

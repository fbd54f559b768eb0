"""The test environments (``stampede.envs.testing``): each fault at the step it is set for, through
the ``module:id`` form the actors use, and the Spot task's rewards."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from stampede.envs import make_vec_env
from stampede.envs import testing as testing_envs
from stampede.envs.testing import FaultyCartPole, SpotEnv

from .conftest import random_actions


def test_a_crash_comes_at_its_step_counted_over_all_episodes():
    env = FaultyCartPole("crash", at_step=5)
    env.reset(seed=0)
    env.step(0)
    env.step(1)
    env.reset(seed=1)  # a new episode does not restart the count
    env.step(0)
    env.step(1)
    with pytest.raises(RuntimeError, match="injected failure at step 5"):
        env.step(0)


def test_the_registered_crash_env_runs_through_a_vector_until_step_100():
    env = make_vec_env(1, 0, kind="gym", gym_id="stampede.envs.testing:StampedeCrash-v0")
    env.reset(0)
    actions = random_actions(100, 1, 2)
    for action in actions[:-1]:
        env.step(action)
    with pytest.raises(RuntimeError, match="injected failure at step 100"):
        env.step(actions[-1])
    env.close()


def test_nan_rewards_start_at_their_step():
    env = gym.make("StampedeNaN-v0")
    env.reset(seed=0)
    rewards = []
    for t in range(32):
        _, reward, terminated, truncated, _ = env.step(t % 2)
        rewards.append(reward)
        if terminated or truncated:
            env.reset()
    assert np.isfinite(rewards[:29]).all()
    assert np.isnan(rewards[29:]).all()  # from step 30 on


def test_nan_once_fires_once_per_process(monkeypatch):
    monkeypatch.setattr(testing_envs, "_nan_once_fired", False)
    first, second = FaultyCartPole("nan_once", at_step=2), FaultyCartPole("nan_once", at_step=2)
    for env in (first, second):
        env.reset(seed=0)
    assert np.isfinite(first.step(0)[1])
    assert np.isnan(first.step(1)[1])
    assert np.isfinite(first.step(0)[1])
    second.step(0)
    assert np.isfinite(second.step(1)[1])


def test_an_unknown_fault_is_refused():
    with pytest.raises(ValueError, match=r"fault must be one of \('crash', 'segfault'"):
        FaultyCartPole("explode")


def spot_column(obs: np.ndarray) -> int:
    """The column [0, 6) of the bright square in a Spot observation [4, 84, 84]."""
    return int(np.flatnonzero(obs[0, 40])[0]) // (SpotEnv.size // SpotEnv.columns)


@pytest.mark.parametrize(
    ("gym_id", "delay"), [("StampedeSpot-v0", 0), ("StampedeSpotDelayed-v0", 8)]
)
def test_spot_rewards_naming_the_column_of_the_square(gym_id, delay):
    env = gym.make(gym_id)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (4, 84, 84)
    assert obs.dtype == np.uint8
    rewards, wrong_rewards, truncated = [], [], False
    for _ in range(SpotEnv.episode_steps):
        obs, reward, terminated, truncated, _ = env.step(spot_column(obs))
        rewards.append(reward)
        assert not terminated
    assert truncated  # 20 steps per episode
    assert rewards == [0.0] * delay + [1.0] * (SpotEnv.episode_steps - delay)
    obs, _ = env.reset(seed=1)
    for _ in range(SpotEnv.episode_steps):
        obs, reward, *_ = env.step((spot_column(obs) + 1) % SpotEnv.columns)
        wrong_rewards.append(reward)
    assert sum(wrong_rewards) == 0

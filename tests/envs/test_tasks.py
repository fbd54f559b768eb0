"""Several single-game vectors as one (``stampede.envs.tasks``): env i of the whole is env i of a
plain vector, each env keeps its task id, and vectors that cannot share a network are refused."""

from __future__ import annotations

import numpy as np
import pytest

from stampede.envs import EnvError, VecStep
from stampede.envs.tasks import TaskVecEnv
from stampede.envs.vector import GymVecEnv

from .conftest import random_actions, rollout


def cartpoles(*sizes: int) -> list[GymVecEnv]:
    return [GymVecEnv(size, "CartPole-v1") for size in sizes]


def test_parts_side_by_side_step_as_one_vector_of_the_same_envs():
    """Each part is reset with its offset (env i keeps seed + i) and gets its slice of the
    actions, so [2 envs | 1 env] plays exactly as one vector of 3, game ends included."""
    whole = TaskVecEnv(cartpoles(2, 1), tasks=[0, 0, 1])
    single = GymVecEnv(3, "CartPole-v1")
    assert whole.num_envs == 3
    assert whole.spec == single.spec
    np.testing.assert_array_equal(whole.tasks, [0, 0, 1])
    actions = random_actions(100, 3, 2)
    (first_whole, steps_whole), (first_single, steps_single) = (
        rollout(env, 7, actions) for env in (whole, single)
    )
    np.testing.assert_array_equal(first_whole, first_single)
    assert any(step.done[2] for step in steps_whole)  # the comparison crosses episode ends
    for t, (a, b) in enumerate(zip(steps_whole, steps_single, strict=True)):
        for field in VecStep._fields:
            np.testing.assert_array_equal(
                getattr(a, field), getattr(b, field), err_msg=f"{field} at step {t}"
            )
    whole.close()
    single.close()


def test_close_closes_every_part():
    parts = cartpoles(1, 2)
    TaskVecEnv(parts, tasks=[0, 1, 1]).close()
    assert [part.envs for part in parts] == [[], []]


def test_vectors_that_cannot_share_one_network_are_refused():
    with pytest.raises(EnvError, match=r"TaskVecEnv needs at least one vector"):
        TaskVecEnv([], tasks=[])
    mixed = [GymVecEnv(1, "CartPole-v1"), GymVecEnv(1, "Acrobot-v1")]
    with pytest.raises(EnvError, match=r"give different observations or action sets .*full_action"):
        TaskVecEnv(mixed, tasks=[0, 1])


def test_tasks_and_actions_must_fit_the_envs():
    with pytest.raises(EnvError, match=r"tasks must give one task per env \(3\), got 2"):
        TaskVecEnv(cartpoles(2, 1), tasks=[0, 1])
    whole = TaskVecEnv(cartpoles(2, 1), tasks=[0, 0, 1])
    whole.reset(0)
    with pytest.raises(EnvError, match=r"shape \(3,\), got dtype int64 and shape \(2,\)"):
        whole.step(np.zeros(2, dtype=np.int64))
    with pytest.raises(EnvError, match=r"must lie in \[0, 2\), got min 0 max 2"):
        whole.step(np.array([0, 0, 2]))
    whole.close()

"""The environment contract (``stampede.envs.spec``): whole-game returns, the action check and the
seeds of a vector's environments."""

from __future__ import annotations

import numpy as np
import pytest

from stampede.envs.spec import EnvError, GameTracker, check_actions, env_seeds


def test_game_returns_and_lengths_are_reported_where_a_game_ends_and_then_restart():
    tracker = GameTracker(2)
    steps = [
        ([1.0, 2.0], [False, False]),
        ([3.0, -1.0], [True, False]),
        ([5.0, 0.5], [True, True]),
    ]
    results = [tracker.update(np.array(r), np.array(end)) for r, end in steps]
    returns = np.stack([ret for ret, _ in results])
    lengths = np.stack([length for _, length in results])
    np.testing.assert_array_equal(returns, [[np.nan, np.nan], [4.0, np.nan], [5.0, 1.5]])
    np.testing.assert_array_equal(lengths, [[0, 0], [2, 0], [1, 3]])
    assert returns.dtype == np.float32
    assert lengths.dtype == np.int64
    tracker.update(np.array([7.0, 7.0]), np.array([False, False]))
    tracker.reset()
    ret, length = tracker.update(np.array([1.0, 1.0]), np.array([True, True]))
    np.testing.assert_array_equal(ret, [1.0, 1.0])
    np.testing.assert_array_equal(length, [1, 1])


def test_actions_of_any_integer_type_become_int64():
    actions = check_actions(np.array([0, 5], dtype=np.uint8), num_envs=2, num_actions=6)
    assert actions.dtype == np.int64
    np.testing.assert_array_equal(actions, [0, 5])
    np.testing.assert_array_equal(check_actions([1, 2], num_envs=2, num_actions=6), [1, 2])


def test_actions_must_be_integers_in_range():
    with pytest.raises(EnvError, match=r"integer array of shape \(2,\), got dtype float64"):
        check_actions(np.array([0.0, 1.0]), num_envs=2, num_actions=6)
    with pytest.raises(EnvError, match=r"must lie in \[0, 6\), got min -1 max 3"):
        check_actions(np.array([-1, 3]), num_envs=2, num_actions=6)


def test_env_i_gets_seed_plus_i_wrapped_into_int32():
    np.testing.assert_array_equal(env_seeds(5, 3), [5, 6, 7])
    np.testing.assert_array_equal(env_seeds(2**31 - 1, 2), [2**31 - 1, 0])
    np.testing.assert_array_equal(env_seeds(np.uint32(2**32 - 1), 1), [2**31 - 1])


@pytest.mark.parametrize("seed", [True, 1.0, "1", None])
def test_a_seed_must_be_an_int(seed):
    with pytest.raises(EnvError, match=rf"seed must be an int, got {type(seed).__name__}"):
        env_seeds(seed, 2)

"""Vectors of environments (``stampede.envs.vector``): the VecStep contract on both Atari backends
and on gymnasium ids, seeding, sticky actions, and identical steps from either Atari backend."""

from __future__ import annotations

import numpy as np
import pytest

from stampede.envs import EnvError, VecStep, env_spec, make_vec_env
from stampede.envs.atari import uniform_below
from stampede.envs.factory import ale_vector_available

from .conftest import random_actions, rollout

ATARI_BACKENDS = [
    "python_loop",
    pytest.param(
        "ale_vector",
        marks=pytest.mark.skipif(not ale_vector_available(), reason="ale-py < 0.12"),
    ),
]


# --- spaces --------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ATARI_BACKENDS)
def test_pong_observations_are_stacked_uint8_frames(backend):
    env = make_vec_env(2, 0, game="pong", backend=backend)
    obs = env.reset(0)
    assert env.num_envs == 2
    assert env.spec.obs_shape == (4, 84, 84)
    assert env.spec.obs_dtype == np.uint8
    assert env.spec.frames_per_step == 4
    assert obs.shape == (2, 4, 84, 84)
    assert obs.dtype == np.uint8
    step = env.step(np.zeros(2, dtype=np.int64))
    assert step.obs.shape == (2, 4, 84, 84)
    assert step.obs.dtype == np.uint8
    assert step.reward.dtype == np.float32
    assert step.done.dtype == np.bool_
    assert step.episode_return.dtype == np.float32
    assert step.episode_length.dtype == np.int64
    env.close()


def test_cartpole_observations_are_float32_vectors():
    env = make_vec_env(3, 0, kind="gym", gym_id="CartPole-v1")
    obs = env.reset(0)
    assert env.spec.obs_shape == (4,)
    assert env.spec.obs_dtype == np.float32
    assert env.spec.num_actions == 2
    assert env.spec.frames_per_step == 1
    assert obs.shape == (3, 4)
    assert obs.dtype == np.float32
    env.close()


def test_gym_image_observations_stay_uint8():
    """A gymnasium id with a uint8 image space keeps its bytes (a CNN scales them by 1/255)."""
    env = make_vec_env(2, 0, kind="gym", gym_id="stampede.envs.testing:StampedeSpot-v0")
    obs = env.reset(0)
    assert env.spec.obs_shape == (4, 84, 84)
    assert env.spec.obs_dtype == np.uint8
    assert obs.dtype == np.uint8
    assert obs.max() == 255
    assert env.step(np.zeros(2, dtype=np.int64)).obs.dtype == np.uint8
    env.close()


# --- episodes ------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ATARI_BACKENDS)
def test_auto_reset_gives_a_fresh_episode_on_the_same_step(backend):
    # No no-ops: every Pong game starts from the same screen, so the auto-reset obs must equal
    # reset()'s; a 40-frame cap ends the game at step 10.
    env = make_vec_env(1, 0, game="pong", backend=backend, noop_max=0, max_episode_frames=40)
    first, steps = rollout(env, 0, np.ones((10, 1), dtype=np.int64))
    assert not any(s.done[0] for s in steps[:-1])
    assert steps[-1].done[0]
    assert (steps[-2].obs[0, :-1] != first[0, :-1]).any()  # mid-game the stack is full of play
    np.testing.assert_array_equal(steps[-1].obs, first)  # frame stack restarted, not carried
    assert (first[0, :-1] == 0).all()
    assert first[0, -1].any()
    env.close()


@pytest.mark.parametrize("backend", ATARI_BACKENDS)
def test_frame_cap_truncates_and_reports_the_game(backend):
    env = make_vec_env(2, 0, game="pong", backend=backend, max_episode_frames=100)
    _, steps = rollout(env, 0, random_actions(60, 2, 6))
    ends = [t for t, s in enumerate(steps) if s.done[0]]
    assert ends[:2] == [24, 49]  # 100 frames = 25 agent steps, counted after the no-ops
    assert steps[24].episode_length[0] == 25
    assert np.isfinite(steps[24].episode_return[0])
    assert np.isnan(steps[23].episode_return[0])
    assert steps[23].episode_length[0] == 0
    env.close()


@pytest.mark.parametrize("backend", ATARI_BACKENDS)
def test_episodic_life_ends_training_episodes_but_reports_whole_games(backend):
    env = make_vec_env(1, 1, game="breakout", backend=backend, episodic_life=True)
    env.reset(1)
    rewards, life_losses = [], 0
    for action in random_actions(3000, 1, 4):
        step = env.step(action)
        rewards.append(float(step.reward[0]))
        if step.done[0] and np.isnan(step.episode_return[0]):
            life_losses += 1
        if np.isfinite(step.episode_return[0]):
            break
    else:
        pytest.fail("no Breakout game ended in 3000 random steps")
    assert life_losses == 4  # 5 lives: 4 losses end training episodes, the 5th the game
    assert step.done[0]
    assert step.episode_length[0] == len(rewards)
    assert step.episode_return[0] == pytest.approx(sum(rewards))
    assert sum(rewards) > 0
    env.close()


@pytest.mark.parametrize("backend", ATARI_BACKENDS)
def test_without_episodic_life_only_game_ends_are_done(backend):
    env = make_vec_env(1, 1, game="breakout", backend=backend, episodic_life=False)
    _, steps = rollout(env, 1, random_actions(600, 1, 4))
    dones = [s for s in steps if s.done[0]]
    assert dones
    assert all(np.isfinite(s.episode_return[0]) for s in dones)
    env.close()


def test_gym_episode_return_is_the_return_and_resets_on_the_same_step():
    env = make_vec_env(2, 0, kind="gym", gym_id="CartPole-v1")
    _, steps = rollout(env, 0, random_actions(200, 2, 2))
    ends = [s for s in steps if s.done[0]]
    assert ends
    assert all(s.episode_return[0] == s.episode_length[0] for s in ends)
    assert all(np.abs(s.obs[0]).max() <= 0.05 for s in ends)  # CartPole starts in [-0.05, 0.05]
    env.close()


# --- seeding, sticky actions, backends -----------------------------------------------------------


def _noop_count(seed: int, noop_max: int = 30) -> int:
    return uniform_below(np.random.RandomState(seed), noop_max + 1)


@pytest.mark.parametrize("backend", ATARI_BACKENDS)
def test_same_seed_same_trajectory_and_seeds_differ(backend):
    env = make_vec_env(2, 11, game="pong", backend=backend)
    actions = random_actions(60, 2, 6)
    first_a, steps_a = rollout(env, 11, actions)
    first_b, steps_b = rollout(env, 11, actions)
    np.testing.assert_array_equal(first_a, first_b)
    for a, b in zip(steps_a, steps_b, strict=True):
        np.testing.assert_array_equal(a.obs, b.obs)
        np.testing.assert_array_equal(a.reward, b.reward)
    other = next(s for s in range(12, 100) if _noop_count(s) != _noop_count(11))
    _, steps_c = rollout(env, other, actions)
    assert any((a.obs[0] != c.obs[0]).any() for a, c in zip(steps_a, steps_c, strict=True))
    env.close()


@pytest.mark.parametrize("backend", ATARI_BACKENDS)
def test_sticky_actions_repeat_the_previous_action(backend):
    # With probability near 1 ALE repeats its previous action, NOOP since the reset: any action
    # sequence then plays like all-NOOP (1 itself is refused: the agent would never act). With 0
    # the paddle moves.
    def play(p: float) -> tuple[np.ndarray, np.ndarray]:
        """Observations [T, 1, 4, 84, 84] under RIGHT (2) only and under NOOP only."""
        env = make_vec_env(1, 0, game="pong", backend=backend, repeat_action_probability=p)
        moves, noops = (rollout(env, 0, np.full((30, 1), a))[1] for a in (2, 0))
        env.close()
        return np.stack([s.obs for s in moves]), np.stack([s.obs for s in noops])

    sticky_moves, sticky_noops = play(1 - 1e-9)
    np.testing.assert_array_equal(sticky_moves, sticky_noops)
    moves, noops = play(0.0)
    assert (moves != noops).any()


@pytest.mark.skipif(not ale_vector_available(), reason="ale-py < 0.12")
@pytest.mark.parametrize(
    ("game", "knobs"),
    [
        ("pong", {"max_episode_frames": 400}),
        ("breakout", {"repeat_action_probability": 0.25, "screen_size": 64}),
        ("space_invaders", {"full_action_space": True, "frame_skip": 3, "max_episode_frames": 300}),
    ],
)
def test_backends_give_identical_steps(game, knobs):
    envs = [
        make_vec_env(2, 5, game=game, backend=b, **knobs) for b in ("python_loop", "ale_vector")
    ]
    actions = random_actions(200, 2, envs[0].spec.num_actions)
    (first_py, steps_py), (first_cpp, steps_cpp) = (rollout(env, 5, actions) for env in envs)
    np.testing.assert_array_equal(first_py, first_cpp)
    assert any(s.done.any() for s in steps_py)  # the comparison crosses episode ends
    for t, (a, b) in enumerate(zip(steps_py, steps_cpp, strict=True)):
        for field in VecStep._fields:
            np.testing.assert_array_equal(
                getattr(a, field), getattr(b, field), err_msg=f"{field} at step {t}"
            )
    for env in envs:
        env.close()


def test_the_python_loops_are_called_python_loop():
    """Neither Python-loop backend is named after gymnasium; the old name says what replaced it."""
    for fields in (
        {"game": "pong", "backend": "python_loop"},
        {"kind": "gym", "gym_id": "CartPole-v1"},
    ):
        env = make_vec_env(1, 0, **fields)
        assert env.backend == "python_loop"
        env.close()
    with pytest.raises(EnvError, match=r"env\.backend='gymnasium' was renamed 'python_loop'"):
        make_vec_env(1, 0, game="pong", backend="gymnasium")


@pytest.mark.parametrize("backend", ATARI_BACKENDS)
def test_large_seeds_wrap_into_the_emulator_range(backend):
    env = make_vec_env(2, 0, game="pong", backend=backend)
    np.testing.assert_array_equal(env.reset(2**31 + 4), env.reset(4))  # uint32 seeds are fine
    env.close()


# --- errors --------------------------------------------------------------------------------------


def test_unknown_gym_id_names_env_gym_id():
    with pytest.raises(EnvError, match=r"env\.gym_id='NotAnEnv-v0'"):
        env_spec(kind="gym", gym_id="NotAnEnv-v0")
    with pytest.raises(EnvError, match=r"env\.gym_id='Pendulum-v1'.*Discrete"):
        make_vec_env(1, 0, kind="gym", gym_id="Pendulum-v1")


@pytest.mark.parametrize("backend", ATARI_BACKENDS)
def test_bad_actions_and_step_before_reset_raise(backend):
    env = make_vec_env(2, 0, game="pong", backend=backend)
    with pytest.raises(EnvError, match="before reset"):
        env.step(np.zeros(2, dtype=np.int64))
    env.reset(0)
    with pytest.raises(EnvError, match=r"\[0, 6\)"):
        env.step(np.array([0, 6]))
    with pytest.raises(EnvError, match=r"shape \(2,\)"):
        env.step(np.zeros(3, dtype=np.int64))
    env.close()


@pytest.mark.parametrize("num_envs", [0, -1, 2.0, True])
def test_num_envs_must_be_a_positive_int(num_envs):
    with pytest.raises(EnvError, match=rf"num_envs must be an int >= 1, got {num_envs!r}"):
        make_vec_env(num_envs, 0, kind="gym", gym_id="CartPole-v1")


@pytest.mark.parametrize("backend", ATARI_BACKENDS)
def test_a_closed_vector_refuses_to_step(backend):
    env = make_vec_env(2, 0, game="pong", backend=backend)
    env.reset(0)
    env.close()
    with pytest.raises(EnvError, match="before reset"):
        env.step(np.zeros(2, dtype=np.int64))

"""A single renderable environment for evaluation videos (``stampede.envs.video``): the training
observations, whole games, the emulator's colour screen, and envs that cannot be recorded."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from stampede.envs import EnvError
from stampede.envs.factory import ale_vector_available
from stampede.envs.video import AtariVideoEnv, make_video_env


def test_spaces_and_frame_rate_follow_the_settings():
    env = make_video_env(0, game="pong", frame_skip=3, frame_stack=2, screen_size=64)
    obs, info = env.reset(seed=0)
    assert info == {}
    assert env.observation_space.shape == (2, 64, 64)
    assert env.observation_space.contains(obs)
    assert env.action_space.n == 6
    assert env.metadata["render_fps"] == 20  # 60 Hz / 3 frames per step: real time
    frame = env.render()
    assert frame.shape == (210, 160, 3)
    assert frame.dtype == np.uint8


def test_the_frame_cap_truncates_and_keeps_the_last_observation():
    """No auto-reset at the end of a game: the last frame of a video is this game's."""
    env = make_video_env(0, game="pong", noop_max=0, max_episode_frames=400)
    first, _ = env.reset(seed=0)
    steps = [env.step(1) for _ in range(100)]  # 400 frames at 4 per step
    assert [truncated for *_, truncated, _ in steps] == [False] * 99 + [True]
    assert not any(terminated for _, _, terminated, _, _ in steps)
    np.testing.assert_array_equal(steps[-1][0], steps[-2][0])
    assert (steps[-1][0] != first).any()


def test_losing_a_life_ends_nothing():
    """A video shows a whole game, as evaluation scores it: no episodic life here."""
    env = make_video_env(0, game="breakout")
    env.reset(seed=0)
    lives = env.game.ale.lives()
    for _ in range(2000):
        _, _, terminated, truncated, _ = env.step(1)  # FIRE: serve, never move the paddle
        assert not terminated
        assert not truncated
        if env.game.ale.lives() < lives:
            break
    else:
        pytest.fail("no Breakout life lost in 2000 steps")


@pytest.mark.skipif(not ale_vector_available(), reason="ale-py < 0.12")
def test_either_atari_backend_plays_the_python_emulator_loop():
    assert isinstance(make_video_env(0, game="pong", backend="ale_vector"), AtariVideoEnv)


def test_a_bad_gym_id_is_refused_naming_env_gym_id():
    with pytest.raises(EnvError, match=r"env\.gym_id='NotAnEnv-v0' is not a gymnasium id"):
        make_video_env(0, kind="gym", gym_id="NotAnEnv-v0")


@pytest.mark.skipif(
    importlib.util.find_spec("pygame") is not None, reason="pygame installed: CartPole renders"
)
def test_a_gym_id_that_cannot_render_says_what_is_missing():
    expected = r"env\.gym_id='CartPole-v1' cannot render video frames: .*pygame"
    with pytest.raises(EnvError, match=expected):
        make_video_env(0, kind="gym", gym_id="CartPole-v1")

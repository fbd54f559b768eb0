"""Every ``env.*`` setting (``stampede.envs.settings``): its check naming the key, the run's name,
and the settings of one task of a multi-task run."""

from __future__ import annotations

import pytest

from stampede.envs import EnvError, EnvSettings, env_spec
from stampede.envs.settings import env_settings


@pytest.mark.parametrize("p", [-0.1, 1.0, 1.5])
def test_sticky_action_probability_is_below_one(p):
    """[0, 1): with probability 1 the agent's actions would never reach the game."""
    with pytest.raises(EnvError, match=r"env\.repeat_action_probability must be in \[0, 1\), got"):
        EnvSettings(repeat_action_probability=p)


def test_bad_settings_name_their_key():
    with pytest.raises(EnvError, match=r"env\.backend"):
        env_spec(backend="envpool")
    with pytest.raises(EnvError, match=r"env\.kind"):
        env_spec(kind="mujoco")
    with pytest.raises(EnvError, match=r"env\.backend='ale_vector'.*atari"):
        env_spec(kind="gym", gym_id="CartPole-v1", backend="ale_vector")
    with pytest.raises(EnvError, match=r"env\.frame_skip must be >= 1, got 0"):
        env_spec(frame_skip=0)
    with pytest.raises(EnvError, match=r"env\.gym_id must be a gymnasium id"):
        env_spec(kind="gym")
    with pytest.raises(EnvError, match=r"unknown env setting.*frameskip"):
        env_spec(frameskip=4)


@pytest.mark.parametrize("key", ["frame_skip", "frame_stack", "screen_size", "max_episode_frames"])
def test_sizes_and_counts_are_at_least_one(key):
    with pytest.raises(EnvError, match=rf"env\.{key} must be >= 1, got 0"):
        EnvSettings(**{key: 0})


def test_no_op_starts_may_be_off_but_not_negative():
    assert EnvSettings(noop_max=0).noop_max == 0
    with pytest.raises(EnvError, match=r"env\.noop_max must be >= 0, got -1"):
        EnvSettings(noop_max=-1)


def test_a_gym_id_needs_no_atari_game():
    """The Atari knobs are ignored by kind=gym: a game that does not exist is not looked up."""
    settings = EnvSettings(kind="gym", gym_id="CartPole-v1", game="not_a_game")
    assert settings.name == "CartPole-v1"
    assert settings.tasks == ("CartPole-v1",)


def test_a_run_is_named_after_up_to_three_games():
    games = ["pong", "breakout", "qbert", "alien"]
    assert EnvSettings(game="breakout").name == "breakout"
    assert EnvSettings(games=games[:3], full_action_space=True).name == "pong+breakout+qbert"
    assert EnvSettings(games=games, full_action_space=True).name == "multitask4"


def test_a_task_keeps_every_setting_but_the_game():
    settings = EnvSettings(games=["pong", "breakout"], full_action_space=True, frame_skip=3)
    assert settings.task(1) == EnvSettings(game="breakout", full_action_space=True, frame_skip=3)


def test_env_settings_lists_the_known_keys_for_an_unknown_one():
    expected = r"unknown env setting\(s\) \['gam', 'skip'\]; known: \['kind', 'game', 'gym_id',"
    with pytest.raises(EnvError, match=expected):
        env_settings({"gam": "pong", "skip": 4})
    assert env_settings({"game": "breakout"}) == EnvSettings(game="breakout")

"""The video of an evaluation (stampede.eval.video): one game to mp4 as the agent saw it, named
after the game, capped in length; and an env that cannot be recorded fails before evaluating."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch

from stampede.eval import protocol as ev
from stampede.eval import video
from stampede.eval.policy import Policy
from stampede.models import AtariNet

from .conftest import CARTPOLE_KWARGS, cartpole_mlp, run_eval

# Pong cut at 120 frames: 30 agent steps of 4 frames.
SHORT_PONG = {"kind": "atari", "game": "pong", "max_episode_frames": 120, "episodic_life": False}


def pong_policy() -> Policy:
    torch.manual_seed(0)
    model = AtariNet((4, 84, 84), 6, hidden_size=16)
    return Policy(model, 1, torch.device("cpu"), greedy=False, reward_clip=1.0)


def video_frames(path: Path) -> np.ndarray:
    import imageio.v3 as iio

    return np.asarray(iio.imread(path, index=None))


def test_video_env_sees_what_the_vector_env_sees() -> None:
    """Same seed and actions: AtariVideoEnv's observations equal the training vector's."""
    from stampede.envs import make_vec_env
    from stampede.envs.video import AtariVideoEnv, make_video_env

    kwargs = {"kind": "atari", "game": "breakout", "episodic_life": False, "backend": "python_loop"}
    vec = make_vec_env(num_envs=1, seed=5, **kwargs)
    video_env = make_video_env(5, **kwargs)
    assert isinstance(video_env, AtariVideoEnv)
    obs_vec, (obs_video, _) = vec.reset(seed=5), video_env.reset(seed=5)
    rng = np.random.default_rng(0)
    for _ in range(60):
        np.testing.assert_array_equal(obs_vec[0], obs_video)
        action = int(rng.integers(vec.spec.num_actions))
        obs_vec = vec.step(np.array([action])).obs
        obs_video, *_ = video_env.step(action)
    frame = video_env.render()
    assert frame.shape == (210, 160, 3)
    assert frame.dtype == np.uint8
    assert video_env.metadata["render_fps"] == 15


def test_one_game_is_recorded_to_an_mp4_named_after_it(tmp_path: Path) -> None:
    """One RGB frame per agent step of the (capped) game; an id's odd characters become ``_``;
    nothing but the mp4 is left in the video directory."""
    pytest.importorskip("moviepy")
    path = video.record_video(pong_policy(), SHORT_PONG, 5, tmp_path / "videos", "ALE/Pong:v5 x")
    assert path == tmp_path / "videos" / "ALE_Pong_v5_x.mp4"
    assert sorted((tmp_path / "videos").iterdir()) == [path]
    frames = video_frames(path)
    assert frames.shape[1:] == (210, 160, 3)
    assert 28 <= len(frames) <= 31


def test_a_long_game_is_cut_at_the_video_frame_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A whole Pong game is thousands of steps; the video (and the playing) stops at the cap."""
    pytest.importorskip("moviepy")
    monkeypatch.setattr(video, "MAX_VIDEO_FRAMES", 10)
    whole_game = {**SHORT_PONG, "max_episode_frames": 108_000}
    path = video.record_video(pong_policy(), whole_game, 5, tmp_path, "pong")
    assert len(video_frames(path)) <= 11  # the reset's frame and 10 steps


def test_a_second_video_of_the_same_name_replaces_the_first(tmp_path: Path) -> None:
    pytest.importorskip("moviepy")
    first = video.record_video(pong_policy(), SHORT_PONG, 5, tmp_path, "pong")
    first.write_bytes(b"not a video")
    second = video.record_video(pong_policy(), SHORT_PONG, 6, tmp_path, "pong")
    assert second == first
    assert len(video_frames(second)) >= 28
    assert sorted(tmp_path.iterdir()) == [second]


def test_the_video_is_one_more_game_the_statistics_do_not_count(tmp_path: Path) -> None:
    pytest.importorskip("moviepy")
    model = pong_policy().model
    plain = run_eval(model, SHORT_PONG, episodes=2, num_envs=2)
    filmed = run_eval(
        model, SHORT_PONG, episodes=2, num_envs=2, video_dir=tmp_path, video_name="pong_100"
    )
    assert (plain.video, filmed.video) == (None, tmp_path / "pong_100.mp4")
    assert filmed.video.is_file()
    assert (filmed.returns, filmed.lengths) == (plain.returns, plain.lengths)


def test_without_moviepy_the_video_is_refused_naming_the_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        video.importlib.util, "find_spec", lambda name: None if name == "moviepy" else real(name)
    )
    with pytest.raises(ev.EvalError, match=r"needs moviepy.*pip install 'stampede-rl\[video\]'"):
        video.check_video_env(SHORT_PONG, seed=0)


def test_video_of_an_env_that_cannot_render_fails_before_evaluating() -> None:
    pytest.importorskip("moviepy")
    try:
        import pygame  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("pygame installed: CartPole can render")
    with pytest.raises(ev.EvalError, match=r"eval.video=true: env.gym_id='CartPole-v1'"):
        run_eval(cartpole_mlp(), CARTPOLE_KWARGS, episodes=1, num_envs=1, video_dir=Path("unused"))

"""One game of an evaluation recorded to mp4 (``eval.video=true``).

The game is played on a single renderable environment (``stampede.envs.video``) that gives the
network the observations of the training vector, wrapped in gymnasium's ``RecordVideo``. It is
played after the counted games and is not one of them.
"""

from __future__ import annotations

import importlib.util
import os
import re
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from stampede.eval.policy import EvalError, Policy

VIDEO_DIRNAME = "videos"  # under the run directory
# A video keeps every frame in memory until it is written (gymnasium's RecordVideo): cap it at
# 4 minutes of play at 15 frames per second (~360 MB of 210x160 RGB frames).
MAX_VIDEO_FRAMES = 3600


def check_video_env(env_kwargs: dict[str, Any], seed: int) -> None:
    """Raise EvalError now if the video cannot be recorded (no moviepy, env cannot render)."""
    from stampede.envs import EnvError
    from stampede.envs.video import make_video_env

    if importlib.util.find_spec("moviepy") is None:
        raise EvalError(
            "eval.video=true needs moviepy to write mp4 files: pip install 'stampede-rl[video]'"
        )
    try:
        make_video_env(seed, **env_kwargs).close()
    except EnvError as error:
        raise EvalError(f"eval.video=true: {error}") from None


def record_video(
    policy: Policy, env_kwargs: dict[str, Any], seed: int, video_dir: Path, video_name: str
) -> Path:
    """Play one game with ``policy`` (a batch of one) on a renderable env and write it to
    ``<video_dir>/<video_name>.mp4`` (at most ``MAX_VIDEO_FRAMES`` frames); return that path."""
    from gymnasium.wrappers import RecordVideo

    from stampede.envs.video import make_video_env

    video_dir.mkdir(parents=True, exist_ok=True)
    final = video_dir / f"{_safe_name(video_name)}.mp4"
    # RecordVideo names its files itself and warns about existing folders: record into a fresh
    # folder of our own, then move the one file to its final name.
    with tempfile.TemporaryDirectory(dir=video_dir, prefix=".recording-") as tmp:
        folder = Path(tmp) / "episode"  # RecordVideo warns when its folder exists already
        recorder = RecordVideo(
            make_video_env(seed, **env_kwargs),
            str(folder),
            episode_trigger=lambda episode: episode == 0,
            video_length=MAX_VIDEO_FRAMES,
            disable_logger=True,
        )
        try:
            obs, _ = recorder.reset(seed=seed)
            while recorder.recording:
                action = int(policy.act(_as_batch(obs))[0])
                obs, reward, terminated, truncated, _ = recorder.step(action)
                policy.observe(np.array([reward]), np.array([terminated or truncated]))
                if terminated or truncated:
                    break
        finally:
            recorder.close()  # writes the mp4
        written = sorted(folder.glob("*.mp4"))
        if not written:
            raise EvalError(f"eval.video=true: no video was written to {video_dir}")
        os.replace(written[0], final)
    return final


def _as_batch(obs: Any) -> np.ndarray:
    """One observation as a batch of one [1, *obs_shape], typed as the vector envs type it."""
    obs = np.asarray(obs)
    return (obs if obs.dtype == np.uint8 else obs.astype(np.float32))[None]


def _safe_name(name: str) -> str:
    """A file name from a game or gym id (``module:Id-v0`` has a colon)."""
    return re.sub(r"[^\w.-]+", "_", name)

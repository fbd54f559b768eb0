"""One environment as a ``gymnasium.Env`` that renders RGB frames, for recording evaluation videos.

Evaluation plays its statistics games on a ``VecEnv`` (fast, no rendering). A video needs a
single game that ``gymnasium.wrappers.RecordVideo`` can wrap: reset/step with gymnasium's
signature, no same-step auto-reset (the last frame of a video must be the game's last frame,
not the next game's first), and ``render()`` returning an RGB array.

For Atari, ``AtariVideoEnv`` plays one ``AtariGame`` with exactly the preprocessing of
``AtariVecEnv`` (same seed, same actions, same observations), so the agent in the video sees
what it saw in training, while ``render()`` shows the emulator's full-colour 210x160 screen.
For gymnasium ids, ``gymnasium.make(gym_id, render_mode="rgb_array")`` is used as it is.
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np

from stampede.envs.atari import AtariGame
from stampede.envs.factory import resolve_backend
from stampede.envs.preprocessing import AreaResize, push_frame, restart_stack
from stampede.envs.settings import EnvSettings, env_settings
from stampede.envs.spec import EnvError
from stampede.envs.vector import atari_spec, make_gym

ALE_FRAMES_PER_SECOND = 60  # the Atari 2600's NTSC frame rate


class AtariVideoEnv(gymnasium.Env[np.ndarray, np.int64]):
    """One Atari game, observations as ``AtariVecEnv`` gives them, RGB screens from ``render()``.

    obs: uint8 [frame_stack, screen_size, screen_size]; a game ends (``terminated``) at game over
    and is ``truncated`` at ``max_episode_frames``. Losing a life ends nothing here: a video shows
    a whole game, as evaluation scores it. One ``render()`` frame per agent step, so the video
    plays in real time at 60 / frame_skip frames per second.
    """

    def __init__(self, settings: EnvSettings, seed: int = 0) -> None:
        self.settings = settings
        self.game = AtariGame(settings, seed)
        self.stampede_spec = atari_spec(settings, self.game.actions)
        self.render_mode = "rgb_array"
        self.metadata = {
            "render_modes": ["rgb_array"],
            "render_fps": max(1, ALE_FRAMES_PER_SECOND // settings.frame_skip),
        }
        self.observation_space = gymnasium.spaces.Box(
            0, 255, self.stampede_spec.obs_shape, np.uint8
        )
        self.action_space = gymnasium.spaces.Discrete(self.stampede_spec.num_actions)
        self._raw = np.zeros(self.game.screen_hw, dtype=np.uint8)  # [210, 160] grey frame
        self._stack = np.zeros(self.stampede_spec.obs_shape, dtype=np.uint8)  # [K, h, w]
        size = settings.screen_size
        self._resize = AreaResize(self.game.screen_hw, (size, size))

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.game.reset(self._raw, seed=seed)
        restart_stack(self._stack, self._resize(self._raw))
        return self._stack.copy(), {}

    def step(self, action: np.int64 | int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        outcome = self.game.step(int(action), self._raw)
        ended = outcome.game_over or outcome.truncated
        if not ended:  # at a game end the frame is stale (see AtariGame.step): keep the last one
            push_frame(self._stack, self._resize(self._raw))
        return self._stack.copy(), outcome.reward, outcome.game_over, outcome.truncated, {}

    def render(self) -> np.ndarray:
        """The emulator's current screen, RGB uint8 [210, 160, 3]."""
        return self.game.ale.getScreenRGB()


def make_video_env(seed: int, **fields: Any) -> gymnasium.Env:
    """A single renderable environment for the fields of ``cfg.env`` (``dataclasses.asdict``).

    ``backend`` is checked and otherwise ignored: a video always plays the Python emulator loop,
    which gives the same observations as either Atari backend. Raises EnvError when a gymnasium
    id cannot render RGB frames (e.g. classic control without pygame), naming what is missing.
    """
    settings = env_settings(fields)
    resolve_backend(settings)
    if settings.kind == "atari":
        return AtariVideoEnv(settings, seed)
    gym_id = settings.gym_id
    make_gym(gym_id).close()  # our EnvError for a bad id, before asking for a renderer
    env = gymnasium.make(gym_id, render_mode="rgb_array")
    try:
        env.reset(seed=seed)
        frame = env.render()
    except gymnasium.error.DependencyNotInstalled as error:
        env.close()
        raise EnvError(f"env.gym_id={gym_id!r} cannot render video frames: {error}") from None
    if not isinstance(frame, np.ndarray) or frame.ndim != 3:
        env.close()
        raise EnvError(
            f"env.gym_id={gym_id!r} renders {type(frame).__name__}, not an RGB array [H, W, 3]; "
            "it cannot be recorded"
        )
    return env

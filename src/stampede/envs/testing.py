"""Environments for tests, registered with gymnasium on import: faulty ones for fault injection
and a tiny image task that checks the image path learns.

Use them through the ``module:id`` form of a gymnasium id, which imports this module in every
process that builds the env (actor processes included)::

    python run.py env=gym env.gym_id=stampede.envs.testing:StampedeCrash-v0 model=mlp

Each is CartPole until its ``at_step``-th step (counted over all its episodes), then:

- ``StampedeCrash-v0``: raises RuntimeError;
- ``StampedeSegfault-v0``: the process dies of SIGSEGV;
- ``StampedeHang-v0``: the step never returns;
- ``StampedeNaNOnce-v0``: one NaN reward, from the first such env of each process only;
- ``StampedeNaN-v0``: every reward from then on is NaN.

``StampedeSpot-v0`` is a contextual bandit seen through Atari-shaped frames (uint8
[4, 84, 84]): a bright square in one of 6 columns, reward 1 for the action naming that column,
20 steps per episode (random play: 20 / 6 = 3.3, perfect play: 20). The network must read the
square's position from the pixels, so it learns only when observations, actions, rewards and
the learner's batches line up through the actor processes and the convolutional torso.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.envs.classic_control import CartPoleEnv

FAULTS = ("crash", "segfault", "hang", "nan_once", "nan")
_nan_once_fired = False  # per process: only one NaN reward in all envs of this process


class FaultyCartPole(CartPoleEnv):
    def __init__(self, fault: str, at_step: int = 100, **kwargs: Any) -> None:
        if fault not in FAULTS:
            raise ValueError(f"FaultyCartPole: fault must be one of {FAULTS}, got {fault!r}")
        super().__init__(**kwargs)
        self.fault, self.at_step, self.steps = fault, at_step, 0

    def step(self, action: Any) -> Any:
        global _nan_once_fired
        self.steps += 1
        obs, reward, terminated, truncated, info = super().step(action)
        if self.steps < self.at_step:
            return obs, reward, terminated, truncated, info
        if self.fault == "crash" and self.steps == self.at_step:
            raise RuntimeError(f"FaultyCartPole: injected failure at step {self.steps}")
        if self.fault == "segfault":
            os.kill(os.getpid(), signal.SIGSEGV)
        if self.fault == "hang":
            while True:
                time.sleep(1)
        if self.fault == "nan" or (self.fault == "nan_once" and not _nan_once_fired):
            _nan_once_fired = True
            reward = float("nan")
        return obs, reward, terminated, truncated, info


for _name, _fault in [
    ("Crash", "crash"),
    ("Segfault", "segfault"),
    ("Hang", "hang"),
    ("NaNOnce", "nan_once"),
    ("NaN", "nan"),
]:
    gym.register(
        f"Stampede{_name}-v0",
        entry_point=f"{__name__}:FaultyCartPole",
        max_episode_steps=500,
        kwargs={"fault": _fault, "at_step": 30 if _fault.startswith("nan") else 100},
    )


class SpotEnv(gym.Env):
    """Name the column of the bright square (see the module docstring)."""

    columns = 6
    size = 84
    episode_steps = 20

    def __init__(self, delay: int = 0) -> None:
        self.observation_space = spaces.Box(0, 255, (4, self.size, self.size), np.uint8)
        self.action_space = spaces.Discrete(self.columns)
        self._spot, self._steps = 0, 0
        self.delay = delay  # steps between an action and its reward
        self._pending: list[float] = []

    def _obs(self) -> np.ndarray:
        obs = np.zeros((4, self.size, self.size), dtype=np.uint8)
        width = self.size // self.columns  # 14 pixels per column
        left = self._spot * width + 2
        obs[:, 35:47, left : left + 10] = 255
        return obs

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> Any:
        super().reset(seed=seed)
        self._steps = 0
        self._pending = [0.0] * self.delay
        self._spot = int(self.np_random.integers(self.columns))
        return self._obs(), {}

    def step(self, action: Any) -> Any:
        self._pending.append(float(int(action) == self._spot))
        reward = self._pending.pop(0)
        self._steps += 1
        self._spot = int(self.np_random.integers(self.columns))
        return self._obs(), reward, False, self._steps >= self.episode_steps, {}


gym.register("StampedeSpot-v0", entry_point=f"{__name__}:SpotEnv")
gym.register("StampedeSpotDelayed-v0", entry_point=f"{__name__}:SpotEnv", kwargs={"delay": 8})

"""Environments for fault-injection tests, registered with gymnasium when this module is imported.

Use them through the ``module:id`` form of a gymnasium id, which imports this module in every
process that builds the env (actor processes included)::

    python run.py env=gym env.gym_id=stampede.testing:StampedeCrash-v0 model=mlp
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
from gymnasium.envs.classic_control import CartPoleEnv

CRASH_AT_STEP = 100


class CrashingCartPole(CartPoleEnv):
    """CartPole that raises on its ``CRASH_AT_STEP``-th step (counted over all its episodes)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.steps = 0

    def step(self, action: Any) -> Any:
        self.steps += 1
        if self.steps == CRASH_AT_STEP:
            raise RuntimeError(f"CrashingCartPole: injected failure at step {self.steps}")
        return super().step(action)


gym.register("StampedeCrash-v0", entry_point=CrashingCartPole, max_episode_steps=500)

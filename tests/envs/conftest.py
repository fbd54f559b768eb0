"""Helpers of the environment tests: seeded random actions, and a reset-then-step rollout.

The test files import these with ``from .conftest import ...``.
"""

from __future__ import annotations

import numpy as np

from stampede.envs import VecEnv, VecStep


def random_actions(num_steps: int, num_envs: int, num_actions: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, num_actions, size=(num_steps, num_envs))


def rollout(env: VecEnv, seed: int, actions: np.ndarray) -> tuple[np.ndarray, list[VecStep]]:
    """reset(seed), then one step per row of ``actions`` [T, E]."""
    first = env.reset(seed)
    return first, [env.step(a) for a in actions]

"""Faulty environments for fault-injection tests, registered with gymnasium on import.

Use them through the ``module:id`` form of a gymnasium id, which imports this module in every
process that builds the env (actor processes included)::

    python run.py env=gym env.gym_id=stampede.testing:StampedeCrash-v0 model=mlp

Each is CartPole until its ``at_step``-th step (counted over all its episodes), then:

- ``StampedeCrash-v0``: raises RuntimeError;
- ``StampedeSegfault-v0``: the process dies of SIGSEGV;
- ``StampedeHang-v0``: the step never returns;
- ``StampedeNaNOnce-v0``: one NaN reward, from the first such env of each process only;
- ``StampedeNaN-v0``: every reward from then on is NaN.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import gymnasium as gym
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

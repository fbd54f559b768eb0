"""Helpers of the evaluation tests: a small CartPole network, the protocol run with fixed
settings, and an Atari run's config.

The test files import these with ``from .conftest import ...``.
"""

from __future__ import annotations

from typing import Any

import torch

from stampede.config.schema import Config, EvalConfig
from stampede.envs import EnvSettings
from stampede.eval import protocol as ev
from stampede.models import MLP

# CartPole as env settings (the fields of cfg.env), not the root conftest's override list.
CARTPOLE_KWARGS: dict[str, Any] = {"kind": "gym", "gym_id": "CartPole-v1"}


def cartpole_mlp(use_lstm: bool = False) -> MLP:
    torch.manual_seed(0)
    return MLP((4,), 2, use_lstm=use_lstm, hidden_size=16, hidden_sizes=[16])


def run_eval(model: Any, env_kwargs: dict[str, Any], **kwargs: Any) -> ev.Evaluation:
    settings = {"seed": 3, "greedy": False, "reward_clip": 1.0, "device": "cpu"} | kwargs
    return ev.evaluate(model, env_kwargs, **settings)


def atari_cfg(**eval_settings: Any) -> Config:
    return Config(
        env=EnvSettings(game="pong"),
        eval=EvalConfig(**eval_settings),
        seed=2,
        name="atari5",
        device="cpu",
    )

"""Helpers of the model tests: the Atari observation shape, parameter counts, and random inputs.

The test files import these with ``from .conftest import ...``.
"""

from __future__ import annotations

import torch
from torch import Tensor

ATARI_OBS = (4, 84, 84)


def num_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def make_inputs(
    obs_shape: tuple[int, ...], num_actions: int, steps: int, batch: int, seed: int = 0
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Random [T, B] inputs (obs, last_action, reward, done), done all False; uint8 images."""
    g = torch.Generator().manual_seed(seed)
    if len(obs_shape) > 1:
        obs = torch.randint(0, 256, (steps, batch, *obs_shape), generator=g, dtype=torch.uint8)
    else:
        obs = torch.randn(steps, batch, *obs_shape, generator=g)
    last_action = torch.randint(0, num_actions, (steps, batch), generator=g)
    reward = torch.rand(steps, batch, generator=g) * 2 - 1
    done = torch.zeros(steps, batch, dtype=torch.bool)
    return obs, last_action, reward, done

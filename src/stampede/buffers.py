"""The rollout spec table and the shared-memory rollout buffers.

An actor writes one *slot* per rollout: ``unroll_length + 1`` steps of its ``E`` environments,
so every tensor of a slot is time-major, ``[T + 1, E, ...]``. Step ``t`` of a slot holds

    obs[t]           the observation x_t
    reward[t]        the reward of the transition INTO x_t (unclipped)
    done[t]          that transition ended an episode, so x_t is the first observation of a new one
    last_action[t]   the action that led to x_t (an input of the network, as in the paper)
    action[t]        the action the behaviour policy mu took at x_t
    logits[t]        mu's logits at x_t
    episode_return/episode_length[t]   the true game return/length where a whole game ended on
                     the transition into x_t (NaN / 0 elsewhere)

The last step of a rollout is the first step of the next one, so consecutive slots overlap by one
step and the learner bootstraps from ``x_T``. ``core_state`` is the LSTM state before step 0.

Two fields are per slot, not per step: ``policy_version`` (the learner update the rollout started
from) and ``actor_time`` (the actor's seconds per stage of ``stampede.timing.ACTOR_STAGES``
since its previous slot, then its wall seconds).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from stampede.envs import EnvSpec
from stampede.timing import ACTOR_STAGES

PER_SLOT = ("policy_version", "actor_time")  # fields without time and env axes
_TORCH_DTYPES = {np.dtype(np.uint8): torch.uint8, np.dtype(np.float32): torch.float32}


@dataclass(frozen=True)
class Field:
    shape: tuple[int, ...]  # per slot, time-major
    dtype: torch.dtype


def rollout_spec(
    env: EnvSpec, unroll_length: int, num_envs: int, core_shapes: Sequence[tuple[int, ...]]
) -> dict[str, Field]:
    """The table of every tensor in a rollout slot: name -> shape [T + 1, E, ...] and dtype."""
    steps = (unroll_length + 1, num_envs)
    obs_dtype = _TORCH_DTYPES.get(np.dtype(env.obs_dtype), torch.float32)
    spec = {
        "obs": Field((*steps, *env.obs_shape), obs_dtype),
        "reward": Field(steps, torch.float32),
        "done": Field(steps, torch.bool),
        "last_action": Field(steps, torch.int64),
        "action": Field(steps, torch.int64),
        "logits": Field((*steps, env.num_actions), torch.float32),
        "episode_return": Field(steps, torch.float32),
        "episode_length": Field(steps, torch.int64),
        "policy_version": Field((), torch.int64),
        "actor_time": Field((len(ACTOR_STAGES) + 1,), torch.float64),
    }
    for i, shape in enumerate(core_shapes):
        spec[f"core_state_{i}"] = Field(shape, torch.float32)  # [layers, E, hidden]
    return spec


def core_state(fields: dict[str, Tensor]) -> tuple[Tensor, ...]:
    """The LSTM state stored in a slot or batch (``core_state_0``, ``core_state_1``, ...)."""
    return tuple(
        fields[f"core_state_{i}"] for i in range(sum(k.startswith("core_state_") for k in fields))
    )


class RolloutBuffers:
    """``num_slots`` rollout slots in shared memory, one tensor per field: ``[num_slots, ...]``."""

    def __init__(self, spec: dict[str, Field], num_slots: int) -> None:
        self.num_slots = num_slots
        self.tensors: dict[str, Tensor] = {
            name: torch.zeros((num_slots, *f.shape), dtype=f.dtype).share_memory_()
            for name, f in spec.items()
        }

    def slot(self, index: int) -> dict[str, Tensor]:
        """Views of one slot (writes go straight to shared memory)."""
        return {name: t[index] for name, t in self.tensors.items()}

    def gather(self, indices: Sequence[int], device: torch.device) -> dict[str, Tensor]:
        """A learner batch from several slots: time-major fields become [T + 1, S * E, ...]."""
        index = torch.as_tensor(indices, dtype=torch.long)
        batch = {}
        for name, t in self.tensors.items():
            picked = t.index_select(0, index)  # [S, T + 1, E, ...], [S, layers, E, H] or [S, ...]
            if name in PER_SLOT:
                batch[name] = picked
                continue
            # [S, A, E, ...] -> [A, S, E, ...] -> [A, S * E, ...] where A is time or layers
            picked = picked.transpose(0, 1)
            picked = picked.reshape(picked.shape[0], -1, *picked.shape[3:])
            batch[name] = picked.to(device, non_blocking=True)
        return batch

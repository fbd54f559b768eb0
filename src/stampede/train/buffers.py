"""The rollout spec table, the shared-memory rollout buffers, and the time convention of a rollout.

An actor writes one *slot* per rollout: ``unroll_length + 1`` steps of its ``E`` environments,
so every tensor of a slot is time-major, ``[T + 1, E, ...]``. Step ``t`` of a slot holds x_t
with what led to it (the network's inputs at x_t, as in the paper) and what mu did there:

    obs[t]           the observation x_t
    reward[t]        r_{t-1}, the reward of the transition x_{t-1} -> x_t (unclipped)
    done[t]          that transition ended an episode, so x_t is the first observation of a new one
    last_action[t]   a_{t-1}, the action that led to x_t
    action[t]        a_t, the action the behaviour policy mu took at x_t
    logits[t]        mu's logits at x_t
    episode_return/episode_length[t]   the true game return/length where a whole game ended on
                     the transition into x_t (NaN / 0 elsewhere)
    task[t]          the task id of the env (index into ``env.games``; 0 in single-game runs),
                     the same at every step: an env slot plays one game for the whole run

The last step of a rollout is the first step of the next one, so consecutive slots overlap by one
step. ``core_state`` is the LSTM state before step 0.

The learner runs the network over all T + 1 steps, then takes T steps of the loss: step t uses
x_t's side (its outputs, a_t, mu's logits: rows ``[:-1]``) and the transition x_t -> x_{t+1}
(its reward and episode end: rows ``[1:]``), and V-trace bootstraps from V(x_T) (row ``-1``).
`transitions` makes that cut, once, with rlax's time-indexed names (``r_t``, ``discount_t``,
``v_t``) anchored at x_t as in IMPALA's eq. 1 (Espeholt et al. 2018, arXiv 1802.01561): rlax
anchors at the state a transition reaches, so its ``v_tm1``, ``v_t``, ``rho_tm1`` are our
``v_t``, ``v_tp1``, ``rho_t``.

Two fields are per slot, not per step: ``policy_version`` (the learner update the rollout started
from) and ``actor_time`` (the actor's seconds per stage of ``stampede.train.timing.ACTOR_STAGES``
since its previous slot, then its wall seconds).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

from stampede.envs import EnvSpec
from stampede.models import clip_reward
from stampede.train.timing import ACTOR_STAGES

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
        "task": Field(steps, torch.int64),
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


class Transitions(NamedTuple):
    """The T steps of the loss in a [T + 1, B] batch: x_t and the transition x_t -> x_{t+1}."""

    # x_t's side, rows [:-1]
    pi_logits_t: Tensor  # [T, B, A] the learner's policy pi at x_t (gradients flow)
    v_t: Tensor  # [T, B] V(x_t) (gradients flow)
    mu_logits_t: Tensor  # [T, B, A] the behaviour policy mu at x_t, as the actor acted
    a_t: Tensor  # [T, B] the action mu took at x_t
    # the transition's side, rows [1:]
    r_t: Tensor  # [T, B] its reward, clipped
    discount_t: Tensor  # [T, B] gamma, or 0 where it ended an episode
    # row -1
    bootstrap_value: Tensor  # [B] V(x_T), the value after the last step


def transitions(
    batch: dict[str, Tensor],
    pi_logits: Tensor,
    values: Tensor,
    *,
    discount: float,
    reward_clip: float,
) -> Transitions:
    """Cut a [T + 1, B] batch and the network's outputs over it (policy logits [T + 1, B, A],
    values [T + 1, B]) into the loss's T steps (see the module docstring)."""
    not_done_tp1 = (~batch["done"][1:]).to(values.dtype)  # [T + 1, B] -> [T, B]: shifted by one
    return Transitions(
        pi_logits_t=pi_logits[:-1],  # [T + 1, B, A] -> [T, B, A]
        v_t=values[:-1],  # [T + 1, B] -> [T, B]
        mu_logits_t=batch["logits"][:-1],
        a_t=batch["action"][:-1],
        r_t=clip_reward(batch["reward"][1:], reward_clip),  # [T + 1, B] -> [T, B]: shifted by one
        discount_t=discount * not_done_tp1,
        bootstrap_value=values[-1],  # [T + 1, B] -> [B]
    )


class RolloutBuffers:
    """``num_slots`` rollout slots in shared memory, one tensor per field: ``[num_slots, ...]``."""

    def __init__(self, spec: dict[str, Field], num_slots: int) -> None:
        self.num_slots = num_slots
        self.tensors: dict[str, Tensor] = {
            name: torch.zeros((num_slots, *f.shape), dtype=f.dtype).share_memory_()
            for name, f in spec.items()
        }
        self._staging: _CudaStaging | None = None  # made by the first gather to a GPU

    def __getstate__(self) -> dict[str, object]:
        # Actor processes receive the slots only: pinned memory and a CUDA stream stay here.
        return {**self.__dict__, "_staging": None}

    def slot(self, index: int) -> dict[str, Tensor]:
        """Views of one slot (writes go straight to shared memory)."""
        return {name: t[index] for name, t in self.tensors.items()}

    def gather(self, indices: Sequence[int], device: torch.device) -> dict[str, Tensor]:
        """A learner batch from several slots: time-major fields become [T + 1, S * E, ...].
        Ready to use on the calling thread's current stream (`gather_async` then `ready`)."""
        batch, copied = self.gather_async(indices, device)
        return ready(batch, copied)

    def gather_async(
        self, indices: Sequence[int], device: torch.device
    ) -> tuple[dict[str, Tensor], torch.cuda.Event | None]:
        """`gather`, returning before a copy to a GPU has finished: (batch, the copy's event, or
        None on the CPU). The thread that uses the batch calls ``ready(batch, event)`` first.

        To a GPU the slots go through pinned host memory (made at the first such gather) on a
        stream of their own, so the copy overlaps the learner's work; per-slot fields stay on
        the CPU, as on a CPU learner. The slots may be released as soon as this returns."""
        index = torch.as_tensor(indices, dtype=torch.long)
        if device.type != "cuda":
            return self._gather_on_host(index, device), None
        staging = self._staging
        if staging is None or staging.slots != len(indices) or staging.device != device:
            staging = self._staging = _CudaStaging(self.tensors, len(indices), device)
        return staging.gather(self.tensors, index)

    def _gather_on_host(self, index: Tensor, device: torch.device) -> dict[str, Tensor]:
        batch = {}
        for name, t in self.tensors.items():
            picked = t.index_select(0, index)  # [S, T + 1, E, ...], [S, layers, E, H] or [S, ...]
            if name in PER_SLOT:
                batch[name] = picked
                continue
            batch[name] = _slots_to_columns(picked).to(device, non_blocking=True)
        return batch


def _slots_to_columns(picked: Tensor) -> Tensor:
    """[S, A, E, ...] -> [A, S, E, ...] -> [A, S * E, ...] where A is time or layers."""
    picked = picked.transpose(0, 1)
    return picked.reshape(picked.shape[0], -1, *picked.shape[3:])


def ready(batch: dict[str, Tensor], copied: torch.cuda.Event | None) -> dict[str, Tensor]:
    """``batch`` made safe to use on this thread's current CUDA stream: the stream waits for the
    copy (``copied``, from `RolloutBuffers.gather_async`; None: nothing to wait for), and the
    caching allocator keeps each tensor's memory until that stream is done with it, not only the
    copy stream it was made on."""
    if copied is None:
        return batch
    stream = torch.cuda.current_stream(copied.device)
    stream.wait_event(copied)
    for t in batch.values():
        if t.is_cuda:
            t.record_stream(stream)
    return batch


class _CudaStaging:
    """Pinned host tensors of one batch's slots, [S, ...] per time-major field, and the stream
    that copies them to the GPU. Reused by every gather of S slots, once its last copy is done."""

    def __init__(self, tensors: dict[str, Tensor], slots: int, device: torch.device) -> None:
        self.slots, self.device = slots, device
        self.host = {
            name: torch.empty((slots, *t.shape[1:]), dtype=t.dtype, pin_memory=True)
            for name, t in tensors.items()
            if name not in PER_SLOT
        }
        self.stream = torch.cuda.Stream(device)
        self.copied: torch.cuda.Event | None = None  # the last copy out of `host`

    def gather(
        self, tensors: dict[str, Tensor], index: Tensor
    ) -> tuple[dict[str, Tensor], torch.cuda.Event]:
        if self.copied is not None:
            self.copied.synchronize()  # the last batch has left `host`: it may be overwritten
        batch = {name: tensors[name].index_select(0, index) for name in PER_SLOT}  # on the CPU
        for name, pinned in self.host.items():
            torch.index_select(tensors[name], 0, index, out=pinned)  # [S, T + 1, E, ...]
        with torch.cuda.stream(self.stream):
            for name, pinned in self.host.items():
                picked = pinned.to(self.device, non_blocking=True)
                batch[name] = _slots_to_columns(picked)  # the transpose on the GPU, this stream
            self.copied = torch.cuda.Event()
            self.copied.record(self.stream)
        return {name: batch[name] for name in tensors}, self.copied  # the fields in spec order

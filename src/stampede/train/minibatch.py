"""How the learner cuts a batch of B trajectories into minibatches (``optim.minibatches``):
random splits of the trajectories, each minibatch's columns of the batch, and the batch as it
arrived (its policy and V-trace returns, computed once and shared by every minibatch)."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from stampede.algo.vtrace import VTraceReturns
from stampede.train import buffers


class Arrival(NamedTuple):
    """The batch as the learner first saw it: its policy logits pi_logits_t [T, B, A], V-trace
    returns, and the shift and scale [2] its advantages are normalised with (their mean and std,
    or the targets' `stampede.algo.losses.return_range`; in PopArt's normalised space where
    PopArt is on), kept for the later steps on that batch (``optim.epochs > 1``)."""

    pi_logits_t: Tensor
    returns: VTraceReturns
    advantage_moments: Tensor

    def columns(self, index: Tensor) -> Arrival:
        """The same for the trajectories ``index`` of the batch ([T, B] -> [T, len(index)])."""
        r = self.returns
        return Arrival(
            self.pi_logits_t.index_select(1, index),
            r._replace(
                vs=r.vs.index_select(1, index),
                pg_advantages=r.pg_advantages.index_select(1, index),
                log_rhos=r.log_rhos.index_select(1, index),
            ),
            self.advantage_moments,  # the whole batch's: a minibatch may normalise with them
        )


def batch_tasks(batch: dict[str, Tensor]) -> Tensor:
    """The task id of every step, [T + 1, B] (all 0 for a batch without one: a single task)."""
    if "task" in batch:
        return batch["task"]
    return torch.zeros_like(batch["action"])


def columns_of(batch: dict[str, Tensor], index: Tensor) -> dict[str, Tensor]:
    """Trajectories ``index`` of a batch: time-major fields [T + 1, B, ...] and the LSTM state
    [layers, B, H] keep those columns; per-slot fields (``buffers.PER_SLOT``) stay whole."""
    return {
        name: t if name in buffers.PER_SLOT else t.index_select(1, index)
        for name, t in batch.items()
    }


def part_of(
    batch: dict[str, Tensor], arrival: Arrival | None, columns: Tensor | None
) -> tuple[dict[str, Tensor], Arrival | None]:
    """The trajectories ``columns`` of the batch and of its arrival (None: the whole batch)."""
    if columns is None:
        return batch, arrival
    return columns_of(batch, columns), arrival.columns(columns) if arrival is not None else None


def random_split(width: int, splits: int, device: torch.device) -> tuple[Tensor, ...]:
    """A random split of B = ``width`` trajectories into ``splits`` index tensors on ``device``.
    Drawn on the CPU (the learner's RNG stream, whatever the device); a CUDA copy goes through
    pinned memory, so it does not wait for the GPU."""
    perm = torch.randperm(width)
    if device.type == "cuda":
        perm = perm.pin_memory().to(device, non_blocking=True)
    return perm.chunk(splits)

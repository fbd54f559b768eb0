"""Several learners as one: torch.distributed set-up and the collectives the runner needs.

Every rank runs its own actors and learner. The learners start from identical parameters
(broadcast from rank 0) and average their gradients every update, so they stay identical: the
effective batch is ``world_size * runtime.batch_size`` trajectories. Rank and world come from
the usual environment variables (torchrun sets them); under SLURM, submitit's
``TorchDistributedEnvironment`` exports them from the job's tasks. NCCL on GPUs, gloo on CPUs.
Nothing here schedules processes: SLURM/submitit or torchrun start the ranks.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

_TIMEOUT = datetime.timedelta(minutes=10)  # a rank waiting longer than this for the others fails


@dataclass(frozen=True)
class Rank:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def _slurm_tasks() -> int:
    return int(os.environ.get("SLURM_NTASKS", "1")) if "SLURM_JOB_ID" in os.environ else 1


def setup(device_type: str) -> Rank:
    """Join the process group if this process is one of several ranks; else a single rank."""
    if "RANK" not in os.environ and _slurm_tasks() > 1 and "SUBMITIT_EXECUTOR" in os.environ:
        from submitit.helpers import TorchDistributedEnvironment

        TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size == 1:
        return Rank()
    rank = Rank(int(os.environ["RANK"]), world_size, int(os.environ.get("LOCAL_RANK", "0")))
    if not dist.is_initialized():
        backend = "nccl" if device_type == "cuda" else "gloo"
        dist.init_process_group(backend=backend, timeout=_TIMEOUT)
    return rank


def device_for(rank: Rank, device: torch.device) -> torch.device:
    """One GPU per rank on a node: cuda:<local_rank>."""
    if device.type == "cuda" and rank.distributed:
        return torch.device("cuda", rank.local_rank % torch.cuda.device_count())
    return device


def teardown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def average_gradients(grads: list[Tensor]) -> None:
    """All-reduce the gradients as one flat buffer and divide by the world size."""
    flat = torch.cat([g.reshape(-1) for g in grads])  # [sum of numels]
    dist.all_reduce(flat)
    flat /= dist.get_world_size()
    offset = 0
    for g in grads:
        g.copy_(flat[offset : offset + g.numel()].view_as(g))
        offset += g.numel()


def all_reduce_sum(tensor: Tensor) -> None:
    """Sum ``tensor`` over the ranks, in place (e.g. PopArt's per-task target sums)."""
    dist.all_reduce(tensor)


def broadcast_model(model: nn.Module) -> None:
    """Give every rank rank 0's parameters and buffers."""
    for tensor in [*model.parameters(), *model.buffers()]:
        dist.broadcast(tensor.data, src=0)


def any_rank(flag: bool, device: torch.device) -> bool:
    """True on every rank if ``flag`` is true on any rank (so all ranks stop at the same update)."""
    t = torch.tensor([1.0 if flag else 0.0], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


def broadcast_object(value: Any) -> Any:
    """Rank 0's ``value`` on every rank (e.g. the run directory under torchrun)."""
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]

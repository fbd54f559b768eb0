"""Several learners as one (stampede.train.distributed): a rank from the environment torchrun sets,
and the collectives the runner needs, run on two gloo ranks."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist

from stampede.train import distributed
from stampede.train.distributed import Rank

# One rank of a two-rank run: join through ``setup`` as torchrun's environment says, use every
# collective once, print what this rank ends with.
RANK_SCRIPT = """
import json, sys
import torch
import torch.distributed as dist
from stampede.models import MLP
from stampede.train import distributed

rank = distributed.setup("cpu")
r = rank.rank
grads = [torch.full((2, 3), float(r + 1)), torch.full((4,), 10.0 * (r + 1))]
distributed.average_gradients(grads)
total = torch.tensor([r + 1.0, 10.0])
distributed.all_reduce_sum(total)
torch.manual_seed(r)  # each rank starts from other parameters
model = MLP((4,), 2, hidden_sizes=[8])
before = [p.sum().item() for p in model.parameters()]
distributed.broadcast_model(model)
out = {
    "rank": [rank.rank, rank.world_size, rank.local_rank, rank.is_main, rank.distributed],
    "grads": [g.tolist() for g in grads],
    "sum": total.tolist(),
    "before": before,
    "after": [p.sum().item() for p in model.parameters()],
    "any_one": distributed.any_rank(r == 1, torch.device("cpu")),
    "any_none": distributed.any_rank(False, torch.device("cpu")),
    "object": distributed.broadcast_object(f"run dir of rank {r}"),
}
distributed.teardown()
out["initialized_after"] = dist.is_initialized()
print(json.dumps(out))
"""

TORCHRUN_KEYS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_ranks_average_their_gradients_and_start_from_rank_0s_parameters() -> None:
    port = free_port()
    procs = []
    for r in range(2):
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        env |= {
            "RANK": str(r),
            "WORLD_SIZE": "2",
            "LOCAL_RANK": str(r),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "OMP_NUM_THREADS": "1",
        }
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", RANK_SCRIPT],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    first, second = results
    assert first["rank"] == [0, 2, 0, True, True]
    assert second["rank"] == [1, 2, 1, False, True]
    for result in results:
        assert result["grads"] == [[[1.5] * 3] * 2, [15.0] * 4]  # the mean over the ranks
        assert result["sum"] == [3.0, 20.0]
        assert result["after"] == first["before"]  # rank 0's parameters everywhere
        assert (result["any_one"], result["any_none"]) == (True, False)
        assert result["object"] == "run dir of rank 0"
        assert result["initialized_after"] is False
    assert second["before"] != first["before"]


def test_without_torchrun_this_process_is_the_only_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in (*TORCHRUN_KEYS, "SLURM_JOB_ID"):
        monkeypatch.delenv(key, raising=False)
    assert distributed.setup("cpu") == Rank()
    assert not dist.is_initialized()
    rank = Rank()
    assert (rank.rank, rank.world_size, rank.is_main, rank.distributed) == (0, 1, True, False)
    distributed.teardown()  # nothing to leave: no error


def test_a_slurm_job_of_one_task_is_one_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in TORCHRUN_KEYS:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("SLURM_JOB_ID", "123")
    monkeypatch.setenv("SLURM_NTASKS", "1")
    monkeypatch.setenv("SUBMITIT_EXECUTOR", "slurm")
    assert distributed.setup("cpu") == Rank()
    assert not dist.is_initialized()


def test_a_rank_keeps_its_device_unless_it_shares_a_nodes_gpus() -> None:
    cpu = torch.device("cpu")
    assert distributed.device_for(Rank(1, 2, 1), cpu) == cpu
    single = torch.device("cuda", 0)
    assert distributed.device_for(Rank(), single) == single  # one rank: the configured GPU
    if torch.cuda.is_available():
        local = distributed.device_for(Rank(3, 4, 1), torch.device("cuda"))
        assert local == torch.device("cuda", 1 % torch.cuda.device_count())

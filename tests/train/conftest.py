"""Helpers of the central-inference tests: a small request table, a step's inputs, and the
server's loop in a thread of the test process (the same code as its own process runs).

The test files import these with ``from .conftest import ...``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import torch
import torch.multiprocessing as mp

from stampede.envs import EnvSpec
from stampede.models import ActorCritic
from stampede.train.inference import ServerSetup, _Server
from stampede.train.requests import RequestTable

OBS, A = 4, 3
SPEC = EnvSpec((OBS,), np.dtype(np.float32), A, 1)
SETUP = ServerSetup(
    device="cpu", reward_clip=1.0, max_batch=0, wait_s=0.0, threads=1, precision="fp32"
)


def table(model: ActorCritic, actors: int, envs: int, groups: int) -> RequestTable:
    core = [tuple(t.shape) for t in model.initial_state(1)]
    return RequestTable(mp.get_context("spawn"), SPEC, actors, envs, groups, core)


def inputs(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(obs, a_{t-1}, r_{t-1}, done) of n envs at some x_t."""
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(n, OBS, generator=g),
        torch.randint(0, A, (n,), generator=g),
        torch.randn(n, generator=g),
        torch.rand(n, generator=g) < 0.3,
    )


@contextmanager
def serving(server: _Server) -> Iterator[None]:
    """The server's loop in a thread, until the block ends."""
    stop = threading.Event()
    thread = threading.Thread(target=server.serve, args=(stop.is_set,), daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=10)
        assert not thread.is_alive()

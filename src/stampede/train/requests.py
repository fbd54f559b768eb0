"""The request table of central inference (``runtime.inference=central``, `stampede.train.
inference`): the shared memory between one learner's actors and its inference server.

The protocol, per group g (an actor's contiguous range of envs), is two counters and a
semaphore, and no lock: the actor writes its inputs, bumps ``requested[g]`` and posts ``ready``;
the server snapshots ``requested``, serves every g with ``requested[g] != answered[g]``, writes
the outputs, sets ``answered[g]`` to the snapshot and posts ``reply[g]``. An actor killed in
mid-request leaves its group pending; the server answers it (nobody reads the answer) and the
replacement actor, which reuses the rows, waits for the answer to its own request number, so a
stale reply is skipped. Nothing an actor holds can block the server or the other actors.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from stampede.envs import EnvSpec
from stampede.models import CoreState

# The server's loop: waiting for requests, gathering their rows, the forward pass, writing the
# answers back. Logged as time/inference/<stage>.
SERVER_STAGES = ("wait", "gather", "forward", "reply")
_COUNTERS = ("forwards", "requests", "observations")
POLL_S = 0.5  # how often a blocked actor or the server looks whether its parent is gone


def env_groups(num_envs: int, groups: int) -> list[tuple[int, int]]:
    """Split ``num_envs`` envs into ``groups`` contiguous ranges [lo, hi), as even as can be."""
    if not 1 <= groups <= num_envs:
        raise ValueError(f"cannot split {num_envs} envs into {groups} groups")
    bounds = np.linspace(0, num_envs, groups + 1).round().astype(int)
    return [(int(lo), int(hi)) for lo, hi in itertools.pairwise(bounds)]


class RequestTable:
    """The shared-memory request table of one learner's actors, and the counters between them.

    Row ``actor * E + e`` holds env e of that actor; request ``actor * G + g`` is group g of it.
    Built in the learner process before any actor starts; handed to the actors and the server
    as process arguments (tensors in shared memory, semaphores by inheritance).
    """

    def __init__(
        self,
        ctx: Any,
        env: EnvSpec,
        num_actors: int,
        num_envs: int,
        groups: int,
        core_shapes: Sequence[tuple[int, ...]],
    ) -> None:
        self.num_actors, self.num_envs = num_actors, num_envs
        self.groups = env_groups(num_envs, groups)
        rows = num_actors * num_envs
        obs_dtype = torch.uint8 if np.dtype(env.obs_dtype) == np.uint8 else torch.float32

        def shared(*shape: int, dtype: torch.dtype = torch.float32) -> Tensor:
            return torch.zeros(shape, dtype=dtype).share_memory_()

        # inputs at x_t, per row
        self.obs = shared(rows, *env.obs_shape, dtype=obs_dtype)
        self.last_action = shared(rows, dtype=torch.int64)
        self.reward = shared(rows)
        self.done = shared(rows, dtype=torch.bool)
        self.task = shared(rows, dtype=torch.int64)
        # [layers, rows, hidden] each: the LSTM state before x_t (in) and after it (out)
        self.core_in = [shared(shape[0], rows, *shape[2:]) for shape in core_shapes]
        self.core_out = [shared(shape[0], rows, *shape[2:]) for shape in core_shapes]
        # outputs, per row
        self.action = shared(rows, dtype=torch.int64)
        self.logits = shared(rows, env.num_actions)
        # per request (actor, group)
        requests = num_actors * len(self.groups)
        self.requested = shared(requests, dtype=torch.int64)
        self.answered = shared(requests, dtype=torch.int64)
        self.ready = ctx.Semaphore(0)  # one post per request: wakes the server
        self.reply = [ctx.Semaphore(0) for _ in range(requests)]  # one per request
        # the server's counters and time budget since it started (read by the runner)
        self.counters = shared(len(_COUNTERS), dtype=torch.int64)
        self.seconds = shared(len(SERVER_STAGES) + 1, dtype=torch.float64)  # stages, then wall

    def rows(self, request: int) -> slice:
        """The rows of request ``actor * G + g``."""
        actor, group = divmod(request, len(self.groups))
        lo, hi = self.groups[group]
        return slice(actor * self.num_envs + lo, actor * self.num_envs + hi)

    def client(self, actor_id: int) -> InferenceClient:
        return InferenceClient(self, actor_id)

    def stats(self) -> tuple[dict[str, int], np.ndarray, float]:
        """(counters, seconds per server stage, wall seconds) since the server started."""
        counters = dict(zip(_COUNTERS, self.counters.tolist(), strict=True))
        seconds = self.seconds.numpy().copy()
        return counters, seconds[:-1], float(seconds[-1])


class InferenceClient:
    """An actor's side of the request table: ``request`` a group's actions, later ``result``."""

    def __init__(self, table: RequestTable, actor_id: int) -> None:
        self.table, self.actor_id = table, actor_id
        self.parent = os.getppid()
        self._expected: dict[int, int] = {}

    def request(
        self,
        group: int,
        inputs: tuple[Tensor, Tensor, Tensor, Tensor],
        task: Tensor,
        core_state: CoreState,
    ) -> None:
        """Post the inputs at x_t of group ``group``: (obs, a_{t-1}, r_{t-1}, done), each [n, ...],
        the envs' task ids [n] and the LSTM state before x_t ([layers, n, H] each, or ())."""
        t, r = self.table, self.actor_id * len(self.table.groups) + group
        rows = t.rows(r)
        obs, last_action, reward, done = inputs
        t.obs[rows].copy_(obs)
        t.last_action[rows].copy_(last_action)
        t.reward[rows].copy_(reward)
        t.done[rows].copy_(done)
        t.task[rows].copy_(task)
        for shared, state in zip(t.core_in, core_state, strict=True):
            shared[:, rows].copy_(state)
        number = int(t.requested[r]) + 1
        t.requested[r] = number  # after the inputs: the server reads them once it sees this
        self._expected[group] = number
        t.ready.release()

    def result(self, group: int) -> tuple[Tensor, Tensor, CoreState] | None:
        """(a_t [n], logits [n, A], LSTM state after x_t) of the group's last request, copied out
        of the table; None if the learner process is gone (the actor then stops)."""
        t, r = self.table, self.actor_id * len(self.table.groups) + group
        while int(t.answered[r]) != self._expected[group]:  # skip stale replies
            if not t.reply[r].acquire(timeout=POLL_S) and os.getppid() != self.parent:
                return None
        rows = t.rows(r)
        core = tuple(shared[:, rows].clone() for shared in t.core_out)
        return t.action[rows].clone(), t.logits[rows].clone(), core

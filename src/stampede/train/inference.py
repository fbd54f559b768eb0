"""Central batched inference: one server process per learner acts for all of its actors.

With ``runtime.inference=central`` the actors hold no model (and, on a GPU node, open no CUDA
context). Each actor steps its environments in groups (two halves by default) and, for each
group, writes the policy's inputs at x_t into its rows of a shared-memory *request table* and
posts a request; the server gathers every waiting group's rows into one forward pass on the
learner's device, writes each row's action, logits and LSTM state back into the table, and
answers each group. While one half of an actor waits for its actions, the actor steps the other
half, so the round trip is hidden behind env stepping. This is the central placement of SEED RL
(Espeholt et al. 2020) and TorchBeast's PolyBeast (Kuttler et al. 2019), here over shared memory:
no tensor is pickled per step.

The protocol, per group g (an actor's contiguous range of envs), is two counters and a
semaphore, and no lock: the actor writes its inputs, bumps ``requested[g]`` and posts ``ready``;
the server snapshots ``requested``, serves every g with ``requested[g] != answered[g]``, writes
the outputs, sets ``answered[g]`` to the snapshot and posts ``reply[g]``. An actor killed in
mid-request leaves its group pending; the server answers it (nobody reads the answer) and the
replacement actor, which reuses the rows, waits for the answer to its own request number, so a
stale reply is skipped. Nothing an actor holds can block the server or the other actors.

The LSTM state travels with the request (inputs and outputs of each row), so the server keeps no
per-actor state and a restarted actor or server needs no hand-over; the model zeroes it at an
episode start (``done``), as in the actors' own inference.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from stampede.envs import EnvSpec
from stampede.models import ActorCritic, CoreState, policy_step
from stampede.train.timing import StageClock, fractions

log = logging.getLogger("stampede")

# The server's loop: waiting for requests, gathering their rows, the forward pass, writing the
# answers back. Logged as time/inference/<stage>.
SERVER_STAGES = ("wait", "gather", "forward", "reply")
_COUNTERS = ("forwards", "requests", "observations")
_POLL_S = 0.5  # how often a blocked actor or the server looks whether its parent is gone


def env_groups(num_envs: int, groups: int) -> list[tuple[int, int]]:
    """Split ``num_envs`` envs into ``groups`` contiguous ranges [lo, hi), as even as can be."""
    if not 1 <= groups <= num_envs:
        raise ValueError(f"cannot split {num_envs} envs into {groups} groups")
    bounds = np.linspace(0, num_envs, groups + 1).round().astype(int)
    return [(int(lo), int(hi)) for lo, hi in itertools.pairwise(bounds)]


@dataclass(frozen=True)
class ServerSetup:
    """What the server process needs; picklable."""

    device: str
    reward_clip: float
    max_batch: int  # most observations per forward; 0 = every waiting one
    wait_s: float  # longest wait for more requests once one is waiting
    threads: int
    precision: str  # fp32 | bf16 (autocast)


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
            if not t.reply[r].acquire(timeout=_POLL_S) and os.getppid() != self.parent:
                return None
        rows = t.rows(r)
        core = tuple(shared[:, rows].clone() for shared in t.core_out)
        return t.action[rows].clone(), t.logits[rows].clone(), core


def run_server(setup: ServerSetup, model: ActorCritic, table: RequestTable) -> None:
    """Process entry point: serve the table's requests with ``model`` (the learner's published
    policy: shared CPU memory, or its GPU tensors through CUDA IPC) until the parent is gone or
    sends SIGTERM."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the runner owns Ctrl-C
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    torch.set_num_threads(setup.threads)
    _Server(setup, model, table).serve(lambda: bool(stop))


class _Server:
    def __init__(self, setup: ServerSetup, model: ActorCritic, table: RequestTable) -> None:
        self.setup, self.model, self.table = setup, model, table
        self.device = torch.device(setup.device)
        self.clock = StageClock(SERVER_STAGES)
        self.started = time.perf_counter()
        self.parent = os.getppid()
        # rows of every request, as index tensors (gathered once per forward)
        self.request_rows = [
            torch.arange(table.num_envs * table.num_actors)[table.rows(r)]
            for r in range(len(table.reply))
        ]
        table.seconds.zero_()
        table.counters.zero_()

    def serve(self, stopping: Any) -> None:
        while not stopping() and os.getppid() == self.parent:
            with self.clock.stage("wait"):
                seen, pending = self._wait()
            if pending.size:
                self._answer(seen, pending)
            self._publish_time()

    def _pending(self) -> tuple[Tensor, np.ndarray]:
        seen = self.table.requested.clone()  # a snapshot: later requests wait for the next round
        return seen, np.flatnonzero((seen != self.table.answered).numpy())

    def _wait(self) -> tuple[Tensor, np.ndarray]:
        """The requests to serve now: every waiting one, after waiting up to ``wait_s`` for more
        unless all requests are waiting or the batch is full."""
        t = self.table
        seen, pending = self._pending()
        if not pending.size:
            t.ready.acquire(timeout=_POLL_S)
            seen, pending = self._pending()
            if not pending.size:
                return seen, pending
        deadline = time.perf_counter() + self.setup.wait_s
        while len(pending) < len(t.reply) and not self._full(pending):
            left = deadline - time.perf_counter()
            if left <= 0 or not t.ready.acquire(timeout=left):
                break
            seen, pending = self._pending()
        return seen, pending

    def _full(self, pending: np.ndarray) -> bool:
        limit = self.setup.max_batch
        return limit > 0 and sum(len(self.request_rows[r]) for r in pending) >= limit

    def _answer(self, seen: Tensor, pending: np.ndarray) -> None:
        t, limit = self.table, self.setup.max_batch
        if limit:  # the oldest requests first would need timestamps; in order is fair enough
            pending = pending[np.cumsum([len(self.request_rows[r]) for r in pending]) <= limit]
            pending = pending if pending.size else np.asarray(pending[:1])
        with self.clock.stage("gather"):
            rows = torch.cat([self.request_rows[r] for r in pending])  # [B]
            core = tuple(shared.index_select(1, rows) for shared in t.core_in)  # [layers, B, H]
            inputs = (
                t.obs.index_select(0, rows),
                t.last_action.index_select(0, rows),
                t.reward.index_select(0, rows),
                t.done.index_select(0, rows),
            )
            task = t.task.index_select(0, rows)
        with self.clock.stage("forward"), self._autocast():
            core = tuple(c.to(self.device) for c in core)
            step = policy_step(
                self.model,
                *inputs,
                core,
                device=self.device,
                reward_clip=self.setup.reward_clip,
                task=task,
            )
        with self.clock.stage("reply"):
            t.action.index_copy_(0, rows, step.action)
            t.logits.index_copy_(0, rows, step.logits.float())
            for shared, state in zip(t.core_out, step.core_state, strict=True):
                shared.index_copy_(1, rows, state.float().cpu())
            for r in pending.tolist():
                t.answered[r] = seen[r]
                t.reply[r].release()
            t.counters += torch.tensor([1, len(pending), len(rows)])

    def _autocast(self) -> Any:
        if self.setup.precision == "bf16":
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def _publish_time(self) -> None:
        seconds, _ = self.clock.lap()
        self.table.seconds[:-1] += torch.from_numpy(seconds)
        self.table.seconds[-1] = time.perf_counter() - self.started


class InferenceServer:
    """The server process of one learner: start, supervise (a dead server is replaced and
    answers the waiting requests), stop."""

    def __init__(
        self, ctx: Any, setup: ServerSetup, model: ActorCritic, table: RequestTable
    ) -> None:
        self.ctx, self.setup, self.model, self.table = ctx, setup, model, table
        self.process: Any = None
        self.restarts = 0
        self._last = table.stats()  # what `metrics` last reported

    def start(self) -> None:
        self.process = self.ctx.Process(
            target=run_server,
            name="inference-server",
            daemon=True,
            args=(self.setup, self.model, self.table),
        )
        self.process.start()
        log.info("inference server started (pid %d)", self.process.pid)

    def dead(self) -> str | None:
        """Why the server is gone (and has been joined), or None while it runs."""
        if self.process.exitcode is None:
            return None
        self.process.join()
        return f"inference server died with exit code {self.process.exitcode}"

    def restart(self) -> None:
        self.restarts += 1
        self.start()

    def metrics(self) -> dict[str, float]:
        """Since the last call: ``time/inference/<stage>`` (fractions of the server's wall
        time), ``inference/batch_mean`` (observations per forward pass) and
        ``inference/requests_per_forward``. After a restart, the new server's figures alone."""
        counters, seconds, wall = now = self.table.stats()
        last_counters, last_seconds, last_wall = self._last
        if wall < last_wall:  # a new server counts from zero
            last_counters, last_seconds, last_wall = dict.fromkeys(counters, 0), 0 * seconds, 0.0
        self._last = now
        done = {k: counters[k] - last_counters[k] for k in counters}
        line = fractions("time/inference", SERVER_STAGES, seconds - last_seconds, wall - last_wall)
        if done["forwards"]:
            line["inference/batch_mean"] = done["observations"] / done["forwards"]
            line["inference/requests_per_forward"] = done["requests"] / done["forwards"]
        return line

    def stop(self) -> None:
        if self.process is None or not self.process.is_alive():
            return
        self.process.terminate()
        self.process.join(timeout=5.0)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()

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

The request table and its protocol: ``stampede.train.requests``.

The LSTM state travels with the request (inputs and outputs of each row), so the server keeps no
per-actor state and a restarted actor or server needs no hand-over; the model zeroes it at an
episode start (``done``), as in the actors' own inference.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from stampede.models import ActorCritic, policy_step, precision_context
from stampede.train.requests import POLL_S, SERVER_STAGES, RequestTable
from stampede.train.timing import StageClock, fractions

log = logging.getLogger("stampede")


@dataclass(frozen=True)
class ServerSetup:
    """What the server process needs; picklable."""

    device: str
    reward_clip: float
    max_batch: int  # most observations per forward; 0 = every waiting one
    wait_s: float  # longest wait for more requests once one is waiting
    threads: int
    precision: str  # fp32 | bf16 (autocast)


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
            t.ready.acquire(timeout=POLL_S)
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
        with self.clock.stage("forward"), precision_context(self.setup.precision, self.device):
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

"""The actor processes of one learner: start, supervise, restart, stop.

A component failure should cost seconds, not the run. An actor that raises, segfaults, is
killed, or holds a rollout slot longer than ``runtime.actor_timeout_s`` (hung) is replaced by a
fresh process with fresh environments and new seeds, while the learner keeps training on the
other actors' rollouts. The slot it was filling is put back on the free queue, so a
half-written rollout is never learned from. More than ``runtime.max_actor_restarts`` restarts
within ``runtime.actor_restart_window_s`` stop the run with the last traceback.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import torch

from stampede.actor import ActorSetup, Channels, run_actor
from stampede.buffers import RolloutBuffers
from stampede.models import ActorCritic

log = logging.getLogger("stampede")

_POLL_S = 0.5


class ActorFailure(RuntimeError):
    """Actors failed more often than allowed; the message carries the last traceback."""


class ActorPool:
    def __init__(
        self,
        ctx: Any,
        setups: list[ActorSetup],
        model: ActorCritic,
        buffers: RolloutBuffers,
        version: int,
        *,
        max_restarts: int,
        restart_window_s: float,
        timeout_s: float,
    ) -> None:
        n = len(setups)
        self.ctx, self.setups, self.model, self.buffers = ctx, setups, model, buffers
        self.max_restarts, self.window_s, self.timeout_s = max_restarts, restart_window_s, timeout_s
        self.channels = Channels(
            free_queue=ctx.Queue(),
            full_queue=ctx.Queue(),
            errors=ctx.Queue(),
            version=ctx.Value("q", version, lock=False),
            stop=ctx.Event(),
            holding=torch.full((n,), -1, dtype=torch.int64).share_memory_(),
            taken_at=torch.zeros(n, dtype=torch.float64).share_memory_(),
        )
        for index in range(buffers.num_slots):
            self.channels.free_queue.put(index)
        self.processes: list[Any] = [None] * n
        self.restarts = 0
        self.recent: deque[float] = deque()
        self.tracebacks: dict[int, str] = {}
        self.last_check = time.monotonic()

    def start(self) -> None:
        for actor_id in range(len(self.setups)):
            self._spawn(actor_id)

    def _spawn(self, actor_id: int) -> None:
        process = self.ctx.Process(
            target=run_actor,
            name=f"actor-{actor_id}",
            daemon=True,
            args=(self.setups[actor_id], self.model, self.buffers, self.channels),
        )
        process.start()
        self.processes[actor_id] = process

    # ------------------------------------------------------------------ slots

    def next_full_slot(self, stopping: Callable[[], bool]) -> int | None:
        """The next filled slot, supervising the actors while waiting; None once stopping."""
        while not stopping():
            if time.monotonic() - self.last_check >= _POLL_S:
                self.supervise()
            try:
                return int(self.channels.full_queue.get(timeout=_POLL_S))
            except queue.Empty:
                continue
        return None

    def release(self, index: int) -> None:
        self.channels.free_queue.put(index)

    def set_version(self, version: int) -> None:
        self.channels.version.value = version

    # -------------------------------------------------------------- supervision

    def supervise(self) -> None:
        """Restart dead or hung actors; raise ActorFailure past the restart budget."""
        self.last_check = time.monotonic()
        self._drain_errors()
        now = time.time()
        for actor_id, process in enumerate(self.processes):
            taken = float(self.channels.taken_at[actor_id])
            hung = int(self.channels.holding[actor_id]) >= 0 and now - taken > self.timeout_s
            if process.exitcode is None and not hung:
                continue
            if hung:
                self.tracebacks.setdefault(
                    actor_id,
                    f"actor {actor_id} hung: no rollout for {now - taken:.0f} s "
                    f"(runtime.actor_timeout_s={self.timeout_s:g})",
                )
                process.kill()
            process.join()
            time.sleep(0.05)  # a dying actor's traceback may still be in flight
            self._drain_errors()
            reason = self.tracebacks.pop(
                actor_id, f"actor {actor_id} died with exit code {process.exitcode}"
            )
            self._replace(actor_id, reason)

    def _drain_errors(self) -> None:
        while True:
            try:
                actor_id, trace = self.channels.errors.get_nowait()
            except queue.Empty:
                return
            self.tracebacks[actor_id] = trace

    def _replace(self, actor_id: int, reason: str) -> None:
        held = int(self.channels.holding[actor_id])
        if held >= 0:  # its half-written rollout goes back unused
            self.channels.holding[actor_id] = -1
            self.channels.free_queue.put(held)
        now = time.monotonic()
        self.recent.append(now)
        while self.recent and now - self.recent[0] > self.window_s:
            self.recent.popleft()
        if len(self.recent) > self.max_restarts:
            raise ActorFailure(
                f"actor {actor_id} failed ({len(self.recent)} failures within "
                f"{self.window_s:g} s, runtime.max_actor_restarts={self.max_restarts}):\n{reason}"
            )
        self.restarts += 1
        log.warning(
            "restarting actor %d (restart %d): %s",
            actor_id,
            self.restarts,
            reason.strip().splitlines()[-1],
        )
        setup = self.setups[actor_id]
        self.setups[actor_id] = dataclasses.replace(setup, restart=setup.restart + 1)
        self._spawn(actor_id)

    # -------------------------------------------------------------------- stop

    def stop(self) -> None:
        """Ask every actor to stop, wait a little, then kill stragglers."""
        self.channels.stop.set()
        for _ in self.processes:
            self.channels.free_queue.put(None)
        deadline = time.time() + 5.0
        for process in self.processes:
            if process is None:
                continue
            process.join(timeout=max(0.0, deadline - time.time()))
            if process.is_alive():
                process.kill()
                process.join()

"""The actor processes of one learner: start, feed with free slots, supervise, restart, stop.

A component failure should cost seconds, not the run. An actor that raises, segfaults, is
killed, or holds a rollout slot longer than ``runtime.actor_timeout_s`` (hung) is replaced by a
fresh process with fresh environments and new seeds while the learner keeps training on the
other actors' rollouts. The slots it was given are put back with the free ones, so a
half-written rollout is never learned from. More than ``runtime.max_actor_restarts`` failures
within ``runtime.actor_restart_window_s`` stop the run with the last traceback.

Each actor talks to the pool over its own pipe (see ``stampede.train.actor.run_actor``); the pool
hands out free slots, at most ``SLOTS_PER_ACTOR`` at a time per actor, so it always knows which
slots a failed actor held.

In lock-step (``runtime.deterministic``) the pool hands out only the slots the learner allows
(one batch after each published update), to the actors in turn, and numbers them, so that a
batch is learned from in the order its slots were handed out, whatever order they come back in.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections import deque
from collections.abc import Callable
from multiprocessing.connection import wait
from typing import Any

from stampede.errors import RunFailure
from stampede.models import ActorCritic
from stampede.train.actor import ActorSetup, run_actor
from stampede.train.buffers import RolloutBuffers
from stampede.train.inference import InferenceServer
from stampede.train.requests import RequestTable

log = logging.getLogger("stampede")

SLOTS_PER_ACTOR = 2  # one being filled, one queued, so an actor never waits for the learner
_POLL_S = 0.5


class ActorFailure(RunFailure):
    """Actors failed more often than allowed; the message carries the last traceback."""


@dataclasses.dataclass
class _Actor:
    process: Any
    conn: Any  # the pool's end of this actor's pipe
    assigned: deque[int]  # slots given to it, oldest (being filled) first
    since: float  # when its oldest assigned slot started to be filled, or it was (re)started
    error: str | None = None  # the traceback it sent, if it failed


class ActorPool:
    """The actor processes of one learner and the rollout slots they hold, and the inference
    server if they use one. Not thread-safe: one thread talks to the actors' pipes at a time (the
    runner's batch thread, then, once that has ended, the thread that calls stop()).

    ``policy`` is what every actor is given to act with: the published model, or the request
    table of ``server`` (``runtime.inference=central``), which the pool starts first, supervises
    with the actors (a dead server is replaced, within the same restart budget) and stops last.
    """

    def __init__(
        self,
        ctx: Any,
        setups: list[ActorSetup],
        policy: ActorCritic | RequestTable | None,
        buffers: RolloutBuffers,
        version: int,
        *,
        max_restarts: int,
        restart_window_s: float,
        timeout_s: float,
        server: InferenceServer | None = None,
        lockstep: bool = False,
    ) -> None:
        self.ctx, self.setups, self.policy, self.buffers = ctx, setups, policy, buffers
        self.server, self.lockstep = server, lockstep
        self.allowance = 0  # lock-step: slots that may still be handed out
        self.handed: dict[int, int] = {}  # lock-step: slot -> its place in the hand-out order
        self._handed_count = 0
        self._turn = 0  # lock-step: the actor whose turn it is for the next slot
        self.max_restarts, self.window_s, self.timeout_s = max_restarts, restart_window_s, timeout_s
        self.version = ctx.Value("q", version, lock=False)
        self.free: deque[int] = deque(range(buffers.num_slots))
        self.actors: list[_Actor] = []
        self.restarts = 0
        self.recent: deque[float] = deque()
        self.last_check = time.monotonic()

    def start(self) -> None:
        if self.server is not None:
            self.server.start()
        for actor_id in range(len(self.setups)):
            self.actors.append(self._spawn(actor_id))
        self._hand_out()

    def _spawn(self, actor_id: int) -> _Actor:
        ours, theirs = self.ctx.Pipe(duplex=True)
        process = self.ctx.Process(
            target=run_actor,
            name=f"actor-{actor_id}",
            daemon=True,
            args=(self.setups[actor_id], self.policy, self.buffers, theirs, self.version),
        )
        process.start()
        theirs.close()
        return _Actor(process, ours, deque(), time.monotonic())

    def _hand_out(self) -> None:
        """Give free slots to actors with fewer than SLOTS_PER_ACTOR: least loaded first, or in
        lock-step the actors in turn and no more than the learner allows."""
        while self.free and (not self.lockstep or self.allowance > 0):
            actor = self._next_actor()
            if actor is None:
                return
            index = self.free.popleft()
            if self.lockstep:
                self.allowance -= 1
                self.handed[index] = self._handed_count
                self._handed_count += 1
            if not actor.assigned:
                actor.since = time.monotonic()
            actor.assigned.append(index)
            try:
                actor.conn.send(index)
            except OSError:  # it died: supervise() reclaims its slots
                continue

    def _next_actor(self) -> _Actor | None:
        """The actor the next free slot goes to; None when every actor holds SLOTS_PER_ACTOR."""
        if not self.lockstep:
            actor = min(self.actors, key=lambda a: len(a.assigned))
            return actor if len(actor.assigned) < SLOTS_PER_ACTOR else None
        for k in range(len(self.actors)):
            actor = self.actors[(self._turn + k) % len(self.actors)]
            if len(actor.assigned) < SLOTS_PER_ACTOR:
                self._turn = (self._turn + k + 1) % len(self.actors)
                return actor
        return None

    def allow(self, slots: int) -> None:
        """Lock-step: the learner has published its update; hand out the next batch's slots."""
        self.allowance += slots
        self._hand_out()

    def in_hand_out_order(self, indices: list[int]) -> list[int]:
        """Lock-step: ``indices`` in the order they were handed out."""
        return sorted(indices, key=self.handed.__getitem__)

    # ------------------------------------------------------------------ slots

    def next_full_slot(self, stopping: Callable[[], bool]) -> int | None:
        """The next filled slot, supervising the actors while waiting; None once stopping."""
        while not stopping():
            if time.monotonic() - self.last_check >= _POLL_S:
                self.supervise()
            ready = wait([a.conn for a in self.actors], timeout=_POLL_S)
            # Longest-waiting first: in list order, a learner-bound run would only ever read
            # actor 0, and the others' full slots would wait until they were killed as hung.
            for actor in sorted((a for a in self.actors if a.conn in ready), key=lambda a: a.since):
                try:
                    kind, payload = actor.conn.recv()
                except (EOFError, OSError):
                    continue  # the process died; supervise() replaces it
                if kind == "error":
                    actor.error = str(payload)
                    continue
                actor.assigned.remove(payload)
                actor.since = time.monotonic()
                # Refill now, not at release: a batch of more slots than the actors hold at
                # once (one actor, batch_size / envs_per_actor > SLOTS_PER_ACTOR) would wait
                # forever for slots the actors were never given.
                self._hand_out()
                return int(payload)
        return None

    def release(self, index: int) -> None:
        """A slot the learner has copied out is free again."""
        self.free.append(index)
        self._hand_out()

    def set_version(self, version: int) -> None:
        self.version.value = version

    def inference_metrics(self) -> dict[str, float]:
        """The inference server's figures since the last call (none without a server)."""
        return self.server.metrics() if self.server is not None else {}

    # -------------------------------------------------------------- supervision

    def supervise(self) -> None:
        """Replace dead or hung actors and a dead server; raise ActorFailure past the restart
        budget."""
        self.last_check = time.monotonic()
        if self.server is not None and (why := self.server.dead()):
            self._count_failure("the inference server", why)
            log.warning("restarting the inference server: %s", why)
            self.server.restart()
        for actor_id, actor in enumerate(self.actors):
            hung = bool(actor.assigned) and self.last_check - actor.since > self.timeout_s
            if actor.process.exitcode is None and not hung:
                continue
            if hung:
                reason = (
                    f"actor {actor_id} hung: no rollout for {self.last_check - actor.since:.0f}"
                    f" s (runtime.actor_timeout_s={self.timeout_s:g})"
                )
                actor.process.kill()
            actor.process.join()
            reason = self._last_words(actor) or (
                reason if hung else f"actor {actor_id} died with exit code {actor.process.exitcode}"
            )
            self._replace(actor_id, reason)

    @staticmethod
    def _last_words(actor: _Actor) -> str | None:
        """The traceback a failing actor sent before it exited, if any."""
        error = actor.error
        try:
            while actor.conn.poll():
                kind, payload = actor.conn.recv()
                if kind == "error":
                    error = payload
        except (EOFError, OSError):
            pass
        return error

    def _replace(self, actor_id: int, reason: str) -> None:
        old = self.actors[actor_id]
        old.conn.close()
        self.free.extend(old.assigned)  # its half-written rollouts go back unused
        if self.lockstep:  # to be handed out again in this round
            self.allowance += len(old.assigned)
        self._count_failure(f"actor {actor_id}", reason)
        self.restarts += 1
        log.warning(
            "restarting actor %d (restart %d): %s",
            actor_id,
            self.restarts,
            reason.strip().splitlines()[-1],
        )
        setup = self.setups[actor_id]
        self.setups[actor_id] = dataclasses.replace(setup, restart=setup.restart + 1)
        self.actors[actor_id] = self._spawn(actor_id)
        self._hand_out()

    def _count_failure(self, who: str, reason: str) -> None:
        """Count a failure; past ``max_restarts`` within the window, stop the run."""
        now = time.monotonic()
        self.recent.append(now)
        while self.recent and now - self.recent[0] > self.window_s:
            self.recent.popleft()
        if len(self.recent) > self.max_restarts:
            raise ActorFailure(
                f"{who} failed ({len(self.recent)} failures within "
                f"{self.window_s:g} s, runtime.max_actor_restarts={self.max_restarts}):\n{reason}"
            )

    # -------------------------------------------------------------------- stop

    def stop(self) -> None:
        """Tell every actor to stop, wait a little, then kill stragglers."""
        for actor in self.actors:
            with contextlib.suppress(OSError):
                actor.conn.send(None)
        deadline = time.time() + 5.0
        for actor in self.actors:
            actor.process.join(timeout=max(0.0, deadline - time.time()))
            if actor.process.is_alive():
                actor.process.kill()
                actor.process.join()
            actor.conn.close()
        if self.server is not None:
            self.server.stop()

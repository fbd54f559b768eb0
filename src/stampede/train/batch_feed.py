"""The learner's batch feed: a thread that turns full rollout slots into learner batches.

It takes ``slots_per_batch`` full slots from the actor pool, gathers them into one batch on the
learner's device (``RolloutBuffers.gather``), hands the slots back to the actors and puts the
batch on a one-place queue, so the next batch is gathered while the learner works on this one.
With ``prefetch=False`` it gathers only when the learner asks (``request``), after publishing its
last update: fresher data, a lower policy lag, for a short wait. An exception in the thread is
raised in the learner's thread by ``get``. In lock-step (``runtime.deterministic``) each request
lets the pool hand out one batch's slots, and the batch holds them in the order they were handed
out.

On a GPU the batch's copy is still running when the thread queues it (`RolloutBuffers.
gather_async`); ``get`` makes the learner's stream wait for it, so neither thread waits for the
copy on the host.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from typing import Any

import torch

from stampede.train.buffers import RolloutBuffers, ready
from stampede.train.pool import ActorPool

log = logging.getLogger("stampede")

_STOPPED = "stopped"  # the thread's last item
_JOIN_S = 10.0  # how long stop() waits for the thread (a poll, a gather, a respawn)


class BatchFeed:
    """Learner batches gathered in a thread; ``stopping`` (shared with the runner) ends it."""

    def __init__(
        self,
        pool: ActorPool,
        buffers: RolloutBuffers,
        slots_per_batch: int,
        device: torch.device,
        prefetch: bool,
        stopping: threading.Event,
    ) -> None:
        self.pool, self.buffers, self.device = pool, buffers, device
        self.slots_per_batch, self.prefetch = slots_per_batch, prefetch
        self.stopping = stopping
        self._batches: queue.Queue[Any] = queue.Queue(maxsize=1)
        self._wanted = threading.Semaphore(1)  # prefetch=False: gather on request
        self.thread = threading.Thread(target=self._run, name="batch-feed", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def get(self) -> dict[str, torch.Tensor] | None:
        """The next batch (waits for it); None once the feed has stopped."""
        item = self._batches.get()
        if isinstance(item, BaseException):
            raise item
        if item is _STOPPED:
            return None
        batch, copied = item
        return ready(batch, copied)  # on this thread's stream: after the copy

    def request(self) -> None:
        """The learner has published its update: with ``prefetch=False``, gather the next batch."""
        if not self.prefetch:
            self._wanted.release()

    def stop(self) -> None:
        """End the thread before the pool stops: it may be inside the pool (handing slots to the
        actors over the pipes ``ActorPool.stop`` uses), blocked on the full queue, or waiting for
        a request. Stop, unblock, join; the batches it still gathered are dropped."""
        self.stopping.set()
        self._wanted.release()
        deadline = time.monotonic() + _JOIN_S
        while self.thread.is_alive() and time.monotonic() < deadline:
            with contextlib.suppress(queue.Empty):
                self._batches.get_nowait()
            self.thread.join(timeout=0.05)
        if self.thread.is_alive():
            log.warning("the batch thread did not end within %g s; stopping the actors", _JOIN_S)

    def _run(self) -> None:
        stopping = self.stopping.is_set
        try:
            while not stopping():
                if not self.prefetch and not self._wanted.acquire(timeout=0.5):
                    continue  # no request yet: look at stopping() again
                if self.pool.lockstep:
                    self.pool.allow(self.slots_per_batch)
                indices = []
                for _ in range(self.slots_per_batch):
                    index = self.pool.next_full_slot(stopping)
                    if index is None:
                        break
                    indices.append(index)
                if len(indices) < self.slots_per_batch:
                    break
                if self.pool.lockstep:
                    indices = self.pool.in_hand_out_order(indices)
                batch, copied = self.buffers.gather_async(indices, self.device)
                for index in indices:  # the slots are copied out (pinned or on the CPU)
                    self.pool.release(index)
                self._batches.put((batch, copied))
            self._batches.put(_STOPPED)  # wakes the learner if it is waiting for a batch
        except BaseException as error:  # handed to the learner's thread, which re-raises it
            self._batches.put(error)

"""The learner's batch feed (stampede.train.batch_feed): batches of the slots the pool hands over,
in that order, the slots handed back; prefetching or gathering on request; an error raised in the
learner's thread; and a stop that ends the thread wherever it waits."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator

import numpy as np
import pytest
import torch

from stampede.envs import EnvSpec
from stampede.train.batch_feed import BatchFeed
from stampede.train.buffers import RolloutBuffers, rollout_spec

T, E, SLOTS = 2, 2, 4
SPEC = EnvSpec((3,), np.dtype(np.float32), 2, 1)


class FakePool:
    """Stands in for the actor pool: full slots in the order ``order`` gives (None: the pool is
    stopping), or ``error`` raised; records the slots taken and handed back."""

    lockstep = False

    def __init__(self, order: Iterator[int | None], error: Exception | None = None) -> None:
        self.order, self.error = order, error
        self.taken: list[int] = []
        self.released: list[int] = []

    def next_full_slot(self, stopping: Callable[[], bool]) -> int | None:
        if self.error is not None:
            raise self.error
        index = None if stopping() else next(self.order)
        if index is not None:
            self.taken.append(index)
        return index

    def release(self, index: int) -> None:
        self.released.append(index)


def marked_buffers() -> RolloutBuffers:
    """Slots whose rewards are their index + 1, so a batch column names its slot."""
    buffers = RolloutBuffers(rollout_spec(SPEC, T, E, []), SLOTS)
    for s in range(SLOTS):
        buffers.slot(s)["reward"].fill_(s + 1)
    return buffers


def feed(pool: FakePool, prefetch: bool = True) -> BatchFeed:
    return BatchFeed(pool, marked_buffers(), 2, torch.device("cpu"), prefetch, threading.Event())


def slots_of(batch: dict[str, torch.Tensor]) -> list[int]:
    """The slot of each env column of a batch ([T + 1, slots * E])."""
    return [int(r) - 1 for r in batch["reward"][0]]


def wait_until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_batches_hold_the_slots_in_the_order_handed_over_and_give_them_back() -> None:
    pool = FakePool(iter([2, 0, 3, 1, None]))
    batches = feed(pool)
    batches.start()
    first, second = batches.get(), batches.get()
    assert first is not None
    assert second is not None
    assert slots_of(first) == [2, 2, 0, 0]
    assert slots_of(second) == [3, 3, 1, 1]
    assert first["reward"].shape == (T + 1, 2 * E)
    assert batches.get() is None  # the pool is stopping: no half batch
    assert pool.released == [2, 0, 3, 1]
    batches.thread.join(timeout=10)
    assert not batches.thread.is_alive()


def test_prefetch_gathers_ahead_and_otherwise_only_on_request() -> None:
    """With prefetch the next batch is gathered while the learner works; without, only after
    the learner asks (its update published): fresher data."""
    ahead = FakePool(itertools.cycle(range(SLOTS)))
    prefetching = feed(ahead, prefetch=True)
    prefetching.start()
    assert prefetching.get() is not None
    wait_until(lambda: len(ahead.taken) >= 4)  # the next batch, without being asked
    prefetching.stop()

    asked = FakePool(itertools.cycle(range(SLOTS)))
    on_request = feed(asked, prefetch=False)
    on_request.start()
    assert on_request.get() is not None
    time.sleep(0.3)
    assert len(asked.taken) == 2  # waiting for the request
    on_request.request()
    assert on_request.get() is not None
    assert len(asked.taken) == 4
    on_request.stop()
    assert not on_request.thread.is_alive()


def test_an_error_in_the_feed_is_raised_in_the_learners_thread() -> None:
    batches = feed(FakePool(iter([]), error=RuntimeError("actor pipe broke")))
    batches.start()
    with pytest.raises(RuntimeError, match="actor pipe broke"):
        batches.get()


@pytest.mark.parametrize("prefetch", [True, False])
def test_stop_ends_the_thread_where_it_waits(prefetch: bool) -> None:
    """Prefetch: blocked on the full queue with a batch nobody takes; without: waiting for a
    request. Either way stop() ends it, and it takes no slot after."""
    pool = FakePool(itertools.cycle(range(SLOTS)))
    batches = feed(pool, prefetch=prefetch)
    batches.start()
    wait_until(lambda: len(pool.released) >= 2)
    time.sleep(0.2)  # blocked now
    started = time.monotonic()
    batches.stop()
    assert not batches.thread.is_alive()
    assert time.monotonic() - started < 5
    taken = len(pool.taken)
    time.sleep(0.2)
    assert len(pool.taken) == taken
    assert batches.stopping.is_set()

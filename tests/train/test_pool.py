"""`ActorPool` reclaims the slots of an actor that dies or hangs, with fake actors (no envs).

A fake actor speaks the pool's protocol (`stampede.train.actor.run_actor`): it receives slot indices
on its pipe (None: stop) and answers ``("full", index)`` or ``("error", traceback)``. A healthy
one fills every step of the slot with its own mark; a faulty one first scribbles a poison value
into the slot, as a crash in mid-rollout would, then dies or hangs. The learner side of the
test takes slots as the runner does (`next_full_slot`, `gather`, `release`) and checks every
batch it gets is whole: no poison, no unwritten step, one writer per rollout.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
import time

import numpy as np
import pytest
import torch

from stampede.envs import EnvSpec
from stampede.train import pool as pool_module
from stampede.train.actor import ActorSetup
from stampede.train.buffers import RolloutBuffers, rollout_spec
from stampede.train.pool import SLOTS_PER_ACTOR, ActorFailure, ActorPool

T, E, SLOTS_PER_BATCH = 3, 2, 2
ENV = EnvSpec(obs_shape=(2,), obs_dtype=np.dtype(np.float32), num_actions=2, frames_per_step=1)
POISON = -1.0
ROLLOUT_S = 0.01  # a healthy actor's time per rollout (see the fairness test for why not 0)
DEADLINE_S = 20.0  # a broken pool fails the test instead of hanging it


def mark(actor_id: int, restart: int) -> float:
    """What a healthy actor writes at every step: who wrote the rollout (> 0)."""
    return 100.0 + 10 * actor_id + restart


def fake_actor(setup: ActorSetup, model, buffers: RolloutBuffers, conn, version) -> None:
    """The process target the pool starts in place of `run_actor`. ``env_kwargs["fault"]``
    says how the first incarnation (restart 0) of an actor fails; restarts are healthy except
    for the fault "always"."""
    fault = setup.env_kwargs.get("fault") if setup.restart == 0 else None
    if setup.env_kwargs.get("fault") == "always":
        fault = "always"
    while True:
        index = conn.recv()
        if index is None:
            return
        slot = buffers.slot(index)
        if fault is not None:
            slot["reward"][: T // 2].fill_(POISON)  # half a rollout written, then...
        if fault == "dies":
            os._exit(3)  # ...killed mid-rollout (no goodbye, like SIGKILL or a segfault)
        if fault == "hangs":
            time.sleep(600)  # ...stuck in an env step; the pool must kill it
        if fault == "always":
            conn.send(("error", f"Traceback (most recent call last):\nRuntimeError: boom {index}"))
            sys.exit(1)
        time.sleep(setup.env_kwargs.get("delay", ROLLOUT_S))  # stepping its envs
        slot["policy_version"].fill_(version.value)
        slot["reward"].fill_(mark(setup.actor_id, setup.restart))
        conn.send(("full", index))


def make_pool(
    monkeypatch, faults: list[str | None], slots: int = 0, delays: tuple[float, ...] = (), **limits
) -> tuple[ActorPool, RolloutBuffers]:
    monkeypatch.setattr(pool_module, "run_actor", fake_actor)
    slots = slots or SLOTS_PER_ACTOR * len(faults)
    buffers = RolloutBuffers(rollout_spec(ENV, T, E, []), slots)
    setups = [
        ActorSetup(
            actor_id=i,
            rank=0,
            generation=0,
            seed=0,
            num_envs=E,
            unroll_length=T,
            reward_clip=1.0,
            env_kwargs={"fault": fault, "delay": delays[i] if delays else ROLLOUT_S},
            device="cpu",
            threads=1,
        )
        for i, fault in enumerate(faults)
    ]
    limits = {"max_restarts": 5, "restart_window_s": 60.0, "timeout_s": 60.0, **limits}
    # fork: the fake target needs no pickling; the pool is the same under forkserver.
    pool = ActorPool(mp.get_context("fork"), setups, None, buffers, 0, **limits)
    return pool, buffers


def take_batches(pool: ActorPool, buffers: RolloutBuffers, until):
    """Learner batches, taken as the runner takes them, until ``until(batches, slots)`` holds
    (slots: the indices of each batch); fails after DEADLINE_S."""
    deadline = time.monotonic() + DEADLINE_S
    stopping = lambda: time.monotonic() > deadline  # noqa: E731
    batches: list[dict[str, torch.Tensor]] = []
    slots: list[list[int]] = []
    while not until(batches, slots):
        indices = [pool.next_full_slot(stopping) for _ in range(SLOTS_PER_BATCH)]
        assert None not in indices, f"no full slot within {DEADLINE_S} s"
        batches.append(buffers.gather(indices, torch.device("cpu")))
        for index in indices:
            pool.release(index)
        pool.set_version(len(batches))
        slots.append(indices)
    return batches, slots


def writers(batch) -> list[float]:
    """The mark of the actor that wrote each column; asserts the column is one whole rollout."""
    reward = batch["reward"]  # [T + 1, S * E]
    assert (reward != POISON).all(), "a half-written rollout reached the learner"
    assert (reward > 0).all(), "a step of a rollout was never written"
    assert (reward == reward[0]).all(), "one rollout written by two actors"
    return reward[0].tolist()


def refilled(held: set[int]):
    """``until`` for `take_batches`: every slot the faulty actor held has reached the learner
    (whole: `writers` checks each batch, and its first incarnation never finished one, so each
    was written again after it was reclaimed) and its replacement has delivered a rollout.
    Which actor refills which slot is the pool's choice (least loaded first)."""

    def done(batches, slots) -> bool:
        marks = {w for batch in batches for w in writers(batch)}
        taken = {index for indices in slots for index in indices}
        return held <= taken and mark(1, restart=1) in marks

    return done


# A dead actor is found by its exit code, not by the hang timeout; a hung one by the timeout.
@pytest.mark.parametrize(("fault", "timeout_s"), [("dies", 60.0), ("hangs", 2.0)])
def test_slots_of_a_failed_actor_are_reclaimed_and_refilled(monkeypatch, fault, timeout_s) -> None:
    pool, buffers = make_pool(monkeypatch, [None, fault], timeout_s=timeout_s)
    try:
        pool.start()
        held = set(pool.actors[1].assigned)  # the slots the faulty actor was given
        assert len(held) == SLOTS_PER_ACTOR
        # Until the slots its predecessor held (one poisoned, one never written) are back and
        # the replacement works, every batch the learner gets is whole (see `writers`).
        batches, slots = take_batches(pool, buffers, until=refilled(held))
        assert pool.restarts == 1
        assert pool.setups[1].restart == 1  # the replacement gets new seeds
        assert {index for indices in slots for index in indices} == set(range(buffers.num_slots))
        # The version the learner publishes reaches the replacement as well.
        assert batches[-1]["policy_version"].max() >= 1
    finally:
        pool.stop()


def test_an_actor_that_keeps_failing_stops_the_run_with_its_traceback(monkeypatch) -> None:
    pool, buffers = make_pool(monkeypatch, ["always"], max_restarts=1)
    try:
        pool.start()
        with pytest.raises(ActorFailure, match=r"(?s)max_actor_restarts=1.*RuntimeError: boom"):
            take_batches(pool, buffers, until=lambda b, s: len(b) == 1)
        assert pool.restarts == 1  # one replacement, then the budget was spent
    finally:
        pool.stop()


def test_a_learner_bound_pool_serves_every_actor(monkeypatch) -> None:
    """Actors faster than the learner (CartPole, or a slow learner): every healthy actor's
    rollouts reach the learner, and none is killed as hung for slots the pool never read."""
    pool, buffers = make_pool(monkeypatch, [None, None], timeout_s=1.0)
    deadline = time.monotonic() + DEADLINE_S
    writer_of_slot = []
    try:
        pool.start()
        for _ in range(30):
            index = pool.next_full_slot(lambda: time.monotonic() > deadline)
            assert index is not None
            writer_of_slot.append(buffers.slot(index)["reward"][0, 0].item())
            time.sleep(0.05)  # the learner's update: every actor has its slots full by now
            pool.release(index)
        served = [writer_of_slot.count(mark(i, 0)) for i in range(2)]
        assert min(served) >= 5, f"rollouts the learner got from actors 0 and 1: {served}"
        assert pool.restarts == 0, "a healthy actor was killed as hung"
    finally:
        pool.stop()


def test_one_actor_fills_a_batch_of_more_slots_than_it_holds(monkeypatch) -> None:
    """One actor, a batch of 4 slots (batch_size / envs_per_actor) but 2 held at a time: the pool
    gives the actor a free slot as soon as it hands one in, not when the batch is released, or
    the learner would wait forever for the third slot."""
    batch_slots = 2 * SLOTS_PER_ACTOR
    pool, buffers = make_pool(monkeypatch, [None], slots=SLOTS_PER_ACTOR + batch_slots)
    deadline = time.monotonic() + DEADLINE_S
    try:
        pool.start()
        for _ in range(3):  # three whole batches
            indices = [
                pool.next_full_slot(lambda: time.monotonic() > deadline) for _ in range(batch_slots)
            ]
            assert None not in indices, f"no full slot within {DEADLINE_S} s"
            assert len(set(indices)) == batch_slots
            assert set(writers(buffers.gather(indices, torch.device("cpu")))) == {mark(0, 0)}
            for index in indices:
                pool.release(index)
    finally:
        pool.stop()


def test_in_lock_step_slots_go_out_only_when_allowed_in_turn_and_come_back_in_that_order(
    monkeypatch,
) -> None:
    """runtime.deterministic: no actor acts until the learner allows a batch; the batch's slots
    go to the actors in turn and are learned from in that order, though the slow actor 0 hands
    its slots in last."""
    pool, buffers = make_pool(monkeypatch, [None, None], slots=4, delays=(0.3, 0.0), lockstep=True)
    deadline = time.monotonic() + DEADLINE_S
    try:
        pool.start()
        assert not any(a.assigned for a in pool.actors)  # nothing before the first batch
        for batch_number in range(2):
            pool.allow(3)
            arrived = [pool.next_full_slot(lambda: time.monotonic() > deadline) for _ in range(3)]
            assert None not in arrived
            assert not any(a.assigned for a in pool.actors)  # the batch, and nothing more
            ordered = pool.in_hand_out_order(arrived)
            assert ordered != arrived  # actor 1's slot came back before actor 0's last one
            batch = buffers.gather(ordered, torch.device("cpu"))
            turns = [(3 * batch_number + k) % 2 for k in range(3)]  # the turn carries over
            assert writers(batch)[::E] == [mark(actor, 0) for actor in turns]
            for index in ordered:
                pool.release(index)
    finally:
        pool.stop()

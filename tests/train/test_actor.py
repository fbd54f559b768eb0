"""The rollout loop of an actor process (stampede.train.actor), run as the pool runs it: the slots
it fills (the time convention, the policy's own logits, the version it acted with), its seeds,
and a failure reported with its traceback."""

from __future__ import annotations

import multiprocessing as mp
from typing import Any

import pytest
import torch

from stampede.envs import env_spec
from stampede.models import MLP
from stampede.train.actor import ActorSetup, run_actor
from stampede.train.buffers import RolloutBuffers, rollout_spec

T, E = 5, 2
CARTPOLE = {"kind": "gym", "gym_id": "CartPole-v1"}


def setup(**changes: Any) -> ActorSetup:
    fields: dict[str, Any] = {
        "actor_id": 0,
        "rank": 0,
        "generation": 0,
        "seed": 1,
        "num_envs": E,
        "unroll_length": T,
        "reward_clip": 1.0,
        "env_kwargs": CARTPOLE,
        "device": "cpu",
        "threads": 1,
    }
    return ActorSetup(**(fields | changes))


class Actor:
    """One actor process on its own pipe, forked as the pool starts it (fork: nothing to
    pickle; the pool's forkserver gives the same process)."""

    def __init__(self, actor_setup: ActorSetup, model: MLP, buffers: RolloutBuffers) -> None:
        ctx = mp.get_context("fork")
        self.conn, theirs = ctx.Pipe()
        self.version = ctx.Value("q", 7, lock=False)
        self.process = ctx.Process(
            target=run_actor, args=(actor_setup, model, buffers, theirs, self.version), daemon=True
        )
        self.process.start()

    def fill(self, index: int) -> tuple[str, Any]:
        self.conn.send(index)
        assert self.conn.poll(60), "the actor sent nothing within 60 s"
        return self.conn.recv()

    def stop(self) -> int | None:
        self.conn.send(None)
        self.process.join(timeout=30)
        return self.process.exitcode


def test_an_actor_fills_slots_as_the_learner_reads_them() -> None:
    """Row t holds x_t (obs, the reward and action before it, whether it starts a game) and
    what the policy did there (its logits and action); row T is row 0 of the next rollout."""
    torch.manual_seed(0)
    model = MLP((4,), 2, hidden_sizes=[8])
    buffers = RolloutBuffers(rollout_spec(env_spec(**CARTPOLE), T, E, []), 2)
    actor = Actor(setup(), model, buffers)
    try:
        assert actor.fill(0) == ("full", 0)
        actor.version.value = 8  # the learner published an update
        assert actor.fill(1) == ("full", 1)
    finally:
        assert actor.stop() == 0
    first, second = buffers.slot(0), buffers.slot(1)
    assert (int(first["policy_version"]), int(second["policy_version"])) == (7, 8)
    assert first["done"][0].all()  # x_0 starts a game
    assert (first["last_action"][0] == 0).all()
    assert (first["reward"][0] == 0).all()
    for slot in (first, second):
        assert torch.equal(slot["last_action"][1:], slot["action"][:-1])  # a_{t-1} of x_t
        assert (slot["reward"][1:] == 1.0).all()  # CartPole pays 1 a step
        with torch.no_grad():
            reward = slot["reward"].clamp(-1, 1)  # the clip it was trained with
            out = model(slot["obs"], slot["last_action"], reward, slot["done"], ())
        torch.testing.assert_close(slot["logits"], out.policy_logits)
        seconds = slot["actor_time"]  # per stage, then the wall time
        assert (seconds >= 0).all()
        assert seconds[:-1].sum() <= seconds[-1] + 1e-6
    for key in ("obs", "reward", "done", "last_action", "action", "logits", "episode_return"):
        torch.testing.assert_close(second[key][0], first[key][T], equal_nan=True)


def test_an_actor_that_cannot_start_sends_its_traceback_and_exits_1() -> None:
    buffers = RolloutBuffers(rollout_spec(env_spec(**CARTPOLE), T, E, []), 1)
    broken = setup(env_kwargs={"kind": "gym", "gym_id": "NoSuchEnv-v9"})
    actor = Actor(broken, MLP((4,), 2), buffers)
    assert actor.conn.poll(60)
    kind, traceback = actor.conn.recv()
    actor.process.join(timeout=30)
    assert actor.process.exitcode == 1
    assert kind == "error"
    assert traceback.startswith("Traceback (most recent call last):")
    assert "NoSuchEnv-v9" in traceback


@pytest.mark.parametrize("field", ["seed", "rank", "actor_id", "generation", "restart"])
def test_every_actor_incarnation_has_its_own_seeds(field: str) -> None:
    """A restarted actor, a resumed run (generation) and another rank never replay the envs or
    the action sampling of an earlier one; the same setup gives the same seeds."""
    base = setup(seed=3, rank=1, actor_id=2, generation=4, restart=0)
    other = setup(**{**vars(base), field: getattr(base, field) + 1})
    assert base.seeds() == setup(**vars(base)).seeds()
    env_seed, torch_seed = base.seeds()
    assert env_seed != torch_seed
    assert set(base.seeds()).isdisjoint(other.seeds())


def test_task_ids_and_initial_lstm_state() -> None:
    assert setup().task_ids().tolist() == [0, 0]  # a single-game run: task 0
    assert setup(tasks=(1, 0)).task_ids().tolist() == [1, 0]
    assert setup().initial_state(3) == ()
    h, c = setup(core_shapes=((1, 1, 16), (1, 1, 16))).initial_state(3)
    assert h.shape == c.shape == (1, 3, 16)
    assert not h.any()
    assert not c.any()

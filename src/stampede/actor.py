"""The rollout loop of one actor process (IMPALA, Espeholt et al. 2018, section 3).

An actor steps a vector of environments as one batch and runs batched inference for the whole
vector (``stampede.models.policy_step``, as evaluation does) with the policy the learner publishes
(shared CPU memory, or CUDA tensors shared through IPC on a GPU: no per-step copy through
pickling). It fills one free rollout slot with ``unroll_length + 1`` steps (see
``stampede.buffers``), stamps it with the policy version it started from, and hands the slot
index to the learner.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import traceback
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from stampede.buffers import RolloutBuffers
from stampede.envs import VecStep, make_vec_env
from stampede.models import ActorCritic, policy_step
from stampede.timing import ACTOR_STAGES, StageClock


@dataclass(frozen=True)
class ActorSetup:
    """Everything an actor process needs, picklable for the ``spawn`` start method."""

    actor_id: int
    rank: int  # of the learner this actor feeds (distributed runs)
    generation: int  # bumps on every resume of the run so seeds never repeat
    seed: int
    num_envs: int
    unroll_length: int
    reward_clip: float
    env_kwargs: dict[str, Any]
    device: str
    threads: int
    restart: int = 0  # bumps when the runner replaces this actor after a failure
    tasks: tuple[int, ...] = ()  # multi-task runs: the task (game index) of each env

    def task_ids(self) -> Tensor:
        """[E] int64, the task of each of this actor's envs (all 0 in a single-game run)."""
        return torch.tensor(self.tasks or (0,) * self.num_envs, dtype=torch.int64)

    def seeds(self) -> tuple[int, int]:
        """(environment seed, torch seed) from the run seed, rank, actor id and generation."""
        env_seed, torch_seed = np.random.SeedSequence(
            self.seed, spawn_key=(self.rank, self.actor_id, self.generation, self.restart)
        ).generate_state(2)
        return int(env_seed), int(torch_seed)


class _Step:
    """The environment side of the current step x_t, as torch tensors of shape [E, ...]: what a
    rollout slot stores at step t (``stampede.buffers``)."""

    def __init__(self, obs: np.ndarray, num_envs: int) -> None:
        self.obs = torch.from_numpy(obs)
        self.reward = torch.zeros(num_envs)  # r_{t-1}, of the transition into x_t (unclipped)
        self.done = torch.ones(num_envs, dtype=torch.bool)  # x_0 starts an episode
        self.last_action = torch.zeros(num_envs, dtype=torch.int64)  # a_{t-1}
        self.episode_return = torch.full((num_envs,), float("nan"))
        self.episode_length = torch.zeros(num_envs, dtype=torch.int64)

    def advance(self, result: VecStep, action: Tensor) -> None:
        """Become x_{t+1}: what stepping the envs with ``action`` [E] returned."""
        self.obs = torch.from_numpy(result.obs)
        self.reward = torch.from_numpy(result.reward)
        self.done = torch.from_numpy(result.done)
        self.last_action = action
        self.episode_return = torch.from_numpy(result.episode_return)
        self.episode_length = torch.from_numpy(result.episode_length)

    def inputs(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """The policy's inputs at x_t: (obs, a_{t-1}, r_{t-1}, done), as ``policy_step`` takes
        them."""
        return self.obs, self.last_action, self.reward, self.done


def _write(slot: dict[str, Tensor], t: int, step: _Step, action: Tensor, logits: Tensor) -> None:
    slot["obs"][t].copy_(step.obs)
    slot["reward"][t].copy_(step.reward)
    slot["done"][t].copy_(step.done)
    slot["last_action"][t].copy_(step.last_action)
    slot["episode_return"][t].copy_(step.episode_return)
    slot["episode_length"][t].copy_(step.episode_length)
    slot["action"][t].copy_(action)
    slot["logits"][t].copy_(logits)


def run_actor(
    setup: ActorSetup, model: ActorCritic, buffers: RolloutBuffers, conn: Any, version: Any
) -> None:
    """Process entry point. ``conn`` is this actor's own pipe to the runner: it receives slot
    indices to fill (None: stop) and sends back ``("full", index)`` or ``("error", traceback)``.
    A pipe per actor, and no lock shared between actors, means an actor killed at any instant
    cannot leave a lock held that would stall the others. ``version`` is the learner's update
    count (a lock-free shared integer)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the runner owns Ctrl-C and shuts us down
    try:
        _rollouts(setup, model, buffers, conn, version)
    except BaseException:
        with contextlib.suppress(OSError):
            conn.send(("error", traceback.format_exc()))
        raise SystemExit(1) from None


def _rollouts(
    setup: ActorSetup, model: ActorCritic, buffers: RolloutBuffers, conn: Any, version: Any
) -> None:
    torch.set_num_threads(setup.threads)
    env_seed, torch_seed = setup.seeds()
    torch.manual_seed(torch_seed)
    device = torch.device(setup.device)
    E, T = setup.num_envs, setup.unroll_length
    env = make_vec_env(num_envs=E, seed=env_seed, tasks=setup.tasks or None, **setup.env_kwargs)
    task = setup.task_ids()  # [E]
    try:
        step = _Step(env.reset(seed=env_seed), E)
        act = functools.partial(
            policy_step, model, device=device, reward_clip=setup.reward_clip, task=task
        )
        state = model.initial_state(E, device)
        state_before, (action, logits, state) = state, act(*step.inputs(), state)
        parent = os.getppid()
        clock = StageClock(ACTOR_STAGES)
        while True:  # every statement of a rollout is inside a stage of the time budget
            with clock.stage("wait"):
                index = _next_slot(conn, parent)
            if index is None:
                break
            with clock.stage("write"):
                slot = buffers.slot(index)
                slot["policy_version"].fill_(version.value)
                slot["task"].copy_(task.expand(T + 1, E))  # [E] -> [T + 1, E]
                for i, tensor in enumerate(state_before):
                    slot[f"core_state_{i}"].copy_(tensor)
            for t in range(T + 1):
                with clock.stage("write"):
                    _write(slot, t, step, action, logits)
                if t == T:  # x_T's action is taken as step 0 of the next rollout
                    break
                with clock.stage("env"):
                    step.advance(env.step(action.numpy()), action)
                with clock.stage("inference"):
                    state_before, (action, logits, state) = state, act(*step.inputs(), state)
            with clock.stage("write"):
                seconds, wall = clock.lap()
                slot["actor_time"].copy_(torch.from_numpy(np.append(seconds, wall)))
                conn.send(("full", index))
    finally:
        env.close()


def _next_slot(conn: Any, parent: int) -> int | None:
    """The next slot to fill, or None when the runner says stop or is gone (even by kill -9)."""
    while not conn.poll(1.0):
        if os.getppid() != parent:
            return None
    try:
        index = conn.recv()
    except EOFError:
        return None
    return None if index is None else int(index)

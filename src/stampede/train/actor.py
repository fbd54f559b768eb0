"""The rollout loop of one actor process (IMPALA, Espeholt et al. 2018, section 3).

An actor steps a vector of environments as one batch and acts for the whole vector at once. With
``runtime.inference=actor`` it runs the forward pass itself (``stampede.models.policy_step``, as
evaluation does) with the policy the learner publishes (shared CPU memory, or CUDA tensors shared
through IPC on a GPU: no per-step copy through pickling). With ``central`` it holds no model: it
steps its envs in two groups, and while one group waits for the inference server's answer
(``stampede.train.inference``) it steps the other. It fills one free rollout slot with
``unroll_length + 1`` steps of all its envs (see ``stampede.train.buffers``), stamps it with
the policy version it started from, and hands the slot index to the learner.
"""

from __future__ import annotations

import contextlib
import os
import signal
import traceback
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from stampede.envs import VecStep, make_vec_env
from stampede.models import ActorCritic, CoreState, policy_step
from stampede.train.buffers import RolloutBuffers
from stampede.train.requests import InferenceClient, RequestTable
from stampede.train.timing import ACTOR_STAGES, StageClock


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
    core_shapes: tuple[tuple[int, ...], ...] = ()  # the LSTM state of one env, [layers, 1, H]
    deterministic: bool = False  # runtime.deterministic: torch's deterministic algorithms

    def initial_state(self, num_envs: int) -> CoreState:
        """Zero LSTM state for ``num_envs`` envs, on the CPU (the central server's inputs; the
        model moves its own state to its device in actor placement): () without LSTM."""
        return tuple(torch.zeros(s[0], num_envs, *s[2:]) for s in self.core_shapes)

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
    rollout slot stores at step t (``stampede.train.buffers``)."""

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


def _write(
    slot: dict[str, Tensor], t: int, envs: slice, step: _Step, action: Tensor, logits: Tensor
) -> None:
    """Row t of the slot's columns ``envs``: x_t of that group and what mu did there."""
    slot["obs"][t, envs].copy_(step.obs)
    slot["reward"][t, envs].copy_(step.reward)
    slot["done"][t, envs].copy_(step.done)
    slot["last_action"][t, envs].copy_(step.last_action)
    slot["episode_return"][t, envs].copy_(step.episode_return)
    slot["episode_length"][t, envs].copy_(step.episode_length)
    slot["action"][t, envs].copy_(action)
    slot["logits"][t, envs].copy_(logits)


class LocalPolicy:
    """``runtime.inference=actor``: the actor's own forward pass with the published model, on
    ``device`` (the learner's: shared CPU memory or CUDA IPC). The same two calls as
    ``stampede.train.requests.InferenceClient``, so the rollout loop does not know where it
    acts."""

    def __init__(self, model: ActorCritic, device: torch.device, reward_clip: float) -> None:
        self.model, self.device, self.reward_clip = model, device, reward_clip
        self._results: dict[int, tuple[Tensor, Tensor, CoreState]] = {}

    def request(
        self,
        group: int,
        inputs: tuple[Tensor, Tensor, Tensor, Tensor],
        task: Tensor,
        core_state: CoreState,
    ) -> None:
        out = policy_step(
            self.model,
            *inputs,
            tuple(s.to(self.device) for s in core_state),
            device=self.device,
            reward_clip=self.reward_clip,
            task=task,
        )
        self._results[group] = (out.action, out.logits, out.core_state)

    def result(self, group: int) -> tuple[Tensor, Tensor, CoreState]:
        return self._results.pop(group)


def run_actor(
    setup: ActorSetup,
    policy: ActorCritic | RequestTable,
    buffers: RolloutBuffers,
    conn: Any,
    version: Any,
) -> None:
    """Process entry point. ``policy`` is the published model (``runtime.inference=actor``) or
    the central server's request table (``central``: this process then holds no model).
    ``conn`` is this actor's own pipe to the runner: it receives slot indices to fill (None:
    stop) and sends back ``("full", index)`` or ``("error", traceback)``. A pipe per actor, and
    no lock shared between actors, means an actor killed at any instant cannot leave a lock held
    that would stall the others. ``version`` is the learner's update count (a lock-free shared
    integer)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the runner owns Ctrl-C and shuts us down
    try:
        _rollouts(setup, policy, buffers, conn, version)
    except BaseException:
        with contextlib.suppress(OSError):
            conn.send(("error", traceback.format_exc()))
        raise SystemExit(1) from None


class _Group:
    """One group of an actor's envs [lo, hi): its env vector, its current step x_t, the LSTM
    state before x_t, and what the policy chose there once it has answered."""

    def __init__(self, setup: ActorSetup, bounds: tuple[int, int], env_seed: int) -> None:
        lo, hi = bounds
        self.envs = slice(lo, hi)
        tasks = setup.tasks[lo:hi] or None
        seed = env_seed + lo  # env i of the actor keeps the seed it has in one vector
        self.env = make_vec_env(num_envs=hi - lo, seed=seed, tasks=tasks, **setup.env_kwargs)
        self.task = setup.task_ids()[lo:hi]  # [n]
        self.step = _Step(self.env.reset(seed=seed), hi - lo)
        self.state: CoreState = ()  # before x_t
        self.acted: tuple[Tensor, Tensor, CoreState] | None = None  # (a_t, logits, state after)


def _rollouts(
    setup: ActorSetup,
    policy: ActorCritic | RequestTable,
    buffers: RolloutBuffers,
    conn: Any,
    version: Any,
) -> None:
    torch.set_num_threads(setup.threads)
    torch.use_deterministic_algorithms(setup.deterministic)
    env_seed, torch_seed = setup.seeds()
    torch.manual_seed(torch_seed)
    E, T = setup.num_envs, setup.unroll_length
    if isinstance(policy, RequestTable):
        acting: LocalPolicy | InferenceClient = policy.client(setup.actor_id)
        bounds = policy.groups
    else:
        device = torch.device(setup.device)
        acting, bounds = LocalPolicy(policy, device, setup.reward_clip), [(0, E)]
    groups: list[_Group] = []
    try:
        for b in bounds:
            groups.append(_Group(setup, b, env_seed))
        for g, group in enumerate(groups):
            group.state = setup.initial_state(group.envs.stop - group.envs.start)
            acting.request(g, group.step.inputs(), group.task, group.state)
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
                slot["task"].copy_(setup.task_ids().expand(T + 1, E))  # [E] -> [T + 1, E]
            for t in range(T + 1):
                for g, group in enumerate(groups):
                    if not _act(clock, acting, g, group, slot, t, last=t == T):
                        return
            with clock.stage("write"):
                seconds, wall = clock.lap()
                slot["actor_time"].copy_(torch.from_numpy(np.append(seconds, wall)))
                conn.send(("full", index))
    finally:
        for group in groups:
            group.env.close()


def _act(
    clock: StageClock,
    acting: LocalPolicy | InferenceClient,
    g: int,
    group: _Group,
    slot: dict[str, Tensor],
    t: int,
    *,
    last: bool,
) -> bool:
    """Row t of the slot for one group: take the policy's answer at x_t, write x_t, and unless
    ``last`` (t == T: x_T's action is step 0 of the next rollout) step the envs and ask for a_{t+1}.
    While this group waits for its answer, the actor steps the others. False: the learner is
    gone."""
    with clock.stage("inference"):
        if group.acted is None:
            group.acted = acting.result(g)
            if group.acted is None:
                return False
    action, logits, state_after = group.acted
    with clock.stage("write"):
        if t == 0:  # the LSTM state before row 0, [layers, E, H]: this group's columns
            for i, tensor in enumerate(group.state):
                slot[f"core_state_{i}"][:, group.envs].copy_(tensor)
        _write(slot, t, group.envs, group.step, action, logits)
    if last:
        return True
    with clock.stage("env"):
        group.step.advance(group.env.step(action.numpy()), action)
    with clock.stage("inference"):
        group.state, group.acted = state_after, None
        acting.request(g, group.step.inputs(), group.task, group.state)
    return True


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

"""The processes of one learner rank: the rollout slots, the actor processes and, with
``runtime.inference=central``, the inference server, started as one ``ActorPool``; and the
layout line the run log starts with."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.multiprocessing as mp

from stampede.config.runtime import RuntimeConfig, cpu_isa, usable_cpus
from stampede.config.schema import Config
from stampede.envs import EnvSpec
from stampede.models import ActorCritic
from stampede.rundir.checkpoint_state import Progress
from stampede.train.actor import ActorSetup
from stampede.train.buffers import RolloutBuffers, rollout_spec
from stampede.train.inference import InferenceServer, ServerSetup
from stampede.train.pool import ActorPool
from stampede.train.requests import RequestTable


def actor_context() -> Any:
    """Actor processes fork from a server that has imported torch and the envs already, so a
    (re)started actor is up in a fraction of a second; the server itself never touches CUDA."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["stampede.train.actor"])
    return ctx


def rollout_buffers(r: RuntimeConfig, spec: EnvSpec, model: ActorCritic) -> RolloutBuffers:
    """The shared rollout slots of one rank: ``r.buffer_slots`` of [T + 1, E] steps each."""
    core = [tuple(t.shape) for t in model.initial_state(r.envs_per_actor)]  # [layers, E, H]
    return RolloutBuffers(
        rollout_spec(spec, r.unroll_length, r.envs_per_actor, core), r.buffer_slots
    )


def start_pool(
    cfg: Config,
    spec: EnvSpec,
    published: ActorCritic,
    buffers: RolloutBuffers,
    device: torch.device,
    rank: int,
    progress: Progress,
    slot_tasks: list[int] | None,
) -> ActorPool:
    """Start this rank's actors (and its inference server) on ``buffers``, acting with the
    ``published`` model: in each actor, or through one server that holds it (central)."""
    r = cfg.runtime
    core = tuple(tuple(t.shape) for t in published.initial_state(1))  # [layers, 1, H] each
    ctx = actor_context()
    policy: ActorCritic | RequestTable = published
    server = None
    if r.placement(device) == "central":  # the actors hold no model: one server acts for all
        policy = RequestTable(ctx, spec, r.actors, r.envs_per_actor, r.inference_groups, core)
        setup = ServerSetup(
            device=str(device),
            reward_clip=cfg.vtrace.reward_clip,
            max_batch=r.inference_batch,
            wait_s=r.inference_wait_ms / 1000,
            threads=r.inference_threads,
            precision=r.resolved_precision(device),
        )
        server = InferenceServer(ctx, setup, published, policy)
    env_kwargs = dataclasses.asdict(cfg.env)
    setups = [
        ActorSetup(
            actor_id=i,
            rank=rank,
            generation=progress.generation,
            seed=cfg.seed,
            num_envs=r.envs_per_actor,
            unroll_length=r.unroll_length,
            reward_clip=cfg.vtrace.reward_clip,
            env_kwargs=env_kwargs,
            device=str(device),
            threads=r.actor_threads,
            tasks=actor_tasks(slot_tasks, r, rank, i),
            core_shapes=core,
            deterministic=r.deterministic,
        )
        for i in range(r.actors)
    ]
    pool = ActorPool(
        ctx,
        setups,
        policy,
        buffers,
        progress.updates,
        max_restarts=r.max_actor_restarts,
        restart_window_s=r.actor_restart_window_s,
        timeout_s=r.actor_timeout_s,
        server=server,
        lockstep=r.deterministic,
    )
    pool.start()
    return pool


def actor_tasks(
    slot_tasks: list[int] | None, r: RuntimeConfig, rank: int, actor_id: int
) -> tuple[int, ...]:
    """The task of each env of actor ``actor_id`` of ``rank``, from the task of every env slot
    of the run (``slot_tasks``; None in a single-game run: ())."""
    if slot_tasks is None:
        return ()
    first = (rank * r.actors + actor_id) * r.envs_per_actor
    return tuple(slot_tasks[first : first + r.envs_per_actor])


def layout(r: RuntimeConfig, device: torch.device) -> str:
    """A rank's processes, e.g. ``14 actors x 8 envs (1 thread(s) each), inference central on
    cuda (bf16, 1 thread(s)), learner on cuda (bf16, 2 thread(s)), 16 usable CPUs``; a CPU is
    named with its instruction set (``cpu avx2``, ``cpu avx512_bf16``)."""
    precision = r.resolved_precision(device)
    on = f"{device} {cpu_isa()}" if device.type == "cpu" else str(device)
    if r.placement(device) == "central":
        where = f"central on {on} ({precision}, {r.inference_threads} thread(s))"
    else:
        where = f"in each actor on {on} (fp32)"
    return (
        f"{r.actors} actors x {r.envs_per_actor} envs ({r.actor_threads} thread(s) each), "
        f"inference {where}, learner on {on} ({precision}, "
        f"{r.learner_torch_threads} thread(s)), {usable_cpus()} usable CPUs"
        + (", deterministic (actors in lock-step with the learner)" if r.deterministic else "")
    )

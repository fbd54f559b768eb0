"""`make bench`: throughput of the full training loop against its two ceilings, in one run.

Measures, on whatever machine runs it, with the composed config (default: Pong with the default
network and hyperparameters, all cores; extra Hydra overrides on the command line):

1. env-only ceiling: the same actor processes stepping the same vectorised envs with random
   actions and no model, in environment frames/s (frame skip included);
2. learner-only ceiling: learner updates/s on synthetic batches of the configured shape;
3. the full loop (actors + learner) in frames/s, from its own metrics after a warm-up;

and the ratio of 3 to the ideal 1 / (1/env_only + 1/learner_only), the rate if env stepping and
learning shared the machine perfectly. Usage: ``python benchmarks/throughput.py [--seconds 30]
[overrides...]``, e.g. ``device=cuda runtime.num_actors=16``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import torch
import torch.multiprocessing as mp

from stampede.buffers import rollout_spec
from stampede.compose import load_config
from stampede.config import Config
from stampede.envs import env_spec, make_vec_env
from stampede.learner import Learner
from stampede.logging import read_metrics
from stampede.runner import Trainer

CONF = Path(__file__).resolve().parents[1] / "conf"


def _step_randomly(
    env_kwargs: dict, num_envs: int, seed: int, seconds: float, out: mp.Queue
) -> None:
    torch.set_num_threads(1)
    env = make_vec_env(num_envs=num_envs, seed=seed, **env_kwargs)
    env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        env.step(rng.integers(env.spec.num_actions, size=num_envs))
        steps += num_envs
    out.put((steps, time.perf_counter() - start))
    env.close()


def env_only_fps(cfg: Config, seconds: float) -> float:
    """Frames/s of num_actors processes stepping their env vectors with random actions."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    r = cfg.runtime
    kwargs = dataclasses.asdict(cfg.env)
    procs = [
        ctx.Process(target=_step_randomly, args=(kwargs, r.envs_per_actor, i, seconds, out))
        for i in range(r.actors)
    ]
    for p in procs:
        p.start()
    results = [out.get() for _ in procs]
    for p in procs:
        p.join()
    frames_per_step = env_spec(**kwargs).frames_per_step
    return sum(steps / elapsed for steps, elapsed in results) * frames_per_step


def learner_only(cfg: Config, seconds: float) -> tuple[float, float]:
    """(updates/s, frames/s) of the learner alone on synthetic batches of the configured shape."""
    r = cfg.runtime
    spec = env_spec(**dataclasses.asdict(cfg.env))
    from stampede.model_config import model_factory

    model = model_factory(cfg.model, spec.obs_shape, spec.num_actions)().to(cfg.torch_device)
    learner = Learner(model, cfg.vtrace, cfg.optim, cfg.total_frames)
    core = [tuple(t.shape) for t in model.initial_state(r.batch_size)]
    batch = {}
    for name, field in rollout_spec(spec, r.unroll_length, r.batch_size, core).items():
        if name == "policy_version":
            continue
        if field.dtype == torch.uint8:
            value = torch.randint(0, 256, field.shape, dtype=torch.uint8)
        elif field.dtype == torch.int64:
            value = torch.randint(0, spec.num_actions, field.shape)
        elif field.dtype == torch.bool:
            value = torch.rand(field.shape) < 0.01
        else:
            value = torch.randn(field.shape)
        batch[name] = value.to(cfg.torch_device)
    learner.update(batch, 0)  # warm-up
    updates, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        learner.update(batch, 0)
        updates += 1
    if cfg.torch_device.type == "cuda":
        torch.cuda.synchronize()
    rate = updates / (time.perf_counter() - start)
    return rate, rate * r.unroll_length * r.batch_size * spec.frames_per_step


def full_loop_fps(cfg: Config, seconds: float) -> float:
    """Frames/s of the real training loop, from its own metric lines after the first two."""
    with tempfile.TemporaryDirectory() as tmp:
        trainer = Trainer(cfg, Path(tmp))
        threading.Timer(seconds, trainer.request_stop).start()
        trainer.train()
        fps = [row["perf/fps"] for row in read_metrics(Path(tmp))][2:-1]
    if not fps:
        raise SystemExit("bench: the full loop logged too few lines; raise --seconds")
    return float(np.mean(fps))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="per measurement")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. device=cuda")
    args = parser.parse_args(argv)
    overrides = [
        "logger.interval_s=1",
        "logger.wandb.mode=disabled",
        "logger.progress=false",
        "checkpointing.interval_s=1e9",
        *args.overrides,
    ]
    cfg = load_config(CONF, overrides)
    r = cfg.runtime
    print(
        f"machine: {platform.machine()} {os.cpu_count()} cores, torch {torch.__version__}, "
        f"device {cfg.torch_device}; env {cfg.env.name} ({cfg.env.backend}), model "
        f"{cfg.model._target_.rsplit('.', 1)[-1]}, {r.actors} actors x {r.envs_per_actor} "
        f"envs, batch {r.batch_size} x unroll {r.unroll_length}; {args.seconds:.0f} s each"
    )
    env_fps = env_only_fps(cfg, args.seconds)
    print(
        f"env-only ceiling:      {env_fps:10,.0f} frames/s  ({env_fps / 4:,.0f} steps/s at skip 4)"
    )
    updates, learner_fps = learner_only(cfg, args.seconds)
    print(f"learner-only ceiling:  {learner_fps:10,.0f} frames/s  ({updates:.2f} updates/s)")
    full = full_loop_fps(cfg, args.seconds)
    ideal = 1.0 / (1.0 / env_fps + 1.0 / learner_fps)
    print(f"full training loop:    {full:10,.0f} frames/s")
    print(
        f"ideal 1/(1/env+1/learner): {ideal:6,.0f} frames/s; full / ideal = {full / ideal:.1%}; "
        f"full / env-only = {full / env_fps:.1%}; full / learner-only = {full / learner_fps:.1%}"
    )
    sys.stdout.flush()


if __name__ == "__main__":
    main()

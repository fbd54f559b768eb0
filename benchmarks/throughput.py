"""`make bench`: throughput of the full training loop against its two ceilings, in one run.

Measures, on whatever machine runs it, with the composed config (default: Pong with the default
network and hyperparameters, the default process layout; extra Hydra overrides on the command
line):

1. env-only ceiling: the same actor processes stepping the same vectorised envs with random
   actions and no model, in environment frames/s (frame skip included);
2. learner-only ceiling: learner updates/s on synthetic batches of the configured shape, for
   each precision (``--precisions``), plain, through ``torch.compile`` (``--no-compile``: not)
   and with each minibatch step one CUDA graph replay (``runtime.cuda_graph``; ``--graph``, on
   by default on a CUDA device);
3. the full loop (actors + learner) in frames/s, from its own metrics after a warm-up, for each
   inference placement (``--placements``: ``runtime.inference=actor|central``) and precision
   (``runtime.precision=fp32|bf16``), side by side, with the time budgets of the learner, the
   actors and the inference server and the peak GPU memory of the learner process; and the
   default precision in reproducible mode (``runtime.deterministic=true``: actors in lock-step
   with the learner; ``--no-deterministic`` skips it);

then one table, the row of the configured default marked ``*``. Usage: ``python
benchmarks/throughput.py [--seconds 30] [--placements actor central] [--precisions fp32 bf16]
[--no-compile] [--[no-]graph] [--no-deterministic] [overrides...]``, e.g. ``device=cuda
model=resnet``. The full loop has the captured learner's rows too (actor placement) with
``--graph``.
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

from stampede.config.compose import load_config
from stampede.config.models import model_factory
from stampede.config.runtime import cpu_isa, cpu_name
from stampede.config.schema import Config
from stampede.envs import env_spec, make_vec_env
from stampede.rundir.files import METRICS_FILE, read_metrics
from stampede.train.buffers import rollout_spec
from stampede.train.learner import Learner
from stampede.train.trainer import Trainer

CONF = Path(__file__).resolve().parents[1] / "conf"
# The time-budget columns of the table: (metric key, column title).
BUDGET = (
    ("time/learner/wait", "L wait"),
    ("time/learner/forward_backward", "L fwd+bwd"),
    ("time/actor/wait", "A wait"),
    ("time/actor/env", "A env"),
    ("time/actor/inference", "A infer"),
    ("time/inference/wait", "S wait"),
    ("time/inference/forward", "S fwd"),
    ("inference/batch_mean", "S batch"),
)


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
    """(updates/s, frames/s) of the learner alone on synthetic batches of the configured shape,
    with the configured precision and compile setting.

    Every update does the whole work of a real one (all passes and steps) at a learning rate of
    0 (the end of the linear schedule): learning from one batch over and over drives the policy
    to extremes where bf16 overflows, and a skipped (non-finite) update would cut its passes
    short and flatter the figure."""
    r, device = cfg.runtime, cfg.torch_device
    torch.set_num_threads(r.learner_torch_threads)
    spec = env_spec(**dataclasses.asdict(cfg.env))
    model = model_factory(cfg.model, spec.obs_shape, spec.num_actions)().to(device)
    learner = Learner(
        model,
        cfg.vtrace,
        dataclasses.replace(cfg.optim, anneal_lr=True),
        cfg.total_frames,
        precision=r.resolved_precision(device),
        compile=r.compile,
        cuda_graph=r.cuda_graph,
    )
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
        batch[name] = value.to(device)
    done = cfg.total_frames  # lr 0 from here on
    for _ in range(2 if r.cuda_graph else 1):  # warm-up (compilation; the graph's capture)
        learner.update(batch, done)
    updates, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        learner.update(batch, done)
        updates += 1
    if device.type == "cuda":
        torch.cuda.synchronize()
    rate = updates / (time.perf_counter() - start)
    if learner.skipped:
        raise RuntimeError(f"{learner.skipped} synthetic updates were skipped: the figure is void")
    return rate, rate * r.unroll_length * r.batch_size * spec.frames_per_step


@dataclasses.dataclass
class LoopResult:
    fps: float
    budget: dict[str, float]  # the BUDGET keys' means over the measured lines
    gpu_mib: float  # the learner process's peak GPU memory (0 on the CPU)


STARTUP_LINES = 2  # metric lines of the loop's start-up, left out of the figures


def _stop_after_startup(trainer: Trainer, metrics: Path, seconds: float) -> None:
    """Stop ``trainer`` ``seconds`` after its first STARTUP_LINES metric lines, so that a slow
    start does not eat the measurement (on a 16-CPU H200 node, spawning 14 actors and the first
    CUDA updates took about 35 s)."""
    while not metrics.exists() or len(metrics.read_bytes().splitlines()) < STARTUP_LINES:
        time.sleep(0.2)
    time.sleep(seconds)
    trainer.request_stop()


def full_loop(cfg: Config, seconds: float) -> LoopResult:
    """The real training loop for ``seconds`` after its start-up: frames/s and time budgets from
    its own metric lines after the start-up's, the last one (the stop) left out too."""
    device = cfg.torch_device
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    with tempfile.TemporaryDirectory() as tmp:
        trainer = Trainer(cfg, Path(tmp))
        watch = (trainer, Path(tmp) / METRICS_FILE, seconds)
        threading.Thread(target=_stop_after_startup, args=watch, daemon=True).start()
        trainer.train()
        rows = read_metrics(Path(tmp))[STARTUP_LINES:-1]
    if not rows:
        raise SystemExit("bench: the full loop logged too few lines; raise --seconds")
    budget = {
        key: float(np.mean([r[key] for r in rows if key in r]))
        for key, _ in BUDGET
        if any(key in r for r in rows)
    }
    gpu = torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else 0.0
    return LoopResult(float(np.mean([r["perf/fps"] for r in rows])), budget, gpu)


def _table(rows: list[tuple[str, LoopResult]], default: str) -> str:
    head = f"  {'placement, precision':<24}{'frames/s':>10}" + "".join(
        f"{title:>10}" for _, title in BUDGET
    )
    lines = [head + f"{'GPU MiB':>9}"]
    for name, res in rows:
        mark = "*" if name == default else " "
        cells = "".join(
            f"{res.budget[key]:>10.2f}" if key in res.budget else f"{'-':>10}" for key, _ in BUDGET
        )
        lines.append(f"{mark} {name:<24}{res.fps:>10,.0f}{cells}{res.gpu_mib:>9,.0f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="per measurement")
    parser.add_argument("--placements", nargs="+", default=["actor", "central"])
    parser.add_argument("--precisions", nargs="+", default=["fp32", "bf16"])
    parser.add_argument(
        "--compile",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also the learner-only ceilings through torch.compile (--no-compile: not)",
    )
    parser.add_argument(
        "--graph",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also the learner-only ceilings and actor-placement full loops with "
        "runtime.cuda_graph=true (default: on a CUDA device)",
    )
    parser.add_argument(
        "--deterministic",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also the full loop with runtime.deterministic=true (--no-deterministic: not)",
    )
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
    r, device = cfg.runtime, cfg.torch_device
    default = f"{r.placement(device)}, {r.resolved_precision(device)}"
    print(
        f"machine: {cpu_name()} ({platform.machine()}, {cpu_isa()}; torch's CPU capability "
        f"{torch.backends.cpu.get_cpu_capability()}) {os.cpu_count()} cores, "
        f"torch {torch.__version__}, "
        f"device {device}"
        + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else "")
        + f"; env {cfg.env.name} ({cfg.env.backend}), model "
        f"{cfg.model._target_.rsplit('.', 1)[-1]}, {r.actors} actors x {r.envs_per_actor} "
        f"envs, batch {r.batch_size} x unroll {r.unroll_length}, {r.learner_torch_threads} "
        f"learner threads; default {default}; {args.seconds:.0f} s each",
        flush=True,
    )
    env_fps = env_only_fps(cfg, args.seconds)
    print(f"{'env-only ceiling:':<34}{env_fps:10,.0f} frames/s", flush=True)
    graph = device.type == "cuda" if args.graph is None else args.graph
    modes = [("", [])]  # the learner's step: eager, torch.compile'd, one CUDA graph replay
    modes += [(", compiled", ["runtime.compile=true"])] * args.compile
    modes += [(", graph", ["runtime.cuda_graph=true"])] * graph
    learner_fps = {}
    for precision in args.precisions:
        for suffix, mode in modes:
            name = precision + suffix
            variant = load_config(CONF, [*overrides, f"runtime.precision={precision}", *mode])
            updates, learner_fps[name] = learner_only(variant, args.seconds)
            label = f"learner-only ceiling ({name}):"
            print(
                f"{label:<34}{learner_fps[name]:10,.0f} frames/s ({updates:.2f} updates/s)",
                flush=True,
            )
    # (row name, the learner-only row it is compared with, its overrides)
    loops = [
        (
            f"{placement}, {precision}",
            precision,
            [f"runtime.inference={placement}", f"runtime.precision={precision}"],
        )
        for placement in args.placements
        for precision in args.precisions
    ]
    if graph:  # the captured learner behind the actor placement
        for p in args.precisions:
            graphed = [
                "runtime.inference=actor",
                "runtime.cuda_graph=true",
                f"runtime.precision={p}",
            ]
            loops.append((f"actor, {p}, graph", f"{p}, graph", graphed))
    if args.deterministic:  # the acting policy in the actors; a metric line every update
        precision = r.resolved_precision(device)
        reproducible = [
            "runtime.inference=actor",
            "runtime.deterministic=true",
            "logger.interval_updates=1",
            f"runtime.precision={precision}",
        ]
        loops.append((f"actor, {precision}, deterministic", precision, reproducible))
    rows = []
    for name, learner_row, settings in loops:
        variant = load_config(CONF, [*overrides, *settings])
        rows.append((name, full_loop(variant, args.seconds)))
        label = f"full loop ({name}):"
        line = f"{label:<34}{rows[-1][1].fps:10,.0f} frames/s"
        if learner_row in learner_fps:
            ideal = 1.0 / (1.0 / env_fps + 1.0 / learner_fps[learner_row])
            line += f" ({rows[-1][1].fps / ideal:.0%} of 1/(1/env + 1/learner) = {ideal:,.0f})"
        print(line, flush=True)
    print("\nfull loop, frames/s and mean time fractions (L learner, A actors, S server):")
    print(_table(rows, default))
    sys.stdout.flush()


if __name__ == "__main__":
    main()

"""Environment stepping speed in one process: agent steps/s and frames/s (x frame skip).

Pong with uniformly random actions and the paper's preprocessing (84x84 grayscale, 4 stacked
frames, action repeat 4 with max-pool, no-op starts, episodic life), no model. Each row steps
for a fixed wall-clock time after construction and reset; a row is one process's ceiling, which
is what one actor process can feed the learner.

Rows:
- ``single AtariGame``: one emulator with action repeat and resize, no vector around it;
- ``gymnasium`` / ``ale_vector``: ``make_vec_env`` backends with E envs (E = 1, 8, 32);
  ``ale_vector`` uses one worker thread, as an actor process does (``--threads`` adds rows
  with more threads, to show what the C++ vector does when it may use several cores);
- reference: gymnasium's ``SyncVectorEnv`` over ale-py's ``ALE/Pong-v5`` (frameskip 4, raw
  210x160 RGB, no preprocessing at all), the plain gymnasium way.

Usage: ``python benchmarks/env_throughput.py [--seconds 5] [--envs 1 8 32] [--threads 2]``.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from stampede.envs import make_vec_env
from stampede.envs.atari import AtariGame, AtariSettings
from stampede.envs.factory import ale_vector_available
from stampede.envs.preprocessing import AreaResize, push_frame
from stampede.envs.vector import AleVectorEnv

FRAME_SKIP = 4


class Rate(NamedTuple):
    steps_per_s: float
    steps_per_cpu_s: float


def measure(step: Callable[[np.ndarray], object], num_envs: int, seconds: float) -> Rate:
    """Agent steps (all envs together) of ``step`` with random actions, per second of wall
    time and per CPU-second of this process (all its threads); the latter barely moves when
    other processes share the cores."""
    actions = np.random.default_rng(0).integers(0, 6, size=(4096, num_envs))
    steps, start, cpu_start = 0, time.perf_counter(), time.process_time()
    while (elapsed := time.perf_counter() - start) < seconds:
        step(actions[steps % len(actions)])
        steps += 1
    cpu = time.process_time() - cpu_start
    return Rate(steps * num_envs / elapsed, steps * num_envs / cpu)


def single_game(seconds: float) -> Rate:
    """One AtariGame with resize and frame stack by hand: the per-env floor of the Python form."""
    settings = AtariSettings(game="pong")
    game, raw = AtariGame(settings), np.zeros((210, 160), dtype=np.uint8)
    resize, stack = AreaResize((210, 160), (84, 84)), np.zeros((4, 84, 84), dtype=np.uint8)
    game.reset(raw, seed=0)

    def step(action: np.ndarray) -> None:
        outcome = game.step(int(action[0]), raw)
        if outcome.game_over or outcome.truncated:
            game.reset(raw)
        push_frame(stack, resize(raw))

    return measure(step, 1, seconds)


def vector(backend: str, num_envs: int, seconds: float, threads: int = 1) -> Rate:
    if backend == "ale_vector":
        env = AleVectorEnv(num_envs, AtariSettings(game="pong"), num_threads=threads)
    else:
        env = make_vec_env(num_envs, 0, game="pong", backend=backend)
    env.reset(0)
    rate = measure(env.step, num_envs, seconds)
    env.close()
    return rate


def gymnasium_sync(num_envs: int, seconds: float) -> Rate:
    import ale_py
    import gymnasium

    gymnasium.register_envs(ale_py)
    env = gymnasium.vector.SyncVectorEnv(
        [
            lambda: gymnasium.make("ALE/Pong-v5", frameskip=FRAME_SKIP, repeat_action_probability=0)
            for _ in range(num_envs)
        ],
        autoreset_mode=gymnasium.vector.AutoresetMode.SAME_STEP,
    )
    env.reset(seed=0)
    rate = measure(env.step, num_envs, seconds)
    env.close()
    return rate


def report(name: str, num_envs: int, rate: Rate) -> None:
    print(
        f"{name:<42} E={num_envs:<3} {rate.steps_per_s:>7,.0f} steps/s "
        f"{rate.steps_per_s * FRAME_SKIP:>7,.0f} frames/s "
        f"{rate.steps_per_cpu_s:>7,.0f} steps/cpu-s",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="stepping time per row")
    parser.add_argument("--envs", type=int, nargs="+", default=[1, 8, 32], help="vector sizes")
    parser.add_argument("--threads", type=int, nargs="*", default=[], help="extra ale_vector rows")
    args = parser.parse_args()
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Pong, random")

    report("single AtariGame (no vector)", 1, single_game(args.seconds))
    backends = ["gymnasium"] + (["ale_vector"] if ale_vector_available() else [])
    for backend in backends:
        for num_envs in args.envs:
            report(
                f"make_vec_env backend={backend}", num_envs, vector(backend, num_envs, args.seconds)
            )
    for threads in args.threads if "ale_vector" in backends else []:
        for num_envs in args.envs:
            report(
                f"ale_vector, {threads} threads",
                num_envs,
                vector("ale_vector", num_envs, args.seconds, threads),
            )
    for num_envs in args.envs:
        report(
            "ref: SyncVectorEnv ALE/Pong-v5 raw RGB",
            num_envs,
            gymnasium_sync(num_envs, args.seconds),
        )


if __name__ == "__main__":
    main()

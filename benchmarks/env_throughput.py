"""Environment stepping speed in one process: agent steps/s and frames/s (x frame skip).

Pong with uniformly random actions and the paper's preprocessing (84x84 grayscale, 4 stacked
frames, action repeat 4 with max-pool, no-op starts, episodic life), no model: one process's
ceiling, what one actor process can feed the learner. For each E the rows are stepped in turn,
one step each, until each has stepped for ``--seconds`` (construction and reset not counted);
steps/cpu-s counts the CPU time of this process, all threads, during that row's steps.

Rows:
- ``single AtariGame``: one emulator with action repeat and resize, no vector around it;
- ``python_loop`` / ``ale_vector``: ``make_vec_env`` backends with E envs (E = 1, 8, 32);
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
from dataclasses import dataclass

import numpy as np

from stampede.envs import EnvSettings, VecEnv, make_vec_env
from stampede.envs.atari import AtariGame
from stampede.envs.factory import ale_vector_available
from stampede.envs.preprocessing import AreaResize, push_frame
from stampede.envs.vector import AleVectorEnv

FRAME_SKIP = 4
Step = Callable[[np.ndarray], object]


@dataclass
class Contestant:
    """One way of stepping E envs, with the wall and CPU time its steps took so far."""

    name: str
    step: Step
    steps: int = 0
    wall: float = 0.0
    cpu: float = 0.0

    def run_once(self, actions: np.ndarray) -> None:
        wall, cpu = time.perf_counter(), time.process_time()
        self.step(actions)
        self.wall += time.perf_counter() - wall
        self.cpu += time.process_time() - cpu
        self.steps += 1


def race(contestants: list[Contestant], num_envs: int, seconds: float) -> None:
    """Step the contestants in turn, one step each, until each has stepped for ``seconds``.

    Interleaving step by step gives every contestant the same share of whatever else runs on
    the machine, so the comparison holds on a shared box even when the absolute figures move.
    """
    actions = np.random.default_rng(0).integers(0, 6, size=(4096, num_envs))
    t = 0
    while min(c.wall for c in contestants) < seconds:
        for contestant in contestants:
            contestant.run_once(actions[t % len(actions)])
        t += 1


def single_game() -> Step:
    """One AtariGame with resize and frame stack by hand: the per-env floor of the Python form."""
    game, raw = AtariGame(EnvSettings(game="pong")), np.zeros((210, 160), dtype=np.uint8)
    resize, stack = AreaResize((210, 160), (84, 84)), np.zeros((4, 84, 84), dtype=np.uint8)
    game.reset(raw, seed=0)

    def step(action: np.ndarray) -> None:
        outcome = game.step(int(action[0]), raw)
        if outcome.game_over or outcome.truncated:
            game.reset(raw)
        push_frame(stack, resize(raw))

    return step


def vector(backend: str, num_envs: int, threads: int = 1) -> Step:
    env: VecEnv
    if backend == "ale_vector":
        env = AleVectorEnv(num_envs, EnvSettings(game="pong"), num_threads=threads)
    else:
        env = make_vec_env(num_envs, 0, game="pong", backend=backend)
    env.reset(0)
    return env.step


def gymnasium_sync(num_envs: int) -> Step:
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
    return env.step


def contestants(num_envs: int, threads: list[int]) -> list[Contestant]:
    group = [Contestant("single AtariGame (no vector)", single_game())] if num_envs == 1 else []
    group.append(Contestant("make_vec_env backend=python_loop", vector("python_loop", num_envs)))
    if ale_vector_available():
        group.append(Contestant("make_vec_env backend=ale_vector", vector("ale_vector", num_envs)))
        group += [
            Contestant(f"ale_vector, {n} threads", vector("ale_vector", num_envs, n))
            for n in threads
        ]
    group.append(Contestant("ref: SyncVectorEnv ALE/Pong-v5 raw RGB", gymnasium_sync(num_envs)))
    return group


def report(contestant: Contestant, num_envs: int) -> None:
    steps = contestant.steps * num_envs
    print(
        f"{contestant.name:<40} E={num_envs:<3} {steps / contestant.wall:>7,.0f} steps/s "
        f"{steps * FRAME_SKIP / contestant.wall:>7,.0f} frames/s "
        f"{steps / contestant.cpu:>7,.0f} steps/cpu-s",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="stepping time per row")
    parser.add_argument("--envs", type=int, nargs="+", default=[1, 8, 32], help="vector sizes")
    parser.add_argument("--threads", type=int, nargs="*", default=[], help="extra ale_vector rows")
    args = parser.parse_args()
    print(f"{platform.machine()}, {os.cpu_count()} CPUs; Pong, random actions; wall and CPU time")
    for num_envs in args.envs:
        group = contestants(num_envs, args.threads)
        race(group, num_envs, args.seconds)
        for contestant in group:
            report(contestant, num_envs)


if __name__ == "__main__":
    main()

"""Soak: CartPole for 10 minutes with an actor killed at random every minute (slow).

Checks that training keeps going, that the learner's memory is flat (within 10% of minute 2 at
the end), and that nothing leaks after exit: no process, no shared-memory segment. Prints the
figures (restarts, memory, frames/s with and without kills).
"""

from __future__ import annotations

import itertools
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from stampede.rundir.files import read_metrics

ROOT = Path(__file__).resolve().parents[2]
ARGS = [
    "env=cartpole",
    "model=mlp",
    "optim=adam",
    "runtime.num_actors=3",
    "runtime.envs_per_actor=4",
    "runtime.batch_size=16",
    "logger.interval_s=5",
    "logger.wandb.mode=disabled",
    "checkpointing.interval_s=60",
    "total_frames=1000000000",
]
MINUTE = 60.0


def shm_entries() -> set[str]:
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


def start(run_dir: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(ROOT / "run.py"), f"hydra.run.dir={run_dir}", *ARGS],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=run_dir.parent,
    )


def actors_of(proc: psutil.Process) -> list[psutil.Process]:
    """The actor processes: children of the forkserver, itself a child of the runner."""
    return [p for p in proc.children(recursive=True) if p.ppid() != proc.pid]


def mean_fps(run_dir: Path, after_frames: int = 0) -> float:
    rows = [r for r in read_metrics(run_dir) if r["env/frames"] > after_frames][1:]
    return sum(r["perf/fps"] for r in rows) / max(len(rows), 1)


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_soak_with_random_actor_kills(tmp_path: Path) -> None:
    shm_before = shm_entries()
    baseline_dir = tmp_path / "baseline"
    baseline = start(baseline_dir)
    time.sleep(1.5 * MINUTE)
    baseline.send_signal(signal.SIGTERM)
    assert baseline.wait(timeout=60) == 0
    fps_without = mean_fps(baseline_dir)

    run_dir = tmp_path / "soak"
    proc = start(run_dir)
    runner = psutil.Process(proc.pid)
    seen: dict[int, psutil.Process] = {}
    rng = random.Random(0)
    rss: dict[int, int] = {}
    frames_by_minute = []
    started = time.monotonic()
    for minute in range(1, 11):
        time.sleep(max(0.0, started + minute * MINUTE - time.monotonic()))
        rss[minute] = runner.memory_info().rss
        frames_by_minute.append(read_metrics(run_dir)[-1]["env/frames"])
        actors = actors_of(runner)
        seen |= {p.pid: p for p in runner.children(recursive=True)}
        if minute < 10 and actors:
            rng.choice(actors).kill()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0
    rows = read_metrics(run_dir)
    restarts = rows[-1]["actors/restarts"]
    fps_with = mean_fps(run_dir)
    print(
        f"\nsoak: restarts={restarts} rss_minute2={rss[2] / 2**20:.1f}MiB "
        f"rss_minute10={rss[10] / 2**20:.1f}MiB fps_without_kills={fps_without:.0f} "
        f"fps_with_kills={fps_with:.0f} frames_by_minute={frames_by_minute}"
    )

    assert restarts >= 9
    assert all(b > a for a, b in itertools.pairwise(frames_by_minute)), (
        f"training stalled: {frames_by_minute}"
    )
    assert abs(rss[10] - rss[2]) <= 0.10 * rss[2], f"learner memory grew: {rss}"
    time.sleep(2)
    alive = [p.pid for p in seen.values() if p.is_running() and p.status() != "zombie"]
    assert not alive, f"processes left after exit: {alive}"
    assert shm_entries() <= shm_before, f"leaked shared memory: {shm_entries() - shm_before}"

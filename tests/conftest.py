"""Shared test helpers: the repository's paths, and running ``run.py`` the way a user does
(a subprocess in a directory of its own, one run directory per test).

Tests import these with ``from conftest import ...`` (``tests/`` is on pytest's ``pythonpath``).
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"

# CartPole settings that learn in about a minute on 2 CPU cores: one optimizer step per batch
# with raw advantages (IMPALA's own update; the Atari defaults' several passes per batch would
# only cost time here).
CARTPOLE = [
    "env=cartpole",
    "model=mlp",
    "optim=adam",
    "optim.lr=0.001",
    "optim.epochs=1",
    "optim.minibatches=1",
    "vtrace.normalize_advantages=false",
    "vtrace.lambda_=1.0",
    "runtime.prefetch=true",
    "optim.anneal_lr=false",
    "vtrace.entropy_cost=0.01",
    "vtrace.reward_clip=0",
    "runtime.num_actors=2",
    "runtime.envs_per_actor=8",
    "runtime.batch_size=16",
    "runtime.unroll_length=20",
    "logger.interval_s=1",
    "logger.wandb.mode=disabled",
]


def run_py(
    run_dir: Path, *overrides: str, timeout: float = 300, **kwargs: Any
) -> subprocess.CompletedProcess[str]:
    """``python run.py hydra.run.dir=<run_dir> <overrides>`` to its end, output captured; from
    the run directory's parent unless ``cwd`` says otherwise."""
    kwargs.setdefault("cwd", run_dir.parent)
    return subprocess.run(
        [sys.executable, str(ROOT / "run.py"), f"hydra.run.dir={run_dir}", *overrides],
        capture_output=True,
        text=True,
        timeout=timeout,
        **kwargs,
    )


def start_py(run_dir: Path, *overrides: str) -> subprocess.Popen[str]:
    """The same, started in the background (stdout and stderr together in ``stdout``)."""
    return subprocess.Popen(
        [sys.executable, str(ROOT / "run.py"), f"hydra.run.dir={run_dir}", *overrides],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=run_dir.parent,
    )


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``condition`` every 0.2 s; AssertionError naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.2)

"""Shared test helpers: the repository's paths, and running ``run.py`` the way a user does
(a subprocess in a directory of its own, one run directory per test).

Tests import these with ``from conftest import ...`` (``tests/`` is on pytest's ``pythonpath``).

Exact comparisons (``torch.equal``, ``atol=0``, digests) are for one code path run twice. Two
paths that compute the same value (grad and no grad, batched and unbatched, actor and server) may
take different CPU kernels, which split their sums by instruction set (oneDNN picks AVX2 or
AVX-512 kernels by the CPU): those compare with ``assert_close_ulps``.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

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


FLOAT32_EPS = torch.finfo(torch.float32).eps  # one ulp at 1.0


def assert_close_ulps(actual: torch.Tensor, expected: torch.Tensor, ulps: int) -> None:
    """``actual`` equals ``expected`` to within ``ulps`` float32 ulps of ``expected``'s largest
    magnitude: the rounding that another order of the same sums can give (each rounding of a
    sum of terms of that size is at most half an ulp of it). The caller says why the two paths
    may round differently."""
    scale = float(expected.detach().abs().max()) if expected.numel() else 0.0
    atol = ulps * FLOAT32_EPS * max(scale, torch.finfo(torch.float32).tiny)
    torch.testing.assert_close(actual, expected, rtol=0, atol=atol)

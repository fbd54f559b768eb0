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

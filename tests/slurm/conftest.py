"""The local single-node SLURM cluster (scripts/local_slurm.sh) as a pytest session fixture.

Tests that use `slurm` skip unless the cluster answers; with STAMPEDE_START_SLURM=1 the fixture
starts it first (as root; the first start installs Debian packages and takes about a minute).
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "local_slurm.sh"
NODE = "localhost"
UP_STATES = ("idle", "mixed", "allocated", "completing")  # the node answers; jobs may run
NOT_RUNNING = "local SLURM not running: run scripts/local_slurm.sh start"


def state_dir() -> Path:
    return Path(os.environ.get("STAMPEDE_SLURM_DIR", "/tmp/stampede-slurm"))


def run_cmd(args: Sequence[str], timeout_s: float = 30.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(args), capture_output=True, text=True, timeout=timeout_s, check=False
    )


def node_state() -> str | None:
    """The node's state as `sinfo` reports it, or None when no controller answers."""
    try:
        # `scontrol ping` fails at once when no controller listens; sinfo would retry for 9 s.
        if run_cmd(["scontrol", "ping"], timeout_s=15).returncode != 0:
            return None
        out = run_cmd(["sinfo", "-h", "-n", NODE, "-o", "%T"], timeout_s=15)
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return None
    lines = out.stdout.split()
    return lines[0] if out.returncode == 0 and lines else None


def wait_idle(timeout_s: float) -> str | None:
    """Wait for the node to be idle (earlier jobs may still end); returns its last state."""
    deadline = time.monotonic() + timeout_s
    state = node_state()
    while state in UP_STATES and state != "idle" and time.monotonic() < deadline:
        time.sleep(0.5)
        state = node_state()
    return state


@dataclass
class LocalSlurm:
    """Submits jobs to the local cluster, reads their states, and cancels them on teardown."""

    submitted: list[str] = field(default_factory=list)

    def sbatch(self, *args: str) -> str:
        out = run_cmd(["sbatch", "--parsable", *args])
        if out.returncode != 0:
            raise RuntimeError(f"sbatch {' '.join(args)} failed: {out.stderr.strip()}")
        job_id = out.stdout.strip().split(";")[0]
        self.submitted.append(job_id)
        return job_id

    def track(self, job_id: str) -> None:
        """Cancel this job (submitted elsewhere, e.g. by submitit) on teardown too."""
        self.submitted.append(job_id)

    def sacct_states(self, job_id: str) -> list[str]:
        """Allocation states of every run of the job, oldest first (a requeue adds one)."""
        out = run_cmd(["sacct", "-n", "-X", "-P", "--duplicates", "-o", "State", "-j", job_id])
        return [line.split()[0] for line in out.stdout.splitlines() if line.strip()]

    def sacct_field(self, job_id: str, name: str) -> str:
        out = run_cmd(["sacct", "-n", "-X", "-P", "-o", name, "-j", job_id])
        return out.stdout.strip().splitlines()[-1] if out.stdout.strip() else ""

    def squeue_state(self, job_id: str) -> str:
        out = run_cmd(["squeue", "-h", "-j", job_id, "-o", "%T"])
        return out.stdout.strip()

    def wait_sacct(self, job_id: str, state: str, timeout_s: float = 30.0) -> list[str]:
        """Poll sacct until the job's latest run is in `state`; fail naming what it saw."""
        deadline = time.monotonic() + timeout_s
        states: list[str] = []
        while time.monotonic() < deadline:
            states = self.sacct_states(job_id)
            if states and states[-1] == state:
                return states
            time.sleep(0.3)
        raise AssertionError(
            f"job {job_id}: expected sacct state {state} within {timeout_s} s, "
            f"got {states or 'no record'}"
        )

    def cancel_all(self) -> None:
        if self.submitted:
            run_cmd(["scancel", *self.submitted])
            self.submitted.clear()


def start_cluster() -> None:
    out = run_cmd(["bash", str(SCRIPT), "start"], timeout_s=900)
    if out.returncode != 0:
        pytest.fail(f"scripts/local_slurm.sh start failed:\n{out.stdout}\n{out.stderr}")


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[Path]:
    """Make sure the local cluster answers with a usable node; yields its state directory."""
    conf = state_dir() / "etc" / "slurm.conf"
    with pytest.MonkeyPatch.context() as mp:
        if conf.exists() and "SLURM_CONF" not in os.environ:
            mp.setenv("SLURM_CONF", str(conf))  # works even without the /etc/slurm link
        if node_state() not in UP_STATES and os.environ.get("STAMPEDE_START_SLURM") == "1":
            start_cluster()
            mp.setenv("SLURM_CONF", str(conf))
        state = wait_idle(timeout_s=30)
        if state is None:
            if os.environ.get("STAMPEDE_REQUIRE_SLURM") == "1":  # CI: a skip would hide a failure
                pytest.fail(NOT_RUNNING)
            pytest.skip(NOT_RUNNING)
        if state != "idle":
            jobs = run_cmd(["squeue", "-h", "-o", "%i %P %T"]).stdout.strip().split("\n")
            pytest.skip(
                f"local SLURM node {NODE} is {state!r}, not idle (jobs: {jobs}); "
                "run scripts/local_slurm.sh start --clean"
            )
        yield state_dir()


@pytest.fixture
def slurm(slurm_cluster: Path) -> Iterator[LocalSlurm]:
    """Per test: a job submitter whose jobs are all cancelled afterwards."""
    cluster = LocalSlurm()
    yield cluster
    cluster.cancel_all()

"""The local SLURM cluster behaves like a real one: sbatch and sacct, submitit, preemption.

Needs `scripts/local_slurm.sh start` (or STAMPEDE_START_SLURM=1); skipped otherwise.
"""

from __future__ import annotations

import math
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import submitit

from .conftest import SCRIPT, LocalSlurm, run_cmd

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(90)]

# submitit asks for USR2 90 s before the time limit (`--signal=USR2@90`), and SLURM may send it up
# to 60 s earlier than asked: with a 2-minute limit a task could get USR2 at start, before Python
# installed submitit's handler, and die of it (seen: "task 1: User defined signal 2"). With 10
# minutes the signal cannot come before 7 min 30 s, far past these tests.
JOB_MINUTES = 10


def wait_for(predicate: Callable[[], object], what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.2)


def test_sbatch_job_is_completed_in_sacct(slurm: LocalSlurm, tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    job = slurm.sbatch(
        "--chdir", str(tmp_path), "-o", str(out), "--wrap", "echo ran on $SLURMD_NODENAME"
    )
    slurm.wait_sacct(job, "COMPLETED")
    assert out.read_text().strip() == "ran on localhost"
    assert slurm.sacct_field(job, "ExitCode") == "0:0"


def test_failed_and_cancelled_jobs_report_their_state(slurm: LocalSlurm, tmp_path: Path) -> None:
    common = ("--chdir", str(tmp_path), "-o", "/dev/null")
    failing = slurm.sbatch(*common, "--wrap", "exit 3")
    sleeping = slurm.sbatch(*common, "--wrap", "sleep 300")
    wait_for(lambda: slurm.squeue_state(sleeping) == "RUNNING", "the sleeping job to run")
    run_cmd(["scancel", sleeping])
    slurm.wait_sacct(failing, "FAILED")
    assert slurm.sacct_field(failing, "ExitCode") == "3:0"
    slurm.wait_sacct(sleeping, "CANCELLED")


def test_submitit_job_returns_its_value(slurm: LocalSlurm, tmp_path: Path) -> None:
    executor = submitit.AutoExecutor(folder=tmp_path / "submitit", cluster="slurm")
    executor.update_parameters(timeout_min=JOB_MINUTES, slurm_partition="debug", cpus_per_task=1)
    # The function is pickled by reference, so it must be importable on the node: stdlib is.
    job = executor.submit(math.factorial, 10)
    slurm.track(job.job_id)
    wait_for(job.done, f"submitit job {job.job_id}", timeout_s=45)
    assert job.result() == 3_628_800
    slurm.wait_sacct(job.job_id, "COMPLETED")


def test_submitit_two_tasks_each_see_their_rank(slurm: LocalSlurm, tmp_path: Path) -> None:
    """A 2-rank job, like a distributed learner: one task per core, ranks 0 and 1."""
    executor = submitit.AutoExecutor(folder=tmp_path / "submitit", cluster="slurm")
    executor.update_parameters(timeout_min=JOB_MINUTES, tasks_per_node=2, cpus_per_task=1)
    job = executor.submit(os.getenv, "SLURM_PROCID")
    slurm.track(job.job_id)
    wait_for(job.done, f"submitit job {job.job_id}", timeout_s=45)
    assert sorted(str(rank) for rank in job.results()) == ["0", "1"]


# The low-priority job: it notes each start, says when its USR2 trap is set, notes USR2 and
# keeps working (as a checkpointing job would), and stops at SIGTERM. A rerun exits at once.
LOW_JOB = """#!/bin/bash
log={log}
echo "start ${{SLURM_RESTART_COUNT:-0}}" >> $log
[ "${{SLURM_RESTART_COUNT:-0}}" -gt 0 ] && exit 0
trap 'echo usr2 >> $log' USR2
trap 'echo term >> $log; exit 0' TERM
echo ready >> $log
for i in $(seq 1200); do sleep 0.1; done
"""


def test_high_partition_preempts_debug_job_after_usr2(slurm: LocalSlurm, tmp_path: Path) -> None:
    log = tmp_path / "events.txt"
    script = tmp_path / "low.sh"
    script.write_text(LOW_JOB.format(log=log))
    common = ("--chdir", str(tmp_path), "-o", "/dev/null")
    # B: sends the signal to the batch shell itself (by default only job steps get it).
    low = slurm.sbatch(
        *common,
        "-p",
        "debug",
        "--exclusive",
        "--requeue",
        "-t",
        "5",
        "--signal=B:USR2@60",
        str(script),
    )
    wait_for(lambda: log.exists() and "ready" in log.read_text(), "the low job's USR2 trap")
    high = slurm.sbatch(*common, "-p", "high", "-c", "1", "--wrap", f"echo high >> {log}")
    slurm.wait_sacct(high, "COMPLETED", timeout_s=60)

    events = log.read_text().split()
    assert events[:3] == ["start", "0", "ready"], events
    # USR2 came first, the high job ran only after the low one was stopped.
    assert events.index("usr2") < events.index("term") < events.index("high"), events
    assert slurm.sacct_states(low)[0] == "PREEMPTED"
    requeued = run_cmd(["scontrol", "show", "job", low]).stdout
    assert "Restarts=1" in requeued, requeued


def test_start_again_notices_the_running_cluster(slurm_cluster: Path) -> None:
    pid_file = slurm_cluster / "run" / "slurmctld.pid"
    if os.geteuid() != 0 or not pid_file.exists():
        pytest.skip("cluster not started by scripts/local_slurm.sh as root here")
    pid_before = pid_file.read_text().strip()
    out = subprocess.run(
        ["bash", str(SCRIPT), "start"], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0, out.stderr
    assert "already running" in out.stdout
    assert "local SLURM ready: node localhost" in out.stdout
    assert pid_file.read_text().strip() == pid_before

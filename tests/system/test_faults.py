"""Fault tolerance: actor failures, numerical faults, storage faults, secrets (issue: long runs)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import pickle
import re
import resource
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch
from conftest import ROOT, run_py

from stampede.rundir import checkpoint
from stampede.rundir.files import read_metrics

TINY = [
    "model=mlp",
    "runtime.num_actors=2",
    "runtime.envs_per_actor=2",
    "runtime.batch_size=4",
    "runtime.unroll_length=10",
    "logger.interval_s=1",
    "logger.wandb.mode=disabled",
]


def faulty(name: str) -> list[str]:
    return ["env=gym", f"env.gym_id=stampede.envs.testing:Stampede{name}-v0", *TINY]


@pytest.mark.parametrize(
    ("fault", "extra", "frames", "min_restarts"),
    [
        # Every new actor fails again after 100 env steps. With the crash, restarts outnumber
        # the rollout slots (2 * 2 + 1 = 5): finishing proves half-written slots are reclaimed.
        ("Crash", [], 2000, 6),
        ("Segfault", [], 1000, 2),
        ("Hang", ["runtime.actor_timeout_s=5"], 800, 2),
    ],
)
def test_failed_actors_are_replaced_and_training_goes_on(
    fault: str, extra: list[str], frames: int, min_restarts: int, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    proc = run_py(
        run_dir,
        *faulty(fault),
        *extra,
        "runtime.max_actor_restarts=1000",
        f"total_frames={frames}",
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = read_metrics(run_dir)
    assert rows[-1]["env/frames"] >= frames
    assert rows[-1]["actors/restarts"] >= min_restarts
    log = (run_dir / "run.log").read_text()
    assert "restarting actor" in log
    if fault == "Hang":
        assert "hung" in log


def test_killed_actor_is_replaced(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "run.py"),
            f"hydra.run.dir={run_dir}",
            "env=cartpole",
            *TINY,
            "total_frames=100000000",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=tmp_path,
    )
    try:
        deadline = time.monotonic() + 60
        while len(read_metrics(run_dir)) < 2:
            assert time.monotonic() < deadline, "no metrics"
            time.sleep(0.2)
        runner = psutil.Process(proc.pid)  # actors are forked by its forkserver child
        actors = [c for c in runner.children(recursive=True) if c.ppid() != runner.pid]
        assert len(actors) >= 2
        actors[0].kill()
        while not read_metrics(run_dir)[-1].get("actors/restarts"):
            assert time.monotonic() < deadline + 30, "the killed actor was not replaced"
            time.sleep(0.2)
        frames = read_metrics(run_dir)[-1]["env/frames"]
        while read_metrics(run_dir)[-1]["env/frames"] <= frames:
            assert time.monotonic() < deadline + 60, "training stalled after the restart"
            time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0


def test_too_many_actor_failures_stop_with_the_traceback(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    proc = run_py(run_dir, *faulty("Crash"), "runtime.max_actor_restarts=2", timeout=120)
    assert proc.returncode == 1
    assert "injected failure at step 100" in proc.stdout + proc.stderr
    assert "runtime.max_actor_restarts=2" in proc.stdout + proc.stderr
    assert checkpoint.load_latest(checkpoint.checkpoint_dir(run_dir)) is not None


def test_a_nan_update_is_skipped(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    proc = run_py(run_dir, *faulty("NaNOnce"), "total_frames=4000")
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = read_metrics(run_dir)
    assert rows[-1]["env/frames"] >= 4000
    assert rows[-1]["learner/skipped_updates"] >= 1
    _, state = checkpoint.load_latest(checkpoint.checkpoint_dir(run_dir))
    assert all(torch.isfinite(t).all() for t in state["model"].values())


def test_consecutive_nan_updates_stop_with_last_good_checkpoint(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    proc = run_py(run_dir, *faulty("NaN"), "runtime.max_nonfinite_updates=3")
    assert proc.returncode == 1
    output = proc.stdout + proc.stderr
    assert re.search(r"3 consecutive updates were skipped because loss/\w+ is nan", output), output
    _, state = checkpoint.load_latest(checkpoint.checkpoint_dir(run_dir))
    assert all(torch.isfinite(t).all() for t in state["model"].values())
    assert all(
        torch.isfinite(t).all()
        for s in state["optimizer"]["state"].values()
        for t in s.values()
        if isinstance(t, torch.Tensor)
    )


def test_unreadable_newest_checkpoint_falls_back_to_the_previous(tmp_path: Path) -> None:
    directory = tmp_path / "checkpoints"
    for frames in (100, 200, 300, 400):
        checkpoint.save(directory, frames, {"frames": frames, "w": torch.ones(3) * frames}, keep=3)
    names = [p.name for p in checkpoint.list_checkpoints(directory)]
    assert names == ["ckpt_000000000400.pt", "ckpt_000000000300.pt", "ckpt_000000000200.pt"]
    newest = directory / names[0]
    newest.write_bytes(newest.read_bytes()[:-10])  # torn write / bit rot
    _, state = checkpoint.load_latest(directory)
    assert state["frames"] == 300
    assert newest.exists(), "the broken file must be left for inspection"
    with pytest.raises(checkpoint.CheckpointError, match="checksum mismatch"):
        checkpoint.load_file(newest)


def test_resume_says_it_fell_back(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    args = ["env=cartpole", *TINY, "checkpointing.interval_s=1"]
    assert run_py(run_dir, *args, "total_frames=2000").returncode == 0
    assert run_py(run_dir, *args, "total_frames=4000").returncode == 0
    found = checkpoint.list_checkpoints(checkpoint.checkpoint_dir(run_dir))
    assert len(found) >= 2
    found[0].write_bytes(b"garbage")
    _, previous = checkpoint.load_latest(checkpoint.checkpoint_dir(run_dir))
    proc = run_py(run_dir, *args, "total_frames=6000")
    assert proc.returncode == 0, proc.stderr[-3000:]
    log = (run_dir / "run.log").read_text()
    assert "skipping unreadable checkpoint" in log
    assert f"frames={previous['frames']}" in log.split("skipping unreadable checkpoint")[-1]


def test_checkpoint_cannot_run_code(tmp_path: Path) -> None:
    class Exploit:
        def __reduce__(self):
            return (os.system, (f"touch {tmp_path / 'pwned'}",))

    directory = tmp_path / "checkpoints"
    path = checkpoint.save(directory, 1, {"frames": 1}, keep=3)
    path.write_bytes(pickle.dumps({"frames": Exploit()}))
    digest = checkpoint._digest(path)
    path.with_suffix(".sha256").write_text(f"{digest}  {path.name}\n")
    with pytest.raises(checkpoint.CheckpointError, match="cannot be loaded safely"):
        checkpoint.load_file(path)
    assert not (tmp_path / "pwned").exists()


def test_unwritable_run_directory_fails_before_training(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    started = time.monotonic()
    proc = run_py(blocker / "run", "env=cartpole", *TINY, cwd=tmp_path)
    assert proc.returncode == 2
    assert time.monotonic() - started < 20
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "hydra.run.dir" in lines[0]


def test_disk_too_small_for_a_checkpoint_fails_before_training(tmp_path: Path) -> None:
    def small_files() -> None:  # every file this process writes is capped at 200 KB
        resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))

    proc = run_py(tmp_path / "run", "env=atari", "model=resnet", *TINY[1:], preexec_fn=small_files)
    assert proc.returncode == 2
    assert "cannot write checkpoints" in proc.stderr
    assert "MiB needed per checkpoint" in proc.stderr
    assert not list((tmp_path / "run").glob("checkpoints/ckpt_*"))


def test_no_secret_is_written_anywhere(tmp_path: Path) -> None:
    secret = "sk-test-0123456789abcdef0123456789abcdef"
    run_dir = tmp_path / "run"
    env = {**os.environ, "WANDB_API_KEY": secret, "STAMPEDE_SECRET": secret}
    proc = run_py(
        run_dir,
        "env=cartpole",
        *TINY[:-1],
        "logger.wandb.mode=offline",
        "total_frames=2000",
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    assert any(p.suffix == ".wandb" for p in files)
    leaked = [p for p in files if secret.encode() in p.read_bytes()]
    assert not leaked, leaked


def test_no_shell_is_built_from_strings() -> None:
    sources = list((ROOT / "src" / "stampede").rglob("*.py"))
    for path in sources:
        text = path.read_text()
        for pattern in (
            r"shell\s*=\s*True",
            r"os\.system\(",
            r"os\.popen\(",
            r"(?<![.\w])eval\(",
            r"(?<![.\w])exec\(",
        ):
            assert not re.search(pattern, text), f"{path}: {pattern}"


HOLD_LOCK = """
import fcntl, os, socket, sys, time
with open(sys.argv[1], "a+") as f:
    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    f.write(f"{os.getpid()} {socket.gethostname()}")
    f.flush()
    print("held", flush=True)
    time.sleep(300)
"""


def test_a_second_run_on_a_busy_run_directory_is_refused(tmp_path: Path) -> None:
    """Another live process holds the run directory's lock: refused in one line, exit 2, nothing
    written; once that process is gone (killed: no chance to clean up), a run starts fine."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(run_dir / ".lock")], stdout=subprocess.PIPE, text=True
    )
    args = ["env=cartpole", *TINY, "total_frames=1000"]
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "held\n"
        proc = run_py(run_dir, *args)
        assert proc.returncode == 2, proc.stderr[-3000:]
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1, proc.stderr
        assert str(run_dir) in lines[0]
        assert f"pid {holder.pid} on {socket.gethostname()}" in lines[0]
        assert not (run_dir / "config.yaml").exists()
        assert not read_metrics(run_dir)
    finally:
        holder.kill()
        holder.wait()
    proc = run_py(run_dir, *args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert read_metrics(run_dir)[-1]["env/frames"] >= 1000


def test_every_rank_is_refused_a_busy_run_directory(tmp_path: Path) -> None:
    """Under torchrun only rank 0 takes the lock; the other ranks learn of the refusal from it."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    lock = (run_dir / ".lock").open("a+")
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    lock.write(f"{os.getpid()} {socket.gethostname()}")
    lock.flush()
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2"]
    args = [f"hydra.run.dir={run_dir}", "env=cartpole", *TINY, "total_frames=1000"]
    proc = subprocess.Popen(
        [*torchrun, str(ROOT / "run.py"), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        start_new_session=True,  # its ranks are killed with it if the test times out
    )
    try:
        _, stderr = proc.communicate(timeout=120)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        lock.close()
    refusal = f"stampede: {run_dir} is in use by another run (pid {os.getpid()}"
    assert proc.returncode != 0
    assert stderr.count(refusal) == 2, stderr[-3000:]
    assert not (run_dir / "config.yaml").exists()

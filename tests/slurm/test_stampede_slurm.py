"""Stampede on the real local SLURM cluster: job arrays, 2-rank learners, preemption + requeue."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stampede.rundir import checkpoint
from stampede.rundir.files import WANDB_ID_FILE, read_metrics

from .conftest import LocalSlurm, run_cmd

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(240)]

ROOT = Path(__file__).resolve().parents[2]
TINY = [
    "env=cartpole",
    "model=mlp",
    "runtime.num_actors=1",
    "runtime.envs_per_actor=4",
    "runtime.batch_size=8",
    "logger.interval_s=1",
    "hydra.launcher.cpus_per_task=1",
]
DIGEST = re.compile(r"rank (\d+)/(\d+) done: updates=(\d+) frames=(\d+) parameter_digest=(\w+)")
# The runner's line when it resumes from a checkpoint: (checkpoint frames, frames).
RESUMED = re.compile(r"resumed from .*ckpt_(\d+)\.pt: frames=(\d+)")


def slurm_command(sweep_dir: Path, *overrides: str) -> list[str]:
    """`run.py infra=slurm` with TINY, the overrides and the sweep directory (a sweep needs
    `--multirun` after them, or an experiment that sets `hydra.mode`)."""
    run_py = [sys.executable, str(ROOT / "run.py"), "infra=slurm", *TINY, *overrides]
    return [*run_py, f"hydra.sweep.dir={sweep_dir}"]


def multirun(sweep_dir: Path, *overrides: str, timeout: float = 200) -> subprocess.CompletedProcess:
    """`run.py infra=slurm ... --multirun`: submits, waits for the jobs, returns."""
    return subprocess.run(
        [*slurm_command(sweep_dir, *overrides), "--multirun"],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=sweep_dir.parent,
    )


def job_dirs(sweep_dir: Path) -> list[Path]:
    return sorted(p.parent for p in sweep_dir.glob("*/config.yaml"))


def submitit_logs(sweep_dir: Path) -> str:
    return "".join(p.read_text() for p in sorted(sweep_dir.glob(".submitit/*/*_log.*")))


def test_two_job_multirun_completes(slurm: LocalSlurm, tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    started = time.monotonic()
    proc = multirun(sweep, "total_frames=8000", "logger.wandb.mode=disabled", "seed=1,2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    dirs = job_dirs(sweep)
    assert len(dirs) == 2
    for run_dir in dirs:
        rows = read_metrics(run_dir)
        assert rows, f"no metrics in {run_dir}"
        assert rows[-1]["env/frames"] >= 8000
        assert checkpoint.list_checkpoints(checkpoint.checkpoint_dir(run_dir))
    seeds = sorted("seed: 1" in (d / "config.yaml").read_text() for d in dirs)
    assert seeds == [False, True]
    print(f"2-job array submitted and finished in {time.monotonic() - started:.1f} s")


def test_two_ranks_under_slurm_hold_identical_parameters(slurm: LocalSlurm, tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    proc = multirun(
        sweep, "total_frames=12000", "logger.wandb.mode=offline", "hydra.launcher.tasks_per_node=2"
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    [run_dir] = job_dirs(sweep)
    found = DIGEST.findall(submitit_logs(sweep))
    assert sorted(int(rank) for rank, *_ in found) == [0, 1], found
    assert {(world, updates, frames, digest) for _, world, updates, frames, digest in found} == {
        (found[0][1], found[0][2], found[0][3], found[0][4])
    }, found
    assert int(found[0][2]) > 0
    _assert_rank0_wrote_alone(run_dir, submitit_logs(sweep))


def test_multitask_popart_job_with_two_ranks_under_slurm(slurm: LocalSlurm, tmp_path: Path) -> None:
    """The multi-task command with infra=slurm and two learner ranks: rank 0's envs play Pong,
    rank 1's Breakout; PopArt's statistics and the per-game frames are summed over the ranks, so
    both ranks end with identical parameters and the counts cover both games."""
    sweep = tmp_path / "sweep"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "run.py"),
            "--multirun",
            "infra=slurm",
            "env.games=[pong,breakout]",
            "env.full_action_space=true",
            "vtrace.popart=true",
            "runtime.num_actors=1",
            "runtime.envs_per_actor=2",
            "runtime.batch_size=4",
            "runtime.unroll_length=10",
            "total_frames=8000",
            "logger.interval_s=1",
            "logger.wandb.mode=disabled",
            "hydra.launcher.cpus_per_task=1",
            "hydra.launcher.tasks_per_node=2",
            f"hydra.sweep.dir={sweep}",
        ],
        capture_output=True,
        text=True,
        timeout=200,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    [run_dir] = job_dirs(sweep)
    found = DIGEST.findall(submitit_logs(sweep))
    assert sorted(int(rank) for rank, *_ in found) == [0, 1], found
    assert len({tuple(f[1:]) for f in found}) == 1, found
    last = [row for row in read_metrics(run_dir) if "perf/fps" in row][-1]
    assert last["env/pong/frames"] + last["env/breakout/frames"] == last["env/frames"]
    assert last["env/pong/frames"] == last["env/breakout/frames"]  # one game per rank
    assert last["popart/breakout/sigma"] != 1.0


def test_torchrun_two_ranks_hold_identical_parameters(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node",
            "2",
            str(ROOT / "run.py"),
            *TINY[:-1],
            "total_frames=12000",
            "logger.wandb.mode=offline",
            f"hydra.run.dir={run_dir}",
        ],
        capture_output=True,
        text=True,
        timeout=200,
        cwd=tmp_path,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-3000:]
    found = DIGEST.findall(output)
    assert sorted(int(rank) for rank, *_ in found) == [0, 1], found
    assert len({tuple(f[1:]) for f in found}) == 1, found
    _assert_rank0_wrote_alone(run_dir, output)


def _assert_rank0_wrote_alone(run_dir: Path, output: str) -> None:
    """One checkpoint write (at exit), one W&B run, one metrics stream."""
    assert output.count("checkpoint ckpt_") == 1, output[-3000:]
    assert len(checkpoint.list_checkpoints(checkpoint.checkpoint_dir(run_dir))) == 1
    assert len(list((run_dir / "wandb").glob("offline-run-*"))) == 1
    frames = [row["env/frames"] for row in read_metrics(run_dir)]
    assert frames == sorted(set(frames)), "two ranks wrote metrics"


def test_preempted_job_requeues_and_resumes(slurm: LocalSlurm, tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    launcher = subprocess.Popen(
        [*slurm_command(sweep, "total_frames=30000", "logger.wandb.mode=offline"), "--multirun"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=tmp_path,
    )
    try:
        deadline = time.monotonic() + 90
        while not (job_dirs(sweep) and len(read_metrics(job_dirs(sweep)[0])) >= 3):
            assert time.monotonic() < deadline, "the job never started training"
            time.sleep(0.5)
        [run_dir] = job_dirs(sweep)
        job_id = run_cmd(["squeue", "-h", "-o", "%i"]).stdout.split()[0]
        slurm.track(job_id)
        before = read_metrics(run_dir)
        run_id = (run_dir / WANDB_ID_FILE).read_text()
        preempted_at = time.monotonic()
        assert run_cmd(["scancel", "--signal=USR2", job_id]).returncode == 0
        out, _ = launcher.communicate(timeout=200)
    finally:
        launcher.kill()
    assert launcher.returncode == 0, out[-3000:]
    logs = submitit_logs(sweep)
    assert "Requeued job" in logs
    resumed = RESUMED.search(logs)
    assert resumed, logs[-3000:]
    rows = read_metrics(run_dir)
    frames = [row["env/frames"] for row in rows]
    updates = [row["learner/updates"] for row in rows]
    assert frames == sorted(set(frames)), "duplicate or out-of-order metric steps"
    assert updates == sorted(set(updates))
    assert int(resumed.group(2)) >= max(r["env/frames"] for r in before)
    after = rows[len(before) :]
    assert after, "no metrics after the requeue"
    assert frames[-1] >= 30000
    assert (run_dir / WANDB_ID_FILE).read_text() == run_id
    assert {p.name.rsplit("-", 1)[-1] for p in (run_dir / "wandb").glob("offline-run-*")} == {
        run_id.strip()
    }
    print(json.dumps({"requeue_to_finish_s": round(time.monotonic() - preempted_at, 1)}))


# Its own waits add up past the module's 240 s: 120 s for member 0 to start, then 300 s for the
# controller (seen: 178 s alone on 2 cores, past 240 s with a training run beside it).
@pytest.mark.timeout(480)
def test_pbt_members_as_slurm_jobs_survive_a_preemption(slurm: LocalSlurm, tmp_path: Path) -> None:
    """`+experiment=pbt_pong infra=slurm` with 2 members: each round is a 2-job array; member 0's
    job is preempted (USR2) in the first round, requeues, resumes from its checkpoint, and the
    controller waits for it; the population finishes both rounds with its lineage intact."""
    sweep = tmp_path / "pbt"
    controller = subprocess.Popen(
        slurm_command(
            sweep,
            "+experiment=pbt_pong",
            "hydra.sweeper.members=2",
            "hydra.sweeper.interval_frames=20000",
            "total_frames=40000",
            "logger.wandb.mode=offline",
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=tmp_path,
    )
    member0 = sweep / "member_0"
    try:
        deadline = time.monotonic() + 120
        while len(read_metrics(member0)) < 3:
            assert time.monotonic() < deadline, "member 0 never started training"
            assert controller.poll() is None, controller.communicate()[0][-3000:]
            time.sleep(0.5)
        jobs = run_cmd(["squeue", "-h", "-o", "%i"]).stdout.split()
        [job_id] = [j for j in jobs if j.endswith("_0")]  # array task 0: member 0
        slurm.track(job_id)
        before = read_metrics(member0)
        assert before[-1]["env/frames"] < 20000, "the round ended before the preemption"
        assert run_cmd(["scancel", "--signal=USR2", job_id]).returncode == 0
        out, _ = controller.communicate(timeout=300)
    finally:
        controller.kill()
    assert controller.returncode == 0, out[-3000:]
    logs = submitit_logs(sweep)
    assert "Requeued job" in logs
    log = (member0 / "run.log").read_text()
    resumed = RESUMED.search(log)
    assert resumed, log[-3000:]
    assert 0 < int(resumed.group(2)) < 20000  # mid-round: from the checkpoint the preemption wrote
    rows = read_metrics(member0)
    frames = [row["env/frames"] for row in rows if "perf/fps" in row]  # training lines
    assert frames == sorted(set(frames)), "duplicate or out-of-order metric steps"
    assert frames[-1] >= 40000
    # eval.at_end (the experiment's): once, when the population finished
    assert [row["env/frames"] >= 40000 for row in rows if "eval/episode_return" in row] == [True]
    lineage = [
        json.loads(line) for line in (sweep / "pbt" / "lineage.jsonl").read_text().splitlines()
    ]
    assert [(r["round"], r["member"]) for r in lineage] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert all(r["frames"] >= 20000 * (r["round"] + 1) for r in lineage)
    [exploit] = [r for r in lineage if r["copied_from"] is not None]
    assert exploit["round"] == 0
    assert exploit["copied_from"] == 1 - exploit["member"]
    state = json.loads((sweep / "pbt" / "state.json").read_text())
    assert state["round"] == 2
    assert state["lineage"] == lineage
    assert state["pending"] is None


def test_optuna_trials_as_slurm_jobs(slurm: LocalSlurm, tmp_path: Path) -> None:
    """`+experiment=tune_pong infra=slurm`: the trials are SLURM jobs (a 2-job array per batch);
    each returns its objective through submitit to the sweeper, which stores it in the study."""
    optuna = pytest.importorskip("optuna")
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    proc = multirun(
        tmp_path / "sweep",
        "+experiment=tune_pong",
        "total_frames=8000",
        "eval.at_end=false",
        "logger.wandb.mode=disabled",
        "hydra.sweeper.n_trials=2",
        "hydra.sweeper.n_jobs=2",
        f"hydra.sweeper.storage={storage}",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    study = optuna.load_study(study_name="tune_pong", storage=storage)
    assert [t.state for t in study.trials] == [optuna.trial.TrialState.COMPLETE] * 2
    logged = re.findall(r"objective env/episode_return = (\S+)", submitit_logs(tmp_path / "sweep"))
    assert sorted(float(v) for v in logged) == pytest.approx(sorted(t.value for t in study.trials))
    assert "Best parameters:" in proc.stdout + proc.stderr

"""Evaluation of whole runs through ``run.py``: mode=eval on a trained Pong run (stats printed, mp4
written beside the run) and a training run's eval/* line in every sink."""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path

import numpy as np
import pytest
from conftest import run_py, start_py, wait_for

from stampede.config.runtime import usable_cpus
from stampede.rundir import checkpoint


def _video_frames(path: Path) -> np.ndarray:
    import imageio.v3 as iio

    return np.asarray(iio.imread(path, index=None))


def test_mode_eval_on_a_trained_pong_run_prints_stats_and_writes_video(tmp_path: Path) -> None:
    """Train Pong briefly (games capped at 250 agent steps to keep it fast), then evaluate it from
    the run directory alone: no env=/model= on the eval command line."""
    pytest.importorskip("moviepy")
    run_dir = tmp_path / "train"
    trained = run_py(
        run_dir,
        "env=pong",
        "env.max_episode_frames=1000",
        "model.hidden_size=32",
        "total_frames=1600",
        "runtime.num_actors=1",
        "runtime.envs_per_actor=2",
        "runtime.batch_size=2",
        "optim.minibatches=1",
        "runtime.unroll_length=20",
        "logger.wandb.mode=disabled",
        "logger.progress=false",
    )
    assert trained.returncode == 0, trained.stderr[-3000:]
    evaluated = run_py(
        tmp_path / "eval",
        "mode=eval",
        f"checkpoint={run_dir}",
        "eval.episodes=10",
        "eval.num_envs=4",
        "eval.video=true",
    )
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    assert "evaluation of pong (seed 1, " in evaluated.stdout
    assert "10 games, sampled actions" in evaluated.stdout
    assert "return: mean " in evaluated.stdout
    record = json.loads((run_dir / "eval.json").read_text())
    assert record["episodes"] == len(record["returns"]) == 10
    assert all(-21 <= r <= 21 for r in record["returns"])
    assert record["checkpoint"] == str(checkpoint.resolve(run_dir).resolve())
    (video,) = (run_dir / "videos").glob("*.mp4")
    assert video.name == f"pong_{record['frames']:012d}.mp4"
    frames = _video_frames(video)
    assert frames.shape[1:] == (210, 160, 3)
    assert 10 < len(frames) <= 252  # one frame per agent step of one capped game (+ reset)
    assert not (tmp_path / "eval" / "eval.json").exists()  # results live with the run only


EVAL_KEYS = (
    "eval/episode_return",
    "eval/episode_return_median",
    "eval/episode_return_std",
    "eval/episode_length",
    "eval/episodes",
)


def test_eval_metrics_reach_every_sink_of_a_training_run(tmp_path: Path) -> None:
    """A short CartPole run that evaluates when it ends: its eval/* line is in metrics.jsonl, in
    the offline W&B run and in the log, under the same names and with eval.json's numbers."""
    import wandb_records

    from stampede.rundir.files import read_metrics

    run_dir = tmp_path / "run"
    trained = run_py(
        run_dir,
        "debug=fast",
        "env=cartpole",
        "model=mlp",
        "total_frames=100",
        "eval.at_end=true",
        "eval.episodes=2",
        "eval.num_envs=2",
        "logger.wandb.mode=offline",
        "logger.progress=false",
    )
    assert trained.returncode == 0, trained.stderr[-3000:]
    record = json.loads((run_dir / "eval.json").read_text())
    wandb_file = next((run_dir / "wandb").glob("offline-run-*/run-*.wandb"))
    for sink, rows in (
        ("metrics.jsonl", read_metrics(run_dir)),
        ("W&B", wandb_records.history(wandb_file)),
    ):
        (line,) = [row for row in rows if "eval/episode_return" in row]
        assert set(EVAL_KEYS) <= set(line), f"{sink}: {sorted(line)}"
        assert line["env/frames"] == record["frames"], sink
        assert (line["eval/episode_return"], line["eval/episodes"]) == (record["mean"], 2), sink
    log = (run_dir / "run.log").read_text()
    assert all(f"{key}=" in log for key in EVAL_KEYS), log[-2000:]


# 100 frames of CartPole, then the final evaluation (its eval.episodes given by each test).
TRAIN_THEN_EVALUATE = (
    "debug=fast",
    "env=cartpole",
    "model=mlp",
    "total_frames=100",
    "eval.at_end=true",
    "eval.num_envs=2",
    "logger.wandb.mode=disabled",
    "logger.progress=false",
)


def test_a_finished_run_started_again_does_not_play_its_final_evaluation_twice(
    tmp_path: Path,
) -> None:
    """A relaunched sweep starts its finished runs again: their final evaluation is in eval.json
    already and is not played again, and no actor starts nor a line goes to their logs; with
    other eval settings the evaluation is played."""
    run_dir = tmp_path / "run"
    command = TRAIN_THEN_EVALUATE

    def history() -> list[dict]:
        lines = (run_dir / "eval_history.jsonl").read_text().splitlines()
        return [json.loads(line) for line in lines]

    proc = run_py(run_dir, *command, "eval.episodes=2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    logs = {name: (run_dir / name).read_bytes() for name in ("episodes.jsonl", "metrics.jsonl")}
    proc = run_py(run_dir, *command, "eval.episodes=2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [row["episodes"] for row in history()] == [2]
    assert {name: (run_dir / name).read_bytes() for name in logs} == logs
    run_log = (run_dir / "run.log").read_text()
    assert "is finished (100 of 100 frames, its evaluation done): nothing left" in run_log
    assert run_log.count("layout: ") == 1, run_log[-3000:]  # the actors started once
    proc = run_py(run_dir, *command, "eval.episodes=3")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [row["episodes"] for row in history()] == [2, 3]


def test_evaluations_during_training_share_the_cpus_and_the_final_one_has_them_all(
    tmp_path: Path,
) -> None:
    """Every ``eval.every_frames`` the learner evaluates while its actors run, so on
    ``runtime.actor_threads`` threads; once training ends and the actors have stopped, the final
    evaluation plays on every usable CPU (torch's threads and the env vector's)."""
    run_dir = tmp_path / "run"
    proc = run_py(run_dir, *TRAIN_THEN_EVALUATE, "eval.every_frames=40", "eval.episodes=2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = (run_dir / "eval_history.jsonl").read_text().splitlines()
    assert [json.loads(line)["frames"] for line in lines] == [40, 80, 100]
    log = (run_dir / "run.log").read_text()
    threads = re.findall(r"evaluating CartPole-v1 at (\d+) frames: .*threads=(\d+)\)", log)
    assert threads == [("40", "1"), ("80", "1"), ("100", str(usable_cpus()))], log[-3000:]


def test_a_stop_signal_abandons_the_final_evaluation_and_a_restart_plays_it(
    tmp_path: Path,
) -> None:
    """SIGTERM (or Ctrl-C, or a preemption) while the final evaluation plays its games: the
    process ends within seconds with no eval.json and no objective, instead of playing the games
    out (200 games to the frame cap take longer than 10M frames of training). Started again, the
    run finds its training done and plays the evaluation."""
    run_dir = tmp_path / "run"
    command = TRAIN_THEN_EVALUATE
    proc = start_py(run_dir, *command, "eval.episodes=1000000")  # far more than 30 s of games
    log = run_dir / "run.log"
    wait_for(lambda: log.exists() and "evaluating" in log.read_text(), 90, "the evaluation")
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out[-3000:]  # a single run: stopped with its checkpoint
    assert "evaluation at 100 frames abandoned (SIGTERM)" in out, out[-3000:]
    assert "stopped by SIGTERM" in out
    assert "objective" not in out
    assert not (run_dir / "eval.json").exists()

    again = run_py(run_dir, *command, "eval.episodes=3")
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads((run_dir / "eval.json").read_text())["episodes"] == 3

"""Metrics to every sink under the same names (stampede.rundir.sinks): metrics.jsonl, the log's
summary line, episodes.jsonl with a start line per (re)start, and one W&B run per run directory."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import wandb_records

from stampede.eval import protocol as ev
from stampede.eval.results import VIDEO_KEY, eval_metrics
from stampede.rundir import files
from stampede.rundir.files import read_jsonl, read_metrics
from stampede.rundir.sinks import MetricLogger


def metric_logger(run_dir: Path, **settings: Any) -> MetricLogger:
    """A run's logger writing the JSONL files only, unless ``settings`` say otherwise."""
    defaults: dict[str, Any] = {
        "jsonl": True,
        "wandb_mode": "disabled",
        "wandb_project": "test",
        "wandb_entity": None,
        "wandb_group": None,
        "wandb_tags": [],
        "run_name": "run",
        "config": {},
        "total_frames": 1000,
        "start_frames": 0,
        "progress": False,
    }
    return MetricLogger(run_dir, **(defaults | settings))


def test_an_eval_video_goes_to_the_sinks_as_its_path(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    video = tmp_path / "videos" / "CartPole-v1_000000000500.mp4"
    evaluation = ev.Evaluation(returns=(10.0, 30.0), lengths=(10, 30), video=video)
    with caplog.at_level("INFO", logger="stampede"), metric_logger(tmp_path) as logger:
        logger.write(eval_metrics(evaluation, 500), {VIDEO_KEY: video})
    (line,) = read_metrics(tmp_path)
    assert line == {
        "env/frames": 500,
        "eval/episode_return": 20.0,
        "eval/episode_return_median": 20.0,
        "eval/episode_return_std": 10.0,
        "eval/episode_length": 20.0,
        "eval/episodes": 2,
        "eval/video": str(video),
    }
    assert "eval/episode_return=20 eval/episode_return_median=20" in caplog.text
    assert f"eval/video={video}" in caplog.text


def test_non_finite_values_are_left_out_and_the_log_shows_the_summary_keys(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A NaN loss is no JSON number: the line goes without it. Integers stay integers. The log
    line shows the progress keys only, the files everything."""
    metrics = {
        "env/frames": 4096,
        "perf/fps": 1234.5678,
        "loss/total": float("nan"),
        "loss/pg": 0.25,
        "grad/norm": float("inf"),
        "env/episode_return": -20.5,
    }
    with caplog.at_level("INFO", logger="stampede"), metric_logger(tmp_path) as logger:
        logger.write(metrics)
    (line,) = read_metrics(tmp_path)
    assert line == {
        "env/frames": 4096,
        "perf/fps": 1234.5678,
        "loss/pg": 0.25,
        "env/episode_return": -20.5,
    }
    assert isinstance(line["env/frames"], int)
    (summary,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("env/")]
    assert summary == "env/frames=4096 perf/fps=1235 env/episode_return=-20.5"


def test_each_finished_game_is_a_line_after_the_starts_line(tmp_path: Path) -> None:
    with metric_logger(tmp_path, start_frames=300) as logger:
        logger.write_episodes(400, 12.34567, [1.0, -2.0], [10, 20])
    assert read_jsonl(tmp_path / files.EPISODES_FILE) == [
        {files.START_KEY: 300},
        {
            "env/frames": 400,
            "time/elapsed_s": 12.346,
            "env/episode_return": 1.0,
            "env/episode_length": 10,
        },
        {
            "env/frames": 400,
            "time/elapsed_s": 12.346,
            "env/episode_return": -2.0,
            "env/episode_length": 20,
        },
    ]


def test_a_multitask_runs_games_are_logged_under_their_game(tmp_path: Path) -> None:
    with metric_logger(tmp_path) as logger:
        logger.write_episodes(500, 1.0, [3.0, -21.0], [30, 40], [("breakout", 90), ("pong", 410)])
    _, breakout, pong = read_jsonl(tmp_path / files.EPISODES_FILE)
    assert breakout == {
        "env/frames": 500,
        "time/elapsed_s": 1.0,
        "env/breakout/episode_return": 3.0,
        "env/breakout/episode_length": 30,
        "env/breakout/frames": 90,
    }
    assert (pong["env/pong/episode_return"], pong["env/pong/frames"]) == (-21.0, 410)


def test_a_resumed_run_appends_to_its_history(tmp_path: Path) -> None:
    """Nothing is rewritten: the second start's lines follow the first's, and its start line
    tells the readers which of the first start's games its checkpoint threw away."""
    with metric_logger(tmp_path) as logger:
        logger.write({"env/frames": 100, "loss/pg": 1.0})
        logger.write_episodes(150, 1.0, [5.0], [50])
    with metric_logger(tmp_path, start_frames=120) as logger:
        logger.write({"env/frames": 200, "loss/pg": 2.0})
        logger.write_episodes(210, 2.0, [6.0], [60])
    assert [line["env/frames"] for line in read_metrics(tmp_path)] == [100, 200]
    lines = read_jsonl(tmp_path / files.EPISODES_FILE)
    assert [line.get(files.START_KEY, line.get("env/frames")) for line in lines] == [
        0,
        150,
        120,
        210,
    ]
    assert [line["env/frames"] for line in files.read_episodes(tmp_path)] == [210]


def test_without_jsonl_nothing_is_written(tmp_path: Path) -> None:
    with metric_logger(tmp_path, jsonl=False) as logger:
        logger.write({"env/frames": 1})
        logger.write_episodes(1, 0.0, [1.0], [1])
    assert list(tmp_path.iterdir()) == []


def test_a_resumed_run_continues_the_same_wandb_run(tmp_path: Path) -> None:
    """The id stored in the run directory names the W&B run of every start; each start logs its
    own lines into it."""
    for frames in (100, 200):
        with metric_logger(tmp_path, wandb_mode="offline") as logger:
            logger.write({"env/frames": frames, "loss/pg": frames / 100})
        time.sleep(1.1)  # W&B names an offline run's directory by the second it started
    run_id = (tmp_path / files.WANDB_ID_FILE).read_text().strip()
    runs = sorted((tmp_path / "wandb").glob("offline-run-*"))
    assert [run.name.rsplit("-", 1)[1] for run in runs] == [run_id, run_id]
    logged = [
        [row["env/frames"] for row in wandb_records.history(run / f"run-{run_id}.wandb")]
        for run in runs
    ]
    assert logged == [[100], [200]]

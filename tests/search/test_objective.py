"""What a finished run returns to a search: the mean of its last 100 games (of one game, or
since some frames), or a figure of its end-of-training evaluation; NaN when there is none."""

from __future__ import annotations

import json
import math
from pathlib import Path

from stampede.config.objective import Objective
from stampede.eval.results import EvalRecord
from stampede.rundir.files import EPISODES_FILE, EVAL_FILE, MULTITASK_EVAL_DIR
from stampede.search.objective import value


def games(run_dir: Path, rows: list[dict]) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / EPISODES_FILE).write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_the_mean_of_the_last_100_games_and_of_the_recent_ones(tmp_path: Path) -> None:
    games(tmp_path, [{"env/frames": f, "env/episode_return": float(f)} for f in range(1, 151)])
    env = Objective("env", None, "episode_return")
    assert value(env, tmp_path) == sum(range(51, 151)) / 100  # the last 100 of 150
    assert value(env, tmp_path, since_frames=140) == sum(range(141, 151)) / 10
    assert math.isnan(value(env, tmp_path, since_frames=150))  # no game since


def test_one_game_of_a_multitask_run(tmp_path: Path) -> None:
    rows = [
        {"env/frames": 10, "env/pong/frames": 5, "env/pong/episode_return": -21.0},
        {"env/frames": 20, "env/breakout/frames": 10, "env/breakout/episode_return": 3.0},
        {"env/frames": 30, "env/pong/frames": 15, "env/pong/episode_return": -19.0},
    ]
    games(tmp_path, rows)
    assert value(Objective("env", "pong", "episode_return"), tmp_path) == -20.0
    assert value(Objective("env", "breakout", "episode_return"), tmp_path) == 3.0


def test_the_evaluation_figures_and_nan_without_an_evaluation(tmp_path: Path) -> None:
    mean = Objective("eval", None, "episode_return")
    assert math.isnan(value(mean, tmp_path))
    record = EvalRecord(
        game="pong", env_kind="atari", seed=1, experiment="test", frames=100, episodes=3,
        greedy=False, returns=(1.0, 2.0, 6.0), mean=3.0, median=2.0, std=2.16, min=1.0,
        max=6.0, checkpoint=None,
    )  # fmt: skip
    where = tmp_path / MULTITASK_EVAL_DIR / "pong"
    where.mkdir(parents=True)
    for directory in (tmp_path, where):
        (directory / EVAL_FILE).write_text(json.dumps(record.to_json()))
    assert value(mean, tmp_path) == 3.0
    assert value(Objective("eval", "pong", "episode_return_median"), tmp_path) == 2.0

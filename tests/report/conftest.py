"""Sweeps for the report tests: eval.json files of a partial Atari sweep (``sweep``), and whole
run directories as the runner and evaluation leave them (``run_sweep``).

The test files import the helpers with ``from .conftest import ...``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from stampede.config.schema import Config
from stampede.envs import EnvSettings
from stampede.eval.protocol import Evaluation
from stampede.eval.results import EvalRecord, write_eval
from stampede.rundir.checkpoint_state import config_yaml

# A partial sweep: 3 games x 2 seeds, scores chosen so means and stds are easy to check.
SWEEP_SCORES = {
    ("pong", 1): 10.0,
    ("pong", 2): 20.0,
    ("breakout", 1): 100.0,
    ("breakout", 2): 300.0,
    ("ms_pacman", 1): 1000.0,
    ("ms_pacman", 2): 2000.0,
}


def eval_record(game: str, seed: int, mean: float, **extra: object) -> dict[str, object]:
    record: dict[str, object] = {
        "game": game,
        "env_kind": "atari",
        "seed": seed,
        "experiment": "atari5",
        "frames": 1_234_560,
        "episodes": 2,
        "greedy": False,
        "returns": [mean - 1.0, mean + 1.0],
        "mean": mean,
        "median": mean,
        "std": 1.0,
        "min": mean - 1.0,
        "max": mean + 1.0,
        "checkpoint": "checkpoints/ckpt_000001234560.pt",
    }
    record.update(extra)
    return record


def write_json(path: Path, record: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    """A multirun-like tree with run directories at different depths."""
    root = tmp_path / "multirun"
    for i, ((game, seed), mean) in enumerate(SWEEP_SCORES.items()):
        # Depth varies with i: multirun/0/eval.json ... multirun/d/12-00-00/5/eval.json.
        run_dir = root.joinpath(*["2026-11-29", "12-00-00"][: i % 3], str(i))
        write_json(run_dir / "eval.json", eval_record(game, seed, mean))
    return root


GAMES = ("pong", "breakout", "qbert")
SEEDS = (1, 2)


def make_run(run_dir: Path, game: str, seed: int, episodes: int = 40) -> None:
    """A run directory as the runner and evaluation leave it, with a rising learning curve."""
    run_dir.mkdir(parents=True)
    cfg = Config(env=EnvSettings(game=game), seed=seed, name="fixture")
    (run_dir / "config.yaml").write_text(config_yaml(cfg))
    rng = np.random.default_rng(seed)
    frames = np.sort(rng.integers(1_000, 2_000_000, episodes))
    returns = 10.0 * frames / 2_000_000 + rng.normal(0, 1, episodes) + seed
    with (run_dir / "episodes.jsonl").open("w") as f:
        for fr, ret in zip(frames, returns, strict=True):
            line = {"env/frames": int(fr), "env/episode_return": float(ret)}
            f.write(json.dumps(line | {"env/episode_length": 100}) + "\n")
    with (run_dir / "metrics.jsonl").open("w") as f:
        f.write(json.dumps({"env/frames": int(frames[-1]), "loss/total": 0.5}) + "\n")
    evaluation = Evaluation(returns=tuple(returns[-5:]), lengths=(100,) * 5)
    write_eval(run_dir, EvalRecord.of(evaluation, cfg, int(frames[-1]), None), evaluation)


@pytest.fixture(scope="module")
def run_sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Hydra multirun of GAMES x SEEDS whole run directories."""
    root = tmp_path_factory.mktemp("multirun") / "2026-11-29" / "12-00-00"
    for i, (game, seed) in enumerate((g, s) for g in GAMES for s in SEEDS):
        make_run(root / f"{i}_env.game={game},seed={seed}", game, seed)
    (root / "multirun.yaml").write_text("{}\n")
    return root

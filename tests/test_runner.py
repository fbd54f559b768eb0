"""The runner's own state: what a resumed run restores, and how many processes it starts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from stampede.config import load_config
from stampede.runner import Trainer

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
TINY = ["env=cartpole", "model=mlp", "debug=fast", "logger.wandb.mode=disabled"]


class _Stop(Exception):
    pass


def _rng_when_training_starts(trainer: Trainer, monkeypatch: pytest.MonkeyPatch) -> torch.Tensor:
    """The learner's torch RNG state at the point train() starts the actors (not started)."""

    def stop(*args: object) -> None:
        raise _Stop

    monkeypatch.setattr(trainer, "_logger", stop)
    with pytest.raises(_Stop):
        trainer.train()
    return torch.get_rng_state()


def test_resume_continues_the_saved_random_stream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = load_config(CONF, TINY)
    first = Trainer(cfg, tmp_path)
    torch.manual_seed(1234)
    torch.rand(5)  # somewhere along a stream that no seed of the config gives
    saved = torch.get_rng_state()
    first.save_checkpoint()
    resumed = Trainer(cfg, tmp_path)
    assert torch.equal(_rng_when_training_starts(resumed, monkeypatch), saved)


def test_a_fresh_run_starts_from_its_seed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = load_config(CONF, [*TINY, "seed=7"])
    state = _rng_when_training_starts(Trainer(cfg, tmp_path), monkeypatch)
    assert torch.equal(state, torch.manual_seed(7).get_state())


def test_one_actor_per_cpu_of_the_allocation_not_of_the_machine() -> None:
    """Under taskset (or a SLURM allocation) num_actors=0 counts the CPUs we may use."""
    code = "from stampede.config import RuntimeConfig; print(RuntimeConfig().actors)"
    out = subprocess.run(
        ["taskset", "-c", "0", sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert out.stdout.strip() == "1"


def _batch() -> dict[str, torch.Tensor]:
    return {
        "actor_time": torch.ones(1, 5, dtype=torch.float64),
        "episode_return": torch.tensor([[float("nan")], [3.0]]),
        "episode_length": torch.tensor([[0], [7]]),
    }


def test_a_skipped_update_stays_out_of_the_interval_means() -> None:
    from stampede.runner import _Window

    window = _Window(frames=0)
    good = {"loss/pg": 1.0, "loss/baseline": 2.0, "loss/entropy": -1.0, "learner/grad_norm": 4.0}
    window.add(good | {"learner/explained_variance": 0.5}, _batch())
    nan = float("nan")
    window.add(good | {"loss/baseline": nan, "learner/grad_norm": nan}, _batch())
    window.add(good | {"learner/explained_variance": nan}, _batch())  # a NaN diagnostic only
    line = window.line(frames=300, updates=3, frames_per_step=1, world_size=1)
    assert line["loss/baseline"] == 2.0
    assert line["learner/grad_norm"] == 4.0
    assert line["learner/explained_variance"] == 0.5
    assert line["learner/skipped_in_interval"] == 1
    assert line["env/episodes"] == 3  # the skipped update's games still count

"""The trainer's own state: what a resumed run restores, and how many processes it starts."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from stampede.config.compose import load_config
from stampede.rundir import checkpoint
from stampede.rundir.checkpoint import CheckpointError
from stampede.train import trainer as runner
from stampede.train.trainer import Trainer

ROOT = Path(__file__).resolve().parents[2]
CONF = ROOT / "conf"
TINY = ["env=cartpole", "model=mlp", "debug=fast", "logger.wandb.mode=disabled"]


class _Stop(Exception):
    pass


def _rng_when_training_starts(trainer: Trainer, monkeypatch: pytest.MonkeyPatch) -> torch.Tensor:
    """The learner's torch RNG state at the point train() starts the actors (not started)."""

    def stop(*args: object) -> None:
        raise _Stop

    monkeypatch.setattr(runner, "run_logger", stop)
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
    code = "from stampede.config.runtime import RuntimeConfig; print(RuntimeConfig().actors)"
    out = subprocess.run(
        ["taskset", "-c", "0", sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert out.stdout.strip() == "1"


# An older run's checkpoint: its fingerprint records the MLP's arguments the schema had then (no
# `activation`), and its stored config names the backend by its old name.
OLD_MLP_KWARGS = "[('hidden_size', 64), ('hidden_sizes', [64, 64]), ('use_lstm', False)]"


def _as_an_older_version_wrote_it(run_dir: Path, model_kwargs: str) -> None:
    """Rewrite the run's checkpoint as an older version wrote it, at 100 frames."""
    directory = checkpoint.checkpoint_dir(run_dir)
    found = checkpoint.load_latest(directory)
    assert found is not None
    state = found[1]
    state["fingerprint"]["model_kwargs"] = model_kwargs
    state["config"] = state["config"].replace("backend: python_loop", "backend: gymnasium")
    assert "backend: gymnasium" in state["config"]
    state["frames"] = 100
    checkpoint.save(directory, 100, state, keep=1)


def test_a_checkpoint_of_an_older_version_resumes(tmp_path: Path) -> None:
    cfg = load_config(CONF, [*TINY, "env.backend=python_loop"])
    Trainer(cfg, tmp_path).save_checkpoint()
    _as_an_older_version_wrote_it(tmp_path, OLD_MLP_KWARGS)
    assert Trainer(cfg, tmp_path).progress.frames == 100


@pytest.mark.parametrize(
    ("model_kwargs", "named"),
    [
        (OLD_MLP_KWARGS.replace("64), ('hidden_sizes'", "128), ('hidden_sizes'"), "hidden_size"),
        (OLD_MLP_KWARGS.replace("False", "True"), "use_lstm"),
    ],
)
def test_a_checkpoint_of_an_older_version_and_another_network_is_refused(
    tmp_path: Path, model_kwargs: str, named: str
) -> None:
    cfg = load_config(CONF, [*TINY, "env.backend=python_loop"])
    Trainer(cfg, tmp_path).save_checkpoint()
    _as_an_older_version_wrote_it(tmp_path, model_kwargs)
    with pytest.raises(CheckpointError) as caught:
        Trainer(cfg, tmp_path)
    message = str(caught.value)
    assert "\n" not in message
    assert "was written for another model or env" in message
    assert f"model.{named}: checkpoint" in message
    assert "activation" not in message  # missing from the old record: no difference


class _RecordingPool:
    """Stands in for the actor pool: a full slot whenever asked, until stop(); records calls
    that come after stop() (the batch thread and stop() both talking to the actors' pipes)."""

    restarts = 0
    lockstep = False

    def __init__(self) -> None:
        self.stopped = False
        self.released = 0
        self.after_stop: list[str] = []
        self.callers: set[threading.Thread] = set()

    def _enter(self, name: str) -> None:
        self.callers.add(threading.current_thread())
        if self.stopped:
            self.after_stop.append(name)

    def next_full_slot(self, stopping: Callable[[], bool]) -> int | None:
        self._enter("next_full_slot")
        time.sleep(0.01)  # waiting on the actors' pipes
        return None if stopping() else 0

    def release(self, index: int) -> None:
        self._enter("release")
        self.released += 1

    def set_version(self, version: int) -> None:
        self._enter("set_version")

    def stop(self) -> None:
        self.stopped = True


@pytest.mark.parametrize("prefetch", [True, False])
def test_the_batch_thread_is_joined_before_the_pool_stops(
    prefetch: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loop ends while the batch thread holds a gathered batch (prefetch: blocked on the full
    queue) or waits for the next request (no prefetch); shutdown must end it, then stop the pool."""
    cfg = load_config(CONF, [*TINY, f"runtime.prefetch={str(prefetch).lower()}"])
    trainer = Trainer(cfg, tmp_path)
    pool = _RecordingPool()

    def start_actors() -> _RecordingPool:
        trainer.buffers = SimpleNamespace(
            gather_async=lambda indices, device: ({"s": indices}, None)
        )
        return pool

    batches_gathered = 2 if prefetch else 1  # one in the queue, one waiting to go in

    def loop(*args: object) -> None:
        deadline = time.monotonic() + 30
        while pool.released < batches_gathered * cfg.runtime.slots_per_batch:
            assert time.monotonic() < deadline, "the batch thread gathered nothing"
            time.sleep(0.01)
        time.sleep(0.2)  # it is blocked now: on the full queue, or on the batch request

    monkeypatch.setattr(trainer, "_start_actors", start_actors)
    monkeypatch.setattr(trainer, "_loop", loop)
    trainer.train()
    (thread,) = pool.callers
    assert not thread.is_alive()
    assert pool.after_stop == []


def test_a_resumed_run_takes_the_optimizer_settings_of_its_config(tmp_path: Path) -> None:
    """The checkpoint gives the optimizer's moments, the command its settings: a run resumed with
    another optim.eps or optim.lr (a PBT member after explore) trains with the new values."""
    first = Trainer(
        load_config(CONF, [*TINY, "optim.eps=1e-5", "optim.betas=[0.9,0.999]"]), tmp_path
    )
    for p in first.model.parameters():
        p.grad = torch.ones_like(p)
    first.learner.optimizer.step()
    first.save_checkpoint()
    moments = [s["exp_avg_sq"].clone() for s in first.learner.optimizer.state.values()]
    resumed = Trainer(
        load_config(CONF, [*TINY, "optim.eps=1e-3", "optim.betas=[0.8,0.99]"]), tmp_path
    )
    [group] = resumed.learner.optimizer.param_groups
    assert group["eps"] == 1e-3
    assert group["betas"] == (0.8, 0.99)
    again = [s["exp_avg_sq"] for s in resumed.learner.optimizer.state.values()]
    assert all(torch.equal(a, b) for a, b in zip(moments, again, strict=True))
    assert len(again) == len(moments) > 0

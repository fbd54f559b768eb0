"""Starting a training run (stampede.train.launch): the run directory is locked for the whole run
and freed after it however it ends, and a directory another run holds is refused before the
trainer starts."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

import pytest
import torch.distributed as dist

from stampede.config.schema import Config
from stampede.rundir import lock as run_lock
from stampede.rundir.lock import RunDirBusy
from stampede.train import launch
from stampede.train.distributed import Rank

HOLD_LOCK = """
import sys, time
from pathlib import Path
from stampede.rundir import lock
with lock.hold(Path(sys.argv[1])):
    print("held", flush=True)
    time.sleep(120)
"""


class RecordingTrainer:
    """Stands in for the Trainer: records how it was made, and whether another run could have
    taken the run directory while it trained; ``fail`` makes training raise."""

    made: ClassVar[list[tuple[Config, Path, Rank]]] = []  # reset by each test
    busy_while_training: ClassVar[list[bool]] = []
    fail = False

    def __init__(self, cfg: Config, run_dir: Path, rank: Rank) -> None:
        self.made.append((cfg, run_dir, rank))
        self.run_dir = run_dir

    def train(self) -> None:
        try:
            run_lock.refuse_if_busy(self.run_dir)
        except RunDirBusy as busy:
            self.busy_while_training.append(f"pid {os.getpid()} on " in str(busy))
        else:
            self.busy_while_training.append(False)
        if self.fail:
            raise RuntimeError("training failed")


@pytest.fixture
def trainer(monkeypatch: pytest.MonkeyPatch) -> type[RecordingTrainer]:
    monkeypatch.setattr(RecordingTrainer, "made", [])
    monkeypatch.setattr(RecordingTrainer, "busy_while_training", [])
    monkeypatch.setattr(launch, "Trainer", RecordingTrainer)
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_JOB_ID"):
        monkeypatch.delenv(key, raising=False)
    return RecordingTrainer


def test_the_run_directory_is_locked_while_training_and_free_after(
    tmp_path: Path, trainer: type[RecordingTrainer]
) -> None:
    cfg = Config(device="cpu")
    launch.train(cfg, tmp_path / "run")
    assert trainer.made == [(cfg, tmp_path / "run", Rank())]
    assert trainer.busy_while_training == [True]  # held by this process, naming it
    run_lock.refuse_if_busy(tmp_path / "run")  # free again: no error
    assert not dist.is_initialized()


def test_a_failed_training_frees_the_run_directory(
    tmp_path: Path, trainer: type[RecordingTrainer], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(trainer, "fail", True)
    with pytest.raises(RuntimeError, match="training failed"):
        launch.train(Config(device="cpu"), tmp_path)
    run_lock.refuse_if_busy(tmp_path)  # a resumed run may start at once
    assert not dist.is_initialized()


def test_a_busy_run_directory_is_refused_before_the_trainer_starts(
    tmp_path: Path, trainer: type[RecordingTrainer]
) -> None:
    run_dir = tmp_path / "run"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(run_dir)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(RunDirBusy) as caught:
            launch.train(Config(device="cpu"), run_dir)
    finally:
        holder.kill()
        holder.wait()
    message = str(caught.value)
    assert message.startswith(f"{run_dir} is in use by another run")
    assert f"pid {holder.pid} on {socket.gethostname()}" in message
    assert trainer.made == []
    assert sorted(p.name for p in run_dir.iterdir()) == [".lock"]  # nothing else written

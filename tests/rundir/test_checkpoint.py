"""Checkpoint writes survive a crash at any point, and pruning never loses the good ones; what a
checkpoint holds (its fingerprint, its stored config) still fits after the schemas changed."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from stampede.config.models import AtariNetConfig, MLPConfig
from stampede.config.schema import Config, EvalConfig
from stampede.envs import EnvError, EnvSettings, EnvSpec
from stampede.eval import run as eval_run
from stampede.rundir import checkpoint, files
from stampede.rundir.checkpoint_state import check_fits, config_yaml, fingerprint

ROOT = Path(__file__).resolve().parents[2]


def state(frames: int) -> dict:
    return {"frames": frames, "w": torch.full((3,), float(frames))}


def test_a_copied_checkpoint_without_checksum_never_costs_the_good_ones(tmp_path: Path) -> None:
    """Issue 10's scenario: an unverifiable newer .pt, keep=1, two saves, then a resume."""
    good = checkpoint.save(tmp_path, 100, state(100), keep=1)
    shutil.copy(good, tmp_path / "ckpt_000000009999.pt")  # no .sha256 beside it
    checkpoint.save(tmp_path, 200, state(200), keep=1)
    checkpoint.save(tmp_path, 300, state(300), keep=1)
    _, loaded = checkpoint.load_latest(tmp_path)
    assert loaded["frames"] == 300
    names = sorted(p.name for p in checkpoint.list_checkpoints(tmp_path))
    assert names == ["ckpt_000000000300.pt", "ckpt_000000009999.pt"]  # the bad one left alone


@pytest.mark.parametrize("crash_at", ["checksum", "rename"])
def test_a_crash_inside_save_leaves_the_previous_checkpoint_newest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, crash_at: str
) -> None:
    checkpoint.save(tmp_path, 100, state(100), keep=1)
    original = files.commit

    def crash(tmp: Path, path: Path) -> None:
        if (crash_at == "checksum" and path.suffix == ".sha256") or (
            crash_at == "rename" and path.suffix == ".pt"
        ):
            raise KeyboardInterrupt("killed")
        original(tmp, path)

    monkeypatch.setattr(files, "commit", crash)  # the checksum's write_atomic
    monkeypatch.setattr(checkpoint, "commit", crash)  # the checkpoint's rename
    with pytest.raises(KeyboardInterrupt):
        checkpoint.save(tmp_path, 200, state(200), keep=1)
    monkeypatch.undo()
    _, loaded = checkpoint.load_latest(tmp_path)
    assert loaded["frames"] == 100
    assert [p.name for p in checkpoint.list_checkpoints(tmp_path)] == ["ckpt_000000000100.pt"]
    assert not list(tmp_path.glob(".*.tmp"))  # no temporary files left behind
    # the next save works and prunes the orphan checksum of the interrupted one
    checkpoint.save(tmp_path, 300, state(300), keep=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "ckpt_000000000300.pt",
        "ckpt_000000000300.sha256",
    ]


def test_keep_counts_the_newest_verifiable_checkpoints(tmp_path: Path) -> None:
    for frames in (1, 2, 3, 4):
        checkpoint.save(tmp_path, frames, state(frames), keep=2)
    assert [p.name for p in checkpoint.list_checkpoints(tmp_path)] == [
        "ckpt_000000000004.pt",
        "ckpt_000000000003.pt",
    ]


# ------------------------------------------------------------------------------ fingerprints

PONG = EnvSpec(
    obs_shape=(4, 84, 84), obs_dtype=np.dtype(np.uint8), num_actions=6, frames_per_step=4
)


def old_atari_fingerprint(model_kwargs: str) -> dict[str, object]:
    """A fingerprint as written before the model schemas listed every constructor argument:
    AtariNet's kwargs then were ``hidden_size`` and ``use_lstm`` only (no ``lstm_size``)."""
    return {
        "model": "stampede.models.AtariNet",
        "model_kwargs": model_kwargs,
        "env": "pong",
        "obs_shape": [4, 84, 84],
        "num_actions": 6,
    }


def test_an_older_fingerprint_of_the_same_network_fits(tmp_path: Path) -> None:
    old = old_atari_fingerprint("[('hidden_size', 256), ('use_lstm', False)]")
    now = fingerprint(Config(model=AtariNetConfig()), PONG)
    assert "lstm_size" in now["model_kwargs"]  # the argument the old record lacks
    check_fits({"fingerprint": old}, now, tmp_path / "ckpt.pt", "advice")


@pytest.mark.parametrize(
    ("old_kwargs", "model", "named"),
    [
        (
            "[('hidden_size', 256), ('use_lstm', False)]",
            AtariNetConfig(hidden_size=128),
            "model.hidden_size: checkpoint 256, this run 128",
        ),
        (
            "[('hidden_size', 256), ('use_lstm', True)]",
            AtariNetConfig(),
            "model.use_lstm: checkpoint True, this run False",
        ),
        (  # lstm_size is missing from the old record: it counts at AtariNet's default (None)
            "[('hidden_size', 256), ('use_lstm', True)]",
            AtariNetConfig(use_lstm=True, lstm_size=128),
            "model.lstm_size: checkpoint None, this run 128",
        ),
    ],
)
def test_an_older_fingerprint_of_another_network_is_refused_in_one_line(
    tmp_path: Path, old_kwargs: str, model: AtariNetConfig, named: str
) -> None:
    old = old_atari_fingerprint(old_kwargs)
    path = tmp_path / "ckpt.pt"
    with pytest.raises(checkpoint.CheckpointError) as caught:
        check_fits({"fingerprint": old}, fingerprint(Config(model=model), PONG), path, "advice")
    message = str(caught.value)
    assert message == f"{path} was written for another model or env ({named}); advice"


def test_another_network_class_is_refused(tmp_path: Path) -> None:
    old = old_atari_fingerprint("[('hidden_size', 256), ('use_lstm', False)]")
    cartpole = EnvSettings(kind="gym", gym_id="CartPole-v1")
    spec = EnvSpec(obs_shape=(4,), obs_dtype=np.dtype(np.float32), num_actions=2, frames_per_step=1)
    now = fingerprint(Config(env=cartpole, model=MLPConfig()), spec)
    with pytest.raises(
        checkpoint.CheckpointError, match=r"model: checkpoint 'stampede\.models\.AtariNet'"
    ):
        check_fits({"fingerprint": old}, now, tmp_path / "ckpt.pt", "advice")


# ------------------------------------------------------------------------- stored configs


def test_a_stored_config_with_an_old_backend_name_still_loads(tmp_path: Path) -> None:
    """Runs stored ``env.backend: gymnasium`` before that backend was renamed python_loop."""
    cartpole = EnvSettings(kind="gym", gym_id="CartPole-v1", backend="python_loop")
    stored = OmegaConf.create(config_yaml(Config(env=cartpole, model=MLPConfig())))
    stored.env.backend = "gymnasium"
    state = {"config": OmegaConf.to_yaml(stored)}
    cfg = eval_run.training_config(state, tmp_path / "c.pt", eval_cfg=EvalConfig(), device="cpu")
    assert cfg.env.backend == "python_loop"
    # Typed today (a command line, a YAML file), the old name still gets the rename error.
    with pytest.raises(EnvError, match=r"env\.backend='gymnasium' was renamed 'python_loop'"):
        EnvSettings(kind="gym", gym_id="CartPole-v1", backend="gymnasium")


def test_a_run_written_before_the_package_layout_changed_resumes(tmp_path: Path) -> None:
    """``tests/data/run_before_issue20`` is a CartPole run directory (config.yaml and its
    checkpoint at 3,072 frames) written by the code of the flat ``stampede`` package, before
    issue 20 moved the modules into subpackages. The same command with more frames resumes it
    where it was: the stored config, fingerprint and state still load."""
    run_dir = tmp_path / "run"
    shutil.copytree(ROOT / "tests" / "data" / "run_before_issue20", run_dir)
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "run.py"),
            f"hydra.run.dir={run_dir}",
            "env=cartpole",
            "model=mlp",
            "total_frames=5000",
            "runtime.num_actors=1",
            "runtime.envs_per_actor=4",
            "runtime.batch_size=4",
            "logger.wandb.mode=disabled",
        ],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    log = (run_dir / "run.log").read_text()
    assert "resumed from" in log
    assert "frames=3072 updates=24" in log
    _, state = checkpoint.load_latest(checkpoint.checkpoint_dir(run_dir))
    assert state["frames"] >= 5000

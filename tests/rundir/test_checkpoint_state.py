"""What a checkpoint holds beside the files (stampede.rundir.checkpoint_state): a resumed run
continues where it stopped, and what an older version wrote (its fingerprint, its stored config,
a whole run directory) still fits after the schemas and the package layout changed."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import ROOT
from omegaconf import OmegaConf

from stampede.config.models import AtariNetConfig, MLPConfig
from stampede.config.schema import CheckpointingConfig, Config, EvalConfig
from stampede.envs import EnvError, EnvSettings, EnvSpec
from stampede.eval import run as eval_run
from stampede.models import MLP
from stampede.rundir import checkpoint, checkpoint_state
from stampede.rundir.checkpoint_state import check_fits, config_yaml, fingerprint

CARTPOLE = EnvSettings(kind="gym", gym_id="CartPole-v1")
CARTPOLE_SPEC = EnvSpec(
    obs_shape=(4,), obs_dtype=np.dtype(np.float32), num_actions=2, frames_per_step=1
)


def cartpole_learner(hidden: int = 16) -> tuple[MLP, torch.optim.Optimizer]:
    """A CartPole network and its optimizer after one step (so the optimizer has moments)."""
    model = MLP((4,), 2, hidden_sizes=[hidden])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    optimizer.step()
    return model, optimizer


def cartpole_cfg(hidden: int = 16, **settings: object) -> Config:
    return Config(env=CARTPOLE, model=MLPConfig(hidden_sizes=[hidden]), **settings)


# ------------------------------------------------------------------------------ save, resume


def test_a_resumed_run_continues_where_the_checkpoint_stopped(tmp_path: Path) -> None:
    cfg = cartpole_cfg()
    torch.manual_seed(0)
    model, optimizer = cartpole_learner()
    torch.rand(3)  # somewhere along the learner's stream
    rng = torch.get_rng_state()
    progress = checkpoint_state.Progress(
        frames=4096, updates=32, generation=2, train_s=12.5, task_frames=[]
    )
    path = checkpoint_state.save(tmp_path, cfg, CARTPOLE_SPEC, model, optimizer, progress)
    assert path == checkpoint.checkpoint_dir(tmp_path) / "ckpt_000000004096.pt"

    torch.manual_seed(1)
    again, again_optimizer = cartpole_learner()
    resumed = checkpoint_state.resume(tmp_path, cfg, CARTPOLE_SPEC, again, again_optimizer)
    assert (resumed.frames, resumed.updates, resumed.train_s) == (4096, 32, 12.5)
    assert resumed.generation == 3  # a resume is a new generation: actor seeds never repeat
    assert resumed.torch_rng is not None
    assert torch.equal(resumed.torch_rng, rng)
    for a, b in zip(model.parameters(), again.parameters(), strict=True):
        assert torch.equal(a, b)
    for a, b in zip(optimizer.state.values(), again_optimizer.state.values(), strict=True):
        assert torch.equal(a["exp_avg"], b["exp_avg"])


def test_a_fresh_run_directory_starts_from_nothing(tmp_path: Path) -> None:
    model, optimizer = cartpole_learner()
    progress = checkpoint_state.resume(tmp_path, cartpole_cfg(), CARTPOLE_SPEC, model, optimizer)
    assert progress == checkpoint_state.Progress()


def test_the_newest_checkpoints_are_kept(tmp_path: Path) -> None:
    cfg = cartpole_cfg(checkpointing=CheckpointingConfig(keep=2))
    model, optimizer = cartpole_learner()
    for frames in (100, 200, 300):
        progress = checkpoint_state.Progress(frames=frames, updates=frames // 100)
        checkpoint_state.save(tmp_path, cfg, CARTPOLE_SPEC, model, optimizer, progress)
    kept = checkpoint.list_checkpoints(checkpoint.checkpoint_dir(tmp_path))
    assert [checkpoint.frames_of(p) for p in kept] == [300, 200]


def test_a_checkpoint_of_another_network_is_not_resumed(tmp_path: Path) -> None:
    model, optimizer = cartpole_learner(hidden=16)
    progress = checkpoint_state.Progress(frames=100, updates=1)
    checkpoint_state.save(tmp_path, cartpole_cfg(16), CARTPOLE_SPEC, model, optimizer, progress)
    other, other_optimizer = cartpole_learner(hidden=32)
    with pytest.raises(checkpoint.CheckpointError) as caught:
        checkpoint_state.resume(tmp_path, cartpole_cfg(32), CARTPOLE_SPEC, other, other_optimizer)
    message = str(caught.value)
    assert "\n" not in message
    assert "model.hidden_sizes: checkpoint [16], this run [32]" in message
    assert message.endswith(
        "resume with the same config or use another run directory (hydra.run.dir=...)"
    )


def test_prepare_writes_the_resolved_config_before_training(tmp_path: Path) -> None:
    """config.yaml is what evaluation and the notebooks read back: the stored config loads."""
    cfg = cartpole_cfg(seed=9, name="cp")
    model, _ = cartpole_learner()
    checkpoint_state.prepare(tmp_path, cfg, model)
    text = (tmp_path / "config.yaml").read_text()
    assert text == config_yaml(cfg)
    stored = checkpoint_state.stored_config({"config": text}, tmp_path / "c.pt")
    assert stored == cfg


def test_prepare_fails_before_training_where_no_checkpoint_can_be_written(tmp_path: Path) -> None:
    (tmp_path / "checkpoints").write_text("a file where the checkpoints go")
    model, _ = cartpole_learner()
    with pytest.raises(checkpoint.CheckpointError, match="cannot write checkpoints to"):
        checkpoint_state.prepare(tmp_path, cartpole_cfg(), model)
    assert not (tmp_path / "config.yaml").exists()


def test_stored_config_takes_the_replaced_fields_and_refuses_what_does_not_load(
    tmp_path: Path,
) -> None:
    text = config_yaml(cartpole_cfg(seed=5))
    cfg = checkpoint_state.stored_config({"config": text}, tmp_path / "c.pt", seed=6, device="cpu")
    assert (cfg.seed, cfg.device, cfg.model.hidden_sizes) == (6, "cpu", [16])
    for bad in ("[1, 2]", "seed: 1\n", text.replace("seed: 5", "seed: many")):
        with pytest.raises(checkpoint.CheckpointError) as caught:
            checkpoint_state.stored_config({"config": bad}, tmp_path / "c.pt")
        message = str(caught.value)
        assert "\n" not in message
        assert message.startswith(f"{tmp_path / 'c.pt'}: the training config stored in it")


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

"""Config composition and validation: the defaults, the groups, and bad input refused early."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir

from stampede.config import (
    Config,
    ConfigError,
    OptimConfig,
    RuntimeConfig,
    VTraceConfig,
    register_configs,
    to_config,
)

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"


@pytest.fixture(scope="module", autouse=True)
def _registered() -> None:
    register_configs()


def composed(*overrides: str) -> Config:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return to_config(compose(config_name="config", overrides=list(overrides)))


def test_defaults_are_the_documented_atari_settings() -> None:
    """The defaults of README's "Defaults and the paper's recipe" (docs/learning.md)."""
    cfg = composed()
    assert (cfg.env.kind, cfg.env.game, cfg.model._target_) == (
        "atari",
        "pong",
        "stampede.models.AtariNet",
    )
    r = cfg.runtime
    assert (r.unroll_length, r.batch_size, r.envs_per_actor, r.prefetch) == (32, 32, 8, False)
    v = cfg.vtrace
    assert (v.discount, v.entropy_cost, v.baseline_cost, v.reward_clip) == (0.99, 0.01, 0.5, 1.0)
    assert (v.rho_bar, v.c_bar, v.lambda_, v.pg_clip, v.normalize_advantages) == (
        1.0,
        1.0,
        0.95,
        0.1,
        True,
    )
    o = cfg.optim
    assert (o.name, o.lr, o.eps, o.grad_clip, o.anneal_lr, o.epochs, o.minibatches) == (
        "adam",
        2.5e-4,
        1e-5,
        40.0,
        True,
        4,
        4,
    )
    assert cfg.total_frames == 200_000_000
    assert (cfg.env.noop_max, cfg.env.frame_skip, cfg.env.frame_stack) == (30, 4, 4)
    assert (cfg.env.max_episode_frames, cfg.env.episodic_life) == (108_000, True)
    assert cfg.logger.wandb.mode == "offline"


@pytest.mark.parametrize(
    ("overrides", "check"),
    [
        (
            ["env=breakout", "model=resnet"],
            lambda c: c.env.game == "breakout" and c.model.channels == [16, 32, 32],
        ),
        (["env=atari", "env.game=space_invaders"], lambda c: c.env.game == "space_invaders"),
        (["env=cartpole", "model=mlp"], lambda c: c.env.gym_id == "CartPole-v1"),
        (["optim=adam"], lambda c: c.optim.name == "adam"),
        (["model.use_lstm=true"], lambda c: c.model.use_lstm),
        (["debug=fast"], lambda c: c.runtime.batch_size == 4),
    ],
)
def test_groups_compose(overrides: list[str], check) -> None:
    assert check(composed(*overrides))


def test_derived_values_are_properties() -> None:
    r = RuntimeConfig(num_actors=3, envs_per_actor=8, batch_size=32)
    assert r.slots_per_batch == 4
    assert r.buffer_slots == 2 * 3 + 4


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: VTraceConfig(discount=1.5), "vtrace.discount must be in [0, 1], got 1.5"),
        (lambda: VTraceConfig(rho_bar=0.5, c_bar=1.0), "vtrace.rho_bar must be >= vtrace.c_bar"),
        (
            lambda: RuntimeConfig(batch_size=30, envs_per_actor=8),
            "runtime.batch_size must be a multiple",
        ),
        (
            lambda: RuntimeConfig(unroll_length=0),
            "runtime.unroll_length must be a positive integer",
        ),
        (lambda: RuntimeConfig(num_actors=-1), "runtime.num_actors must be a positive integer"),
        (lambda: VTraceConfig(pg_clip=1.0), "vtrace.pg_clip must be in [0, 1"),
        (lambda: OptimConfig(epochs=0), "optim.epochs must be a positive integer"),
    ],
)
def test_cross_field_checks_name_the_key(build, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        build()


# Bad command lines: each must exit non-zero fast with ONE readable line naming the key.
BAD_INPUT = [
    (["optim.lr=-1"], "optim.lr"),
    (["vtrace.discount=1.5"], "vtrace.discount"),
    (["env.game=not_a_game"], "env.game"),
    (["model=nope"], "model=nope"),
    (["vtrace.dicount=0.9"], "vtrace.dicount"),
    (["optim.lr=fast"], "optim.lr"),
    (["vtrace.rho_bar=0.5"], "vtrace.rho_bar"),
    (["runtime.batch_size=30"], "runtime.batch_size"),
    (["runtime.unroll_length=0"], "runtime.unroll_length"),
    (["env=cartpole", "model=shallow"], "model"),
    (["model=mlp"], "model"),
    (["--multirun", "seed=1,2", "env.game=pong,nope"], "env.game"),
    (["env=gym", "env.gym_id=NoSuchEnv-v9", "model=mlp"], "env.gym_id"),
    (["runtime.num_actors=-1"], "runtime.num_actors"),
    (["runtime.envs_per_actor=-2"], "runtime.envs_per_actor"),
    (["runtime.envs_per_actor=2", "runtime.batch_size=2"], "optim.minibatches"),
    (["vtrace.pg_clip=1.5"], "vtrace.pg_clip"),
    (["optim.epochs=0"], "optim.epochs"),
    (["mode=eval", "checkpoint=does/not/exist"], "checkpoint='does/not/exist'"),
    pytest.param(
        ["device=cuda"],
        "device",
        marks=pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible"),
    ),
    (["logger.wandb.mode=online"], "logger.wandb.mode"),
    (["hydra.run.dir=/dev/null/run"], "hydra.run.dir"),
    # a run directory whose checkpoint is from another network (see the trained_run fixture)
    (
        ["env=cartpole", "model=mlp", "model.hidden_sizes=[32]", "hydra.run.dir={trained_run}"],
        "another model or env",
    ),
]


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run directory holding a checkpoint of a tiny CartPole MLP (hidden sizes 64, 64)."""
    run_dir = tmp_path_factory.mktemp("trained") / "run"
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "run.py"),
            "debug=fast",
            "env=cartpole",
            "model=mlp",
            "total_frames=500",
            f"hydra.run.dir={run_dir}",
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return run_dir


@pytest.mark.parametrize(("args", "key"), BAD_INPUT)
def test_bad_command_line_fails_fast_with_one_line(
    args: list[str], key: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if any("{trained_run}" in a for a in args):
        run_dir = request.getfixturevalue("trained_run")
        args = [a.format(trained_run=run_dir) for a in args]
    dirs = (
        []
        if any(a.startswith("hydra.run.dir=") for a in args)
        else [f"hydra.run.dir={tmp_path}/run"]
    )
    env = {k: v for k, v in os.environ.items() if k != "WANDB_API_KEY"}
    env["NETRC"] = str(tmp_path / "no-netrc")  # no W&B credentials for this test
    started = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "run.py"),
            "env=pong",
            *args,
            *dirs,
            f"hydra.sweep.dir={tmp_path}/sweep",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    elapsed = time.monotonic() - started
    assert proc.returncode != 0
    assert elapsed < 10, f"took {elapsed:.1f}s"
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert key in lines[0], lines[0]
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_cfg_job_prints_the_composed_config(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "run.py"), "--cfg", "job", "env=breakout", "model=resnet"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert "game: breakout" in proc.stdout
    assert "_target_: stampede.models.ResNet" in proc.stdout
    assert "channels:" in proc.stdout


def test_help_lists_the_groups(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "run.py"), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    for group in ("env:", "model:", "vtrace:", "optim:", "runtime:", "logger:"):
        assert group in proc.stdout
    assert "breakout" in proc.stdout
    assert "resnet" in proc.stdout

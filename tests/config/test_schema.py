"""Config composition and validation: the defaults, the groups, and bad input refused early."""

from __future__ import annotations

import contextlib
import fcntl
import inspect
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from torch.nn import Linear

from stampede.cli import check_command_line
from stampede.config.checks import ConfigError
from stampede.config.compose import GROUP_SCHEMAS, register_configs, to_config
from stampede.config.models import ENV_ARGUMENTS, model_factory, model_schema, network_class
from stampede.config.runtime import RuntimeConfig
from stampede.config.schema import Config, OptimConfig, VTraceConfig
from stampede.envs import EnvSettings
from stampede.models import MLP
from stampede.rundir import lock as run_lock

ROOT = Path(__file__).resolve().parents[2]
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
        "stampede.models.NatureNet",
    )
    assert (cfg.model.hidden_size, cfg.model.use_lstm) == (512, False)
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
        1e-3,
        1e-5,
        40.0,
        False,
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


# --- model arguments: the network's signature is the schema -------------------------------------

# A value other than the default for every constructor argument of every network, by name: a new
# argument fails test_every_model_argument_is_settable until it has one here.
ARGUMENT_VALUES = {
    "use_lstm": True,
    "hidden_size": 32,
    "lstm_size": 16,
    "channels": [8, 8],
    "num_blocks": 1,
    "hidden_sizes": [16],
    "activation": "tanh",
}
# Each option of the model group: its network, and an env whose observations it takes.
MODEL_GROUPS = {
    "shallow": ("stampede.models.AtariNet", "pong", (4, 84, 84)),
    "resnet": ("stampede.models.ResNet", "pong", (4, 84, 84)),
    "nature": ("stampede.models.NatureNet", "pong", (4, 84, 84)),
    "mlp": ("stampede.models.MLP", "cartpole", (4,)),
}


def constructor_arguments(target: str) -> list[str]:
    parameters = inspect.signature(network_class(target)).parameters
    return [name for name in parameters if name not in ENV_ARGUMENTS]


@pytest.mark.parametrize(
    ("group", "argument"),
    [
        (group, argument)
        for group, (target, _, _) in MODEL_GROUPS.items()
        for argument in constructor_arguments(target)
    ],
)
def test_every_model_argument_is_settable(group: str, argument: str) -> None:
    """``model.<arg>=`` reaches the constructor for every argument of each network."""
    target, env, obs_shape = MODEL_GROUPS[group]
    value = ARGUMENT_VALUES[argument]
    cfg = composed(f"env={env}", f"model={group}", f"model.{argument}={json.dumps(value)}")
    assert cfg.model._target_ == target
    assert getattr(cfg.model, argument) == value
    make_model = model_factory(cfg.model, obs_shape, 3)
    assert make_model.keywords[argument] == value
    make_model()  # the network takes it


def test_model_schemas_are_the_signatures() -> None:
    """Each model schema has exactly its network's arguments, with the signature's defaults."""
    for schema in GROUP_SCHEMAS["model"].values():
        model = schema()
        parameters = inspect.signature(network_class(model._target_)).parameters
        assert list(model.kwargs()) == constructor_arguments(model._target_)
        for name, value in model.kwargs().items():
            default = parameters[name].default
            assert value == (list(default) if isinstance(default, tuple) else default)


class WidthMLP(MLP):
    """A network of one's own: a required argument and a sequence default."""

    def __init__(
        self, obs_shape: Sequence[int], num_actions: int, width: int, more: Sequence[int] = (4,)
    ) -> None:
        super().__init__(obs_shape, num_actions, hidden_sizes=(width, *more))


def test_model_schema_of_a_new_network() -> None:
    """A required argument is a required key; a tuple default becomes a list Hydra can compose."""
    schema = model_schema(f"{__name__}.WidthMLP")
    node = OmegaConf.structured(schema)
    assert OmegaConf.is_missing(node, "width")
    assert node.more == [4]
    network = model_factory(schema(width=8), (3,), 2)()
    assert [layer.out_features for layer in network.torso if isinstance(layer, Linear)] == [8, 4]


@pytest.mark.parametrize("override", ["model.dropout=0.1", "+model.dropout=0.1"])
def test_unknown_model_key_is_one_line_listing_the_allowed_keys(override, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        check_command_line([override], CONF)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err == (
        "stampede: config error: model.dropout: no such key; "
        "allowed: _target_, use_lstm, hidden_size, lstm_size\n"
    )


# --- env settings: one schema, one check per key -------------------------------------------------


@pytest.mark.parametrize("p", ["-0.1", "1.0", "1.5"])
def test_sticky_action_probability_out_of_range_is_one_line(p: str, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        check_command_line([f"env.repeat_action_probability={p}"], CONF)
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == (
        f"stampede: config error: env.repeat_action_probability must be in [0, 1), got {float(p)}\n"
    )


def test_env_schema_is_the_envs_own_settings() -> None:
    """cfg.env is what the env package builds from: no second copy of a default or a check."""
    assert type(composed().env) is EnvSettings
    assert GROUP_SCHEMAS["env"] == {"env_schema": EnvSettings}


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
        (lambda: RuntimeConfig(inference="gpu"), "runtime.inference must be one of"),
        (lambda: RuntimeConfig(precision="fp16"), "runtime.precision must be one of"),
        (
            lambda: RuntimeConfig(envs_per_actor=2, batch_size=4, inference_groups=3),
            "runtime.inference_groups must be between 1 and runtime.envs_per_actor = 2",
        ),
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
    # a search space for Optuna's sweeper: both ends of the interval are checked
    (["+experiment=tune_pong", "vtrace.discount=interval(0.9, 1.5)"], "vtrace.discount"),
    (["objective=env/score"], "objective='env/score'"),
    (["env=gym", "env.gym_id=NoSuchEnv-v9", "model=mlp"], "env.gym_id"),
    (["runtime.num_actors=-1"], "runtime.num_actors"),
    (["runtime.envs_per_actor=-2"], "runtime.envs_per_actor"),
    (["runtime.envs_per_actor=2", "runtime.batch_size=2"], "optim.minibatches"),
    (["vtrace.pg_clip=1.5"], "vtrace.pg_clip"),
    (["optim.epochs=0"], "optim.epochs"),
    (["env.repeat_action_probability=1.0"], "env.repeat_action_probability must be in [0, 1)"),
    (["env.backend=gymnasium"], "env.backend='gymnasium' was renamed 'python_loop'"),
    (["model.lstm_sise=128"], "model.lstm_sise: no such key; allowed: _target_, use_lstm"),
    (["env=cartpole", "model=mlp", "model.activation=gelu"], "activation must be one of"),
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


@contextlib.contextmanager
def held_as_a_run_holds_it(run_dir: Path) -> Iterator[None]:
    """The lock of ``run_dir``, held by this process with its ``pid host`` in the file."""
    run_dir.mkdir(parents=True, exist_ok=True)
    with (run_dir / run_lock.LOCK_FILE).open("a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        lock.write(f"{os.getpid()} {socket.gethostname()}\n")
        lock.flush()
        yield


def test_a_refused_second_run_leaves_the_first_runs_hydra_files(tmp_path: Path) -> None:
    """A run directory that another run holds is refused with the runner's one line and exit 2,
    before Hydra writes its .hydra/ files over the first run's."""
    run_dir = tmp_path / "run"
    hydra_dir = run_dir / ".hydra"
    hydra_dir.mkdir(parents=True)
    (hydra_dir / "config.yaml").write_text("the first run's config\n")
    with held_as_a_run_holds_it(run_dir):
        with pytest.raises(run_lock.RunDirBusy) as busy:  # what the runner refuses it with
            run_lock.refuse_if_busy(run_dir)
        proc = subprocess.run(
            [
                sys.executable,
                str(ROOT / "run.py"),
                "env=cartpole",
                "model=mlp",
                f"hydra.run.dir={run_dir}",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
        )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == f"stampede: {busy.value}\n"
    assert f"pid {os.getpid()} on {socket.gethostname()}" in proc.stderr
    assert [p.name for p in hydra_dir.iterdir()] == ["config.yaml"]
    assert (hydra_dir / "config.yaml").read_text() == "the first run's config\n"


def test_torchrun_ranks_leave_a_busy_run_directory_to_the_runner(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every torchrun rank runs the pre-check, and rank 0's runner may lock the shared directory
    while another rank is still there: ranks leave the refusal to the runner, which refuses them
    all (tests/test_faults.py)."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    run_dir = tmp_path / "run"
    with held_as_a_run_holds_it(run_dir):
        check_command_line(["env=cartpole", "model=mlp", f"hydra.run.dir={run_dir}"], CONF)


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

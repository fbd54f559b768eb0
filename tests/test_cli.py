"""``run.py``'s command line checked before Hydra starts any job (``stampede.cli``): one line naming
the key and exit 2 for bad input, sweeps value by value, a busy run directory, ``--cfg`` and
``--help``."""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from conftest import CONF, ROOT

from stampede.cli import check_command_line
from stampede.rundir import lock as run_lock


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


@pytest.mark.parametrize("p", ["-0.1", "1.0", "1.5"])
def test_sticky_action_probability_out_of_range_is_one_line(p: str, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        check_command_line([f"env.repeat_action_probability={p}"], CONF)
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == (
        f"stampede: config error: env.repeat_action_probability must be in [0, 1), got {float(p)}\n"
    )


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


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["model=nope"], "model=nope: no such option; available: mlp, nature, resnet, shallow"),
        (["optim.lr=fast"], "optim.lr: Value 'fast' of type 'str' could not be converted to Float"),
        (
            ["model=mlp"],  # on Pong's frames: the network is built once to find out
            "model MLP takes flat vector observations, got observation shape (4, 84, 84); "
            "use model=nature, model=shallow or model=resnet for images",
        ),
        (  # every value of a sweep is checked, not only the first job's
            ["--multirun", "optim.epochs=1,2,0"],
            "optim.epochs must be a positive integer (>= 1), got 0",
        ),
    ],
)
def test_the_one_line_names_the_key_the_value_and_what_is_allowed(
    argv: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        check_command_line(argv, CONF)
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == f"stampede: config error: {line}\n"


@pytest.mark.parametrize(
    "argv",
    [
        ["--help", "optim.lr=-1"],
        ["-cn", "other", "optim.lr=-1"],
        ["--config-name=other", "optim.lr=-1"],
        ["--config-dir", "elsewhere", "optim.lr=-1"],
    ],
)
def test_help_and_other_configs_are_left_to_hydra(argv: list[str]) -> None:
    check_command_line(argv, CONF)


def test_a_flags_value_is_not_taken_for_an_override() -> None:
    """``--cfg job``: ``job`` is the flag's value (as an override it would not parse)."""
    check_command_line(["--cfg", "job", "env=cartpole", "model=mlp"], CONF)
    with pytest.raises(SystemExit):
        check_command_line(["--cfg", "job", "env=cartpole", "model=mlp", "optim.lr=-1"], CONF)

"""Evaluating a run with its config (stampede.eval.run): during training (eval.json overwritten,
the history appended), from a checkpoint with the training config stored in it, and every bad
input of ``run.py mode=eval`` one line and exit 2."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import run_py
from omegaconf import DictConfig, OmegaConf

from stampede.config.models import MLPConfig, ResNetConfig, model_factory
from stampede.config.schema import Config, EvalConfig
from stampede.envs import EnvSettings, env_spec
from stampede.eval import run as eval_run
from stampede.models import MLP
from stampede.report import report
from stampede.rundir import checkpoint
from stampede.rundir.checkpoint_state import config_yaml

from .conftest import CARTPOLE_KWARGS, atari_cfg, cartpole_mlp

CARTPOLE_ENV = EnvSettings(**CARTPOLE_KWARGS)


# ------------------------------------------------------------------------ during training


def test_evaluate_run_overwrites_eval_json_and_appends_history(tmp_path: Path) -> None:
    cfg = dataclasses.replace(
        atari_cfg(episodes=3, num_envs=2),
        env=EnvSettings(kind="gym", gym_id="CartPole-v1"),
        model=MLPConfig(hidden_sizes=[16]),
    )
    model = cartpole_mlp()
    for frames in (100, 200):
        [result] = eval_run.evaluate_run(model, cfg, tmp_path, frames, None, logger=None)
    record = json.loads((tmp_path / "eval.json").read_text())
    assert record["frames"] == 200
    assert record["returns"] == list(result.returns)
    assert (record["env_kind"], record["game"], record["checkpoint"]) == (
        "gym",
        "CartPole-v1",
        None,
    )
    history = [
        json.loads(line) for line in (tmp_path / "eval_history.jsonl").read_text().splitlines()
    ]
    assert [h["frames"] for h in history] == [100, 200]
    assert report.collect(tmp_path) == []  # not Atari: the table skips it


def test_evaluate_run_acts_on_the_threads_it_is_given_and_restores_the_callers(
    tmp_path: Path,
) -> None:
    cfg = Config(env=CARTPOLE_ENV, model=MLPConfig(hidden_sizes=[16]), device="cpu")
    cfg = dataclasses.replace(cfg, eval=EvalConfig(episodes=1, num_envs=1))
    model = cartpole_mlp()
    seen: set[int] = set()
    model.register_forward_pre_hook(lambda *_: seen.add(torch.get_num_threads()))
    before = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        eval_run.evaluate_run(model, cfg, tmp_path, 10, None, logger=None, threads=2)
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(before)
    assert seen == {2}


def test_a_multitask_run_keeps_each_games_results_apart(tmp_path: Path) -> None:
    games = EnvSettings(games=["pong", "breakout"], full_action_space=True)
    cfg = Config(env=games)
    assert eval_run.results_dir(tmp_path, cfg, 0) == tmp_path / "eval" / "pong"
    assert eval_run.results_dir(tmp_path, cfg, 1) == tmp_path / "eval" / "breakout"
    assert eval_run.results_dir(tmp_path, atari_cfg(), 0) == tmp_path


# --------------------------------------------------------------------------- checkpoints


def test_training_config_is_rebuilt_with_the_model_schema_and_new_eval(tmp_path: Path) -> None:
    trained = Config(model=ResNetConfig(channels=[8, 8], num_blocks=1), seed=7, name="exp")
    state = {"config": config_yaml(trained)}
    new_eval = EvalConfig(episodes=5, video=True)
    cfg = eval_run.training_config(state, tmp_path / "ckpt.pt", eval_cfg=new_eval, device="cpu")
    assert isinstance(cfg.model, ResNetConfig)
    assert (cfg.model.channels, cfg.model.num_blocks) == ([8, 8], 1)
    assert (cfg.seed, cfg.name, cfg.eval, cfg.device) == (7, "exp", new_eval, "cpu")


def test_training_config_missing_is_our_error(tmp_path: Path) -> None:
    with pytest.raises(checkpoint.CheckpointError, match="no training config"):
        eval_run.training_config({}, tmp_path / "c.pt", eval_cfg=EvalConfig(), device="cpu")


def stored_config(cfg: Config, change: Callable[[DictConfig], None]) -> str:
    """The config text a checkpoint of ``cfg`` stores, edited by ``change``."""
    stored = OmegaConf.create(config_yaml(cfg))
    assert isinstance(stored, DictConfig)
    change(stored)
    return OmegaConf.to_yaml(stored)


def test_training_config_picks_the_schema_by_target_not_by_field_names(tmp_path: Path) -> None:
    """A checkpoint written before a network argument existed still loads: its schema is the one
    model._target_ names, and the argument it lacks takes that schema's default."""
    trained = Config(env=CARTPOLE_ENV, model=MLPConfig(hidden_sizes=[8]))
    text = stored_config(trained, lambda c: c.model.pop("use_lstm"))
    cfg = eval_run.training_config(
        {"config": text}, tmp_path / "c.pt", eval_cfg=EvalConfig(), device="cpu"
    )
    assert isinstance(cfg.model, MLPConfig)
    assert cfg.model.hidden_sizes == [8]
    assert cfg.model.use_lstm is False  # the default of MLP(use_lstm=...)


def test_training_config_refuses_an_unknown_target_in_one_line(tmp_path: Path) -> None:
    text = stored_config(Config(), lambda c: setattr(c.model, "_target_", "my_lab.nets.Custom"))
    with pytest.raises(checkpoint.CheckpointError) as caught:
        eval_run.training_config(
            {"config": text}, tmp_path / "c.pt", eval_cfg=EvalConfig(), device="cpu"
        )
    message = str(caught.value)
    assert "\n" not in message
    assert "model._target_='my_lab.nets.Custom'" in message
    for known in ("stampede.models.AtariNet", "stampede.models.ResNet", "stampede.models.MLP"):
        assert known in message


def test_checkpoint_run_dir(tmp_path: Path) -> None:
    run_dir = tmp_path.resolve()
    assert eval_run.checkpoint_run_dir(tmp_path / "checkpoints" / "ckpt_1.pt") == run_dir
    assert eval_run.checkpoint_run_dir(tmp_path / "ckpt_1.pt") == run_dir


def test_model_rebuilt_from_checkpoint_matches(tmp_path: Path) -> None:
    """What evaluate_checkpoint builds is the network the checkpoint holds (weights and all)."""
    cfg = Config(env=EnvSettings(kind="gym", gym_id="CartPole-v1"), model=MLPConfig())
    spec = env_spec(**dataclasses.asdict(cfg.env))
    model = model_factory(cfg.model, spec.obs_shape, spec.num_actions)()
    state = {"config": config_yaml(cfg), "model": model.state_dict()}
    rebuilt_cfg = eval_run.training_config(
        state, tmp_path / "c.pt", eval_cfg=EvalConfig(), device="cpu"
    )
    rebuilt = model_factory(rebuilt_cfg.model, spec.obs_shape, spec.num_actions)()
    rebuilt.load_state_dict(state["model"])
    for a, b in zip(model.parameters(), rebuilt.parameters(), strict=True):
        assert torch.equal(a, b)


def cartpole_cfg() -> Config:
    return Config(env=CARTPOLE_ENV, model=MLPConfig(hidden_sizes=[16]))


def cartpole_state(change: Callable[[DictConfig], None] = lambda stored: None) -> dict[str, Any]:
    """What a checkpoint of a CartPole MLP holds, as far as evaluation reads it; ``change`` edits
    the training config stored in it."""
    cfg = cartpole_cfg()
    spec = env_spec(**CARTPOLE_KWARGS)
    model = model_factory(cfg.model, spec.obs_shape, spec.num_actions)()
    return {
        "model": model.state_dict(),
        "frames": 100,
        "config": stored_config(cfg, change),
        "fingerprint": {"obs_shape": list(spec.obs_shape), "num_actions": spec.num_actions},
    }


def saved(run_dir: Path, state: dict[str, Any]) -> Path:
    """``state`` as the run's checkpoint; returns the checkpoint file."""
    return checkpoint.save(checkpoint.checkpoint_dir(run_dir), int(state["frames"]), state, keep=1)


def test_a_checkpoint_is_evaluated_into_its_own_run_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Given the run directory only, the stored network plays the stored env; the statistics
    are printed and eval.json goes beside the checkpoints, naming the checkpoint file."""
    run_dir = tmp_path / "run"
    state = cartpole_state()
    path = saved(run_dir, state)
    cfg = Config(
        mode="eval",
        checkpoint=str(run_dir),
        eval=EvalConfig(episodes=3, num_envs=2),
        device="cpu",
    )
    (evaluation,) = eval_run.evaluate_checkpoint(cfg)
    out = capsys.readouterr().out
    assert "evaluation of CartPole-v1 (seed 1, 100 training frames)" in out
    assert f"checkpoint: {path.resolve()}" in out
    assert f"results: {run_dir.resolve() / 'eval.json'}" in out
    record = json.loads((run_dir / "eval.json").read_text())
    assert record["returns"] == list(evaluation.returns)
    assert (record["episodes"], record["frames"]) == (3, 100)
    assert record["checkpoint"] == str(path.resolve())


# ------------------------------------------------------------------------ bad input of mode=eval


def _empty_run_dir(run_dir: Path) -> list[str]:
    run_dir.mkdir(parents=True)
    return [f"checkpoint={run_dir}"]


def _no_checksum(run_dir: Path) -> list[str]:
    path = saved(run_dir, cartpole_state())
    path.with_suffix(".sha256").unlink()
    return [f"checkpoint={path}"]


def _corrupt(run_dir: Path) -> list[str]:
    path = saved(run_dir, cartpole_state())
    with path.open("ab") as f:
        f.write(b"more")
    return [f"checkpoint={path}"]


def _unreadable_checksum(run_dir: Path) -> list[str]:
    path = saved(run_dir, cartpole_state())
    path.with_suffix(".sha256").unlink()
    path.with_suffix(".sha256").mkdir()
    return [f"checkpoint={path}"]


def _no_training_config(run_dir: Path) -> list[str]:
    state = cartpole_state()
    del state["config"]
    saved(run_dir, state)
    return [f"checkpoint={run_dir}"]


def _unknown_network(run_dir: Path) -> list[str]:
    saved(run_dir, cartpole_state(lambda c: setattr(c.model, "_target_", "my_lab.nets.Custom")))
    return [f"checkpoint={run_dir}"]


def _weights_of_another_network(run_dir: Path) -> list[str]:
    other = MLP((4,), 2, hidden_sizes=[32])
    saved(run_dir, cartpole_state() | {"model": other.state_dict()})
    return [f"checkpoint={run_dir}"]


def _env_not_installed(run_dir: Path) -> list[str]:
    saved(run_dir, cartpole_state(lambda c: setattr(c.env, "gym_id", "NoSuchEnv-v9")))
    return [f"checkpoint={run_dir}"]


def _unknown_game(run_dir: Path) -> list[str]:
    def atari_game(stored: DictConfig) -> None:
        stored.env.kind, stored.env.game = "atari", "not_a_game"

    saved(run_dir, cartpole_state(atari_game))
    return [f"checkpoint={run_dir}"]


def _env_changed(run_dir: Path) -> list[str]:
    state = cartpole_state()
    state["fingerprint"]["obs_shape"] = [5]
    saved(run_dir, state)
    return [f"checkpoint={run_dir}"]


def _video_cannot_be_made(run_dir: Path) -> list[str]:
    if importlib.util.find_spec("pygame") and importlib.util.find_spec("moviepy"):
        pytest.skip("pygame and moviepy installed: CartPole's video can be recorded")
    saved(run_dir, cartpole_state())
    return [f"checkpoint={run_dir}", "eval.video=true"]


def _results_not_writable(run_dir: Path) -> list[str]:
    saved(run_dir, cartpole_state())
    (run_dir / "eval.json").mkdir()
    return [f"checkpoint={run_dir}", "eval.episodes=1", "eval.num_envs=1"]


def _no_episodes(run_dir: Path) -> list[str]:
    saved(run_dir, cartpole_state())
    return [f"checkpoint={run_dir}", "eval.episodes=0"]


def _no_checkpoint_given(run_dir: Path) -> list[str]:
    return []


# Each: how to make the bad input in a run directory, and what the one line must name.
BAD_EVAL_INPUT = {
    "empty-run-dir": (_empty_run_dir, "no checkpoint file found there"),
    "no-checksum": (_no_checksum, "no checksum file"),
    "corrupt": (_corrupt, "checksum mismatch"),
    "unreadable-checksum": (_unreadable_checksum, "cannot read"),
    "no-training-config": (_no_training_config, "no training config"),
    "unknown-network": (_unknown_network, "model._target_='my_lab.nets.Custom'"),
    "weights-of-another-network": (_weights_of_another_network, "cannot load the network"),
    "env-not-installed": (_env_not_installed, "env.gym_id='NoSuchEnv-v9'"),
    "unknown-game": (_unknown_game, "env.game='not_a_game'"),
    "env-changed": (_env_changed, "trained on an env with"),
    "video-cannot-be-made": (_video_cannot_be_made, "eval.video=true"),
    "results-not-writable": (_results_not_writable, "cannot write the evaluation results"),
    "no-episodes": (_no_episodes, "eval.episodes"),
    "no-checkpoint-given": (_no_checkpoint_given, "checkpoint="),
}


@pytest.mark.parametrize(("make", "names"), BAD_EVAL_INPUT.values(), ids=BAD_EVAL_INPUT.keys())
def test_bad_input_of_mode_eval_is_one_line_and_exit_2(
    make: Callable[[Path], list[str]], names: str, tmp_path: Path
) -> None:
    args = make(tmp_path / "run")
    proc = run_py(tmp_path / "eval", "mode=eval", *args)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert len(lines) == 1, proc.stderr[-3000:]
    assert names in lines[0]
    assert not (tmp_path / "run" / "eval.json").is_file()

"""Evaluation: exactly N whole games, no bias to short games, eval.json for the report, eval/*
in every sink of a training run, the mode=eval entry point end to end (stats printed, mp4
written; every bad input one line and exit 2), and the video env's observations."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from omegaconf import DictConfig, OmegaConf

from stampede.config.models import MLPConfig, ResNetConfig, model_factory
from stampede.config.schema import Config, EvalConfig
from stampede.envs import EnvSettings, EnvSpec, VecStep, env_spec
from stampede.eval import protocol as ev
from stampede.eval import run as eval_run
from stampede.eval.results import EvalRecord, write_eval
from stampede.models import MLP
from stampede.report import report
from stampede.rundir import checkpoint

ROOT = Path(__file__).resolve().parents[2]
CARTPOLE: dict[str, Any] = {"kind": "gym", "gym_id": "CartPole-v1"}
CARTPOLE_ENV = EnvSettings(**CARTPOLE)


def cartpole_mlp(use_lstm: bool = False) -> MLP:
    torch.manual_seed(0)
    return MLP((4,), 2, use_lstm=use_lstm, hidden_size=16, hidden_sizes=[16])


def run_eval(model: Any, env_kwargs: dict[str, Any], **kwargs: Any) -> ev.Evaluation:
    settings = {"seed": 3, "greedy": False, "reward_clip": 1.0, "device": "cpu"} | kwargs
    return ev.evaluate(model, env_kwargs, **settings)


# ------------------------------------------------------------------------------ counting


@pytest.mark.parametrize(
    ("episodes", "num_envs", "expected"),
    [(10, 4, [3, 3, 2, 2]), (8, 8, [1] * 8), (3, 8, [1, 1, 1]), (1, 1, [1]), (5, 1, [5])],
)
def test_episode_quotas_split_evenly(episodes: int, num_envs: int, expected: list[int]) -> None:
    assert ev.episode_quotas(episodes, num_envs) == expected


@pytest.mark.parametrize(("episodes", "num_envs"), [(0, 4), (4, 0)])
def test_episode_quotas_reject_zero(episodes: int, num_envs: int) -> None:
    with pytest.raises(ev.EvalError, match="must be >= 1"):
        ev.episode_quotas(episodes, num_envs)


@pytest.mark.parametrize(("episodes", "num_envs", "use_lstm"), [(7, 3, False), (5, 8, True)])
def test_cartpole_gives_exactly_n_finite_returns(
    episodes: int, num_envs: int, use_lstm: bool
) -> None:
    result = run_eval(cartpole_mlp(use_lstm), CARTPOLE, episodes=episodes, num_envs=num_envs)
    assert result.episodes == episodes == len(result.lengths)
    assert np.isfinite(result.returns).all()
    # CartPole pays 1 per step, so a whole episode's return is its length.
    assert list(result.returns) == [float(n) for n in result.lengths]
    assert result.min <= result.median <= result.max
    assert result.mean == pytest.approx(np.mean(result.returns))


def test_same_seed_same_games_and_global_rng_untouched() -> None:
    model = cartpole_mlp()
    torch.manual_seed(123)
    before = torch.get_rng_state()
    first = run_eval(model, CARTPOLE, episodes=6, num_envs=3)
    assert torch.equal(torch.get_rng_state(), before)
    assert run_eval(model, CARTPOLE, episodes=6, num_envs=3).returns == first.returns
    assert run_eval(model, CARTPOLE, episodes=6, num_envs=3, seed=4).returns != first.returns


def test_model_mode_is_restored() -> None:
    model = cartpole_mlp()
    model.train()
    run_eval(model, CARTPOLE, episodes=1, num_envs=1)
    assert model.training


class _PacedGames:
    """A fake vector: env i ends a game every (i + 1) * 3 steps; its kth game returns 100 i + k."""

    def __init__(self, num_envs: int, seed: int, **_: Any) -> None:
        self.num_envs = num_envs
        self.spec = EnvSpec((4,), np.dtype(np.float32), 2, 1)
        self.t = 0
        self.games = np.zeros(num_envs, dtype=np.int64)

    def reset(self, seed: int) -> np.ndarray:
        return np.zeros((self.num_envs, 4), dtype=np.float32)

    def step(self, actions: np.ndarray) -> VecStep:
        self.t += 1
        ended = self.t % (3 * (np.arange(self.num_envs) + 1)) == 0
        ret = np.where(ended, 100.0 * np.arange(self.num_envs) + self.games, np.nan)
        self.games += ended
        zeros = np.zeros(self.num_envs, dtype=np.float32)
        return VecStep(self.reset(0), zeros, ended, ret.astype(np.float32), ended * 3)

    def close(self) -> None:
        pass


def test_fast_envs_do_not_crowd_out_slow_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    """Env 0's games are 3x shorter than env 2's; each still counts only its quota, in order."""
    monkeypatch.setattr(ev, "make_vec_env", _PacedGames)
    result = run_eval(cartpole_mlp(), CARTPOLE, episodes=7, num_envs=3)
    assert result.returns == (0.0, 1.0, 2.0, 100.0, 101.0, 200.0, 201.0)


# ----------------------------------------------------------------------------- eval.json


def atari_cfg(**eval_settings: Any) -> Config:
    return Config(
        env=EnvSettings(game="pong"),
        eval=EvalConfig(**eval_settings),
        seed=2,
        name="atari5",
        device="cpu",
    )


def test_eval_json_has_the_report_format_and_report_reads_it(tmp_path: Path) -> None:
    evaluation = ev.Evaluation(returns=(-21.0, -19.0, -20.0), lengths=(800, 900, 850))
    cfg = atari_cfg(greedy=True)
    record = EvalRecord.of(evaluation, cfg, frames=123_456, checkpoint="ckpt.pt")
    write_eval(tmp_path / "run", record, evaluation)
    written = json.loads((tmp_path / "run" / "eval.json").read_text())
    assert list(written) == [
        "game", "env_kind", "seed", "experiment", "frames", "episodes", "greedy",
        "returns", "mean", "median", "std", "min", "max", "checkpoint", "agent_games",
    ]  # fmt: skip
    assert written["agent_games"] == 1  # one agent per game
    assert written["returns"] == [-21.0, -19.0, -20.0]
    assert (written["median"], written["min"], written["max"]) == (-20.0, -21.0, -19.0)
    (read,) = report.collect(tmp_path)
    assert (read.game, read.seed, read.experiment) == ("pong", 2, "atari5")
    assert (read.mean, read.frames, read.episodes, read.greedy) == (-20.0, 123_456, 3, True)


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


# --------------------------------------------------------------------------- checkpoints


def test_training_config_is_rebuilt_with_the_model_schema_and_new_eval(tmp_path: Path) -> None:
    trained = Config(model=ResNetConfig(channels=[8, 8], num_blocks=1), seed=7, name="exp")
    from stampede.rundir.checkpoint_state import config_yaml

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
    from stampede.rundir.checkpoint_state import config_yaml

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


# ---------------------------------------------------------------------------------- video


def test_video_env_sees_what_the_vector_env_sees() -> None:
    """Same seed and actions: AtariVideoEnv's observations equal the training vector's."""
    from stampede.envs import make_vec_env
    from stampede.envs.video import AtariVideoEnv, make_video_env

    kwargs = {"kind": "atari", "game": "breakout", "episodic_life": False, "backend": "python_loop"}
    vec = make_vec_env(num_envs=1, seed=5, **kwargs)
    video = make_video_env(5, **kwargs)
    assert isinstance(video, AtariVideoEnv)
    obs_vec, (obs_video, _) = vec.reset(seed=5), video.reset(seed=5)
    rng = np.random.default_rng(0)
    for _ in range(60):
        np.testing.assert_array_equal(obs_vec[0], obs_video)
        action = int(rng.integers(vec.spec.num_actions))
        obs_vec = vec.step(np.array([action])).obs
        obs_video, *_ = video.step(action)
    frame = video.render()
    assert frame.shape == (210, 160, 3)
    assert frame.dtype == np.uint8
    assert video.metadata["render_fps"] == 15


def test_video_of_an_env_that_cannot_render_fails_before_evaluating() -> None:
    pytest.importorskip("moviepy")
    try:
        import pygame  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("pygame installed: CartPole can render")
    with pytest.raises(ev.EvalError, match=r"eval.video=true: env.gym_id='CartPole-v1'"):
        run_eval(cartpole_mlp(), CARTPOLE, episodes=1, num_envs=1, video_dir=Path("unused"))


# ------------------------------------------------------------------------------ end to end


def run_py(*overrides: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "run.py"), *overrides],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
    )


def test_mode_eval_on_a_trained_pong_run_prints_stats_and_writes_video(tmp_path: Path) -> None:
    """Train Pong briefly (games capped at 250 agent steps to keep it fast), then evaluate it from
    the run directory alone: no env=/model= on the eval command line."""
    pytest.importorskip("moviepy")
    run_dir = tmp_path / "train"
    trained = run_py(
        f"hydra.run.dir={run_dir}",
        "env=pong",
        "env.max_episode_frames=1000",
        "model.hidden_size=32",
        "total_frames=1600",
        "runtime.num_actors=1",
        "runtime.envs_per_actor=2",
        "runtime.batch_size=2",
        "optim.minibatches=1",
        "runtime.unroll_length=20",
        "logger.wandb.mode=disabled",
        "logger.progress=false",
        cwd=tmp_path,
    )
    assert trained.returncode == 0, trained.stderr[-3000:]
    evaluated = run_py(
        f"hydra.run.dir={tmp_path / 'eval'}",
        "mode=eval",
        f"checkpoint={run_dir}",
        "eval.episodes=10",
        "eval.num_envs=4",
        "eval.video=true",
        cwd=tmp_path,
    )
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    assert "evaluation of pong (seed 1, " in evaluated.stdout
    assert "10 games, sampled actions" in evaluated.stdout
    assert "return: mean " in evaluated.stdout
    record = json.loads((run_dir / "eval.json").read_text())
    assert record["episodes"] == len(record["returns"]) == 10
    assert all(-21 <= r <= 21 for r in record["returns"])
    assert record["checkpoint"] == str(checkpoint.resolve(run_dir).resolve())
    (video,) = (run_dir / "videos").glob("*.mp4")
    assert video.name == f"pong_{record['frames']:012d}.mp4"
    frames = _video_frames(video)
    assert frames.shape[1:] == (210, 160, 3)
    assert 10 < len(frames) <= 252  # one frame per agent step of one capped game (+ reset)
    assert not (tmp_path / "eval" / "eval.json").exists()  # results live with the run only


def _video_frames(path: Path) -> np.ndarray:
    import imageio.v3 as iio

    return np.asarray(iio.imread(path, index=None))


def test_model_rebuilt_from_checkpoint_matches(tmp_path: Path) -> None:
    """What evaluate_checkpoint builds is the network the checkpoint holds (weights and all)."""
    cfg = Config(env=EnvSettings(kind="gym", gym_id="CartPole-v1"), model=MLPConfig())
    spec = env_spec(**dataclasses.asdict(cfg.env))
    model = model_factory(cfg.model, spec.obs_shape, spec.num_actions)()
    from stampede.rundir.checkpoint_state import config_yaml

    state = {"config": config_yaml(cfg), "model": model.state_dict()}
    rebuilt_cfg = eval_run.training_config(
        state, tmp_path / "c.pt", eval_cfg=EvalConfig(), device="cpu"
    )
    rebuilt = model_factory(rebuilt_cfg.model, spec.obs_shape, spec.num_actions)()
    rebuilt.load_state_dict(state["model"])
    for a, b in zip(model.parameters(), rebuilt.parameters(), strict=True):
        assert torch.equal(a, b)


# ------------------------------------------------------------------------- eval/* in every sink

EVAL_KEYS = (
    "eval/episode_return",
    "eval/episode_return_median",
    "eval/episode_return_std",
    "eval/episode_length",
    "eval/episodes",
)


def test_eval_metrics_reach_every_sink_of_a_training_run(tmp_path: Path) -> None:
    """A short CartPole run that evaluates when it ends: its eval/* line is in metrics.jsonl, in
    the offline W&B run and in the log, under the same names and with eval.json's numbers."""
    import wandb_records

    from stampede.rundir.files import read_metrics

    run_dir = tmp_path / "run"
    trained = run_py(
        f"hydra.run.dir={run_dir}",
        "debug=fast",
        "env=cartpole",
        "model=mlp",
        "total_frames=100",
        "eval.at_end=true",
        "eval.episodes=2",
        "eval.num_envs=2",
        "logger.wandb.mode=offline",
        "logger.progress=false",
        cwd=tmp_path,
    )
    assert trained.returncode == 0, trained.stderr[-3000:]
    record = json.loads((run_dir / "eval.json").read_text())
    wandb_file = next((run_dir / "wandb").glob("offline-run-*/run-*.wandb"))
    for sink, rows in (
        ("metrics.jsonl", read_metrics(run_dir)),
        ("W&B", wandb_records.history(wandb_file)),
    ):
        (line,) = [row for row in rows if "eval/episode_return" in row]
        assert set(EVAL_KEYS) <= set(line), f"{sink}: {sorted(line)}"
        assert line["env/frames"] == record["frames"], sink
        assert (line["eval/episode_return"], line["eval/episodes"]) == (record["mean"], 2), sink
    log = (run_dir / "run.log").read_text()
    assert all(f"{key}=" in log for key in EVAL_KEYS), log[-2000:]


def test_an_eval_video_goes_to_the_sinks_as_its_path(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from stampede.eval.results import VIDEO_KEY, eval_metrics
    from stampede.rundir.files import read_metrics
    from stampede.rundir.sinks import MetricLogger

    video = tmp_path / "videos" / "CartPole-v1_000000000500.mp4"
    evaluation = ev.Evaluation(returns=(10.0, 30.0), lengths=(10, 30), video=video)
    logger = MetricLogger(
        tmp_path,
        jsonl=True,
        wandb_mode="disabled",
        wandb_project="test",
        wandb_entity=None,
        wandb_group=None,
        wandb_tags=[],
        run_name="run",
        config={},
        total_frames=1000,
        start_frames=0,
        progress=False,
    )
    with caplog.at_level("INFO", logger="stampede"), logger:
        logger.write(eval_metrics(evaluation, 500), {VIDEO_KEY: video})
    (line,) = read_metrics(tmp_path)
    assert line == {
        "env/frames": 500,
        "eval/episode_return": 20.0,
        "eval/episode_return_median": 20.0,
        "eval/episode_return_std": 10.0,
        "eval/episode_length": 20.0,
        "eval/episodes": 2,
        "eval/video": str(video),
    }
    assert "eval/episode_return=20 eval/episode_return_median=20" in caplog.text
    assert f"eval/video={video}" in caplog.text


# ------------------------------------------------------------------------ bad input of mode=eval


def cartpole_cfg() -> Config:
    return Config(env=CARTPOLE_ENV, model=MLPConfig(hidden_sizes=[16]))


def cartpole_state(change: Callable[[DictConfig], None] = lambda stored: None) -> dict[str, Any]:
    """What a checkpoint of a CartPole MLP holds, as far as evaluation reads it; ``change`` edits
    the training config stored in it."""
    cfg = cartpole_cfg()
    spec = env_spec(**CARTPOLE)
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
    proc = run_py(f"hydra.run.dir={tmp_path / 'eval'}", "mode=eval", *args, cwd=tmp_path)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert len(lines) == 1, proc.stderr[-3000:]
    assert names in lines[0]
    assert not (tmp_path / "run" / "eval.json").is_file()

"""Evaluation: exactly N whole games, no bias to short games, eval.json for the report, the
mode=eval entry point end to end (stats printed, mp4 written), and the video env's observations."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from stampede import checkpoint, report
from stampede import evaluate as ev
from stampede.config import Config, EnvConfig, EvalConfig, MLPConfig, ResNetConfig, model_factory
from stampede.envs import EnvSpec, VecStep, env_spec
from stampede.models import MLP

ROOT = Path(__file__).resolve().parents[1]
CARTPOLE: dict[str, Any] = {"kind": "gym", "gym_id": "CartPole-v1"}


def cartpole_mlp(use_lstm: bool = False) -> MLP:
    torch.manual_seed(0)
    return MLP((4,), 2, use_lstm=use_lstm, hidden_size=16, hidden_sizes=[16])


def run_eval(model: Any, env_kwargs: dict[str, Any], **kwargs: Any) -> ev.EvalResult:
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
        env=EnvConfig(game="pong"),
        eval=EvalConfig(**eval_settings),
        seed=2,
        name="atari5",
        device="cpu",
    )


def test_eval_json_has_the_report_format_and_report_reads_it(tmp_path: Path) -> None:
    result = ev.EvalResult(returns=(-21.0, -19.0, -20.0), lengths=(800, 900, 850))
    cfg = atari_cfg(greedy=True)
    record = ev.eval_record(result, cfg, frames=123_456, checkpoint_path="ckpt.pt")
    ev.write_eval(tmp_path / "run", record, result)
    written = json.loads((tmp_path / "run" / "eval.json").read_text())
    assert list(written) == [
        "game", "env_kind", "seed", "experiment", "frames", "episodes", "greedy",
        "returns", "mean", "median", "std", "min", "max", "checkpoint",
    ]  # fmt: skip
    assert written["returns"] == [-21.0, -19.0, -20.0]
    assert (written["median"], written["min"], written["max"]) == (-20.0, -21.0, -19.0)
    (read,) = report.collect(tmp_path)
    assert (read.game, read.seed, read.experiment) == ("pong", 2, "atari5")
    assert (read.mean, read.frames, read.episodes, read.greedy) == (-20.0, 123_456, 3, True)


def test_evaluate_run_overwrites_eval_json_and_appends_history(tmp_path: Path) -> None:
    cfg = dataclasses.replace(
        atari_cfg(episodes=3, num_envs=2),
        env=EnvConfig(kind="gym", gym_id="CartPole-v1"),
        model=MLPConfig(hidden_sizes=[16]),
    )
    model = cartpole_mlp()
    for frames in (100, 200):
        result = ev.evaluate_run(model, cfg, tmp_path, frames, checkpoint_path=None)
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
    from stampede.runner import config_yaml

    state = {"config": config_yaml(trained)}
    new_eval = EvalConfig(episodes=5, video=True)
    cfg = ev.training_config(state, tmp_path / "ckpt.pt", eval_cfg=new_eval, device="cpu")
    assert isinstance(cfg.model, ResNetConfig)
    assert (cfg.model.channels, cfg.model.num_blocks) == ([8, 8], 1)
    assert (cfg.seed, cfg.name, cfg.eval, cfg.device) == (7, "exp", new_eval, "cpu")


def test_training_config_missing_is_our_error(tmp_path: Path) -> None:
    with pytest.raises(checkpoint.CheckpointError, match="no training config"):
        ev.training_config({}, tmp_path / "c.pt", eval_cfg=EvalConfig(), device="cpu")


def test_checkpoint_run_dir(tmp_path: Path) -> None:
    assert ev.checkpoint_run_dir(tmp_path / "checkpoints" / "ckpt_1.pt") == tmp_path.resolve()
    assert ev.checkpoint_run_dir(tmp_path / "ckpt_1.pt") == tmp_path.resolve()


# ---------------------------------------------------------------------------------- video


def test_video_env_sees_what_the_vector_env_sees() -> None:
    """Same seed and actions: AtariVideoEnv's observations equal the training vector's."""
    from stampede.envs import make_vec_env
    from stampede.envs.video import AtariVideoEnv, make_video_env

    kwargs = {"kind": "atari", "game": "breakout", "episodic_life": False, "backend": "gymnasium"}
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
    cfg = Config(env=EnvConfig(kind="gym", gym_id="CartPole-v1"), model=MLPConfig())
    spec = env_spec(**dataclasses.asdict(cfg.env))
    model = model_factory(cfg.model, spec.obs_shape, spec.num_actions)()
    from stampede.runner import config_yaml

    state = {"config": config_yaml(cfg), "model": model.state_dict()}
    rebuilt_cfg = ev.training_config(state, tmp_path / "c.pt", eval_cfg=EvalConfig(), device="cpu")
    rebuilt = model_factory(rebuilt_cfg.model, spec.obs_shape, spec.num_actions)()
    rebuilt.load_state_dict(state["model"])
    for a, b in zip(model.parameters(), rebuilt.parameters(), strict=True):
        assert torch.equal(a, b)

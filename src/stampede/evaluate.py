"""Evaluation: play whole games with a trained policy and report their true returns.

The protocol is the one IMPALA reports Atari scores with (Espeholt et al. 2018, arXiv
1802.01561; the DQN Nature protocol of Mnih et al. 2015): a game is a whole game (all lives,
``episodic_life=False``), it starts with a random number of no-ops (up to ``env.noop_max``) and
is cut at ``env.max_episode_frames`` (108,000 frames, 30 minutes). The score of a game is its
unclipped return; the policy samples from its softmax unless ``greedy``.

Counting games without bias: the E environments of the vector do not finish games at the same
pace, and taking "the first N games to end" would favour short games (often the bad ones). So
each environment gets a fixed quota (N / E games, the first N mod E environments one more) and
only its first ``quota`` games count; evaluation ends when every environment has played its
quota. Every counted game is then an independent draw, whatever its length. ``returns`` lists
them by environment index, then in the order each environment finished them.

Entry points: ``evaluate`` (a model and env settings), ``evaluate_run`` (what the runner calls
during and after training; writes ``<run_dir>/eval.json``) and ``evaluate_checkpoint`` (``python
run.py mode=eval checkpoint=<run dir or file>``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import re
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from stampede import checkpoint
from stampede.actor import clip_reward
from stampede.config import GROUP_SCHEMAS, Config, EvalConfig, model_factory
from stampede.envs import EnvSpec, env_spec, make_vec_env
from stampede.models import ActorCritic, select_action
from stampede.report import EVAL_FILENAME

log = logging.getLogger("stampede")

HISTORY_FILENAME = "eval_history.jsonl"  # one line per evaluation of a run, oldest first
VIDEO_DIRNAME = "videos"
# A video keeps every frame in memory until it is written (gymnasium's RecordVideo): cap it at
# 4 minutes of play at 15 frames per second (~360 MB of 210x160 RGB frames).
MAX_VIDEO_FRAMES = 3600
# Evaluation seeds come from the run seed through their own SeedSequence stream, so that they
# never coincide with the actors' training seeds (spawned on (actor_id, generation)).
_EVAL_STREAM = 0x6576616C  # "eval"


class EvalError(RuntimeError):
    """Evaluation could not run as asked; the message names the setting and what was expected."""


@dataclasses.dataclass(frozen=True)
class EvalResult:
    """True returns of the evaluation games (by env index, then completion) and their stats."""

    returns: tuple[float, ...]
    lengths: tuple[int, ...]  # agent steps of each game
    video: Path | None = None  # the recorded mp4, if one was asked for

    @property
    def episodes(self) -> int:
        return len(self.returns)

    @property
    def mean(self) -> float:
        return float(np.mean(self.returns))

    @property
    def median(self) -> float:
        return float(np.median(self.returns))

    @property
    def std(self) -> float:
        """Population standard deviation (ddof=0) of the returns: 0.0 for one game."""
        return float(np.std(self.returns))

    @property
    def min(self) -> float:
        return float(np.min(self.returns))

    @property
    def max(self) -> float:
        return float(np.max(self.returns))

    def stats(self) -> dict[str, float]:
        return {k: getattr(self, k) for k in ("mean", "median", "std", "min", "max")}


def episode_quotas(episodes: int, num_envs: int) -> list[int]:
    """Games each environment must play: ``episodes`` split as evenly as possible.

    Never more environments than games: ``episode_quotas(3, 8) == [1, 1, 1]``.
    """
    if episodes < 1:
        raise EvalError(f"eval.episodes must be >= 1, got {episodes}")
    if num_envs < 1:
        raise EvalError(f"eval.num_envs must be >= 1, got {num_envs}")
    envs = min(episodes, num_envs)
    return [episodes // envs + (1 if i < episodes % envs else 0) for i in range(envs)]


def eval_seed(run_seed: int) -> int:
    """The evaluation seed of a run: derived from its seed, apart from the training seeds."""
    (seed,) = np.random.SeedSequence(run_seed, spawn_key=(_EVAL_STREAM,)).generate_state(1)
    return int(seed) % 2**31


# ---------------------------------------------------------------------------------- policy


class _Policy:
    """Batched inference for B environments with the inputs the actors give the model.

    Keeps the last action, the last (clipped) reward, the done flags and the LSTM state between
    steps; the model zeroes the LSTM state of an environment whose ``done`` is set, so a new game
    starts from a fresh state, as in training.
    """

    def __init__(
        self,
        model: ActorCritic,
        batch: int,
        device: torch.device,
        greedy: bool,
        reward_clip: float,
    ) -> None:
        self.model, self.device = model, device
        self.greedy, self.reward_clip = greedy, reward_clip
        self.state = model.initial_state(batch, device)
        self.last_action = torch.zeros(batch, dtype=torch.int64)
        self.reward = torch.zeros(batch)
        self.done = torch.ones(batch, dtype=torch.bool)  # x_0 starts a game

    @torch.inference_mode()
    def act(self, obs: np.ndarray) -> np.ndarray:
        """a_t [B] from x_t: obs [B, *obs_shape] and the stored r_tm1, a_tm1, done_t."""
        # [B, ...] -> [1, B, ...]: a time axis of length one
        out = self.model(
            torch.from_numpy(obs).to(self.device)[None],
            self.last_action.to(self.device)[None],
            clip_reward(self.reward, self.reward_clip).to(self.device)[None],
            self.done.to(self.device)[None],
            self.state,
        )
        self.state = out.core_state
        self.last_action = select_action(out.policy_logits, self.greedy)[0].cpu()  # [1, B] -> [B]
        return self.last_action.numpy()

    def observe(self, reward: np.ndarray, done: np.ndarray) -> None:
        """Store what the environments returned for the actions just taken ([B] each)."""
        self.reward = torch.as_tensor(reward, dtype=torch.float32)
        self.done = torch.as_tensor(done, dtype=torch.bool)


# -------------------------------------------------------------------------------- evaluate


def evaluate(
    model: ActorCritic,
    env_kwargs: dict[str, Any],
    *,
    episodes: int,
    num_envs: int,
    seed: int,
    greedy: bool,
    reward_clip: float,
    device: torch.device | str,
    video_dir: Path | None = None,
    video_name: str = "eval",
) -> EvalResult:
    """Play ``episodes`` whole games on ``num_envs`` environments and return their true returns.

    env_kwargs: the fields of ``cfg.env`` (``dataclasses.asdict``); ``episodic_life`` is turned
    off, the rest (no-op starts, frame cap, sticky actions, action set) is kept as trained.
    seed: seeds the environments (env i gets ``seed + i``) and the action sampling; the global
    torch RNG is left as it was. reward_clip: the clip the model was trained with (its input).
    video_dir: if given, one more game is played on a single renderable environment and recorded
    to ``<video_dir>/<video_name>.mp4`` (not counted in the returns; at most
    ``MAX_VIDEO_FRAMES`` frames).
    """
    quotas = episode_quotas(episodes, num_envs)
    device = torch.device(device)
    kwargs = {**env_kwargs, "episodic_life": False}
    was_training = model.training
    model.eval()
    rng_devices: list[int] = []  # the model's GPU generator is forked too: sampling runs there
    if device.type == "cuda":
        rng_devices = [device.index if device.index is not None else torch.cuda.current_device()]
    try:
        with torch.random.fork_rng(devices=rng_devices):
            torch.manual_seed(seed)
            if video_dir is not None:
                _check_video_env(kwargs, seed)  # fail before the long part, not after it
            returns, lengths = _play(model, kwargs, quotas, seed, greedy, reward_clip, device)
            video = None
            if video_dir is not None:
                # The next env's seed (folded like env_seeds): a game not in the statistics.
                video_seed = (seed + len(quotas)) % 2**31
                video = _record_video(
                    model, kwargs, video_seed, greedy, reward_clip, device, video_dir, video_name
                )
    finally:
        model.train(was_training)
    return EvalResult(tuple(returns), tuple(lengths), video)


def _play(
    model: ActorCritic,
    env_kwargs: dict[str, Any],
    quotas: Sequence[int],
    seed: int,
    greedy: bool,
    reward_clip: float,
    device: torch.device,
) -> tuple[list[float], list[int]]:
    """Step one vector until environment i has finished ``quotas[i]`` games; collect them."""
    E = len(quotas)
    env = make_vec_env(num_envs=E, seed=seed, **env_kwargs)
    games: list[list[tuple[float, int]]] = [[] for _ in range(E)]
    try:
        obs = env.reset(seed=seed)
        policy = _Policy(model, E, device, greedy, reward_clip)
        while any(len(games[i]) < quotas[i] for i in range(E)):
            result = env.step(policy.act(obs))
            policy.observe(result.reward, result.done)
            obs = result.obs
            for i in map(int, np.flatnonzero(np.isfinite(result.episode_return))):
                if len(games[i]) < quotas[i]:  # later games of a fast env would bias the sample
                    games[i].append(
                        (float(result.episode_return[i]), int(result.episode_length[i]))
                    )
    finally:
        env.close()
    flat = [game for env_games in games for game in env_games]
    return [r for r, _ in flat], [n for _, n in flat]


# ----------------------------------------------------------------------------------- video


def _check_video_env(env_kwargs: dict[str, Any], seed: int) -> None:
    """Raise EvalError now if the video cannot be recorded (no moviepy, env cannot render)."""
    from stampede.envs import EnvError
    from stampede.envs.video import make_video_env

    if _missing("moviepy"):
        raise EvalError(
            "eval.video=true needs moviepy to write mp4 files: pip install 'stampede-rl[video]'"
        )
    try:
        make_video_env(seed, **env_kwargs).close()
    except EnvError as error:
        raise EvalError(f"eval.video=true: {error}") from None


def _missing(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is None


def _record_video(
    model: ActorCritic,
    env_kwargs: dict[str, Any],
    seed: int,
    greedy: bool,
    reward_clip: float,
    device: torch.device,
    video_dir: Path,
    video_name: str,
) -> Path:
    """Play one game on a renderable env wrapped in gymnasium's RecordVideo; return the mp4."""
    from gymnasium.wrappers import RecordVideo

    from stampede.envs.video import make_video_env

    video_dir.mkdir(parents=True, exist_ok=True)
    final = video_dir / f"{_safe_name(video_name)}.mp4"
    # RecordVideo names its files itself and warns about existing folders: record into a fresh
    # folder of our own, then move the one file to its final name.
    with tempfile.TemporaryDirectory(dir=video_dir, prefix=".recording-") as tmp:
        folder = Path(tmp) / "episode"  # RecordVideo warns when its folder exists already
        recorder = RecordVideo(
            make_video_env(seed, **env_kwargs),
            str(folder),
            episode_trigger=lambda episode: episode == 0,
            video_length=MAX_VIDEO_FRAMES,
            disable_logger=True,
        )
        try:
            obs, _ = recorder.reset(seed=seed)
            policy = _Policy(model, 1, device, greedy, reward_clip)
            while recorder.recording:
                action = int(policy.act(_as_batch(obs))[0])
                obs, reward, terminated, truncated, _ = recorder.step(action)
                policy.observe(np.array([reward]), np.array([terminated or truncated]))
                if terminated or truncated:
                    break
        finally:
            recorder.close()  # writes the mp4
        written = sorted(folder.glob("*.mp4"))
        if not written:
            raise EvalError(f"eval.video=true: no video was written to {video_dir}")
        os.replace(written[0], final)
    return final


def _as_batch(obs: Any) -> np.ndarray:
    """One observation as a batch of one [1, *obs_shape], typed as the vector envs type it."""
    obs = np.asarray(obs)
    return (obs if obs.dtype == np.uint8 else obs.astype(np.float32))[None]


def _safe_name(name: str) -> str:
    """A file name from a game or gym id (``module:Id-v0`` has a colon)."""
    return re.sub(r"[^\w.-]+", "_", name)


# ------------------------------------------------------------------------------- run level


def evaluate_run(
    model: ActorCritic,
    cfg: Config,
    run_dir: Path,
    frames: int,
    checkpoint_path: str | None,
) -> EvalResult:
    """Evaluate ``model`` with the ``cfg.eval`` settings and write ``<run_dir>/eval.json``.

    What the runner calls when training ends (``cfg.eval.at_end``) and every
    ``cfg.eval.every_frames``. eval.json holds the latest evaluation, in the format
    ``stampede.report`` reads; every evaluation is also appended to ``eval_history.jsonl``.
    With ``cfg.eval.video`` the mp4 goes to ``<run_dir>/videos/<game>_<frames>.mp4``. If a W&B run
    is active (``wandb.run``) the statistics and the video are logged to it at ``env/frames``.
    Meanwhile torch uses ``cfg.runtime.actor_threads`` threads, as an actor does (restored after).
    """
    e = cfg.eval
    device = next(model.parameters()).device
    log.info(
        "evaluating %s at %d frames: %d games on %d envs (%s actions)",
        cfg.env.name,
        frames,
        e.episodes,
        min(e.num_envs, e.episodes),
        "greedy" if e.greedy else "sampled",
    )
    with _torch_threads(cfg.runtime.actor_threads):
        result = evaluate(
            model,
            dataclasses.asdict(cfg.env),
            episodes=e.episodes,
            num_envs=e.num_envs,
            seed=eval_seed(cfg.seed),
            greedy=e.greedy,
            reward_clip=cfg.vtrace.reward_clip,
            device=device,
            video_dir=Path(run_dir) / VIDEO_DIRNAME if e.video else None,
            video_name=f"{cfg.env.name}_{frames:012d}",
        )
    record = eval_record(result, cfg, frames, checkpoint_path)
    write_eval(Path(run_dir), record, result)
    _log_to_wandb(result, frames)
    log.info(
        "eval %s: mean %.2f median %.2f over %d games",
        cfg.env.name,
        result.mean,
        result.median,
        result.episodes,
    )
    return result


@contextlib.contextmanager
def _torch_threads(threads: int) -> Iterator[None]:
    """Run with ``threads`` intra-op threads (evaluation acts like an actor: small batches, for
    which more threads mostly wait on each other), then restore the caller's setting."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def eval_record(
    result: EvalResult, cfg: Config, frames: int, checkpoint_path: str | None
) -> dict[str, Any]:
    """The content of eval.json: the fields ``stampede.report.collect`` reads, and the rest."""
    return {
        "game": cfg.env.name,
        "env_kind": cfg.env.kind,
        "seed": cfg.seed,
        "experiment": cfg.name,
        "frames": int(frames),
        "episodes": result.episodes,
        "greedy": cfg.eval.greedy,
        "returns": list(result.returns),
        **result.stats(),
        "checkpoint": checkpoint_path,
    }


def write_eval(run_dir: Path, record: dict[str, Any], result: EvalResult) -> Path:
    """Write eval.json atomically (a reader never sees half a file); append to the history."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / EVAL_FILENAME
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    history = {**record, "lengths": list(result.lengths)}
    history["video"] = str(result.video) if result.video is not None else None
    with (run_dir / HISTORY_FILENAME).open("a", encoding="utf-8") as f:
        f.write(json.dumps(history) + "\n")
    return path


def _log_to_wandb(result: EvalResult, frames: int) -> None:
    """Log to the active W&B run, if the process has one (never imports wandb itself)."""
    wandb = sys.modules.get("wandb")
    run = getattr(wandb, "run", None)
    if wandb is None or run is None:
        return
    metrics: dict[str, Any] = {
        "env/frames": frames,
        "eval/episode_return": result.mean,
        "eval/episode_return_median": result.median,
        "eval/episode_return_std": result.std,
        "eval/episodes": result.episodes,
    }
    if result.video is not None:
        metrics["eval/video"] = wandb.Video(str(result.video), format="mp4")
    run.log(metrics)


# ------------------------------------------------------------------------------ checkpoints


def evaluate_checkpoint(cfg: Config, run_dir: Path) -> EvalResult:
    """``python run.py mode=eval checkpoint=<run dir or file> eval.episodes=10 eval.video=true``.

    Loads the checkpoint (``weights_only``), rebuilds env and network from the training config
    stored in it (no need to repeat env=/model=), takes ``eval.*`` and ``device`` from ``cfg``,
    evaluates, prints the statistics and writes eval.json (and the mp4) into the checkpoint's run
    directory, where ``stampede-report`` and the notebooks find them. ``run_dir`` (this eval
    job's own directory) only gets Hydra's log: a second eval.json there would count twice.
    """
    assert cfg.checkpoint is not None  # Config checks this for mode=eval
    path = checkpoint.resolve(cfg.checkpoint).resolve()
    state = checkpoint.load_file(path)
    train_cfg = training_config(state, path, eval_cfg=cfg.eval, device=cfg.device)
    spec = env_spec(**dataclasses.asdict(train_cfg.env))
    _check_fits(state, spec, path)
    model = model_factory(train_cfg.model, spec.obs_shape, spec.num_actions)()
    try:
        model.load_state_dict(state["model"])
    except (KeyError, RuntimeError) as error:
        raise checkpoint.CheckpointError(f"{path}: cannot load the network: {error}") from None
    model.to(train_cfg.torch_device)
    frames = int(state.get("frames", 0))
    results_dir = checkpoint_run_dir(path)
    result = evaluate_run(model, train_cfg, results_dir, frames, str(path))
    print(format_result(result, train_cfg, frames, path), flush=True)
    print(f"  results: {results_dir / EVAL_FILENAME}", flush=True)
    return result


def checkpoint_run_dir(path: Path) -> Path:
    """The run directory a checkpoint file belongs to (the parent of its checkpoints/)."""
    path = Path(path).resolve()
    parent = path.parent
    return parent.parent if parent.name == checkpoint.CHECKPOINT_DIR else parent


def training_config(
    state: dict[str, Any], path: Path, *, eval_cfg: EvalConfig, device: str
) -> Config:
    """The validated training ``Config`` stored in a checkpoint, with eval settings replaced.

    The network's schema (ResNet, MLP, ...) is picked by the fields stored for ``model``.
    """
    from omegaconf import DictConfig, OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from stampede.config import ConfigError

    text = state.get("config")
    if not isinstance(text, str):
        raise checkpoint.CheckpointError(f"{path}: no training config stored in the checkpoint")
    try:
        stored = OmegaConf.create(text)
        if not isinstance(stored, DictConfig) or not isinstance(stored.get("model"), DictConfig):
            raise ConfigError("expected a mapping with a 'model' mapping")
        model_fields = {str(key) for key in stored.model}
        schemas = [c for c in GROUP_SCHEMAS["model"].values() if _field_names(c) == model_fields]
        if not schemas:
            raise ConfigError(f"no model schema has exactly the fields {sorted(model_fields)}")
        base = OmegaConf.structured(Config(model=schemas[0]()))
        chosen = OmegaConf.structured(Config(eval=eval_cfg, device=device))
        merged = OmegaConf.merge(base, stored)
        merged.eval, merged.device = chosen.eval, chosen.device
        merged.mode, merged.checkpoint = "eval", str(path)
        cfg = OmegaConf.to_object(merged)
    except (OmegaConfBaseException, ConfigError, ValueError) as error:
        raise checkpoint.CheckpointError(
            f"{path}: the training config stored in it does not load: {error}"
        ) from None
    assert isinstance(cfg, Config)
    return cfg


def _field_names(schema: type) -> set[str]:
    return {f.name for f in dataclasses.fields(schema)}


def _check_fits(state: dict[str, Any], spec: EnvSpec, path: Path) -> None:
    """The rebuilt env must give the observations and actions the network was trained on."""
    stored = state.get("fingerprint") or {}
    expected = {"obs_shape": list(spec.obs_shape), "num_actions": spec.num_actions}
    found = {k: stored.get(k) for k in expected}
    if stored and found != expected:
        raise checkpoint.CheckpointError(
            f"{path}: trained on an env with {found}, but its stored env config now gives "
            f"{expected} (another ale-py or gymnasium version?)"
        )


def format_result(result: EvalResult, cfg: Config, frames: int, path: Path | None) -> str:
    """The statistics of one evaluation as a short readable block."""
    env = cfg.env
    protocol = (
        f"whole games, up to {env.noop_max} no-op starts, cap {env.max_episode_frames:,} frames"
        if env.kind == "atari"
        else "whole episodes"
    )
    lines = [
        f"evaluation of {env.name} (seed {cfg.seed}, {frames:,} training frames)",
        f"  checkpoint: {path}" if path is not None else "",
        f"  {result.episodes} games, {'greedy' if cfg.eval.greedy else 'sampled'} actions, "
        f"{protocol}",
        f"  return: mean {result.mean:.2f}  median {result.median:.2f}  std {result.std:.2f}  "
        f"min {result.min:.2f}  max {result.max:.2f}",
        f"  mean length: {np.mean(result.lengths):.0f} agent steps",
        f"  video: {result.video}" if result.video is not None else "",
    ]
    return "\n".join(line for line in lines if line)

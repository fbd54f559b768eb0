"""Typed configuration: dataclass schemas for every Hydra group, and their cross-field checks.

The YAML files under ``conf/`` extend these schemas. Hydra rejects unknown keys and wrong types
while composing; ``__post_init__`` rejects out-of-range values when the composed config is
turned into these objects (``OmegaConf.to_object``). Every message names the full key, the value
and what is allowed, so a bad command line fails before any process starts.

Defaults are the IMPALA paper's Atari settings (Espeholt et al. 2018, arXiv 1802.01561,
appendix: unroll 20, batch 32, discount 0.99, entropy cost 0.01, baseline cost 0.5, RMSProp with
learning rate 6e-4 annealed linearly to 0, decay 0.99, eps 0.01, momentum 0, global gradient-norm
clip 40, rewards clipped to [-1, 1], 200M frames).
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from stampede.models import ActorCritic


class ConfigError(ValueError):
    """A configuration value is not allowed; the message names the key, the value and the rule."""


def _require(ok: bool, key: str, value: Any, allowed: str) -> None:
    if not ok:
        raise ConfigError(f"{key} must be {allowed}, got {value!r}")


def _positive_int(key: str, value: int) -> None:
    _require(value >= 1, key, value, "a positive integer (>= 1)")


# ---------------------------------------------------------------------------------------- env


ENV_KINDS = ("atari", "gym")
ENV_BACKENDS = ("auto", "gymnasium", "ale_vector")


@dataclass
class EnvConfig:
    """Environment. Field names are exactly the keyword arguments of ``stampede.envs.make_vec_env``.

    Atari defaults follow the paper (DQN Nature protocol): up to 30 no-op starts, action repeat 4
    with a max over the last two frames, 84x84 grayscale, 4 stacked frames, loss of a life ends a
    training episode, 108,000-frame episode cap, no sticky actions, minimal action set.
    """

    kind: str = "atari"
    game: str = "pong"
    gym_id: str = ""
    backend: str = "auto"
    noop_max: int = 30
    frame_skip: int = 4
    frame_stack: int = 4
    screen_size: int = 84
    episodic_life: bool = True
    max_episode_frames: int = 108_000
    repeat_action_probability: float = 0.0
    full_action_space: bool = False

    def __post_init__(self) -> None:
        _require(self.kind in ENV_KINDS, "env.kind", self.kind, f"one of {ENV_KINDS}")
        _require(
            self.backend in ENV_BACKENDS, "env.backend", self.backend, f"one of {ENV_BACKENDS}"
        )
        _require(self.noop_max >= 0, "env.noop_max", self.noop_max, ">= 0")
        for key in ("frame_skip", "frame_stack", "screen_size", "max_episode_frames"):
            _positive_int(f"env.{key}", getattr(self, key))
        p = self.repeat_action_probability
        _require(0.0 <= p < 1.0, "env.repeat_action_probability", p, "in [0, 1)")
        if self.kind == "atari":
            from stampede.envs import atari_games

            games = atari_games()
            if self.game not in games:
                close = [g for g in games if g.startswith(self.game[:3])] or games[:8]
                raise ConfigError(
                    f"env.game={self.game!r} is not an ALE game id (snake_case ROM names such as "
                    f"{', '.join(close[:8])}; {len(games)} in all, see stampede.envs.atari_games())"
                )
        else:
            _require(
                bool(self.gym_id), "env.gym_id", self.gym_id, "a gymnasium id when env.kind=gym"
            )

    @property
    def name(self) -> str:
        """Short name for run directories and W&B: the ALE game or the gymnasium id."""
        return self.game if self.kind == "atari" else self.gym_id


# -------------------------------------------------------------------------------------- model


@dataclass
class ModelConfig:
    """A network class (``_target_``) and its constructor arguments, except obs_shape/num_actions.

    ``_target_`` may name any subclass of ``stampede.models.ActorCritic``, including your own.
    """

    _target_: str = "stampede.models.AtariNet"
    use_lstm: bool = False
    hidden_size: int = 256

    def __post_init__(self) -> None:
        _positive_int("model.hidden_size", self.hidden_size)

    def kwargs(self) -> dict[str, Any]:
        """Constructor arguments: every field but ``_target_``."""
        return {k: v for k, v in vars(self).items() if k != "_target_"}


@dataclass
class ResNetConfig(ModelConfig):
    _target_: str = "stampede.models.ResNet"
    channels: list[int] = field(default_factory=lambda: [16, 32, 32])
    num_blocks: int = 2

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(
            len(self.channels) > 0 and min(self.channels) > 0,
            "model.channels",
            self.channels,
            "a non-empty list of positive ints",
        )
        _positive_int("model.num_blocks", self.num_blocks)


@dataclass
class MLPConfig(ModelConfig):
    _target_: str = "stampede.models.MLP"
    hidden_size: int = 64
    hidden_sizes: list[int] = field(default_factory=lambda: [64, 64])

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(
            len(self.hidden_sizes) > 0 and min(self.hidden_sizes) > 0,
            "model.hidden_sizes",
            self.hidden_sizes,
            "a non-empty list of positive ints",
        )


# ------------------------------------------------------------------------------------- vtrace


@dataclass
class VTraceConfig:
    """V-trace (paper section 4) and the weights of the three loss terms."""

    discount: float = 0.99
    rho_bar: float = 1.0
    c_bar: float = 1.0
    pg_rho_bar: float = 1.0
    lambda_: float = 1.0
    baseline_cost: float = 0.5
    entropy_cost: float = 0.01
    reward_clip: float = 1.0  # rewards clipped to [-reward_clip, reward_clip]; 0 disables clipping
    normalize_advantages: bool = False  # pg advantages to zero mean, unit std per batch
    pg_clip: float = 0.0  # PPO-style ratio clip around the learner's policy at arrival; 0 = off

    def __post_init__(self) -> None:
        _require(0.0 <= self.discount <= 1.0, "vtrace.discount", self.discount, "in [0, 1]")
        _require(0.0 <= self.lambda_ <= 1.0, "vtrace.lambda_", self.lambda_, "in [0, 1]")
        for key in ("rho_bar", "c_bar", "pg_rho_bar"):
            _require(getattr(self, key) > 0, f"vtrace.{key}", getattr(self, key), "> 0")
        if self.rho_bar < self.c_bar:
            raise ConfigError(
                f"vtrace.rho_bar must be >= vtrace.c_bar (the paper assumes rho_bar >= c_bar), "
                f"got rho_bar={self.rho_bar!r} < c_bar={self.c_bar!r}"
            )
        _require(0.0 <= self.pg_clip < 1.0, "vtrace.pg_clip", self.pg_clip, "in [0, 1) (0: off)")
        for key in ("baseline_cost", "entropy_cost", "reward_clip"):
            _require(getattr(self, key) >= 0, f"vtrace.{key}", getattr(self, key), ">= 0")


# -------------------------------------------------------------------------------------- optim


OPTIMIZERS = ("rmsprop", "adam")


@dataclass
class OptimConfig:
    """Optimizer. ``rmsprop`` with ``tf_style: true`` (the default) is TF1's RMSProp as the paper
    used it: eps inside the square root and the mean-square accumulator started at 1.
    ``tf_style: false`` is ``torch.optim.RMSprop`` (eps outside the root, accumulator at 0)."""

    name: str = "rmsprop"
    lr: float = 6e-4
    anneal_lr: bool = True  # linear decay to 0 over total_frames
    grad_clip: float = 40.0  # global L2 norm; 0 disables
    eps: float = 0.01
    alpha: float = 0.99  # RMSProp decay
    momentum: float = 0.0
    tf_style: bool = True
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    weight_decay: float = 0.0
    epochs: int = 1  # passes over each batch (> 1 reuses it, as PPO's epochs)
    minibatches: int = 1  # optimizer steps per pass, each on a random share of the trajectories

    def __post_init__(self) -> None:
        _require(self.name in OPTIMIZERS, "optim.name", self.name, f"one of {OPTIMIZERS}")
        _require(self.lr > 0, "optim.lr", self.lr, "> 0")
        _require(self.eps > 0, "optim.eps", self.eps, "> 0")
        _require(0.0 <= self.alpha < 1.0, "optim.alpha", self.alpha, "in [0, 1)")
        _require(0.0 <= self.momentum < 1.0, "optim.momentum", self.momentum, "in [0, 1)")
        _require(self.grad_clip >= 0, "optim.grad_clip", self.grad_clip, ">= 0 (0 disables)")
        _require(self.weight_decay >= 0, "optim.weight_decay", self.weight_decay, ">= 0")
        _positive_int("optim.epochs", self.epochs)
        _positive_int("optim.minibatches", self.minibatches)
        ok = len(self.betas) == 2 and all(0 <= b < 1 for b in self.betas)
        _require(ok, "optim.betas", self.betas, "two numbers in [0, 1)")


# ------------------------------------------------------------------------------------ runtime


def usable_cpus() -> int:
    """CPUs this process may run on: its affinity mask (a SLURM allocation, ``taskset``), not
    every core of the machine."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # no sched_getaffinity (macOS)
        return max(1, os.cpu_count() or 1)


@dataclass
class RuntimeConfig:
    """Processes and batching. Each actor steps ``envs_per_actor`` environments as one batch and
    fills one rollout slot of shape [unroll_length + 1, envs_per_actor]; the learner takes
    ``batch_size / envs_per_actor`` slots per update."""

    num_actors: int = 0  # 0 = one actor process per CPU this process may use
    envs_per_actor: int = 16
    batch_size: int = 32
    unroll_length: int = 20
    num_buffers: int = 0  # rollout slots; 0 = auto (see buffer_slots)
    prefetch: bool = True  # gather the next batch during an update (false: after it, fresher)
    learner_threads: int = 0  # torch threads in the learner; 0 = every CPU it may use
    actor_threads: int = 1  # torch threads in each actor process
    max_actor_restarts: int = 10  # actor failures tolerated within actor_restart_window_s
    actor_restart_window_s: float = 600.0
    actor_timeout_s: float = 120.0  # an actor holding one rollout slot longer is hung
    max_nonfinite_updates: int = 10  # consecutive skipped (NaN/inf) updates that stop the run

    def __post_init__(self) -> None:
        _require(
            self.num_actors >= 0,
            "runtime.num_actors",
            self.num_actors,
            "a positive integer, or 0 for one per CPU core",
        )
        for key in ("envs_per_actor", "batch_size", "unroll_length"):
            _positive_int(f"runtime.{key}", getattr(self, key))
        if self.batch_size % self.envs_per_actor:
            raise ConfigError(
                f"runtime.batch_size must be a multiple of runtime.envs_per_actor (each actor "
                f"hands over {self.envs_per_actor} trajectories at once), got "
                f"batch_size={self.batch_size}, envs_per_actor={self.envs_per_actor}"
            )
        for key in ("num_buffers", "learner_threads"):
            _require(getattr(self, key) >= 0, f"runtime.{key}", getattr(self, key), ">= 0")
        _positive_int("runtime.actor_threads", self.actor_threads)
        _require(
            self.max_actor_restarts >= 0,
            "runtime.max_actor_restarts",
            self.max_actor_restarts,
            ">= 0",
        )
        for key in ("actor_restart_window_s", "actor_timeout_s"):
            _require(getattr(self, key) > 0, f"runtime.{key}", getattr(self, key), "> 0")
        _positive_int("runtime.max_nonfinite_updates", self.max_nonfinite_updates)
        slots = self.slots_per_batch
        _require(
            self.num_buffers == 0 or self.num_buffers >= slots,
            "runtime.num_buffers",
            self.num_buffers,
            f"0 (auto) or >= batch_size / envs_per_actor = {slots}",
        )

    @property
    def slots_per_batch(self) -> int:
        return self.batch_size // self.envs_per_actor

    @property
    def buffer_slots(self) -> int:
        """``num_buffers``, or by default: with prefetch, 2 per actor plus one batch (actors
        never wait); without, one per actor and at least one batch (a policy lag near one
        update: no slot sits full while the learner works)."""
        if self.num_buffers:
            return self.num_buffers
        if self.prefetch:
            return 2 * self.actors + self.slots_per_batch
        return max(self.actors, self.slots_per_batch)

    @property
    def actors(self) -> int:
        """Actor processes: ``num_actors``, or one per usable CPU (`usable_cpus`) when it is 0."""
        return self.num_actors or usable_cpus()


# ------------------------------------------------------------------------- logger / checkpoints


WANDB_MODES = ("offline", "online", "disabled")


@dataclass
class WandbConfig:
    mode: str = "offline"
    project: str = "stampede"
    entity: str | None = None
    group: str | None = None
    tags: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        _require(self.mode in WANDB_MODES, "logger.wandb.mode", self.mode, f"one of {WANDB_MODES}")
        if self.mode == "online" and not _has_wandb_key():
            raise ConfigError(
                "logger.wandb.mode='online' needs a W&B API key (WANDB_API_KEY or `wandb login`); "
                "use logger.wandb.mode=offline and `wandb sync` the run directory later"
            )


def _has_wandb_key() -> bool:
    netrc = Path(os.environ.get("NETRC", Path.home() / ".netrc"))
    return bool(os.environ.get("WANDB_API_KEY")) or (
        netrc.is_file() and "api.wandb.ai" in netrc.read_text()
    )


@dataclass
class LoggerConfig:
    interval_s: float = 5.0  # seconds between metric lines
    progress: bool = True  # live progress bar when stdout is a terminal
    jsonl: bool = True  # metrics.jsonl in the run directory
    wandb: WandbConfig = field(default_factory=WandbConfig)

    def __post_init__(self) -> None:
        _require(self.interval_s > 0, "logger.interval_s", self.interval_s, "> 0")


@dataclass
class CheckpointingConfig:
    interval_s: float = 600.0  # wall-clock seconds between checkpoints (and one at exit)
    keep: int = 3  # newest checkpoints kept on disk

    def __post_init__(self) -> None:
        _require(self.interval_s > 0, "checkpointing.interval_s", self.interval_s, "> 0")
        _positive_int("checkpointing.keep", self.keep)


@dataclass
class EvalConfig:
    """Evaluation protocol: the paper's is 200 episodes with up to 30 random no-op starts."""

    episodes: int = 200
    num_envs: int = 8
    greedy: bool = False
    video: bool = False
    at_end: bool = False  # evaluate once training finishes
    every_frames: int = 0  # also evaluate every N frames during training; 0 = never

    def __post_init__(self) -> None:
        _positive_int("eval.episodes", self.episodes)
        _positive_int("eval.num_envs", self.num_envs)
        _require(self.every_frames >= 0, "eval.every_frames", self.every_frames, ">= 0")


# -------------------------------------------------------------------------------------- root


DEVICES = ("auto", "cpu", "cuda")
MODES = ("train", "eval")


@dataclass
class Config:
    env: EnvConfig = field(default_factory=EnvConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    vtrace: VTraceConfig = field(default_factory=VTraceConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    checkpointing: CheckpointingConfig = field(default_factory=CheckpointingConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    name: str = "stampede"  # experiment name: run directory and W&B group default
    seed: int = 1
    device: str = "auto"
    total_frames: int = 200_000_000  # environment frames, frame skip included
    mode: str = "train"
    checkpoint: str | None = None  # run directory or checkpoint file to evaluate (mode=eval)

    def __post_init__(self) -> None:
        _require(self.device in DEVICES, "device", self.device, f"one of {DEVICES}")
        if self.device == "cuda" and not torch.cuda.is_available():
            raise ConfigError("device='cuda' but no CUDA GPU is visible; use device=auto or cpu")
        _require(self.mode in MODES, "mode", self.mode, f"one of {MODES}")
        _positive_int("total_frames", self.total_frames)
        _require(self.seed >= 0, "seed", self.seed, ">= 0")
        if self.mode == "eval" and self.checkpoint is None:
            raise ConfigError("mode=eval needs checkpoint=<run dir or checkpoint file>")
        if self.optim.minibatches > self.runtime.batch_size:
            raise ConfigError(
                f"optim.minibatches must be <= runtime.batch_size (each minibatch holds whole "
                f"trajectories), got minibatches={self.optim.minibatches}, "
                f"batch_size={self.runtime.batch_size}"
            )

    @property
    def torch_device(self) -> torch.device:
        if self.device == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        return torch.device(self.device)


# --------------------------------------------------------------------------- Hydra plumbing


GROUP_SCHEMAS: dict[str, dict[str, type]] = {
    "env": {"env_schema": EnvConfig},
    "model": {"model_schema": ModelConfig, "resnet_schema": ResNetConfig, "mlp_schema": MLPConfig},
    "vtrace": {"vtrace_schema": VTraceConfig},
    "optim": {"optim_schema": OptimConfig},
    "runtime": {"runtime_schema": RuntimeConfig},
    "logger": {"logger_schema": LoggerConfig},
}


def register_configs() -> None:
    """Register the schemas with Hydra's ConfigStore (YAML files extend them by name)."""
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    cs.store(name="config_schema", node=Config)
    for group, schemas in GROUP_SCHEMAS.items():
        for name, node in schemas.items():
            cs.store(group=group, name=name, node=node)
    from stampede.analysis import register_resolvers  # ${stampede.games:...} in experiments

    register_resolvers()


def to_config(dict_config: Any) -> Config:
    """Turn a composed DictConfig into the typed, validated ``Config`` (checks run here)."""
    from omegaconf import OmegaConf

    cfg = OmegaConf.to_object(dict_config)
    assert isinstance(cfg, Config)
    return cfg


def model_factory(
    model: ModelConfig, obs_shape: Sequence[int], num_actions: int
) -> Callable[[], ActorCritic]:
    """A picklable zero-argument constructor for the configured network (used by every process)."""
    from hydra.utils import get_class

    cls = get_class(model._target_)
    if not (isinstance(cls, type) and issubclass(cls, ActorCritic)):
        raise ConfigError(
            f"model._target_ must name a stampede.models.ActorCritic, got {model._target_!r}"
        )
    return functools.partial(cls, tuple(obs_shape), num_actions, **model.kwargs())


def load_config(
    conf_dir: Path, overrides: Sequence[str] = (), config_name: str = "config"
) -> Config:
    """Compose ``conf_dir`` with overrides and validate it outside ``@hydra.main``."""
    from hydra import compose, initialize_config_dir

    register_configs()
    with initialize_config_dir(config_dir=str(Path(conf_dir).resolve()), version_base="1.3"):
        return to_config(compose(config_name=config_name, overrides=list(overrides)))


def check_buildable(cfg: Config) -> None:
    """Build the env spec and the network once, so a model that cannot take the env's
    observations (an MLP on images, a CNN on vectors) or a bad gymnasium id fails here."""
    import dataclasses

    from stampede.envs import env_spec

    spec = env_spec(**dataclasses.asdict(cfg.env))
    model_factory(cfg.model, spec.obs_shape, spec.num_actions)()


# ------------------------------------------------------------------ command-line pre-check


_OTHER_CONFIG_FLAGS = {
    "--config-path",
    "-cp",
    "--config-name",
    "-cn",
    "--config-dir",
    "-cd",
    "--experimental-rerun",
}
_FLAGS_WITH_VALUE = {"--cfg", "-c", "--package", "-p", "--info", "-i"}


def _overrides_of(argv: Sequence[str]) -> list[str] | None:
    """The key=value overrides of a command line, or None when it points at another config."""
    overrides, skip_value = [], False
    for arg in argv:
        if skip_value:
            skip_value = False
        elif arg.split("=")[0] in _OTHER_CONFIG_FLAGS:
            return None
        elif arg in _FLAGS_WITH_VALUE:
            skip_value = True
        elif not arg.startswith("-") and not arg.startswith(("hydra.", "hydra/")):
            overrides.append(arg)
    return overrides


def _one_job_each(overrides: list[str]) -> list[list[str]]:
    """Override lists that together try every value of every sweep (one sweep varied at a time)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(overrides)
    first = [
        str(o.input_line)
        if not o.is_sweep_override()
        else f"{o.get_key_element()}={next(iter(o.sweep_string_iterator()))}"
        for o in parsed
    ]
    jobs = [first]
    for i, o in enumerate(parsed):
        if o.is_sweep_override():
            for value in list(o.sweep_string_iterator())[1:]:
                jobs.append([*first[:i], f"{o.get_key_element()}={value}", *first[i + 1 :]])
    return jobs


def explain(error: BaseException) -> str:
    """One readable line for a composition or validation error, naming the key."""
    from hydra.errors import MissingConfigException
    from omegaconf.errors import OmegaConfBaseException

    from stampede.envs import EnvError

    # Hydra and OmegaConf wrap the error that names the key; ours (and the env's) already do.
    ours = (ConfigError, EnvError, MissingConfigException)
    while error.__cause__ is not None and not isinstance(error, ours):
        error = error.__cause__
    if isinstance(error, MissingConfigException) and error.options is not None:
        missing = (error.missing_cfg_file or "").strip("/")
        group, _, option = missing.rpartition("/")
        options = sorted(o for o in error.options if not o.endswith("_schema"))
        return f"{group}={option}: no such option; available: {', '.join(options)}"
    if isinstance(error, OmegaConfBaseException) and getattr(error, "full_key", None):
        msg = str(getattr(error, "msg", error)).splitlines()[0]
        return f"{error.full_key}: {msg}"
    return " ".join(str(error).split())


def _check_directory(key: str, path: str) -> None:
    """The run (or sweep) directory can be created: fail here rather than inside Hydra."""
    try:
        Path(path).mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ConfigError(
            f"{key}={path!r}: cannot create the run directory "
            f"({error.strerror or error}); cannot write checkpoints there"
        ) from None


def check_command_line(argv: Sequence[str], conf_dir: Path, config_name: str = "config") -> None:
    """Compose and validate the config for the given command line before Hydra starts any job.

    On error, print one line naming the key, the value and what is allowed, and exit with code 2.
    Sweeps are checked value by value, so ``--multirun seed=1,2 env.game=pong,nope`` fails here.
    """
    overrides = _overrides_of(argv)
    if overrides is None or any(a in ("--help", "-h", "--hydra-help") for a in argv):
        return
    try:
        for arg in argv:
            if arg.startswith(("hydra.run.dir=", "hydra.sweep.dir=")):
                _check_directory(*arg.split("=", 1))
        for job in _one_job_each(overrides):
            check_buildable(load_config(conf_dir, job, config_name))
    except Exception as error:  # any composition or validation failure is the user's to fix
        print(f"stampede: config error: {explain(error)}", file=sys.stderr)
        raise SystemExit(2) from None

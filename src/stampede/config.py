"""Typed configuration: the dataclass schema of every Hydra group, and their checks.

The YAML files under ``conf/`` extend these schemas and state only what differs from them. Two
schemas come from where their settings are used: ``env`` is ``stampede.envs.EnvSettings``, and
each network's ``model`` schema is made from its constructor (``stampede.model_config``).
``__post_init__`` rejects out-of-range values, naming the full key, the value and what is
allowed, when a composed config is turned into these objects (``stampede.compose``).

Defaults are the IMPALA paper's Atari settings (Espeholt et al. 2018, arXiv 1802.01561,
appendix: unroll 20, batch 32, discount 0.99, entropy cost 0.01, baseline cost 0.5, RMSProp with
learning rate 6e-4 annealed linearly to 0, decay 0.99, eps 0.01, momentum 0, global gradient-norm
clip 40, rewards clipped to [-1, 1], 200M frames).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import torch

from stampede.config_error import ConfigError, positive_int, require
from stampede.envs import EnvSettings
from stampede.model_config import ModelConfig, NatureNetConfig
from stampede.objective import DEFAULT as DEFAULT_OBJECTIVE
from stampede.objective import Objective

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
    popart: bool = False  # per-task value normalisation (Hessel et al. 2019), stampede.popart
    popart_step_size: float = 3e-4  # beta of PopArt's running moments (the paper's)

    def __post_init__(self) -> None:
        require(0.0 <= self.discount <= 1.0, "vtrace.discount", self.discount, "in [0, 1]")
        require(0.0 <= self.lambda_ <= 1.0, "vtrace.lambda_", self.lambda_, "in [0, 1]")
        for key in ("rho_bar", "c_bar", "pg_rho_bar"):
            require(getattr(self, key) > 0, f"vtrace.{key}", getattr(self, key), "> 0")
        if self.rho_bar < self.c_bar:
            raise ConfigError(
                f"vtrace.rho_bar must be >= vtrace.c_bar (the paper assumes rho_bar >= c_bar), "
                f"got rho_bar={self.rho_bar!r} < c_bar={self.c_bar!r}"
            )
        require(0.0 <= self.pg_clip < 1.0, "vtrace.pg_clip", self.pg_clip, "in [0, 1) (0: off)")
        beta = self.popart_step_size
        require(0.0 < beta <= 1.0, "vtrace.popart_step_size", beta, "in (0, 1]")
        for key in ("baseline_cost", "entropy_cost", "reward_clip"):
            require(getattr(self, key) >= 0, f"vtrace.{key}", getattr(self, key), ">= 0")


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
        require(self.name in OPTIMIZERS, "optim.name", self.name, f"one of {OPTIMIZERS}")
        require(self.lr > 0, "optim.lr", self.lr, "> 0")
        require(self.eps > 0, "optim.eps", self.eps, "> 0")
        require(0.0 <= self.alpha < 1.0, "optim.alpha", self.alpha, "in [0, 1)")
        require(0.0 <= self.momentum < 1.0, "optim.momentum", self.momentum, "in [0, 1)")
        require(self.grad_clip >= 0, "optim.grad_clip", self.grad_clip, ">= 0 (0 disables)")
        require(self.weight_decay >= 0, "optim.weight_decay", self.weight_decay, ">= 0")
        positive_int("optim.epochs", self.epochs)
        positive_int("optim.minibatches", self.minibatches)
        ok = len(self.betas) == 2 and all(0 <= b < 1 for b in self.betas)
        require(ok, "optim.betas", self.betas, "two numbers in [0, 1)")


# ------------------------------------------------------------------------------------ runtime


def usable_cpus() -> int:
    """CPUs this process may run on: its affinity mask (a SLURM allocation, ``taskset``), not
    every core of the machine."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # no sched_getaffinity (macOS)
        return max(1, os.cpu_count() or 1)


INFERENCE = ("auto", "actor", "central")
PRECISIONS = ("auto", "fp32", "bf16")
# Up to this many usable CPUs, one actor per CPU (measured fastest on 2 cores); above it the
# defaults keep RESERVED_CPUS for the learner and the inference server.
SMALL_MACHINE_CPUS = 4
RESERVED_CPUS = 2


@dataclass
class RuntimeConfig:
    """Processes and batching. Each actor steps ``envs_per_actor`` environments as one batch and
    fills one rollout slot of shape [unroll_length + 1, envs_per_actor]; the learner takes
    ``batch_size / envs_per_actor`` slots per update.

    ``inference`` places the acting policy: ``actor`` (each actor process runs its own forward
    pass), ``central`` (one inference server per learner batches the requests of all actors,
    ``stampede.inference``), or ``auto`` (central on CUDA, actor on CPU, where it measured
    faster: README, "Benchmark")."""

    num_actors: int = 0  # 0 = one per usable CPU, less RESERVED_CPUS above SMALL_MACHINE_CPUS
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
    inference: str = "auto"  # auto | actor | central (see the class docstring)
    inference_batch: int = 0  # central: most observations per forward; 0 = every waiting one
    inference_wait_ms: float = 2.0  # central: longest wait for more requests after the first
    inference_threads: int = 1  # central: torch threads of the inference server
    inference_groups: int = 2  # central: env groups per actor (one steps while one waits)
    precision: str = "auto"  # auto | fp32 | bf16: the network's autocast (see resolved_precision)
    compile: bool = False  # torch.compile the learner's network

    def __post_init__(self) -> None:
        require(
            self.num_actors >= 0,
            "runtime.num_actors",
            self.num_actors,
            "a positive integer, or 0 for one per CPU core",
        )
        for key in ("envs_per_actor", "batch_size", "unroll_length"):
            positive_int(f"runtime.{key}", getattr(self, key))
        if self.batch_size % self.envs_per_actor:
            raise ConfigError(
                f"runtime.batch_size must be a multiple of runtime.envs_per_actor (each actor "
                f"hands over {self.envs_per_actor} trajectories at once), got "
                f"batch_size={self.batch_size}, envs_per_actor={self.envs_per_actor}"
            )
        for key in ("num_buffers", "learner_threads"):
            require(getattr(self, key) >= 0, f"runtime.{key}", getattr(self, key), ">= 0")
        positive_int("runtime.actor_threads", self.actor_threads)
        require(
            self.max_actor_restarts >= 0,
            "runtime.max_actor_restarts",
            self.max_actor_restarts,
            ">= 0",
        )
        for key in ("actor_restart_window_s", "actor_timeout_s"):
            require(getattr(self, key) > 0, f"runtime.{key}", getattr(self, key), "> 0")
        positive_int("runtime.max_nonfinite_updates", self.max_nonfinite_updates)
        for key, allowed in (("inference", INFERENCE), ("precision", PRECISIONS)):
            value = getattr(self, key)
            require(value in allowed, f"runtime.{key}", value, f"one of {allowed}")
        require(self.inference_batch >= 0, "runtime.inference_batch", self.inference_batch, ">= 0")
        require(
            self.inference_wait_ms >= 0, "runtime.inference_wait_ms", self.inference_wait_ms, ">= 0"
        )
        positive_int("runtime.inference_threads", self.inference_threads)
        require(
            1 <= self.inference_groups <= self.envs_per_actor,
            "runtime.inference_groups",
            self.inference_groups,
            f"between 1 and runtime.envs_per_actor = {self.envs_per_actor}",
        )
        slots = self.slots_per_batch
        require(
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
        """Actor processes: ``num_actors``, or by default one per usable CPU (`usable_cpus`) on a
        small machine and all but ``RESERVED_CPUS`` on a larger one (the learner's and the
        inference server's)."""
        if self.num_actors:
            return self.num_actors
        cpus = usable_cpus()
        return cpus if cpus <= SMALL_MACHINE_CPUS else cpus - RESERVED_CPUS

    @property
    def learner_torch_threads(self) -> int:
        """``learner_threads``, or by default every usable CPU on a small machine (the actors
        mostly wait for the learner there) and the CPUs the actors leave on a larger one."""
        if self.learner_threads:
            return self.learner_threads
        cpus = usable_cpus()
        return cpus if cpus <= SMALL_MACHINE_CPUS else max(1, cpus - self.actors)

    def placement(self, device: torch.device) -> str:
        """Where the acting policy runs: ``actor`` or ``central`` (``auto`` resolved)."""
        if self.inference != "auto":
            return self.inference
        return "central" if device.type == "cuda" else "actor"

    def resolved_precision(self, device: torch.device) -> str:
        """The network's precision on ``device``: ``precision``, or for ``auto`` bf16 on a CUDA
        GPU that has it and fp32 elsewhere. On a CPU with AVX-512 bf16 bf16 is opt-in: it ran the
        default learner 2.1x as fast, but its one 10M-frame Pong run ended below the fp32 run's
        (docs/learning.md, "Pong, bf16 on the CPU")."""
        if self.precision != "auto":
            return self.precision
        if device.type == "cuda" and torch.cuda.is_bf16_supported():
            return "bf16"
        return "fp32"


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
        require(self.mode in WANDB_MODES, "logger.wandb.mode", self.mode, f"one of {WANDB_MODES}")
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
        require(self.interval_s > 0, "logger.interval_s", self.interval_s, "> 0")


@dataclass
class CheckpointingConfig:
    interval_s: float = 600.0  # wall-clock seconds between checkpoints (and one at exit)
    keep: int = 3  # newest checkpoints kept on disk

    def __post_init__(self) -> None:
        require(self.interval_s > 0, "checkpointing.interval_s", self.interval_s, "> 0")
        positive_int("checkpointing.keep", self.keep)


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
        positive_int("eval.episodes", self.episodes)
        positive_int("eval.num_envs", self.num_envs)
        require(self.every_frames >= 0, "eval.every_frames", self.every_frames, ">= 0")


# -------------------------------------------------------------------------------------- root


DEVICES = ("auto", "cpu", "cuda")
MODES = ("train", "eval")


@dataclass
class Config:
    env: EnvSettings = field(default_factory=EnvSettings)
    model: ModelConfig = field(default_factory=NatureNetConfig)
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
    objective: str = DEFAULT_OBJECTIVE  # what a run returns to a search (stampede.objective)

    def __post_init__(self) -> None:
        require(self.device in DEVICES, "device", self.device, f"one of {DEVICES}")
        if self.device == "cuda" and not torch.cuda.is_available():
            raise ConfigError("device='cuda' but no CUDA GPU is visible; use device=auto or cpu")
        require(self.mode in MODES, "mode", self.mode, f"one of {MODES}")
        positive_int("total_frames", self.total_frames)
        require(self.seed >= 0, "seed", self.seed, ">= 0")
        if self.mode == "eval" and self.checkpoint is None:
            raise ConfigError("mode=eval needs checkpoint=<run dir or checkpoint file>")
        self.search_objective  # noqa: B018 (parsing checks the key)
        if self.optim.minibatches > self.runtime.batch_size:
            raise ConfigError(
                f"optim.minibatches must be <= runtime.batch_size (each minibatch holds whole "
                f"trajectories), got minibatches={self.optim.minibatches}, "
                f"batch_size={self.runtime.batch_size}"
            )

    @property
    def search_objective(self) -> Objective:
        """The ``objective`` this run returns to Optuna or PBT (``stampede.objective``)."""
        return Objective.parse(self.objective, list(self.env.games), self.eval.at_end)

    @property
    def torch_device(self) -> torch.device:
        if self.device == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        return torch.device(self.device)

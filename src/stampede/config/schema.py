"""Typed configuration: the dataclass schema of every Hydra group, and their checks.

The YAML files under ``conf/`` extend these schemas and state only what differs from them. Two
schemas come from where their settings are used: ``env`` is ``stampede.envs.EnvSettings``, and
each network's ``model`` schema is made from its constructor (``stampede.config.models``).
``__post_init__`` rejects out-of-range values, naming the full key, the value and what is
allowed, when a composed config is turned into these objects (``stampede.config.compose``).

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

from stampede.config.checks import ConfigError, positive_int, require
from stampede.config.models import ModelConfig, NatureNetConfig
from stampede.config.objective import DEFAULT as DEFAULT_OBJECTIVE
from stampede.config.objective import Objective
from stampede.config.runtime import RuntimeConfig
from stampede.envs import EnvSettings

# ------------------------------------------------------------------------------------- vtrace


ADVANTAGE_STATS = ("minibatch", "batch", "returns")


@dataclass
class VTraceConfig:
    """V-trace (paper section 4) and the weights of the three loss terms."""

    discount: float = 0.99
    rho_bar: float = 1.0
    c_bar: float = 1.0
    pg_rho_bar: float = 1.0
    lambda_: float = 0.95  # 1.0 in the paper (+experiment=impala_paper)
    baseline_cost: float = 0.5
    entropy_cost: float = 0.01
    reward_clip: float = 1.0  # rewards clipped to [-reward_clip, reward_clip]; 0 disables clipping
    normalize_advantages: bool = True  # pg advantages scaled as advantage_stats says
    # minibatch: zero mean, unit std over each minibatch; batch: the same with the whole batch's
    # mean and std at arrival (a minibatch of a sparse game without reward keeps its small
    # advantages small); returns: divided by max(1, P95 - P5) of the batch's V-trace targets, as
    # DreamerV3 scales its returns (small advantages are never scaled up)
    advantage_stats: str = "minibatch"
    pg_clip: float = 0.1  # PPO-style ratio clip around the learner's policy at arrival; 0 = off
    popart: bool = False  # per-task value normalisation (Hessel et al. 2019), stampede.algo.popart
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
        stats, allowed = self.advantage_stats, f"one of {ADVANTAGE_STATS}"
        require(stats in ADVANTAGE_STATS, "vtrace.advantage_stats", stats, allowed)
        if stats != "minibatch" and not self.normalize_advantages:
            raise ConfigError(
                f"vtrace.advantage_stats={stats!r} scales the advantages only with "
                f"vtrace.normalize_advantages=true (it is false)"
            )
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

    name: str = "adam"
    lr: float = 1e-3
    anneal_lr: bool = False  # true: linear decay to 0 over total_frames
    grad_clip: float = 40.0  # global L2 norm; 0 disables
    eps: float = 1e-5  # Adam's, as PPO's; optim=rmsprop uses the paper's 0.01
    alpha: float = 0.99  # RMSProp decay
    momentum: float = 0.0
    tf_style: bool = True
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    weight_decay: float = 0.0
    epochs: int = 4  # passes over each batch (> 1 reuses it, as PPO's epochs; the paper: 1)
    minibatches: int = 4  # optimizer steps per pass, each on a random share of the trajectories

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


# ------------------------------------------------------------------------- logger / checkpoints


WANDB_MODES = ("offline", "online", "disabled")
DETERMINISTIC_LOG_UPDATES = 10


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
    # >0: a metric line every this many updates instead (0: by interval_s, or every
    # DETERMINISTIC_LOG_UPDATES updates with runtime.deterministic=true: the same lines each run)
    interval_updates: int = 0
    progress: bool = True  # live progress bar when stdout is a terminal
    jsonl: bool = True  # metrics.jsonl in the run directory
    wandb: WandbConfig = field(default_factory=WandbConfig)

    def __post_init__(self) -> None:
        require(self.interval_s > 0, "logger.interval_s", self.interval_s, "> 0")
        require(
            self.interval_updates >= 0, "logger.interval_updates", self.interval_updates, ">= 0"
        )

    def interval_in_updates(self, deterministic: bool) -> int:
        """Updates between metric lines; 0: lines by ``interval_s``."""
        if self.interval_updates or not deterministic:
            return self.interval_updates
        return DETERMINISTIC_LOG_UPDATES


@dataclass
class CheckpointingConfig:
    interval_s: float = 600.0  # wall-clock seconds between checkpoints (and one at exit)
    keep: int = 3  # newest checkpoints kept on disk

    def __post_init__(self) -> None:
        require(self.interval_s > 0, "checkpointing.interval_s", self.interval_s, "> 0")
        positive_int("checkpointing.keep", self.keep)


@dataclass
class EvalConfig:
    """Evaluation protocol: the paper's is 200 episodes with up to 30 random no-op starts.

    ``num_envs`` games are played at once, env i its fixed share of ``episodes`` (no bias to
    short games); which envs (seeds) changes the games drawn, not the protocol. 32 played
    BattleZone's 200 games 1.3x as fast as 8 did on 2 cores (README, "Evaluation")."""

    episodes: int = 200
    num_envs: int = 32
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
    objective: str = DEFAULT_OBJECTIVE  # what a run returns to a search (stampede.search.objective)

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

        if self.runtime.cuda_graph:
            self._check_cuda_graph()

    def _check_cuda_graph(self) -> None:
        """What one CUDA graph per minibatch step cannot hold, named before anything starts."""
        if self.torch_device.type != "cuda":
            raise ConfigError(
                f"runtime.cuda_graph=true needs a CUDA GPU, and device={self.device!r} runs on "
                f"{self.torch_device.type}; use runtime.cuda_graph=false (or runtime.compile=true)"
            )
        refused = {
            "model.use_lstm=true (the core state)": bool(getattr(self.model, "use_lstm", False)),
            "vtrace.popart=true (its statistics move between steps)": self.vtrace.popart,
            "env.games (several tasks)": bool(self.env.games),
            "optim.tf_style=true (RMSpropTF cannot capture)": (
                self.optim.name == "rmsprop" and self.optim.tf_style
            ),
        }
        for what, bad in refused.items():
            if bad:
                raise ConfigError(f"runtime.cuda_graph=true does not support {what}")
        if self.runtime.batch_size % self.optim.minibatches:
            raise ConfigError(
                f"runtime.cuda_graph=true needs minibatches of one shape: runtime.batch_size="
                f"{self.runtime.batch_size} is not a multiple of optim.minibatches="
                f"{self.optim.minibatches}"
            )

    @property
    def search_objective(self) -> Objective:
        """The ``objective`` this run returns to Optuna or PBT (``stampede.search.objective``)."""
        return Objective.parse(self.objective, list(self.env.games), self.eval.at_end)

    @property
    def torch_device(self) -> torch.device:
        if self.device == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        return torch.device(self.device)

"""Population-based training (Jaderberg et al. 2017, arXiv 1711.09846): the controller's decisions
and its state on disk, free of Hydra (the sweeper that launches the members is
``hydra_plugins.stampede_pbt``).

N members train side by side, each a normal Stampede run in its own run directory
(``<sweep dir>/member_<k>``), in rounds of ``interval_frames``: every member trains until the
round's frame count (resuming from its checkpoint), then the controller ranks them by their recent
return (the run's ``objective`` over the games finished in the round). Each member of the bottom
``fraction`` *exploits* a member of the top ``fraction`` drawn at random: the donor's newest
checkpoint (weights, optimizer moments, counters) replaces its own. It then *explores*: each
evolving hyperparameter is multiplied by one of ``perturb`` (0.8 or 1.2, as in the paper) or,
with probability ``resample_probability``, drawn anew from its bounds; always clipped to the
bounds. The next round resumes every member with its (possibly new) values as config overrides.

The rounds are synchronous (all members reach the round's frames before any is ranked), so the
population's state is one small JSON file, written atomically: ``pbt/state.json`` holds the round
to run next, every member's hyperparameters and the lineage so far; ``pbt/lineage.jsonl`` is the
lineage in one line per member per round (its score and values, whom it copied, which values it
took). A controller that was stopped continues from the file: a round whose exploits were decided
but not all copied finishes them first.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from stampede.config.checks import ConfigError
from stampede.rundir import checkpoint
from stampede.rundir.files import copy_atomic, write_text_atomic

STATE_DIR = "pbt"
STATE_FILE = "state.json"
LINEAGE_FILE = "lineage.jsonl"
_VERSION = 1


@dataclasses.dataclass(frozen=True)
class Bound:
    """The range an evolving hyperparameter stays in; ``log``: drawn log-uniformly."""

    low: float
    high: float
    log: bool = False

    def draw(self, rng: random.Random) -> float:
        if self.log:
            return math.exp(rng.uniform(math.log(self.low), math.log(self.high)))
        return rng.uniform(self.low, self.high)

    def clip(self, value: float) -> float:
        return min(self.high, max(self.low, value))


@dataclasses.dataclass(frozen=True)
class Settings:
    """The population: ``hydra.sweeper.*`` of ``hydra/sweeper=pbt``, and the members' budget."""

    members: int
    interval_frames: int
    total_frames: int  # per member (the run's total_frames)
    fraction: float
    perturb: tuple[float, ...]
    resample_probability: float
    params: Mapping[str, Bound]
    seed: int

    def __post_init__(self) -> None:
        key = "hydra.sweeper."
        if self.members < 2:
            raise ConfigError(f"{key}members must be >= 2 (a population), got {self.members}")
        if self.interval_frames <= 0:
            raise ConfigError(f"{key}interval_frames must be > 0, got {self.interval_frames}")
        if not 0 <= self.fraction <= 0.5:
            raise ConfigError(
                f"{key}fraction must be in [0, 0.5] (the bottom part copies the top part; "
                f"0: no exploitation), got {self.fraction}"
            )
        if not self.perturb or any(f <= 0 for f in self.perturb):
            raise ConfigError(f"{key}perturb must be positive factors, got {list(self.perturb)}")
        if not 0 <= self.resample_probability <= 1:
            raise ConfigError(
                f"{key}resample_probability must be in [0, 1], got {self.resample_probability}"
            )
        if not self.params:
            raise ConfigError(
                f"{key}params is empty: name the hyperparameters to evolve, e.g. "
                "optim.lr: tag(log, interval(1e-4, 1e-2))"
            )
        for name, bound in self.params.items():
            if not bound.high - bound.low > 0 or (bound.log and bound.low <= 0):
                raise ConfigError(
                    f"{key}params.{name}: need low < high (and low > 0 with tag(log)), got "
                    f"interval({bound.low}, {bound.high})"
                )

    @property
    def rounds(self) -> int:
        return math.ceil(self.total_frames / self.interval_frames)

    def round_frames(self, round_: int) -> int:
        """The frames every member has trained at the end of round ``round_`` (from 0)."""
        return min((round_ + 1) * self.interval_frames, self.total_frames)

    @property
    def replaced(self) -> int:
        """Members that copy another at each round: the bottom ``fraction``, rounded up."""
        return min(self.members // 2, math.ceil(self.fraction * self.members))

    def identity(self) -> dict[str, Any]:
        """What a restarted controller must find unchanged in its state (total_frames may grow)."""
        return {
            "members": self.members,
            "interval_frames": self.interval_frames,
            "params": {k: dataclasses.asdict(b) for k, b in sorted(self.params.items())},
        }


def member_dir(sweep_dir: Path, member: int) -> Path:
    return Path(sweep_dir) / member_name(member)


def member_name(member: int) -> str:
    return f"member_{member}"


@dataclasses.dataclass
class Population:
    """The controller's state: the next round to run, each member's hyperparameters, the lineage
    rows so far, exploits decided but not yet all copied, and its own W&B run id."""

    settings: dict[str, Any]
    round: int
    params: list[dict[str, float]]
    lineage: list[dict[str, Any]]
    pending: dict[str, Any] | None = None  # {"scores": [...], "exploits": [...]}
    wandb_id: str | None = None

    @classmethod
    def start(cls, settings: Settings) -> Population:
        """Round 0: every member's values drawn from the bounds (seeded by the run's seed)."""
        rng = random.Random(settings.seed)
        params = [
            {name: bound.draw(rng) for name, bound in settings.params.items()}
            for _ in range(settings.members)
        ]
        return cls(settings.identity(), 0, params, [])

    def start_frames(self) -> list[int]:
        """The frames each member starts the current round from: 0 in the first, else those it
        had at the end of the last (``frames``) or took from its donor (``resumes_at``). Games
        after these count in the member's score for the round."""
        starts = [0] * len(self.params)
        for row in self.lineage:
            if row["round"] == self.round - 1:
                starts[row["member"]] = row.get("resumes_at", row["frames"])
        return starts

    @classmethod
    def load_or_start(cls, sweep_dir: Path, settings: Settings) -> Population:
        """The state in ``sweep_dir`` if there is one (it must be of the same population), else
        a new one."""
        path = Path(sweep_dir) / STATE_DIR / STATE_FILE
        if not path.exists():
            return cls.start(settings)
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("version") != _VERSION:
            raise ConfigError(f"{path}: not a state file of this Stampede (version {_VERSION})")
        del data["version"]
        population = cls(**data)
        if population.settings != settings.identity():
            raise ConfigError(
                f"{path} holds another population ({population.settings}); this sweep has "
                f"{settings.identity()}: use another hydra.sweep.dir or the same settings"
            )
        return population

    def save(self, sweep_dir: Path) -> None:
        """Write the state atomically, then the lineage file from it."""
        directory = Path(sweep_dir) / STATE_DIR
        directory.mkdir(parents=True, exist_ok=True)
        state = {"version": _VERSION, **dataclasses.asdict(self)}
        write_text_atomic(directory / STATE_FILE, json.dumps(state, indent=1) + "\n")
        lines = "".join(json.dumps(row) + "\n" for row in self.lineage)
        write_text_atomic(directory / LINEAGE_FILE, lines)


def decide(
    scores: Sequence[float], params: Sequence[Mapping[str, float]], settings: Settings, round_: int
) -> list[dict[str, Any]]:
    """The exploits after round ``round_``: for each of the ``settings.replaced`` lowest-scoring
    members (NaN ranks lowest), a donor drawn from as many highest-scoring ones and the values it
    continues with (the donor's, explored); none where the donor scored no better. Seeded by
    (seed, round): a restart decides the same."""
    rng = random.Random(settings.seed * 100_003 + round_ + 1)
    ranked = sorted(range(len(scores)), key=lambda k: rank_key(scores[k]))  # worst first
    n = settings.replaced
    bottom, top = ranked[:n], ranked[len(ranked) - n :]
    exploits = []
    for member in bottom:
        donor = rng.choice(top)
        if rank_key(scores[donor]) <= rank_key(scores[member]):
            continue  # a tie (every member at -21 early in Pong): nothing better to copy
        exploits.append(
            {
                "member": member,
                "donor": donor,
                "params": explore(params[donor], settings, rng),
            }
        )
    return exploits


def rank_key(score: float) -> float:
    """A score to sort by: NaN (no game finished) ranks below every number."""
    return -math.inf if math.isnan(score) else score


def explore(
    values: Mapping[str, float], settings: Settings, rng: random.Random
) -> dict[str, float]:
    """Each value perturbed by a factor of ``settings.perturb``, or redrawn from its bounds with
    probability ``settings.resample_probability``; clipped to its bounds."""
    explored = {}
    for name, value in values.items():
        bound = settings.params[name]
        if rng.random() < settings.resample_probability:
            explored[name] = bound.draw(rng)
        else:
            explored[name] = bound.clip(value * rng.choice(settings.perturb))
    return explored


def trained_frames(run_dir: Path) -> int:
    """The frames of the run's newest checkpoint (0: none yet)."""
    found = checkpoint.list_checkpoints(checkpoint.checkpoint_dir(run_dir))
    return checkpoint.frames_of(found[0]) if found else 0


def copy_checkpoint(donor_dir: Path, member_dir: Path) -> dict[str, Any]:
    """Replace the checkpoints of ``member_dir`` by the newest one of ``donor_dir`` (with its
    checksum file; the copy is renamed into place, so a crash leaves the old file or the new).
    Returns the paths and the file's SHA-256 for the lineage. Idempotent."""
    source = checkpoint.resolve(checkpoint.checkpoint_dir(donor_dir))
    target_dir = checkpoint.checkpoint_dir(member_dir)
    target_dir.mkdir(parents=True, exist_ok=True)
    target = target_dir / source.name
    for name in (source.name, source.with_suffix(".sha256").name):
        copy_atomic(source.parent / name, target_dir / name)
    for old in checkpoint.list_checkpoints(target_dir):
        if old != target:
            checkpoint.delete(old)
    home = Path(member_dir).parent  # paths relative to the sweep directory: it may move
    return {
        "donor_checkpoint": str(source.relative_to(home)),
        "checkpoint": str(target.relative_to(home)),
        "sha256": hashlib.sha256(target.read_bytes()).hexdigest(),
        "resumes_at": trained_frames(member_dir),
    }

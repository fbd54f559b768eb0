"""Every ``env.*`` setting, once: its name, its default and its check.

``EnvSettings`` is the ``env`` group's schema in ``stampede.config.schema`` (Hydra composes into
it and ``__post_init__`` checks the result before any process starts) and what every backend here is
built from, so a setting cannot drift between the config and the environments.

Atari defaults follow the paper (DQN Nature protocol): up to 30 no-op starts, action repeat 4
with a max over the last two frames, 84x84 grayscale, 4 stacked frames, loss of a life ends a
training episode, 108,000-frame episode cap, no sticky actions, minimal action set.

Multi-task runs (``env.games``: several ALE ids) train one agent on several games at once, as the
paper's multi-task agents do; every env slot of the run plays one of them (``env_tasks``), and all
share the full 18-action set so that one policy head serves every game.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from stampede.envs.roms import rom_path
from stampede.envs.spec import EnvError

ENV_KINDS = ("atari", "gym")
BACKENDS = ("auto", "python_loop", "ale_vector")


@dataclass
class EnvSettings:
    """Which environment and how it is preprocessed; the Atari knobs are ignored by kind=gym.

    backend: how a vector of envs is stepped. ``python_loop``: a Python loop in the actor over
    the emulators (or gymnasium envs); ``ale_vector``: ale-py's C++ vector (Atari only);
    ``auto``: whichever is faster (``stampede.envs.resolve_backend``). Both Atari backends give
    identical observations.
    """

    kind: str = "atari"
    game: str = "pong"  # ALE id, snake_case (kind=atari)
    gym_id: str = ""  # gymnasium id (kind=gym)
    backend: str = "auto"
    noop_max: int = 30
    frame_skip: int = 4
    frame_stack: int = 4
    screen_size: int = 84
    episodic_life: bool = True
    max_episode_frames: int = 108_000
    repeat_action_probability: float = 0.0  # sticky actions (Machado et al. 2018); 1 never acts
    full_action_space: bool = False
    games: list[str] = field(default_factory=list)  # multi-task: ALE ids; env.game is then unused

    def __post_init__(self) -> None:
        _check(self.kind in ENV_KINDS, "kind", self.kind, f"one of {ENV_KINDS}")
        if self.backend == "gymnasium":  # python_loop's old name: it never used gymnasium
            raise EnvError(
                "env.backend='gymnasium' was renamed 'python_loop' (a Python loop over the "
                "emulators); use env.backend=python_loop"
            )
        _check(self.backend in BACKENDS, "backend", self.backend, f"one of {BACKENDS}")
        _check(self.noop_max >= 0, "noop_max", self.noop_max, ">= 0")
        for key in ("frame_skip", "frame_stack", "screen_size", "max_episode_frames"):
            _check(getattr(self, key) >= 1, key, getattr(self, key), ">= 1")
        p = self.repeat_action_probability
        _check(0.0 <= p < 1.0, "repeat_action_probability", p, "in [0, 1)")
        if self.games:
            self._check_games()
        elif self.kind == "atari":
            rom_path(self.game)
        elif self.backend == "ale_vector":
            raise EnvError("env.backend='ale_vector' runs Atari games only; use env.kind=atari")
        else:
            ok = bool(self.gym_id)
            _check(ok, "gym_id", self.gym_id, "a gymnasium id such as 'CartPole-v1' (env.kind=gym)")

    def _check_games(self) -> None:
        """A multi-task game list: two or more distinct Atari games sharing one action set."""
        games = list(self.games)
        _check(self.kind == "atari", "kind", self.kind, "'atari' with env.games (Atari only)")
        _check(len(games) >= 2, "games", games, "two or more ALE ids (one game: env.game=<id>)")
        repeated = sorted({g for g in games if games.count(g) > 1})
        _check(not repeated, "games", games, f"distinct ALE ids ({repeated} repeated)")
        if not self.full_action_space:
            raise EnvError(
                "env.games needs env.full_action_space=true: one policy head of all 18 joystick "
                "actions serves every game (the games' minimal action sets differ)"
            )
        for game in games:
            rom_path(game)

    @property
    def name(self) -> str:
        """Short name for run directories and W&B: the ALE game or the gymnasium id; for a
        multi-task run its games joined by '+' (``multitask<N>`` for more than three)."""
        if self.games:
            return "+".join(self.games) if len(self.games) <= 3 else f"multitask{len(self.games)}"
        return self.game if self.kind == "atari" else self.gym_id

    @property
    def tasks(self) -> tuple[str, ...]:
        """The run's tasks in task-id order: ``env.games``, or the one game (gym id)."""
        return tuple(self.games) or (self.name,)

    def task(self, index: int) -> EnvSettings:
        """The settings of task ``index`` alone: its game, as a single-game run would have it."""
        if not self.games:
            return self
        return dataclasses.replace(self, game=self.games[index], games=[])


def _check(ok: bool, key: str, value: object, expected: str) -> None:
    if not ok:
        raise EnvError(f"env.{key} must be {expected}, got {value!r}")


def env_tasks(num_tasks: int, num_envs: int) -> list[int]:
    """The task of each of a run's ``num_envs`` env slots (all ranks' actors' envs, in order):
    contiguous, nearly equal shares, so that an actor's envs span as few games as possible.

    EnvError unless every task gets at least one env slot.
    """
    if num_envs < num_tasks:
        raise EnvError(
            f"env.games has {num_tasks} games but the run has only {num_envs} env slots "
            f"(runtime.num_actors x runtime.envs_per_actor x ranks); every game needs one: "
            f"raise runtime.envs_per_actor or runtime.num_actors"
        )
    return [j * num_tasks // num_envs for j in range(num_envs)]


def env_settings(fields: dict[str, Any]) -> EnvSettings:
    """``EnvSettings(**fields)``, with EnvError naming an unknown key and the known ones."""
    known = [field.name for field in dataclasses.fields(EnvSettings)]
    unknown = sorted(set(fields) - set(known))
    if unknown:
        raise EnvError(f"unknown env setting(s) {unknown}; known: {known}")
    return EnvSettings(**fields)

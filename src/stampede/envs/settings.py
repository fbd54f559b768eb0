"""Every ``env.*`` setting, once: its name, its default and its check.

``EnvSettings`` is the ``env`` group's schema in ``stampede.config`` (Hydra composes into it and
``__post_init__`` checks the result before any process starts) and what every backend here is
built from, so a setting cannot drift between the config and the environments.

Atari defaults follow the paper (DQN Nature protocol): up to 30 no-op starts, action repeat 4
with a max over the last two frames, 84x84 grayscale, 4 stacked frames, loss of a life ends a
training episode, 108,000-frame episode cap, no sticky actions, minimal action set.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from stampede.envs.atari import rom_path
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
        if self.kind == "atari":
            rom_path(self.game)
        elif self.backend == "ale_vector":
            raise EnvError("env.backend='ale_vector' runs Atari games only; use env.kind=atari")
        else:
            ok = bool(self.gym_id)
            _check(ok, "gym_id", self.gym_id, "a gymnasium id such as 'CartPole-v1' (env.kind=gym)")

    @property
    def name(self) -> str:
        """Short name for run directories and W&B: the ALE game or the gymnasium id."""
        return self.game if self.kind == "atari" else self.gym_id


def _check(ok: bool, key: str, value: object, expected: str) -> None:
    if not ok:
        raise EnvError(f"env.{key} must be {expected}, got {value!r}")


def env_settings(fields: dict[str, Any]) -> EnvSettings:
    """``EnvSettings(**fields)``, with EnvError naming an unknown key and the known ones."""
    known = [field.name for field in dataclasses.fields(EnvSettings)]
    unknown = sorted(set(fields) - set(known))
    if unknown:
        raise EnvError(f"unknown env setting(s) {unknown}; known: {known}")
    return EnvSettings(**fields)

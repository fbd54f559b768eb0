"""Build environment vectors from the fields of ``cfg.env``; pick the Atari backend.

``make_vec_env(num_envs=E, seed=s, **dataclasses.asdict(cfg.env))`` is the one entry point of the
actors; ``env_spec(**...)`` lets the runner size models and buffers (and fail on a bad game or
gym id) before any process starts.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from typing import Any

from stampede.envs.atari import AtariSettings
from stampede.envs.spec import EnvError, EnvSpec, VecEnv
from stampede.envs.vector import (
    AleVectorEnv,
    AtariVecEnv,
    GymVecEnv,
    atari_spec,
    gym_spec,
    make_gym,
)

ENV_KINDS = ("atari", "gym")
BACKENDS = ("auto", "gymnasium", "ale_vector")
# AleVectorEnv's option mapping was checked (identical observations) against this ale-py.
ALE_VECTOR_MIN_VERSION = (0, 12)


def ale_vector_available() -> bool:
    """Whether ale-py ships the C++ ``AtariVectorEnv`` in a version we checked."""
    if importlib.util.find_spec("ale_py") is None:
        return False
    import ale_py

    major, minor = (int(part) for part in ale_py.__version__.split(".")[:2])
    return (major, minor) >= ALE_VECTOR_MIN_VERSION


def resolve_backend(kind: str, backend: str, num_envs: int = 8) -> str:
    """The backend that will run; ``auto`` becomes the faster of two with identical output.

    Atari: ale-py's C++ vector for vectors of 2 or more envs (about 10% more steps per
    CPU-second at E = 8 and 32), the Python loop for a single env (there the C++ vector's
    per-step hand-off to its worker thread costs more than it saves, about 10% slower); see
    benchmarks/env_throughput.py. Gym ids have one backend.
    """
    if kind not in ENV_KINDS:
        raise EnvError(f"env.kind must be one of {ENV_KINDS}, got {kind!r}")
    if backend not in BACKENDS:
        raise EnvError(f"env.backend must be one of {BACKENDS}, got {backend!r}")
    if kind == "gym":
        if backend == "ale_vector":
            raise EnvError("env.backend='ale_vector' runs Atari games only; use env.kind=atari")
        return "gymnasium"
    if backend == "auto":
        return "ale_vector" if num_envs >= 2 and ale_vector_available() else "gymnasium"
    if backend == "ale_vector" and not ale_vector_available():
        raise EnvError(
            "env.backend='ale_vector' needs ale-py >= "
            f"{'.'.join(map(str, ALE_VECTOR_MIN_VERSION))}; use env.backend=gymnasium or auto"
        )
    return backend


def make_vec_env(
    num_envs: int,
    seed: int,
    *,
    kind: str = "atari",
    gym_id: str = "",
    backend: str = "auto",
    **atari: Any,
) -> VecEnv:
    """A vector of ``num_envs`` environments; call ``reset(seed)`` before stepping it.

    kind="atari": the ALE game with the DQN Nature preprocessing, obs uint8 [frame_stack,
    screen_size, screen_size]; ``atari`` holds the knobs of ``AtariSettings`` (game, noop_max,
    frame_skip, frame_stack, screen_size, episodic_life, max_episode_frames,
    repeat_action_probability, full_action_space; paper defaults). kind="gym": gymnasium
    ``gym_id`` as it is; the Atari knobs are checked by name and ignored.
    ``seed`` seeds the emulators' construction; ``reset(seed)`` seeds the episodes.
    """
    chosen = resolve_backend(kind, backend, num_envs)
    settings = atari_settings(atari)
    if kind == "gym":
        return GymVecEnv(num_envs, gym_id)
    if chosen == "ale_vector":
        return AleVectorEnv(num_envs, settings)
    return AtariVecEnv(num_envs, settings, seed=seed)


def env_spec(
    *, kind: str = "atari", gym_id: str = "", backend: str = "auto", **atari: Any
) -> EnvSpec:
    """The spec that ``make_vec_env`` with the same keywords gives; builds one env, cheaply.

    A bad kind, backend, game, gym id or Atari setting raises EnvError here.
    """
    resolve_backend(kind, backend)
    settings = atari_settings(atari)
    if kind == "gym":
        env = make_gym(gym_id)
        try:
            return gym_spec(env, gym_id)
        finally:
            env.close()
    return atari_spec(settings)


def atari_settings(knobs: dict[str, Any]) -> AtariSettings:
    """``AtariSettings(**knobs)``, with EnvError naming an unknown key and the known ones."""
    known = [field.name for field in dataclasses.fields(AtariSettings)]
    unknown = sorted(set(knobs) - set(known))
    if unknown:
        raise EnvError(f"unknown env setting(s) {unknown}; known: kind, gym_id, backend, {known}")
    return AtariSettings(**knobs)

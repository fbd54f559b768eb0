"""Build environment vectors from the fields of ``cfg.env`` (``EnvSettings``); pick the backend.

``make_vec_env(num_envs=E, seed=s, **dataclasses.asdict(cfg.env))`` is the one entry point of the
actors; ``env_spec(**...)`` lets the runner size models and buffers (and fail on a bad game or
gym id) before any process starts.
"""

from __future__ import annotations

import importlib.util
import itertools
from collections.abc import Sequence
from typing import Any

from stampede.envs.settings import EnvSettings, env_settings, env_tasks
from stampede.envs.spec import EnvError, EnvSpec, VecEnv
from stampede.envs.tasks import TaskVecEnv
from stampede.envs.vector import (
    AleVectorEnv,
    AtariVecEnv,
    GymVecEnv,
    atari_spec,
    gym_spec,
    make_gym,
)

# AleVectorEnv's option mapping was checked (identical observations) against this ale-py.
ALE_VECTOR_MIN_VERSION = (0, 12)


def ale_vector_available() -> bool:
    """Whether ale-py ships the C++ ``AtariVectorEnv`` in a version we checked."""
    if importlib.util.find_spec("ale_py") is None:
        return False
    import ale_py

    major, minor = (int(part) for part in ale_py.__version__.split(".")[:2])
    return (major, minor) >= ALE_VECTOR_MIN_VERSION


def resolve_backend(settings: EnvSettings, num_envs: int = 8) -> str:
    """The backend that will run; ``auto`` becomes the faster of two with identical output.

    Atari: ale-py's C++ vector for vectors of 2 or more envs (about 10% more steps per
    CPU-second at E = 8 and 32), the Python loop for a single env (there the C++ vector's
    per-step hand-off to its worker thread costs more than it saves, about 10% slower); see
    benchmarks/env_throughput.py. Gym ids have one backend, the Python loop.
    """
    if settings.kind == "gym":
        return "python_loop"
    if settings.backend == "auto":
        return "ale_vector" if num_envs >= 2 and ale_vector_available() else "python_loop"
    if settings.backend == "ale_vector" and not ale_vector_available():
        raise EnvError(
            "env.backend='ale_vector' needs ale-py >= "
            f"{'.'.join(map(str, ALE_VECTOR_MIN_VERSION))}; use env.backend=python_loop or auto"
        )
    return settings.backend


def make_vec_env(
    num_envs: int,
    seed: int,
    tasks: Sequence[int] | None = None,
    num_threads: int = 1,
    **fields: Any,
) -> VecEnv:
    """A vector of ``num_envs`` environments; call ``reset(seed)`` before stepping it.

    ``fields`` are those of ``EnvSettings`` (the keys of ``cfg.env``; omitted ones take their
    defaults). kind="atari": the ALE game with the DQN Nature preprocessing, obs uint8
    [frame_stack, screen_size, screen_size]. kind="gym": gymnasium ``gym_id`` as it is.
    ``seed`` seeds the emulators' construction; ``reset(seed)`` seeds the episodes.
    Multi-task settings (``env.games``): env i plays game ``tasks[i]`` (by default the games
    share the vector as ``env_tasks`` shares a run's slots); the result is a ``TaskVecEnv``.
    ``num_threads``: the threads that step ale-py's C++ vector (backend ``ale_vector``; each
    vector of a multi-task one gets as many); the Python loops step on the caller's thread.
    """
    settings = env_settings(fields)
    if settings.games:
        tasks = list(tasks) if tasks is not None else env_tasks(len(settings.games), num_envs)
        return _task_vector(settings, tasks, seed, num_threads)
    return _single_game_vector(settings, num_envs, seed, num_threads)


def _task_vector(
    settings: EnvSettings, tasks: list[int], seed: int, num_threads: int
) -> TaskVecEnv:
    """One vector per run of equal tasks, concatenated; env i keeps the seed ``seed + i``."""
    if not tasks or min(tasks) < 0 or max(tasks) >= len(settings.games):
        raise EnvError(
            f"tasks must be {len(settings.games)} game indices in [0, {len(settings.games)}) "
            f"(one per env), got {tasks}"
        )
    parts, offset = [], 0
    for task, run in itertools.groupby(tasks):
        size = len(list(run))
        parts.append(_single_game_vector(settings.task(task), size, seed + offset, num_threads))
        offset += size
    return TaskVecEnv(parts, tasks)


def _single_game_vector(
    settings: EnvSettings, num_envs: int, seed: int, num_threads: int
) -> VecEnv:
    chosen = resolve_backend(settings, num_envs)
    if settings.kind == "gym":
        return GymVecEnv(num_envs, settings.gym_id)
    if chosen == "ale_vector":
        return AleVectorEnv(num_envs, settings, num_threads)
    return AtariVecEnv(num_envs, settings, seed=seed)


def env_spec(**fields: Any) -> EnvSpec:
    """The spec that ``make_vec_env`` with the same keywords gives; builds one env, cheaply.

    A bad kind, backend, game, gym id or Atari setting raises EnvError here. A multi-task run's
    spec is its first game's: with the full action set every Atari game gives the same.
    """
    settings = env_settings(fields).task(0)
    resolve_backend(settings)
    if settings.kind == "gym":
        env = make_gym(settings.gym_id)
        try:
            return gym_spec(env, settings.gym_id)
        finally:
            env.close()
    return atari_spec(settings)

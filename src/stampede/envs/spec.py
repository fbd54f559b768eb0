"""The environment contract the actors rely on: spec, step result, vector protocol, error type.

Every backend (Python loop over ALE, ale-py's C++ vector, gymnasium ids) returns the same
``VecStep``: auto-reset on the same step, raw rewards, and the true game return reported only
when a whole game ends, so that actor code never branches on the backend.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Protocol, runtime_checkable

import numpy as np

from stampede.errors import UserError


class EnvError(UserError, ValueError):
    """A bad environment setting; the message names the ``env.*`` key and what was expected."""


@dataclass(frozen=True)
class EnvSpec:
    """What a model and the rollout buffers need to know about one environment.

    ``frames_per_step`` converts agent steps into the paper's "frames" (frame skip included).
    """

    obs_shape: tuple[int, ...]
    obs_dtype: np.dtype
    num_actions: int
    frames_per_step: int
    action_meanings: tuple[str, ...] | None = None


class VecStep(NamedTuple):
    """Result of one step of E environments; every array has leading dimension E.

    obs: [E, *obs_shape]; where ``done`` is set it is already the first observation of the next
        (training) episode: same-step auto-reset.
    reward: [E] float32, raw (unclipped) reward of this step.
    done: [E] bool, end of a training episode: termination, truncation, or (with episodic life)
        the loss of a life.
    episode_return: [E] float32, true game return (all lives, unclipped) where a full game
        ended on this step, NaN elsewhere.
    episode_length: [E] int64, agent steps of that full game where one ended, 0 elsewhere.
    """

    obs: np.ndarray
    reward: np.ndarray
    done: np.ndarray
    episode_return: np.ndarray
    episode_length: np.ndarray


@runtime_checkable
class VecEnv(Protocol):
    """E environments stepped as one batch in the calling process (no subprocesses inside)."""

    num_envs: int
    spec: EnvSpec

    def reset(self, seed: int) -> np.ndarray:
        """Start every environment anew; env i is seeded with ``seed + i``. Returns [E, *obs]."""
        ...

    def step(self, actions: np.ndarray) -> VecStep:
        """Apply ``actions`` [E] (ints in [0, num_actions)) to every environment."""
        ...

    def close(self) -> None:
        """Release emulators and threads; the vector is unusable afterwards."""
        ...


class GameTracker:
    """Sums reward and counts agent steps over whole games, for ``VecStep.episode_*``.

    A "game" spans every life: with episodic life a training episode ends at each life loss, but
    the score reported to the user (the paper's episode return) is the whole game's.
    """

    def __init__(self, num_envs: int) -> None:
        self._return = np.zeros(num_envs, dtype=np.float64)  # float64: long games, many rewards
        self._length = np.zeros(num_envs, dtype=np.int64)

    def reset(self) -> None:
        self._return[:] = 0.0
        self._length[:] = 0

    def update(self, reward: np.ndarray, game_end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Add this step's ``reward`` [E]; return (episode_return [E], episode_length [E]).

        Where ``game_end`` [E] is set the finished game's totals are reported and the counters
        restart; elsewhere the return is NaN and the length 0.
        """
        self._return += reward
        self._length += 1
        episode_return = np.where(game_end, self._return, np.nan).astype(np.float32)
        episode_length = np.where(game_end, self._length, 0).astype(np.int64)
        self._return[game_end] = 0.0
        self._length[game_end] = 0
        return episode_return, episode_length


def check_actions(actions: np.ndarray, num_envs: int, num_actions: int) -> np.ndarray:
    """``actions`` as an int64 array [E], or EnvError naming the expected shape and range."""
    actions = np.asarray(actions)
    if actions.shape != (num_envs,) or not np.issubdtype(actions.dtype, np.integer):
        raise EnvError(
            f"actions must be an integer array of shape ({num_envs},), "
            f"got dtype {actions.dtype} and shape {actions.shape}"
        )
    if num_envs and (actions.min() < 0 or actions.max() >= num_actions):
        raise EnvError(
            f"actions must lie in [0, {num_actions}), got min {actions.min()} max {actions.max()}"
        )
    return actions.astype(np.int64, copy=False)


def env_seeds(seed: int, num_envs: int) -> np.ndarray:
    """Seeds [E] of the E environments: ``seed + i``, folded into [0, 2**31).

    Emulators take non-negative int32 seeds while callers may pass any int (an actor derives its
    seed from ``SeedSequence.generate_state``, a uint32), so the sum wraps modulo 2**31.
    """
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer):
        raise EnvError(f"seed must be an int, got {type(seed).__name__} {seed!r}")
    return (int(seed) + np.arange(num_envs, dtype=np.int64)) % 2**31

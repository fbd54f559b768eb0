"""Environments: Atari with the paper's preprocessing, gymnasium ids, vectorised in-process.

The actors' contract: ``make_vec_env(num_envs=E, seed=s, **dataclasses.asdict(cfg.env))``
returns a ``VecEnv`` whose ``step`` gives a ``VecStep`` (same-step auto-reset, raw rewards, the
true game return where a game ended). ``env_spec`` reads the spaces without building a vector.
"""

from stampede.envs.atari import AtariSettings, atari_games
from stampede.envs.factory import BACKENDS, ENV_KINDS, env_spec, make_vec_env, resolve_backend
from stampede.envs.spec import EnvError, EnvSpec, VecEnv, VecStep

__all__ = [
    "BACKENDS",
    "ENV_KINDS",
    "AtariSettings",
    "EnvError",
    "EnvSpec",
    "VecEnv",
    "VecStep",
    "atari_games",
    "env_spec",
    "make_vec_env",
    "resolve_backend",
]

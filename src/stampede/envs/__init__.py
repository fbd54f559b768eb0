"""Environments: Atari with the paper's preprocessing, gymnasium ids, vectorised in-process.

``cfg.env`` is an ``EnvSettings``: every ``env.*`` key with its one default and check. The
actors' contract: ``make_vec_env(num_envs=E, seed=s, **dataclasses.asdict(cfg.env))`` returns a
``VecEnv`` whose ``step`` gives a ``VecStep`` (same-step auto-reset, raw rewards, the
true game return where a game ended). ``env_spec`` reads the spaces without building a vector.
"""

from stampede.envs.factory import env_spec, make_vec_env, resolve_backend
from stampede.envs.roms import atari_games
from stampede.envs.settings import BACKENDS, ENV_KINDS, EnvSettings
from stampede.envs.spec import EnvError, EnvSpec, VecEnv, VecStep

__all__ = [
    "BACKENDS",
    "ENV_KINDS",
    "EnvError",
    "EnvSettings",
    "EnvSpec",
    "VecEnv",
    "VecStep",
    "atari_games",
    "env_spec",
    "make_vec_env",
    "resolve_backend",
]

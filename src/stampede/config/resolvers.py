"""The OmegaConf resolvers the experiment configs use: ``${stampede.games:atari57}`` (a game
set as a sweep over ``env.game``), ``${stampede.game_list:atari5}`` (the same as a list, for a
multi-task ``env.games``) and ``${stampede.study_storage:<path>}`` (an Optuna study's database).
The game sets come from ``stampede.envs.games``, like the games the reports compare."""

from __future__ import annotations

from pathlib import Path

from stampede.envs.games import games


def games_sweep(name: str) -> str:
    """A game set as a Hydra sweep value: ``"alien,amidar,..."``."""
    return ",".join(games(name))


def study_storage(path: str) -> str:
    """The SQLite URL of an Optuna study database at ``path`` (relative to the directory the
    sweep starts in), its directory created: SQLite makes the file, not the folders."""
    where = Path(path).resolve()
    where.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{where}"


def register_resolvers() -> None:
    """Register ``${stampede.games:<set>}`` with OmegaConf (experiments sweep ``env.game`` with it),
    ``${stampede.game_list:<set>}``, the same games as a list (multi-task ``env.games``), and
    ``${stampede.study_storage:<path>}`` (an Optuna study's database, ``study_storage``).

    Hydra's basic sweeper instantiates itself from the config, which resolves interpolations in
    ``hydra.sweeper.params``; so this must run before Hydra starts (``register_configs`` does).
    """
    from omegaconf import OmegaConf

    OmegaConf.register_new_resolver("stampede.games", games_sweep, replace=True)
    OmegaConf.register_new_resolver("stampede.study_storage", study_storage, replace=True)
    OmegaConf.register_new_resolver("stampede.game_list", lambda n: list(games(n)), replace=True)

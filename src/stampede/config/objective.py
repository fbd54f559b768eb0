"""The ``objective`` key: which number a training run returns to a search (Optuna maximises it,
PBT ranks members by it), checked with the rest of the config. Reading it from a finished run
is ``stampede.search.objective``.

- ``env/episode_return`` (the default): the mean true (unclipped) return of the last 100 games the
  run finished, as the Atari literature reports; fewer games: the mean of those there are.
- ``env/<game>/episode_return``: the same over one game of a multi-task run.
- ``eval/episode_return`` or ``eval/episode_return_median`` (``eval/<game>/...`` in a multi-task
  run): the mean or median return of the evaluation run at the end of training (needs
  ``eval.at_end=true``), read from the run's ``eval.json``.
"""

from __future__ import annotations

import dataclasses

from stampede.config.checks import ConfigError

DEFAULT = "env/episode_return"
EVAL_FIGURES = {"episode_return": "mean", "episode_return_median": "median"}  # -> EvalRecord


@dataclasses.dataclass(frozen=True)
class Objective:
    """A parsed ``objective`` key: where the number comes from, for which game, which figure."""

    source: str  # "env" (training games) or "eval" (the evaluation at the end of training)
    game: str | None  # one game of a multi-task run; None: the run's (only) game
    figure: str  # "episode_return" or "episode_return_median"

    @classmethod
    def parse(cls, name: str, games: list[str], eval_at_end: bool) -> Objective:
        """The objective ``name`` of a run that trains on ``games`` (empty: a single game);
        ConfigError naming the key and the allowed values if the run cannot produce it."""
        parts = name.split("/")
        figures = {"env": ("episode_return",), "eval": tuple(EVAL_FIGURES)}
        allowed = (
            "env/episode_return, env/<game>/episode_return, eval/episode_return, "
            "eval/episode_return_median (eval/<game>/... for one game of env.games)"
        )
        known = len(parts) in (2, 3) and parts[-1] in figures.get(parts[0], ())
        if not known:
            raise ConfigError(f"objective={name!r}: not a run's objective; one of {allowed}")
        game = parts[1] if len(parts) == 3 else None
        if game is not None and game not in games:
            raise ConfigError(
                f"objective={name!r}: {game!r} is not one of env.games={games}; "
                f"use {parts[0]}/<game>/{parts[-1]} with a game of the run"
            )
        if parts[0] == "eval" and not eval_at_end:
            raise ConfigError(
                f"objective={name!r} is read from the evaluation at the end of training; "
                "set eval.at_end=true (or objective=env/episode_return)"
            )
        return cls(parts[0], game, parts[-1])

"""The Atari-57 game list, as ALE ROM ids (the names `env.game` takes).

The list is read from the package's copy of the IMPALA paper's per-game scores
(Espeholt et al. 2018, arXiv 1802.01561, Table C.1), so that the games we train, the games
we report on and the paper's table can never drift apart. Nothing is read at import: the
file is read the first time `atari57()` (or the module attribute `ATARI57`) is used.
"""

from __future__ import annotations

import csv
import functools
from collections.abc import Callable, Mapping
from importlib import resources

IMPALA_SCORES_CSV = "impala_deep_atari57_scores.csv"
RANDOM_HUMAN_CSV = "atari57_random_human_scores.csv"

# Atari-5 (Aitchison, Sweetser, Hutter, ICML 2023, arXiv 2210.02019): the five games whose scores
# best predict the 57-game median human-normalised score (stampede.report.aggregate).
ATARI5: tuple[str, ...] = ("battle_zone", "double_dunk", "name_this_game", "phoenix", "qbert")

# Five classics of the DQN papers (Mnih et al. 2013/2015), where a working IMPALA clearly beats
# random play within a few million frames: a quick check that a change still learns. Not Atari-5.
CLASSIC5: tuple[str, ...] = ("beam_rider", "breakout", "pong", "qbert", "space_invaders")

# The dev set on which defaults are chosen (docs/learning.md): dense to sparse rewards, and
# Robotank, a first-person tank game like Atari-5's BattleZone. Atari-5 is the test set: it is
# run with the chosen defaults and reported, never tuned on, so the two sets share no game.
DEV5: tuple[str, ...] = ("pong", "breakout", "beam_rider", "space_invaders", "robotank")


def read_data_csv(filename: str) -> list[dict[str, str]]:
    """Rows of a CSV shipped in `stampede/data/`, as dicts keyed by the header.

    Lines starting with `#` are source and provenance notes, not data, and are skipped.
    """
    path = resources.files("stampede").joinpath("data", filename)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as err:
        raise FileNotFoundError(
            f"stampede data file {filename!r} not found in the installed package "
            f"(expected it in stampede/data/; reinstall with `pip install -e .`)"
        ) from err
    data_lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    return list(csv.DictReader(data_lines))


@functools.cache
def atari57() -> tuple[str, ...]:
    """The 57 Atari games as ALE ROM ids, in the order of the paper's table (alphabetical)."""
    games = tuple(row["ale_id"] for row in read_data_csv(IMPALA_SCORES_CSV))
    if len(games) != 57 or len(set(games)) != 57:
        raise ValueError(
            f"{IMPALA_SCORES_CSV} must list 57 distinct games, got {len(set(games))} distinct "
            f"of {len(games)} rows"
        )
    return games


def __getattr__(name: str) -> tuple[str, ...]:
    # Module attribute computed on first use (PEP 562), so importing this module reads no file.
    if name == "ATARI57":
        return atari57()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


GAME_SETS: Mapping[str, Callable[[], tuple[str, ...]]] = {
    "atari57": atari57,
    "atari5": lambda: ATARI5,
    "classic5": lambda: CLASSIC5,
    "dev5": lambda: DEV5,
}


def games(name: str) -> tuple[str, ...]:
    """The ALE ids of a named game set (``atari57``, ``atari5``, ``classic5``, ``dev5``)."""
    if name not in GAME_SETS:
        raise ValueError(f"unknown game set {name!r}; known: {', '.join(GAME_SETS)}")
    return GAME_SETS[name]()

"""Human-normalised scores: our per-game scores against the IMPALA paper, as a table.

Compares per-game scores with IMPALA (deep network, one agent per game) of Espeholt et al.
2018 (arXiv 1802.01561, Table C.1) and summarises them with human-normalised scores,

    HNS = (score - random) / (human - random),

stored as fractions (1.0 = human level) and printed as percentages. Aggregates over the
games present: median and mean HNS as in the paper, and the interquartile mean (IQM) that
Agarwal et al. 2021 ("Deep RL at the Edge of the Statistical Precipice") recommend.

Per game, our score is the mean over seeds of each seed's mean evaluation return, and our
HNS is the HNS of that mean. HNS is affine in the score, so this equals the mean over seeds
of per-seed HNS: the choice does not change any number.

Random scores: the shipped random/human table (DQN Zoo) gives video_pinball a random score of
16256.9, less than 1,500 points under its human score, which turns the paper's 572,898 into an
HNS of about 39,450% and the 57-game mean into ~1592%. The IMPALA paper's means (957.6% deep)
are reproduced only with random = 0 for video_pinball, as other public copies of the table
have it; `PAPER_RANDOM_OVERRIDES` applies that by default so our means compare with the
paper's. Medians are the same either way.

`table_from_scores({"pong": 20.9, ...})` builds the table from scores;
`stampede.report.report` builds it from a sweep's eval.json files and prints it.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping, Sequence
from types import MappingProxyType

import numpy as np

from stampede.envs.games import IMPALA_SCORES_CSV, RANDOM_HUMAN_CSV, atari57, read_data_csv

# See the module docstring: the random score the IMPALA paper's aggregates imply.
PAPER_RANDOM_OVERRIDES: Mapping[str, float] = MappingProxyType({"video_pinball": 0.0})


# ---------------------------------------------------------------------------- reference data


@dataclasses.dataclass(frozen=True)
class GameReference:
    """Reference scores of one game: the paper's name, random, human and IMPALA (deep)."""

    game: str  # ALE id
    name: str  # the paper's name
    random: float
    human: float
    impala_deep: float

    def hns(self, score: float) -> float:
        """Human-normalised score of `score` as a fraction (1.0 = human level)."""
        return (score - self.random) / (self.human - self.random)


def load_reference(
    random_overrides: Mapping[str, float] = PAPER_RANDOM_OVERRIDES,
) -> dict[str, GameReference]:
    """Reference scores of the 57 games keyed by ALE id, in `atari57()` order.

    `random_overrides` replaces random scores of the shipped table (by ALE id); pass `{}` to
    use the DQN Zoo values unchanged.
    """
    return dict(_load_reference(tuple(sorted(random_overrides.items()))))


@functools.cache
def _load_reference(
    overrides: tuple[tuple[str, float], ...],
) -> tuple[tuple[str, GameReference], ...]:
    random_human = {row["game"]: row for row in read_data_csv(RANDOM_HUMAN_CSV)}
    paper = {row["ale_id"]: row for row in read_data_csv(IMPALA_SCORES_CSV)}
    games = atari57()
    if set(random_human) != set(games):
        raise ValueError(
            f"{RANDOM_HUMAN_CSV} must cover the 57 games of {IMPALA_SCORES_CSV}; "
            f"missing {sorted(set(games) - set(random_human))}, "
            f"extra {sorted(set(random_human) - set(games))}"
        )
    unknown = sorted(dict(overrides).keys() - set(games))
    if unknown:
        raise ValueError(f"random_overrides names games outside Atari-57: {unknown}")
    random_of = {g: float(random_human[g]["random"]) for g in games} | dict(overrides)
    return tuple(
        (
            g,
            GameReference(
                game=g,
                name=paper[g]["game"],
                random=random_of[g],
                human=float(random_human[g]["human"]),
                impala_deep=float(paper[g]["impala_deep_score"]),
            ),
        )
        for g in games
    )


# ------------------------------------------------------------------------------------ table


@dataclasses.dataclass(frozen=True)
class GameRow:
    """One game of the table. HNS values are fractions (1.0 = human level)."""

    game: str
    name: str
    score: float  # ours: mean over seeds
    std: float  # sample std over seeds (ddof=1); nan with one seed
    n_seeds: int
    frames: int  # fewest training frames among the seeds (0 if unknown)
    impala_deep: float
    random: float
    human: float
    hns: float
    impala_deep_hns: float
    seed_scores: tuple[float, ...] = ()  # ours: each seed's score, in the order given

    @property
    def beats_paper(self) -> bool:
        return self.score > self.impala_deep


@dataclasses.dataclass(frozen=True)
class Table:
    """Per-game rows (Atari-57 order) for the games present, and the games missing.

    ``multitask_games``: > 0 when every row is played by one multi-task agent trained on that
    many games (Hessel et al. 2019's setting); 0 for one agent per game.
    """

    rows: tuple[GameRow, ...]
    missing: tuple[str, ...]
    multitask_games: int = 0

    @property
    def n_games(self) -> int:
        return len(self.rows)

    @property
    def n_beat_paper(self) -> int:
        return sum(row.beats_paper for row in self.rows)

    @property
    def median_hns(self) -> float:
        return _median([row.hns for row in self.rows])

    @property
    def mean_hns(self) -> float:
        return _mean([row.hns for row in self.rows])

    @property
    def iqm_hns(self) -> float:
        return interquartile_mean([row.hns for row in self.rows])

    @property
    def paper_median_hns(self) -> float:
        """The paper's median HNS over the same games (all 57: the paper's own figure)."""
        return _median([row.impala_deep_hns for row in self.rows])

    @property
    def paper_mean_hns(self) -> float:
        return _mean([row.impala_deep_hns for row in self.rows])

    @property
    def paper_iqm_hns(self) -> float:
        return interquartile_mean([row.impala_deep_hns for row in self.rows])


def interquartile_mean(values: Sequence[float]) -> float:
    """Mean of the middle 50% (Agarwal et al. 2021): drop the lowest and highest
    floor(n / 4) values, average the rest. Same convention as `scipy.stats.trim_mean(x, 0.25)`,
    which rliable uses. nan for no values."""
    if len(values) == 0:
        return math.nan
    n_cut = len(values) // 4
    middle = sorted(values)[n_cut : len(values) - n_cut]
    return _mean(middle)


def _median(values: Sequence[float]) -> float:
    return float(np.median(values)) if len(values) else math.nan


def _mean(values: Sequence[float]) -> float:
    return float(np.mean(values)) if len(values) else math.nan


def table_from_scores(
    scores: Mapping[str, float | Sequence[float] | np.ndarray],
    random_overrides: Mapping[str, float] = PAPER_RANDOM_OVERRIDES,
    frames: Mapping[str, int] | None = None,
) -> Table:
    """Table from {ALE id: score} (or {ALE id: [score per seed]}), e.g. in notebooks; one row per
    Atari-57 game given, in the paper's order. ``frames``: training frames per game (0 if absent).

    Raises ValueError naming any game that is not an Atari-57 ALE id.
    """
    reference = load_reference(random_overrides)
    unknown = sorted(set(scores) - set(reference))
    if unknown:
        raise ValueError(f"not Atari-57 ALE ids: {unknown} (expected ids like 'pong', 'ms_pacman')")
    # A scalar is one seed; np.atleast_1d also accepts lists, tuples and numpy arrays.
    per_game = {game: np.atleast_1d(np.asarray(s, float)).tolist() for game, s in scores.items()}
    empty = sorted(game for game, seeds in per_game.items() if not seeds)
    if empty:
        raise ValueError(f"no scores given for {empty}")
    frames = frames or {}
    rows = tuple(
        _row(ref, per_game[game], frames.get(game, 0))
        for game, ref in reference.items()
        if game in per_game
    )
    return Table(rows=rows, missing=tuple(game for game in reference if game not in per_game))


def _row(ref: GameReference, seed_scores: list[float], frames: int) -> GameRow:
    score = _mean(seed_scores)
    std = float(np.std(seed_scores, ddof=1)) if len(seed_scores) > 1 else math.nan
    return GameRow(
        game=ref.game,
        name=ref.name,
        score=score,
        std=std,
        n_seeds=len(seed_scores),
        frames=frames,
        impala_deep=ref.impala_deep,
        random=ref.random,
        human=ref.human,
        hns=ref.hns(score),
        impala_deep_hns=ref.hns(ref.impala_deep),
        seed_scores=tuple(seed_scores),
    )

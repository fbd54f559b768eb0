"""Aggregates a reviewer accepts: interval estimates over games and seeds, a performance profile,
and the Atari-5 prediction of the 57-game median.

- ``intervals``: the interquartile mean, median and mean of human-normalised scores with
  stratified-bootstrap 95% confidence intervals (runs resampled within each game), computed by
  ``rliable`` (Agarwal et al. 2021, "Deep Reinforcement Learning at the Edge of the Statistical
  Precipice", arXiv 2108.13264). With ``task_bootstrap`` the games are resampled as well
  (rliable's task bootstrap): the interval then says how much the aggregate depends on which
  games were run, not only on the seeds. With one seed per game the stratified bootstrap has
  nothing to resample (its interval is the point itself), so the report uses the task bootstrap.
- ``profile_figure``: rliable's performance profile, the fraction of runs whose HNS exceeds
  each threshold tau, for our runs and for the IMPALA paper's scores on the same games.
- ``atari5_median``: Aitchison, Sweetser and Hutter's Atari-5 (ICML 2023, arXiv 2210.02019)
  predicts the 57-game median HNS from five games by a regression without intercept,
  ``log10(1 + median) = sum_i w_i log10(1 + max(HNS_i, 0))`` with HNS in percent. The weights
  below are the authors' (their ``Atari_5`` entry in maitchison/PPO ``tools/plot_util.py``, which
  gives the subset's cross-validated relative error as 10.4%); they also follow from refitting
  ``LinearRegression(fit_intercept=False)`` to the dataset of maitchison/Atari-5.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from stampede.report.hns import PAPER_RANDOM_OVERRIDES, GameRow, Table, load_reference
from stampede.report.plotting import pyplot

if TYPE_CHECKING:
    from matplotlib.figure import Figure

# The Atari-5 regression's weights, in the order of ATARI5, and its relative error.
ATARI5_WEIGHTS: Mapping[str, float] = {
    "battle_zone": 0.3819751237831753,
    "double_dunk": 0.0679099488887574,
    "name_this_game": 0.310804148620847,
    "phoenix": 0.12412619402774641,
    "qbert": 0.08048518286466755,
}
ATARI5_ERROR = 0.104

CONFIDENCE = 0.95


@dataclasses.dataclass(frozen=True)
class Interval:
    """A point estimate with its confidence interval (HNS as fractions, 1.0 = human level)."""

    point: float
    low: float
    high: float

    def percent(self) -> str:
        return f"{100 * self.point:.1f}% [{100 * self.low:.1f}, {100 * self.high:.1f}]"


def seed_matrix(table: Table) -> np.ndarray:
    """HNS of every (seed, game) of the table, [runs, games]: the first ``runs`` seeds of each
    game, where ``runs`` is the fewest seeds any game has (rliable needs as many runs per game;
    a warning names the games whose further seeds are left out)."""
    runs = min(row.n_seeds for row in table.rows)
    cut = [row.game for row in table.rows if row.n_seeds > runs]
    if cut:
        warnings.warn(
            f"aggregate intervals use {runs} seed(s) per game, the fewest any game has; "
            f"further seeds of {', '.join(cut)} are left out of them",
            UserWarning,
            stacklevel=2,
        )
    return np.array([[_hns(row, s) for s in row.seed_scores[:runs]] for row in table.rows]).T


def _hns(row: GameRow, score: float) -> float:
    return (score - row.random) / (row.human - row.random)


def intervals(
    table: Table, reps: int = 10_000, seed: int = 0, task_bootstrap: bool = False
) -> dict[str, Interval]:
    """IQM, median and mean of the table's HNS over games and seeds, each with its
    stratified-bootstrap 95% interval from ``reps`` resamples (rliable); ``task_bootstrap``
    resamples the games too."""
    from rliable import library, metrics

    scores = {"ours": seed_matrix(table)}
    functions = {
        "IQM": metrics.aggregate_iqm,
        "median": metrics.aggregate_median,
        "mean": metrics.aggregate_mean,
    }
    out = {}
    with _quiet_bootstrap():
        for name, function in functions.items():
            points, cis = library.get_interval_estimates(
                scores,
                lambda x, f=function: np.array([f(x)]),
                task_bootstrap=task_bootstrap,
                reps=reps,
                confidence_interval_size=CONFIDENCE,
                random_state=np.random.RandomState(seed),
            )
            ours, (low, high) = points["ours"][0], cis["ours"][:, 0]
            out[name] = Interval(float(ours), float(low), float(high))
    return out


@contextlib.contextmanager
def _quiet_bootstrap() -> Iterator[None]:
    """rliable hands ``arch`` a RandomState, which arch 7 announces as deprecated on each call."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="random_state is deprecated")
        yield


def profile_figure(table: Table, reps: int = 2_000, task_bootstrap: bool = False) -> Figure:
    """rliable's performance profile of our runs beside the IMPALA paper's scores on the same
    games: for each tau, the fraction of runs with HNS above tau, with 95% bands for ours
    (``task_bootstrap``: the games resampled too)."""
    from rliable import library, plot_utils

    ours = seed_matrix(table)
    paper = np.array([[row.impala_deep_hns for row in table.rows]])  # one run per game
    top = max(2.0, float(np.nanmax(np.concatenate([ours.ravel(), paper.ravel()]))))
    taus = np.linspace(0.0, min(top, 8.0), 81)
    label = "IMPALA paper (deep, 200M frames)"
    with _quiet_bootstrap():
        profiles, cis = library.create_performance_profile(
            {"ours": ours, label: paper}, taus, task_bootstrap=task_bootstrap, reps=reps
        )
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2), layout="constrained")
    plot_utils.plot_performance_profiles(
        profiles,
        taus,
        performance_profile_cis={"ours": cis["ours"]},
        colors={"ours": "tab:blue", label: "tab:grey"},
        xlabel="human-normalised score (tau)",
        ylabel="fraction of runs with score > tau",
        ax=ax,
    )
    lines = ax.get_lines()[:2]  # in the order of the profiles: ours, the paper's
    band = "95% band, games resampled" if task_bootstrap else "95% band"
    ours_label = f"ours ({ours.shape[0]} seed(s) x {ours.shape[1]} games, {band})"
    ax.legend(lines, [ours_label, label], loc="upper right")
    ax.set_title("performance profile (rliable)")
    return fig


def atari5_median(hns_by_game: Mapping[str, float]) -> float | None:
    """The 57-game median HNS (a fraction) that Atari-5 predicts from the HNS (fractions) of its
    five games; None unless all five are given."""
    if not all(game in hns_by_game for game in ATARI5_WEIGHTS):
        return None
    log_median = sum(
        w * math.log10(1 + max(100 * hns_by_game[game], 0.0)) for game, w in ATARI5_WEIGHTS.items()
    )
    return (10**log_median - 1) / 100


def uses_task_bootstrap(table: Table, asked: bool) -> bool:
    """Whether the intervals resample the games: when asked, and always with one seed per game
    (the stratified bootstrap would have no runs to resample)."""
    return asked or min(row.n_seeds for row in table.rows) == 1


def summary_lines(table: Table, reps: int = 10_000, task_bootstrap: bool = False) -> list[str]:
    """The lines ``stampede-report`` prints under the table: the interval estimates, and the
    Atari-5 prediction beside the paper's when the five games are present."""
    lines = []
    runs = min(row.n_seeds for row in table.rows)
    over_games = uses_task_bootstrap(table, task_bootstrap)
    if not over_games:
        how = "stratified bootstrap (seeds resampled within each game)"
    elif runs > 1:
        how = "task bootstrap (games and seeds resampled)"
    else:
        how = "task bootstrap (games resampled; one seed per game leaves no seeds to resample)"
    lines.append(
        f"rliable, {table.n_games} games x {runs} seed(s), {100 * CONFIDENCE:.0f}% intervals "
        f"from the {how}:"
    )
    for name, interval in intervals(table, reps, task_bootstrap=over_games).items():
        lines.append(f"  {name:<6} HNS {interval.percent()}")
    ours = atari5_median({row.game: row.hns for row in table.rows})
    if ours is not None:
        paper = atari5_median({row.game: row.impala_deep_hns for row in table.rows})
        assert paper is not None
        lines.append(
            f"Atari-5 predicted 57-game median HNS: {100 * ours:.1f}% (+-{100 * ATARI5_ERROR:.0f}%"
            f"); the IMPALA paper's five games predict {100 * paper:.1f}%, its 57-game median "
            f"is {100 * paper_median():.1f}%"
        )
    return lines


def paper_median() -> float:
    """The IMPALA paper's (deep) median HNS over all 57 games."""
    reference = load_reference(PAPER_RANDOM_OVERRIDES).values()
    return float(np.median([ref.hns(ref.impala_deep) for ref in reference]))


def write_profile(table: Table, path: str | Path, task_bootstrap: bool = False) -> Path:
    """The performance profile figure as a PNG (bands as in ``summary_lines``)."""
    fig = profile_figure(table, task_bootstrap=uses_task_bootstrap(table, task_bootstrap))
    fig.savefig(path, dpi=110)
    return Path(path)

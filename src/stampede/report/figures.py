"""The standard figures of a sweep: learning curves over seeds (one panel per game) and the
comparison with the paper's per-game scores."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from stampede.report.analysis import SeedBand, paper_comparison
from stampede.report.plotting import pyplot

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from stampede.report.hns import Table


def plot_learning_curves(
    bands: Mapping[str, SeedBand], columns: int | None = None, random_scores: bool = True
) -> Figure:
    """Small multiples, one panel per game: a thin line per seed, the mean over seeds, and the
    min-max band over seeds; a dotted line at random play's score for Atari-57 games.

    ``columns`` defaults to a near-square grid of at most 6 columns (57 games: 6 x 10)."""
    plt = pyplot()
    from matplotlib.ticker import EngFormatter

    if not bands:
        raise ValueError("no learning curves to plot (no run finished a game)")
    from stampede.report.hns import load_reference

    reference = load_reference() if random_scores else {}
    columns = columns or min(6, math.ceil(math.sqrt(len(bands))))
    columns = max(1, min(columns, len(bands)))
    rows = math.ceil(len(bands) / columns)
    fig, axes = plt.subplots(
        rows, columns, figsize=(3.6 * columns, 2.8 * rows), squeeze=False, layout="constrained"
    )
    for ax, band in zip(axes.flat, bands.values(), strict=False):
        for values in band.per_seed:
            ax.plot(band.grid, values, lw=0.7, alpha=0.6, color="tab:blue")
        ax.fill_between(band.grid, band.low, band.high, alpha=0.25, color="tab:blue", lw=0)
        ax.plot(band.grid, band.mean, lw=2.0, color="tab:blue")
        if band.game in reference:
            ax.axhline(reference[band.game].random, ls=":", color="grey", lw=1.0)
        seeds = ", ".join(map(str, band.seeds))
        ax.set_title(f"{band.game} (seeds {seeds})", fontsize=10)
        ax.xaxis.set_major_formatter(EngFormatter())  # 20k, 200M
        ax.set_xlabel("frames")
        ax.set_ylabel("episode return")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(bands) :]:
        ax.set_visible(False)
    fig.suptitle("Return vs frames: mean over seeds, min-max band; dotted: random play")
    return fig


def plot_paper_comparison(table: Table, limits: tuple[float, float] = (-25.0, 150.0)) -> Figure:
    """Horizontal bars per game of ``paper_comparison`` (100% = the paper), sorted, with the
    exact value written at each bar (bars are clipped to ``limits``)."""
    plt = pyplot()
    if not table.rows:
        raise ValueError("the table has no games to plot")
    comparison = paper_comparison(table)
    order = sorted(
        range(len(comparison.games)),
        key=lambda i: -np.inf if math.isnan(comparison.percent[i]) else comparison.percent[i],
    )
    names = [comparison.games[i] for i in order]
    values = comparison.percent[order]
    shown = np.clip(np.nan_to_num(values, nan=0.0), *limits)
    colours = ["tab:green" if v >= 100 else "tab:blue" for v in np.nan_to_num(values, nan=0.0)]
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.32 * len(names)), layout="constrained")
    y = np.arange(len(names))
    ax.barh(y, shown, color=colours)
    for yi, value, bar_end in zip(y, values, shown, strict=True):
        label = "n/a (paper = random)" if math.isnan(value) else f"{value:.1f}%"
        ax.text(
            bar_end + (2 if bar_end >= 0 else -2),
            yi,
            label,
            va="center",
            ha="left" if bar_end >= 0 else "right",
            fontsize=8,
        )
    ax.set_yticks(y, names)
    ax.axvline(0, color="black", lw=0.8)
    ax.axvline(100, color="tab:red", ls="--", lw=1.0)
    ax.set_xlim(limits[0] - 15, limits[1] + 35)
    ax.set_xlabel("score, % of the IMPALA paper's gain over random (100% = paper, 0% = random)")
    ax.set_title(
        f"{table.n_games} games: median HNS {100 * table.median_hns:.1f}% "
        f"(paper, same games: {100 * table.paper_median_hns:.1f}%)"
    )
    ax.grid(axis="x", alpha=0.3)
    return fig

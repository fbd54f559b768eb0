"""The standard figures of a sweep (stampede.report.figures): a panel per game with every seed,
the mean and the band, and the paper comparison's bars, sorted and labelled with their values."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from stampede.report import analysis, figures, hns

from .conftest import GAMES, SEEDS


@pytest.fixture(autouse=True)
def closed_figures() -> Iterator[None]:
    plt = pytest.importorskip("matplotlib.pyplot")
    yield
    plt.close("all")


def test_one_panel_per_game_with_each_seed_and_the_random_score(run_sweep: Path) -> None:
    bands = analysis.seed_bands(analysis.learning_curves(run_sweep), points=20)
    fig = figures.plot_learning_curves(bands)
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in panels] == [f"{g} (seeds 1, 2)" for g in bands]
    assert sorted(bands) == sorted(GAMES)
    random = hns.load_reference()
    for ax, game in zip(panels, bands, strict=True):
        lines = ax.get_lines()
        assert len(lines) == len(SEEDS) + 2  # each seed, their mean, random play's score
        assert list(lines[-1].get_ydata()) == [random[game].random] * 2
        np.testing.assert_allclose(lines[len(SEEDS)].get_ydata(), bands[game].mean)
    assert len(fig.axes) == 4  # 3 games on a 2 x 2 grid: the fourth panel hidden


def test_a_game_outside_atari57_has_no_random_line_and_columns_are_kept() -> None:
    info = analysis.RunInfo(Path("."), "CartPole-v1", "gym", 1, "x")
    curve = analysis.Curve(info, np.array([0.0, 100.0]), np.array([10.0, 200.0]))
    bands = analysis.seed_bands([curve], points=5)
    (ax,) = figures.plot_learning_curves(bands, columns=3).axes  # never more columns than games
    assert len(ax.get_lines()) == 2  # the seed and the mean
    fig = figures.plot_learning_curves(bands | {"again": bands["CartPole-v1"]}, columns=1)
    assert [ax.get_subplotspec().colspan.start for ax in fig.axes] == [0, 0]


def test_no_curves_or_no_games_are_refused() -> None:
    with pytest.raises(ValueError, match="no learning curves to plot"):
        figures.plot_learning_curves({})
    with pytest.raises(ValueError, match="the table has no games to plot"):
        figures.plot_paper_comparison(hns.Table(rows=(), missing=()))


def test_paper_comparison_bars_are_sorted_and_labelled() -> None:
    """100% = the paper's score, 0% = random play; a game where the paper scored random has no
    percentage and goes first; bars are clipped to the limits, labels give the exact value."""
    ref = hns.load_reference()
    table = hns.table_from_scores(
        {
            "pong": ref["pong"].impala_deep,  # 100%
            "breakout": ref["breakout"].random,  # 0%
            "qbert": ref["qbert"].random + 3 * (ref["qbert"].impala_deep - ref["qbert"].random),
            "enduro": 5.0,  # the paper: 0 = random
        }
    )
    fig = figures.plot_paper_comparison(table)
    (ax,) = fig.axes
    names = [label.get_text() for label in ax.get_yticklabels()]
    assert names == ["enduro", "breakout", "pong", "qbert"]
    widths = [bar.get_width() for bar in ax.patches]
    np.testing.assert_allclose(widths, [0.0, 0.0, 100.0, 150.0])  # 300% clipped at 150
    labels = [text.get_text() for text in ax.texts]
    assert labels == ["n/a (paper = random)", "0.0%", "100.0%", "300.0%"]
    assert ax.get_title().startswith("4 games: median HNS ")

"""Where the report's figures go (stampede.report.plotting): saved as PNG only when a directory
is given or set in the environment, the directory given first."""

from __future__ import annotations

from pathlib import Path

import pytest

from stampede.report import plotting

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def figure():
    plt = pytest.importorskip("matplotlib.pyplot")
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    yield fig
    plt.close(fig)


def test_without_a_directory_nothing_is_saved(
    figure, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(plotting.FIGURE_DIR_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    assert plotting.save_figure(figure, "curves.png") is None
    assert list(tmp_path.iterdir()) == []


def test_the_environment_names_the_figure_directory(
    figure, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(plotting.FIGURE_DIR_ENV, str(tmp_path / "figures" / "new"))
    path = plotting.save_figure(figure, "curves.png")
    assert path == tmp_path / "figures" / "new" / "curves.png"
    assert path.read_bytes()[:8] == PNG


def test_a_directory_given_wins_over_the_environment(
    figure, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(plotting.FIGURE_DIR_ENV, str(tmp_path / "from_env"))
    path = plotting.save_figure(figure, "table.png", directory=tmp_path / "given")
    assert path == tmp_path / "given" / "table.png"
    assert path.read_bytes()[:8] == PNG
    assert not (tmp_path / "from_env").exists()

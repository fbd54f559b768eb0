"""The notebooks run top to bottom on a small synthetic sweep (so they cannot rot) and stay free
of stored outputs."""

from __future__ import annotations

from pathlib import Path

import pytest

from stampede.report import analysis, plotting

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = {
    "learning_curves.ipynb": "learning_curves.png",
    "atari57_report.ipynb": "atari57_report.png",
}


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_is_stored_without_outputs(name: str) -> None:
    import nbformat

    nb = nbformat.read(ROOT / "notebooks" / name, as_version=4)
    nbformat.validate(nb)
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert code
    assert all(cell.outputs == [] and cell.execution_count is None for cell in code)
    source = "\n".join(cell.source for cell in code)
    imported = {line.split()[1] for line in source.splitlines() if line.startswith("from ")}
    assert imported <= {"stampede.report", "IPython.display"}  # the public API only


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs_on_a_sweep_and_saves_its_figure(
    name: str, run_sweep: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv(analysis.SWEEP_DIR_ENV, str(run_sweep))
    monkeypatch.setenv(plotting.FIGURE_DIR_ENV, str(tmp_path / "figures"))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(ROOT / "notebooks" / name, as_version=4)
    NotebookClient(nb, timeout=120, kernel_name="python3").execute(cwd=str(tmp_path))
    text = "".join(
        out.get("text", "") for cell in nb.cells if cell.cell_type == "code" for out in cell.outputs
    )
    figure = tmp_path / "figures" / NOTEBOOKS[name]
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"saved {figure}" in text
    if name == "atari57_report.ipynb":
        assert "games present: 3 of 57" in text

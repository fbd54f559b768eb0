"""matplotlib for the report's figures, imported only when a figure is drawn (it takes a
second), and where figures are saved."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.figure import Figure

FIGURE_DIR_ENV = "STAMPEDE_FIGURE_DIR"


def pyplot() -> Any:
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Figure, filename: str, directory: str | Path | None = None) -> Path | None:
    """Save ``fig`` as ``<directory>/<filename>`` (PNG, 120 dpi) when a directory is given or
    ``$STAMPEDE_FIGURE_DIR`` is set; otherwise do nothing and return None."""
    target = directory or os.environ.get(FIGURE_DIR_ENV)
    if not target:
        return None
    path = Path(target) / filename
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    return path

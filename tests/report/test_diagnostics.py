"""Learning diagnostics per stretch of frames (stampede.report.diagnostics)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from stampede.report import diagnostics


def _write_metrics(run_dir: Path, rows: list[dict[str, float]]) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    with (run_dir / "metrics.jsonl").open("a") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")


def test_medians_per_stretch_by_hand(tmp_path: Path) -> None:
    # stretch 1 (frames <= 100): entropy 1, 5, 2 -> median 2; stretch 2 (<= 200): 3, 4 -> 3.5;
    # stretch 3 is unfinished: it ends at the last line's frames, 250
    _write_metrics(
        tmp_path,
        [
            {"env/frames": 40, "learner/entropy": 1.0},
            {"env/frames": 80, "learner/entropy": 5.0},
            {"env/frames": 100, "learner/entropy": 2.0},  # exactly 100: still the first stretch
            {"env/frames": 150, "learner/entropy": 3.0},
            {"env/frames": 200, "learner/entropy": 4.0},
            {"env/frames": 250, "learner/entropy": 7.0},
        ],
    )
    table = diagnostics.from_run(tmp_path, every_frames=100, keys=["learner/entropy"])
    assert table.end.tolist() == [100, 200, 250]
    assert table.lines.tolist() == [3, 2, 1]
    assert table.medians["learner/entropy"].tolist() == [2.0, 3.5, 7.0]


def test_a_key_a_stretch_never_logged_is_nan_and_a_stretch_without_lines_is_left_out(
    tmp_path: Path,
) -> None:
    """Runs logged before a diagnostic existed lack it; a long game may leave a stretch unlogged."""
    _write_metrics(
        tmp_path,
        [
            {"env/frames": 50, "learner/kl": 0.01},
            {"env/frames": 350, "learner/kl": 0.03, "learner/reward_density": 0.5},
        ],
    )
    table = diagnostics.from_run(
        tmp_path, every_frames=100, keys=["learner/kl", "learner/reward_density"]
    )
    assert table.end.tolist() == [100, 350]
    assert table.medians["learner/kl"].tolist() == [0.01, 0.03]
    assert math.isnan(table.medians["learner/reward_density"][0])
    assert table.medians["learner/reward_density"][1] == 0.5


def test_lines_a_restart_threw_away_are_not_counted(tmp_path: Path) -> None:
    """A run resumed from its checkpoint at 100 frames plays 100-200 again: only the second
    history counts (the frames go backwards in metrics.jsonl)."""
    _write_metrics(
        tmp_path,
        [
            {"env/frames": 100, "learner/entropy": 2.0},
            {"env/frames": 200, "learner/entropy": 100.0},  # lost: after the checkpoint
            {"env/frames": 150, "learner/entropy": 1.0},  # resumed from 100
            {"env/frames": 200, "learner/entropy": 1.0},
        ],
    )
    table = diagnostics.from_run(tmp_path, every_frames=100, keys=["learner/entropy"])
    assert table.lines.tolist() == [1, 2]
    assert table.medians["learner/entropy"].tolist() == [2.0, 1.0]


def test_the_csv_reads_back_as_written(tmp_path: Path) -> None:
    _write_metrics(
        tmp_path / "run",
        [
            {"env/frames": 10, "learner/entropy": 2.5, "learner/kl": 0.125},
            {"env/frames": 30, "learner/entropy": 1.5},
        ],
    )
    table = diagnostics.from_run(tmp_path / "run", every_frames=20)
    again = diagnostics.read_csv(diagnostics.write_csv(table, tmp_path / "docs" / "d.csv"))
    assert again.end.tolist() == [20, 30]
    assert again.lines.tolist() == [1, 1]
    assert list(again.medians) == list(diagnostics.KEYS)
    for key in diagnostics.KEYS:
        np.testing.assert_array_equal(again.medians[key], table.medians[key])
    assert again.medians["learner/kl"][0] == 0.125
    assert math.isnan(again.medians["learner/kl"][1])


def test_markdown_has_a_column_per_stretch_and_a_row_per_key(tmp_path: Path) -> None:
    _write_metrics(
        tmp_path,
        [
            {"env/frames": 500_000, "learner/entropy": 2.4},
            {"env/frames": 1_500_000, "learner/entropy": 1.8},
        ],
    )
    table = diagnostics.from_run(tmp_path, keys=["learner/entropy", "learner/kl"])
    assert diagnostics.to_markdown(table).splitlines() == [
        "| frames | 1M | 1.5M |",
        "|---|---:|---:|",
        "| log lines | 1 | 1 |",
        "| learner/entropy | 2.4 | 1.8 |",
        "| learner/kl |  |  |",
    ]


def test_a_run_without_metrics_has_no_stretches_and_a_bad_length_is_refused(
    tmp_path: Path,
) -> None:
    assert len(diagnostics.from_run(tmp_path).end) == 0
    with pytest.raises(ValueError, match="every_frames must be >= 1, got 0"):
        diagnostics.from_run(tmp_path, every_frames=0)


def test_a_last_stretch_just_past_a_round_number_is_told_from_it(tmp_path: Path) -> None:
    """A run of 10M frames logs its last line at 10,002,432: its column must not read 10M twice."""
    _write_metrics(tmp_path, [{"env/frames": 10_000_000}, {"env/frames": 10_002_432}])
    header = diagnostics.to_markdown(diagnostics.from_run(tmp_path)).splitlines()[0]
    assert header == "| frames | 10M | 10.002M |"

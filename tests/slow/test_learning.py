"""Pong learns with the defaults (slow: about 80 minutes on 2 CPU cores; `make test-slow`).

The fast suite keeps the small learning checks (CartPole, the image task in test_train.py);
this is the Atari check that issue 9's "Done when" states: `python run.py env=pong
total_frames=10000000` with the defaults reaches a mean true return >= +18 over the last 100
finished games within 10M frames.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from stampede.report import curves as learning_curve

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(4 * 3600)
def test_pong_reaches_18_within_10m_frames(tmp_path: Path) -> None:
    run_dir = tmp_path / "pong"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "run.py"),
            "env=pong",
            "total_frames=10000000",
            f"hydra.run.dir={run_dir}",
            "logger.progress=false",
            "logger.wandb.mode=disabled",
            "eval.at_end=false",
        ],
        capture_output=True,
        text=True,
        timeout=4 * 3600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    curve = learning_curve.from_run(run_dir)
    (crossing,) = learning_curve.crossings(curve, [18.0])
    assert crossing.frames is not None, (
        f"the mean of the last 100 games never reached +18 (final {curve.final:.1f} "
        f"after {int(curve.frames[-1]):,} frames)"
    )
    assert crossing.frames <= 10_000_000

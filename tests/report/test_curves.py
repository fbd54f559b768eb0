"""The learning benchmark's figures (stampede.report.curves, benchmarks/learning.py)."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from stampede.report import curves as learning_curve

ROOT = Path(__file__).resolve().parents[2]


def _write_episodes(run_dir: Path, returns: list[float], frames_per_game: int = 1000) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    with (run_dir / "episodes.jsonl").open("w") as f:
        for i, ret in enumerate(returns):
            row = {
                "env/frames": (i + 1) * frames_per_game,
                "time/elapsed_s": (i + 1) * 2.0,
                "env/episode_return": ret,
                "env/episode_length": 10,
            }
            f.write(json.dumps(row) + "\n")


def _learning(*args: str) -> subprocess.CompletedProcess[str]:
    """``benchmarks/learning.py <args>``, run as a user runs it, output captured."""
    command = [sys.executable, str(ROOT / "benchmarks" / "learning.py"), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def test_load_episodes_keeps_the_kept_history_and_falls_back_to_metrics(tmp_path: Path) -> None:
    lines = [{"env/frames": 30, "env/episode_return": 3.0}, {"env/frames": 40}]
    (tmp_path / "metrics.jsonl").write_text("\n".join(map(json.dumps, lines)) + "\n{torn")
    frames, _, returns = learning_curve.episodes(tmp_path)
    assert frames.tolist() == [30.0]
    assert returns.tolist() == [3.0]
    lines = [
        {"env/frames": 20, "env/episode_return": 2.0},
        {"env/frames": 5, "env/episode_return": 1.0},
    ]
    (tmp_path / "episodes.jsonl").write_text("\n".join(map(json.dumps, lines)) + "\n")
    frames, _, returns = learning_curve.episodes(
        tmp_path
    )  # restarted at 5: the game at 20 was undone
    assert (frames.tolist(), returns.tolist()) == ([5.0], [1.0])


def test_smooth_is_a_trailing_mean() -> None:
    out = learning_curve.smooth(np.array([1.0, 2.0, 3.0, 4.0]), window=2)
    np.testing.assert_allclose(out, [1.0, 1.5, 2.5, 3.5])
    np.testing.assert_allclose(learning_curve.smooth(np.array([5.0, 7.0]), window=1), [5.0, 7.0])


def test_a_multitask_runs_game_curve_is_drawn_against_that_games_frames(tmp_path: Path) -> None:
    """Each game of a multi-task run has its own curve, on its own frames (not the run's)."""
    lines = [
        {"env/frames": 100, "env/pong/episode_return": -21.0, "env/pong/frames": 60},
        {"env/frames": 200, "env/breakout/episode_return": 2.0, "env/breakout/frames": 90},
        {"env/frames": 300, "env/pong/episode_return": -19.0, "env/pong/frames": 170},
    ]
    (tmp_path / "episodes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    pong = learning_curve.from_run(tmp_path, window=2, game="pong")
    np.testing.assert_array_equal(pong.frames, [60, 170])
    assert pong.final == pytest.approx(-20.0)
    breakout = learning_curve.from_run(tmp_path, window=1, game="breakout")
    np.testing.assert_array_equal(breakout.frames, [90])
    assert len(learning_curve.from_run(tmp_path).frames) == 0  # no single-game curve in it


def test_mean_of_last_window_games_by_hand(tmp_path: Path) -> None:
    _write_episodes(tmp_path, [-21.0, -20.0, -19.0, -18.0, 0.0])
    curve = learning_curve.from_run(tmp_path, window=3)
    assert np.isnan(curve.mean_return[:2]).all()  # fewer than 3 games: no figure yet
    np.testing.assert_allclose(curve.mean_return[2:], [-20.0, -19.0, -37.0 / 3])
    assert curve.final == pytest.approx(-37.0 / 3)
    np.testing.assert_array_equal(curve.frames, [1000, 2000, 3000, 4000, 5000])


def test_games_of_a_discarded_past_are_dropped(tmp_path: Path) -> None:
    """A run killed at 5,000 frames and resumed from its checkpoint at 3,000 plays those frames
    again: the curve shows the games of the history it kept, each frame once."""
    rows = [{"run/start_frames": 0}]
    rows += [{"env/frames": f, "env/episode_return": 1.0} for f in (1000, 2000, 3000, 4000, 5000)]
    rows += [{"run/start_frames": 3000}]
    rows += [{"env/frames": f, "env/episode_return": 2.0} for f in (4500, 6000)]
    (tmp_path / "episodes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    curve = learning_curve.from_run(tmp_path, window=1)
    np.testing.assert_array_equal(curve.frames, [1000, 2000, 3000, 4500, 6000])
    np.testing.assert_array_equal(curve.mean_return, [1, 1, 1, 2, 2])
    # Logs of older versions have no start line: frames going backwards mark the restart.
    old = [r for r in rows if "run/start_frames" not in r]
    (tmp_path / "episodes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in old))
    curve = learning_curve.from_run(tmp_path, window=1)
    np.testing.assert_array_equal(curve.frames, [1000, 2000, 3000, 4000, 4500, 6000])


def test_crossings_are_the_first_game_at_or_above(tmp_path: Path) -> None:
    returns = [-21.0] * 100 + [21.0] * 100  # the mean of the last 100 climbs 0.42 per game
    _write_episodes(tmp_path, returns)
    curve = learning_curve.from_run(tmp_path)
    zero, top, never = learning_curve.crossings(curve, [0.0, 18.0, 21.5])
    # After game 100 + k the mean is (-21 (100 - k) + 21 k) / 100 >= 0 first at k = 50.
    assert (zero.frames, zero.elapsed_s) == (150 * 1000, 150 * 2.0)
    # >= 18 needs 42 k >= 3900, k = 93 (92.86 rounded up).
    assert top.frames == 193 * 1000
    assert never.frames is None
    assert never.elapsed_s is None


def test_csv_keeps_one_row_per_interval_and_the_last(tmp_path: Path) -> None:
    _write_episodes(tmp_path / "run", [float(i) for i in range(250)], frames_per_game=400)
    curve = learning_curve.from_run(tmp_path / "run")
    path = learning_curve.write_csv(curve, tmp_path / "out.csv", every_frames=20_000)
    rows = list(csv.DictReader(path.open()))
    assert [int(r["frames"]) for r in rows] == [400, 20_000, 40_000, 60_000, 80_000, 100_000]
    assert rows[0]["mean_return_last100"] == ""  # not yet 100 games
    assert float(rows[-1]["mean_return_last100"]) == pytest.approx(np.mean(range(150, 250)))
    assert int(rows[-1]["games"]) == 250


def test_benchmark_reports_a_run_and_writes_docs(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    _write_episodes(run_dir, [-21.0] * 100 + [21.0] * 100)
    out = tmp_path / "docs"
    proc = _learning(
        "--report-only",
        "--game=pong",
        f"--run-dir={run_dir}",
        f"--out={out}",
        "--label=test",
    )
    assert proc.returncode == 0, proc.stderr
    assert "mean of last 100 >= 0: 150,000 frames, 5.0 min" in proc.stdout
    assert "mean of last 100 >= 18: 193,000 frames" in proc.stdout
    assert "final mean of last 100: 21.00" in proc.stdout
    assert (out / "pong_test.csv").exists()
    assert (out / "pong.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_report_keeps_the_run_in_docs_and_reads_it_back_once_the_run_is_gone(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "run"
    _write_episodes(run_dir, [-21.0] * 100 + [21.0] * 100)
    (run_dir / "eval.json").write_text('{"game": "pong", "mean_return": 21.0}')
    (run_dir / "run.log").write_text("not kept")
    out = tmp_path / "docs"
    args = ("--report-only", "--game=pong", f"--run-dir={run_dir}", f"--out={out}", "--label=test")
    assert _learning(*args).returncode == 0
    kept = out / "runs" / "test" / "pong"
    assert sorted(p.name for p in kept.iterdir()) == ["episodes.jsonl", "eval.json"]
    assert (kept / "episodes.jsonl").read_bytes() == (run_dir / "episodes.jsonl").read_bytes()

    shutil.rmtree(run_dir)  # a fresh clone: the run directory is gone, docs/ holds its games
    again = _learning(*args)
    assert again.returncode == 0, again.stderr
    assert f"pong in {kept} (200,000 frames of pong, 200 games" in again.stdout
    assert "mean of last 100 >= 0: 150,000 frames, 5.0 min" in again.stdout

    shutil.rmtree(kept)  # only the CSV is left: one row per 50,000 frames
    from_csv = _learning(*args)
    assert from_csv.returncode == 0, from_csv.stderr
    assert f"pong in {out / 'pong_test.csv'}" in from_csv.stdout
    assert "mean of last 100 >= 0: 150,000 frames" in from_csv.stdout
    assert "final mean of last 100: 21.00" in from_csv.stdout


def test_a_report_prints_the_runs_diagnostics_and_keeps_them_in_docs(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    _write_episodes(run_dir, [0.0] * 10)
    with (run_dir / "metrics.jsonl").open("w") as f:
        for frames, entropy in ((4_000, 1.5), (6_000, 0.5), (8_000, 2.5), (12_000, 0.25)):
            f.write(json.dumps({"env/frames": frames, "learner/entropy": entropy}) + "\n")
    out = tmp_path / "docs"
    args = ("--report-only", "--game=pong", f"--run-dir={run_dir}", f"--out={out}", "--label=t")
    proc = _learning(*args, "--diagnostics-every=10000")
    assert proc.returncode == 0, proc.stderr
    table = ["| frames | 0.01M | 0.012M |", "|---|---:|---:|", "| log lines | 3 | 1 |"]
    assert "\n".join([*table, "| learner/entropy | 1.5 | 0.25 |"]) in proc.stdout
    kept = out / "runs" / "t" / "pong" / "diagnostics.csv"
    assert kept.exists()

    shutil.rmtree(run_dir)  # a fresh clone: the table comes from docs/
    again = _learning(*args)
    assert again.returncode == 0, again.stderr
    assert f"({kept})" in again.stdout
    assert "\n".join([*table, "| learner/entropy | 1.5 | 0.25 |"]) in again.stdout


def test_git_keeps_the_runs_that_docs_keep() -> None:
    """docs/learning/runs/ is where a new clone finds past results; .gitignore must not drop it."""

    def ignored(path: str) -> bool:
        check = subprocess.run(
            ["git", "check-ignore", "-q", path], cwd=ROOT, capture_output=True, text=True
        )
        if check.returncode not in (0, 1):  # 128: no git checkout, or git may not read it
            pytest.skip(f"git check-ignore failed: {check.stderr.strip()}")
        return check.returncode == 0

    for kept in ("docs/learning/runs/defaults/pong/seed2/eval.json", "docs/learning/pong.csv"):
        assert not ignored(kept), f"{kept} is ignored by git"
    assert ignored("runs/x/eval.json"), "the scratch run directory runs/ must stay ignored"


def test_benchmark_says_when_a_run_has_no_games(tmp_path: Path) -> None:
    proc = _learning(
        "--report-only",
        f"--run-dir={tmp_path / 'empty'}",
        f"--out={tmp_path}",
    )
    assert proc.returncode == 1
    assert "has no finished games" in proc.stderr


def test_across_seeds_is_the_mean_and_range_up_to_the_shortest_seed(tmp_path: Path) -> None:
    _write_episodes(tmp_path / "a", [0.0, 2.0, 4.0, 6.0])  # frames 1000..4000
    _write_episodes(tmp_path / "b", [2.0, 4.0, 6.0])  # frames 1000..3000
    a, b = (learning_curve.from_run(tmp_path / s, window=1) for s in "ab")
    grid, mean, low, high = learning_curve.across_seeds([a, b], points=5)
    np.testing.assert_allclose(grid, [0, 750, 1500, 2250, 3000])
    assert np.isnan(mean[:2]).all()  # before the first game of a seed there is no curve
    np.testing.assert_allclose(mean[2:], [2.0, 3.5, 5.0])  # a: 1, 2.5, 4; b: 3, 4.5, 6
    np.testing.assert_allclose(low[2:], [1.0, 2.5, 4.0])
    np.testing.assert_allclose(high[2:], [3.0, 4.5, 6.0])


def test_benchmark_reports_each_seed_and_their_spread(tmp_path: Path) -> None:
    base = tmp_path / "runs"
    _write_episodes(base / "seed1", [-21.0] * 100 + [21.0] * 100)
    _write_episodes(base / "seed2", [-21.0] * 120 + [21.0] * 100)
    out = tmp_path / "docs"
    proc = _learning(
        "--report-only",
        "--game=pong",
        "--seeds=2",
        f"--run-dir={base}",
        f"--out={out}",
        "--label=test",
    )
    assert proc.returncode == 0, proc.stderr
    assert "pong seed 1 in" in proc.stdout
    assert "pong seed 2 in" in proc.stdout
    # Seed 1 reaches 0 after game 150, seed 2 after game 170 (1000 frames a game).
    assert "frames to >= 0: 160,000.00 +- 14,142.14" in proc.stdout
    assert "final mean of last 100: 21.00 +- 0.00" in proc.stdout
    assert (out / "pong_test_seed1.csv").exists()
    assert (out / "pong_test_seed2.csv").exists()
    assert (out / "pong.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

"""The probe table (stampede.report.probe, benchmarks/probe.py) from archived runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from stampede.report import probe
from stampede.report.hns import load_reference

ROOT = Path(__file__).resolve().parents[2]
GAMES = ("pong", "breakout", "robotank")
FRAMES = 400_000


def _write_run(
    run_dir: Path, returns: list[float], frames_per_game: int, fps: float, trained: int = 0
) -> None:
    """A run's ``episodes.jsonl``; with ``trained``, the archive's record of its frames."""
    run_dir.mkdir(parents=True, exist_ok=True)
    if trained:
        (run_dir / probe.FRAMES_FILE).write_text(json.dumps({"frames": trained}))
    with (run_dir / "episodes.jsonl").open("w") as f:
        f.write(json.dumps({"run/start_frames": 0}) + "\n")
        for i, ret in enumerate(returns):
            frames = (i + 1) * frames_per_game
            row = {"env/frames": frames, "time/elapsed_s": frames / fps, "env/episode_return": ret}
            f.write(json.dumps(row) + "\n")


def _probe(*args: str) -> subprocess.CompletedProcess[str]:
    """``benchmarks/probe.py <args>``, run as a user runs it, output captured."""
    command = [sys.executable, str(ROOT / "benchmarks" / "probe.py"), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    """Two labels' archives of three games, 400 games of 1,000 frames each (400k frames).

    ``base``: each game's returns are 0 for its first 250 games and then its human score, so at
    N/2 (200 games) the last 100 are all 0 and at N the last 100 are the human score (HNS 1).
    The last game ends 1,000 frames before N, the run trained 96 frames past it.
    ``slow``: the same game at half the frames per second, still at 0 at N on robotank.
    """
    out = tmp_path / "probes"
    reference = load_reference()
    for label, fps in (("base", 2_000.0), ("slow", 1_000.0)):
        probe.ProbeSpec(label, FRAMES, 1, ("optim.lr=0.001",) if label == "slow" else ()).write(
            out / label
        )
        for game in GAMES:
            human = reference[game].human
            late = 0.0 if (label == "slow" and game == "robotank") else human
            games = [0.0] * 250 + [late] * 149  # the last game ends before N
            _write_run(out / label / game, games, 1_000, fps, trained=FRAMES + 96)
    return out


def test_a_labels_row_holds_the_means_at_half_and_end_the_iqm_and_frames_per_second(
    archive: Path,
) -> None:
    base, slow = probe.read_labels(archive, GAMES, reps=500)
    assert base.spec == probe.ProbeSpec("base", FRAMES, 1, ())
    pong = base.games["pong"]
    assert (pong.at_half, pong.frames, pong.games) == (0.0, 399_000, 399)
    assert pong.trained == FRAMES + 96
    assert pong.at_end == pytest.approx(14.6)  # pong's human score: a running mean's rounding
    assert base.fps == pytest.approx(2_000.0)
    assert slow.fps == pytest.approx(1_000.0)
    assert base.iqm is not None
    assert slow.iqm is not None
    assert base.iqm.point == pytest.approx(1.0)  # every game at human level
    robotank_random = load_reference()["robotank"]
    hns = [1.0, 1.0, robotank_random.hns(0.0)]
    assert slow.iqm.point == pytest.approx(stats.trim_mean(hns, 0.25))
    assert slow.iqm.low <= slow.iqm.point <= slow.iqm.high
    assert slow.iqm.low < slow.iqm.high  # the games are resampled: one low game widens it


def test_a_game_short_of_n_frames_shows_its_frames_and_leaves_the_iqm_out(tmp_path: Path) -> None:
    out = tmp_path / "probes"
    probe.ProbeSpec("short", FRAMES, 1, ()).write(out / "short")
    for game in GAMES:
        _write_run(out / "short" / game, list(np.linspace(-21, 0, 300)), 1_000, 1_500.0)
    (row,) = probe.read_labels(out, GAMES)
    assert row.iqm is None
    table = probe.markdown([row], GAMES)
    assert "at 0.30M" in table.splitlines()[2]
    assert "| — | 1,500 | (defaults) |" in table


def test_games_after_n_frames_do_not_count_and_a_run_knows_its_frames_from_its_metrics(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "run"
    _write_run(run_dir, [0.0] * 100 + [50.0] * 100, 1_000, 1_000.0)
    lines = [{"env/frames": f, "loss/total": 0.1} for f in (100_000, 200_000, 204_096)]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    figures = probe.game_figures(run_dir, "pong", 100_000)
    assert figures is not None
    assert (figures.at_end, figures.frames, figures.games) == (0.0, 100_000, 100)
    assert figures.trained == 204_096  # the metrics' last line: the run's last update
    probe.keep_trained_frames(run_dir, tmp_path)
    assert probe.trained_frames(tmp_path) == 204_096  # its archive, without the metrics
    assert np.isnan(figures.at_half)  # 50 games by 50k frames: fewer than 100


def test_the_probe_command_prints_the_labels_by_games_table_from_archives(
    archive: Path, tmp_path: Path
) -> None:
    proc = _probe(
        "--report-only", f"--out={archive}", f"--root={tmp_path / 'no_runs'}", "--games", *GAMES
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    header = next(line for line in lines if line.startswith("| label"))
    assert header == (
        "| label | frames | pong | breakout | robotank | IQM HNS [95% CI] | frames/s | overrides |"
    )
    base = next(line for line in lines if line.startswith("| base"))
    assert base.startswith("| base | 0.4M | 0.0 / 14.6 | 0.0 / 30.5 | 0.0 / 11.9 | 100.0% [")
    assert base.endswith("| 2,000 | (defaults) |")
    slow = next(line for line in lines if line.startswith("| slow"))
    assert "0.0 / 0.0 |" in slow
    assert slow.endswith("| 1,000 | `optim.lr=0.001` |")
    table = (archive / "table.md").read_text().splitlines()  # the whole dev set's columns
    assert table[0].startswith("| label | frames | pong | breakout | beam_rider | space_invaders |")
    written = next(line for line in table if line.startswith("| base"))
    assert written.startswith("| base | 0.4M | 0.0 / 14.6 | 0.0 / 30.5 | — | — | 0.0 / 11.9 | — |")


def test_a_label_is_one_recipe_and_bad_games_are_refused_before_training(
    archive: Path, tmp_path: Path
) -> None:
    changed = _probe("--label=base", f"--out={archive}", f"--root={tmp_path}", "--", "optim.lr=1")
    assert changed.returncode == 2
    assert "label 'base' was probed as 400,000 frames" in changed.stderr
    assert "give the new recipe a new label" in changed.stderr
    assert not (tmp_path / "base").exists()  # nothing trained
    bad = _probe("--label=x", "--games", "dev6", f"--out={archive}", f"--root={tmp_path}")
    assert bad.returncode == 2
    assert "'dev6' is neither a game set (atari57, atari5, classic5, dev5)" in bad.stderr


def test_a_stopped_game_stops_the_probe_before_the_next_game(tmp_path: Path, monkeypatch) -> None:
    """run.py exits 0 when SIGTERM stops it (it resumes later): the probe must not move on."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import probe as probe_command

    trained = []

    def stopped_early(run_dir: Path, games: list[str], frames: int, overrides: list[str]) -> None:
        trained.append(games[0])
        _write_run(run_dir, [0.0], 900, 900.0)
        (run_dir / "metrics.jsonl").write_text(json.dumps({"env/frames": 1_000}) + "\n")

    monkeypatch.setattr(probe_command, "train", stopped_early)
    args = ["--label=t", "--frames=5000", f"--root={tmp_path / 'runs'}", f"--out={tmp_path / 'o'}"]
    assert probe_command.main([*args, "--games", "pong", "breakout"]) == 1
    assert trained == ["pong"]

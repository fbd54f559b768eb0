"""The run directory's files: the atomic write leaves the old file or the new one, the JSONL
readers skip a torn line and drop what a restart threw away."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stampede.rundir import files


def test_an_interrupted_atomic_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    files.write_text_atomic(path, "old\n")

    def crash(f) -> None:
        f.write(b"half of the new")
        raise KeyboardInterrupt("killed")

    with pytest.raises(KeyboardInterrupt):
        files.write_atomic(path, crash)
    assert path.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]
    files.write_text_atomic(path, "new\n")
    assert path.read_text() == "new\n"


def test_copy_atomic_copies_the_bytes(tmp_path: Path) -> None:
    source, target = tmp_path / "a.bin", tmp_path / "b.bin"
    source.write_bytes(bytes(range(256)) * 100)
    target.write_bytes(b"old")
    files.copy_atomic(source, target)
    assert target.read_bytes() == source.read_bytes()


def test_read_jsonl_skips_a_torn_last_line_and_a_missing_file(tmp_path: Path) -> None:
    path = tmp_path / files.METRICS_FILE
    assert files.read_jsonl(path) == []
    path.write_text('{"a": 1}\n{"a": 2}\n{"a": ')  # killed mid-line
    assert files.read_jsonl(path) == [{"a": 1}, {"a": 2}]
    assert files.read_metrics(tmp_path) == [{"a": 1}, {"a": 2}]


def test_read_episodes_drops_the_games_a_resume_played_again(tmp_path: Path) -> None:
    """Games at 10, 20, 30 frames; the run is killed and resumes from its checkpoint at 15: the
    game logged at 20 and 30 belongs to thrown-away training; the resumed run's 25 counts."""
    rows = [
        {files.START_KEY: 0},
        {"env/frames": 10, "env/episode_return": 1.0},
        {"env/frames": 20, "env/episode_return": 2.0},
        {"env/frames": 30, "env/episode_return": 3.0},
        {files.START_KEY: 15},
        {"env/frames": 25, "env/episode_return": 4.0},
    ]
    (tmp_path / files.EPISODES_FILE).write_text("".join(json.dumps(r) + "\n" for r in rows))
    kept = files.read_episodes(tmp_path)
    assert [r["env/frames"] for r in kept] == [10, 25]
    # a log without start lines (metrics.jsonl) shows the restart only as frames going
    # backwards: what was logged past the new line's frames goes
    assert [r["env/frames"] for r in files.surviving_rows(rows[1:4] + rows[5:])] == [10, 20, 25]

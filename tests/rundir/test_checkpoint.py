"""Checkpoint writes survive a crash at any point, and pruning never loses the good ones."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from stampede.rundir import checkpoint, files


def state(frames: int) -> dict:
    return {"frames": frames, "w": torch.full((3,), float(frames))}


def test_a_copied_checkpoint_without_checksum_never_costs_the_good_ones(tmp_path: Path) -> None:
    """Issue 10's scenario: an unverifiable newer .pt, keep=1, two saves, then a resume."""
    good = checkpoint.save(tmp_path, 100, state(100), keep=1)
    shutil.copy(good, tmp_path / "ckpt_000000009999.pt")  # no .sha256 beside it
    checkpoint.save(tmp_path, 200, state(200), keep=1)
    checkpoint.save(tmp_path, 300, state(300), keep=1)
    _, loaded = checkpoint.load_latest(tmp_path)
    assert loaded["frames"] == 300
    names = sorted(p.name for p in checkpoint.list_checkpoints(tmp_path))
    assert names == ["ckpt_000000000300.pt", "ckpt_000000009999.pt"]  # the bad one left alone


@pytest.mark.parametrize("crash_at", ["checksum", "rename"])
def test_a_crash_inside_save_leaves_the_previous_checkpoint_newest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, crash_at: str
) -> None:
    checkpoint.save(tmp_path, 100, state(100), keep=1)
    original = files.commit

    def crash(tmp: Path, path: Path) -> None:
        if (crash_at == "checksum" and path.suffix == ".sha256") or (
            crash_at == "rename" and path.suffix == ".pt"
        ):
            raise KeyboardInterrupt("killed")
        original(tmp, path)

    monkeypatch.setattr(files, "commit", crash)  # the checksum's write_atomic
    monkeypatch.setattr(checkpoint, "commit", crash)  # the checkpoint's rename
    with pytest.raises(KeyboardInterrupt):
        checkpoint.save(tmp_path, 200, state(200), keep=1)
    monkeypatch.undo()
    _, loaded = checkpoint.load_latest(tmp_path)
    assert loaded["frames"] == 100
    assert [p.name for p in checkpoint.list_checkpoints(tmp_path)] == ["ckpt_000000000100.pt"]
    assert not list(tmp_path.glob(".*.tmp"))  # no temporary files left behind
    # the next save works and prunes the orphan checksum of the interrupted one
    checkpoint.save(tmp_path, 300, state(300), keep=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "ckpt_000000000300.pt",
        "ckpt_000000000300.sha256",
    ]


def test_keep_counts_the_newest_verifiable_checkpoints(tmp_path: Path) -> None:
    for frames in (1, 2, 3, 4):
        checkpoint.save(tmp_path, frames, state(frames), keep=2)
    assert [p.name for p in checkpoint.list_checkpoints(tmp_path)] == [
        "ckpt_000000000004.pt",
        "ckpt_000000000003.pt",
    ]


def test_content_digest_sees_every_value_and_nothing_but_values() -> None:
    state = {"model": {"w": torch.ones(2, 3), "step": torch.tensor(4)}, "frames": 10, "a": [1.5]}
    same = {"a": [1.5], "frames": 10, "model": {"step": torch.tensor(4), "w": torch.ones(2, 3)}}
    assert checkpoint.content_digest(state) == checkpoint.content_digest(same)  # key order
    changed = [
        {**state, "frames": 11},
        {**state, "model": {"w": torch.ones(3, 2), "step": torch.tensor(4)}},  # shape
        {**state, "model": {"w": torch.ones(2, 3, dtype=torch.float64), "step": torch.tensor(4)}},
        {**state, "model": {"w": torch.ones(2, 3).nextafter(torch.tensor(2.0)), "step": 4}},
    ]
    for other in changed:
        assert checkpoint.content_digest(other) != checkpoint.content_digest(state)

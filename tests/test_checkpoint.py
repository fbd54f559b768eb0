"""Checkpoint writes survive a crash at any point, and pruning never loses the good ones."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from stampede import checkpoint


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
    original = checkpoint._commit

    def crash(tmp: Path, path: Path) -> None:
        if (crash_at == "checksum" and path.suffix == ".sha256") or (
            crash_at == "rename" and path.suffix == ".pt"
        ):
            raise KeyboardInterrupt("killed")
        original(tmp, path)

    monkeypatch.setattr(checkpoint, "_commit", crash)
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

"""Checkpoints: atomic writes, newest-first discovery, and safe loading.

A checkpoint is one ``torch.save`` file of plain data (tensors, numbers, strings, dicts, lists), so
it loads with ``torch.load(weights_only=True)``: a checkpoint file cannot run code. It is written to
a temporary file in the same directory, flushed to disk, then renamed over its final name, so a
crash mid-write never leaves a broken checkpoint under a real name. A SHA-256 of the file sits
beside it (``.sha256``) and is verified on load; if the newest checkpoint is unreadable, the
previous one is used and the reason is logged.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
from pathlib import Path
from typing import Any

import torch

from stampede.errors import UserError
from stampede.rundir.files import CHECKPOINT_DIR, commit, write_atomic, write_temp

log = logging.getLogger(__name__)

_NAME = re.compile(r"^ckpt_(\d{12})\.pt$")


class CheckpointError(UserError):
    """A checkpoint could not be read, or does not fit the run it is loaded into."""


def _digest(path: Path) -> str:
    sha = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            sha.update(chunk)
    return sha.hexdigest()


def content_digest(value: Any) -> str:
    """SHA-256 (16 hex digits) of a checkpoint's contents, or any part of them: nested dicts,
    lists and tuples of tensors and plain values. Keys count in sorted order, tensors by dtype,
    shape and bytes (on any device): equal digests mean identical contents."""
    sha = hashlib.sha256()
    _hash_into(sha, value)
    return sha.hexdigest()[:16]


def _hash_into(sha: Any, value: Any) -> None:
    if isinstance(value, dict):
        for key in sorted(value, key=str):
            sha.update(f"<{key}>".encode())
            _hash_into(sha, value[key])
    elif isinstance(value, list | tuple):
        sha.update(f"[{len(value)}]".encode())
        for item in value:
            _hash_into(sha, item)
    elif isinstance(value, torch.Tensor):
        sha.update(f"{value.dtype}{tuple(value.shape)}".encode())
        flat = value.detach().cpu().contiguous().reshape(-1)  # a 0-d tensor has no byte view
        sha.update(flat.view(torch.uint8).numpy().tobytes())
    else:
        sha.update(repr(value).encode())


def checkpoint_dir(run_dir: Path) -> Path:
    return Path(run_dir) / CHECKPOINT_DIR


def list_checkpoints(directory: Path) -> list[Path]:
    """Checkpoint files in ``directory``, newest (most frames) first."""
    if not directory.is_dir():
        return []
    found = [p for p in directory.iterdir() if _NAME.match(p.name)]
    return sorted(found, key=lambda p: p.name, reverse=True)


def frames_of(path: Path) -> int:
    """The frames in a checkpoint file's name (``ckpt_<frames>.pt``)."""
    match = _NAME.match(Path(path).name)
    if match is None:
        raise ValueError(f"{path}: not a checkpoint file name (ckpt_<12 digits>.pt)")
    return int(match.group(1))


def delete(path: Path) -> None:
    """Remove a checkpoint file and its checksum file."""
    path.unlink(missing_ok=True)
    path.with_suffix(".sha256").unlink(missing_ok=True)


def save(directory: Path, frames: int, state: dict[str, Any], keep: int) -> Path:
    """Write ``state`` as ``ckpt_<frames>.pt`` with its checksum, then keep the newest ``keep``
    verifiable checkpoints.

    Order matters for a crash at any point: the data goes to a temporary file, its checksum is
    written next, and only then is the file renamed to its real name. So a ``.pt`` under a real
    name always has its checksum beside it, and until the rename the previous checkpoints are
    the newest. Pruning counts only checkpoints that verify, so it never deletes a good one to
    make room beside one it could not read.
    """
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"ckpt_{frames:012d}.pt"
    tmp = write_temp(path, lambda f: torch.save(state, f))
    try:
        digest = _digest(tmp)
        write_atomic(
            path.with_suffix(".sha256"), lambda f: f.write(f"{digest}  {path.name}\n".encode())
        )
        commit(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _prune(directory, keep)
    return path


def _verifies(path: Path) -> bool:
    sidecar = path.with_suffix(".sha256")
    return sidecar.exists() and sidecar.read_text().split()[:1] == [_digest(path)]


def _prune(directory: Path, keep: int) -> None:
    """Delete verifiable checkpoints beyond the newest ``keep`` of them, and checksum files
    whose checkpoint is gone. Checkpoints that do not verify are left for a person to look at."""
    verified = [p for p in list_checkpoints(directory) if _verifies(p)]
    for old in verified[keep:]:
        delete(old)
    for sidecar in directory.glob("ckpt_*.sha256"):
        if not sidecar.with_suffix(".pt").exists():
            sidecar.unlink(missing_ok=True)


def check_writable(directory: Path, nbytes: int) -> None:
    """Fail now, not hours from now, if ``directory`` cannot take a checkpoint of ``nbytes``."""
    probe = directory / ".write_probe"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with probe.open("wb") as f:
            os.posix_fallocate(f.fileno(), 0, nbytes)  # really reserves the blocks
    except OSError as error:
        raise CheckpointError(
            f"cannot write checkpoints to {directory}: {error.strerror or error} "
            f"({nbytes / 2**20:.1f} MiB needed per checkpoint); choose another hydra.run.dir "
            f"or free some space"
        ) from None
    finally:
        with contextlib.suppress(OSError):  # no directory to clean (the error above says why)
            probe.unlink(missing_ok=True)


def load_file(path: Path) -> dict[str, Any]:
    """Load one checkpoint file after verifying its checksum; raise CheckpointError if it is bad."""
    sidecar = path.with_suffix(".sha256")
    if not sidecar.exists():
        raise CheckpointError(f"{path}: no checksum file {sidecar.name} beside it")
    expected = sidecar.read_text().split()[0] if sidecar.read_text().strip() else ""
    if _digest(path) != expected:
        raise CheckpointError(f"{path}: checksum mismatch (file is corrupt or was changed)")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:
        raise CheckpointError(
            f"{path}: cannot be loaded safely ({type(error).__name__}: "
            f"{str(error).splitlines()[0]})"
        ) from None
    if not isinstance(state, dict):
        raise CheckpointError(f"{path}: not a Stampede checkpoint (top level is not a dict)")
    return state


def load_latest(directory: Path) -> tuple[Path, dict[str, Any]] | None:
    """The newest readable checkpoint in ``directory``, falling back to older ones; None if none.

    Unreadable files are reported and left untouched. If checkpoints exist but none is readable,
    raise CheckpointError rather than silently starting from scratch.
    """
    candidates = list_checkpoints(directory)
    errors = []
    for path in candidates:
        try:
            return path, load_file(path)
        except CheckpointError as error:
            errors.append(str(error))
            log.warning("skipping unreadable checkpoint: %s; trying the previous one", error)
    if errors:
        raise CheckpointError(
            "no readable checkpoint in " + str(directory) + ": " + "; ".join(errors)
        )
    return None


def resolve(target: str | Path) -> Path:
    """A checkpoint file from a path that is a file, a checkpoints/ directory or a run directory."""
    path = Path(target)
    if path.is_file():
        return path
    for directory in (path / CHECKPOINT_DIR, path):
        found = list_checkpoints(directory)
        if found:
            return found[0]
    raise CheckpointError(
        f"checkpoint={str(target)!r}: no checkpoint file found there "
        f"(expected a ckpt_*.pt file, a run directory or its {CHECKPOINT_DIR}/)"
    )

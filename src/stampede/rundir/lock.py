"""One training run per run directory: an advisory lock held for the life of the run.

Two runs on one directory (a resumed job racing its requeued twin, two terminals with one
``hydra.run.dir``) would interleave their metrics and mix their checkpoints. The runner holds an
exclusive ``flock`` on ``<run_dir>/.lock`` while it trains, and the file says who holds it
(``pid host``), so a second run is refused naming the first. The kernel drops the lock when its
process dies, however it dies: a killed run leaves no stale lock, and a requeued job resumes as
soon as the old process is gone. ``run.py``'s pre-check (``stampede.cli``) asks first
(``refuse_if_busy``), so a second run is refused before Hydra writes its ``.hydra/`` files over
those of the run that holds the lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from stampede.errors import UserError

log = logging.getLogger("stampede")

LOCK_FILE = ".lock"


class RunDirBusy(UserError):
    """Another live process trains in this run directory."""


@contextlib.contextmanager
def hold(run_dir: Path) -> Iterator[None]:
    """Hold the lock of ``run_dir`` for the ``with`` block; raise RunDirBusy if another process
    holds it."""
    run_dir.mkdir(parents=True, exist_ok=True)
    with (run_dir / LOCK_FILE).open("a+") as file:  # never truncated before it is ours
        try:
            _lock(file, run_dir)
        except OSError as error:  # e.g. Lustre mounted without flock: train, but say what is lost
            log.warning(
                "cannot lock %s (%s): a second run on this directory would not be refused",
                run_dir / LOCK_FILE,
                error.strerror or error,
            )
        else:
            file.truncate(0)
            file.write(f"{os.getpid()} {socket.gethostname()}\n")
            file.flush()
        yield


def refuse_if_busy(run_dir: Path) -> None:
    """Raise RunDirBusy if another process holds the lock of ``run_dir`` now; otherwise take it
    for an instant and let it go, creating nothing (``stampede.cli`` asks before Hydra writes
    into the directory)."""
    try:
        file = (run_dir / LOCK_FILE).open()
    except OSError:  # no lock file: no run has held this directory
        return
    # Closing the file lets the lock go. Where the filesystem cannot lock, the runner says so.
    with file, contextlib.suppress(OSError):
        _lock(file, run_dir)


def _lock(file: IO[str], run_dir: Path) -> None:
    """Take the lock without waiting: RunDirBusy naming the holder if another process has it,
    OSError where the filesystem cannot lock."""
    try:
        fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        file.seek(0)
        pid_host = file.read().split()  # empty for the instant between its flock and write
        holder = "pid {} on {}".format(*pid_host) if len(pid_host) == 2 else "another process"
        raise RunDirBusy(
            f"{run_dir} is in use by another run ({holder}); wait for it to end, stop it, or "
            f"choose another hydra.run.dir"
        ) from None

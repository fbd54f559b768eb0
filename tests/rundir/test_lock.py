"""The run-directory lock where the filesystem has none: training goes on, and says so."""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path

import pytest

from stampede.rundir import lock as run_lock


def test_a_filesystem_without_locks_still_trains_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def no_locks(*args: object) -> None:  # e.g. Lustre mounted without flock
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(run_lock.fcntl, "flock", no_locks)
    with caplog.at_level(logging.WARNING, logger="stampede"), run_lock.hold(tmp_path):
        pass
    assert "a second run on this directory would not be refused" in caplog.text
    assert os.strerror(errno.ENOLCK) in caplog.text

"""The two kinds of failure a user meets, and how ``run.py`` ends on each.

- ``UserError``: the input was wrong (a config value, a checkpoint, a busy run directory, an
  environment that cannot be built). Reported in one line naming what was wrong and what is
  allowed, before anything starts where possible; exit code 2.
- ``RunFailure``: a run that started could not go on (actors keep failing, updates keep going
  non-finite). Logged with its cause, the last good checkpoint kept; exit code 1.

Every error Stampede raises on purpose derives from one of them.
"""

from __future__ import annotations


class UserError(Exception):
    """Bad input: exit 2 with one line."""


class RunFailure(RuntimeError):
    """A started run that cannot continue: exit 1, its checkpoint kept."""

"""Every error Stampede raises on purpose is a ``UserError`` (exit 2, one line) or a
``RunFailure`` (exit 1), so ``run.py`` catches two classes."""

from __future__ import annotations

import pytest

from stampede.config.checks import ConfigError
from stampede.envs import EnvError
from stampede.errors import RunFailure, UserError
from stampede.eval.policy import EvalError
from stampede.rundir.checkpoint import CheckpointError
from stampede.rundir.lock import RunDirBusy
from stampede.train.guard import NumericalFailure
from stampede.train.pool import ActorFailure


@pytest.mark.parametrize("error", [ConfigError, EnvError, EvalError, CheckpointError, RunDirBusy])
def test_bad_input_is_a_user_error(error: type[Exception]) -> None:
    assert issubclass(error, UserError)
    assert not issubclass(error, RunFailure)


@pytest.mark.parametrize("error", [ActorFailure, NumericalFailure])
def test_a_run_that_cannot_go_on_is_a_run_failure(error: type[Exception]) -> None:
    assert issubclass(error, RunFailure)
    assert not issubclass(error, UserError)


def test_config_and_env_errors_stay_value_errors() -> None:
    """Callers that caught ValueError for a bad value (and OmegaConf, which wraps it) still do."""
    assert issubclass(ConfigError, ValueError)
    assert issubclass(EnvError, ValueError)

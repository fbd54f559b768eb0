"""``run.py``'s command line, checked before Hydra starts any job.

Hydra reports a bad override with a traceback, and only once a job runs; ``check_command_line``
composes and validates the config for the same command line first (every value of every sweep),
builds the env spec and the network once, checks that the run directory can be created and that
no other run holds it, and on any failure prints one line naming the key, the value and what is
allowed, and exits with code 2.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from stampede.config.checks import ConfigError
from stampede.config.compose import load_config, unknown_key
from stampede.config.models import model_factory
from stampede.config.schema import Config
from stampede.envs import EnvError
from stampede.rundir import lock as run_lock

_OTHER_CONFIG_FLAGS = {
    "--config-path",
    "-cp",
    "--config-name",
    "-cn",
    "--config-dir",
    "-cd",
    "--experimental-rerun",
}
_FLAGS_WITH_VALUE = {"--cfg", "-c", "--package", "-p", "--info", "-i"}
_HELP_FLAGS = {"--help", "-h", "--hydra-help"}
_MULTIRUN_FLAGS = {"--multirun", "-m"}


def check_command_line(argv: Sequence[str], conf_dir: Path, config_name: str = "config") -> None:
    """Compose and validate the config for the given command line before Hydra starts any job.

    On error, print one line naming the key, the value and what is allowed, and exit with code 2.
    Sweeps are checked value by value, so ``--multirun seed=1,2 env.game=pong,nope`` fails here.
    A ``hydra.run.dir`` that another run holds is refused with the runner's own line, before
    Hydra writes its ``.hydra/`` files over that run's.
    """
    overrides = _overrides_of(argv)
    if overrides is None or _HELP_FLAGS.intersection(argv):
        return
    try:
        for arg in argv:
            if arg.startswith(("hydra.run.dir=", "hydra.sweep.dir=")):
                key, path = arg.split("=", 1)
                _check_directory(key, path)
                if key == "hydra.run.dir" and _single_run(argv):
                    run_lock.refuse_if_busy(Path(path))
        for job in _one_job_each(overrides):
            check_buildable(load_config(conf_dir, job, config_name))
    except run_lock.RunDirBusy as busy:
        print(f"stampede: {busy}", file=sys.stderr)  # the line of a refusal once running
        raise SystemExit(2) from None
    except Exception as error:  # any composition or validation failure is the user's to fix
        print(f"stampede: config error: {explain(error)}", file=sys.stderr)
        raise SystemExit(2) from None


def _single_run(argv: Sequence[str]) -> bool:
    """One job in ``hydra.run.dir``, started alone. Not under ``--multirun`` (its jobs run in
    ``hydra.sweep.dir``), nor as one of several torchrun ranks: those share the directory, and
    rank 0's runner may lock it while another rank is still here."""
    return not _MULTIRUN_FLAGS.intersection(argv) and os.environ.get("WORLD_SIZE", "1") == "1"


def _overrides_of(argv: Sequence[str]) -> list[str] | None:
    """The key=value overrides of a command line, or None when it points at another config."""
    overrides, skip_value = [], False
    for arg in argv:
        if skip_value:
            skip_value = False
        elif arg.split("=")[0] in _OTHER_CONFIG_FLAGS:
            return None
        elif arg in _FLAGS_WITH_VALUE:
            skip_value = True
        elif not arg.startswith("-") and not arg.startswith(("hydra.", "hydra/")):
            overrides.append(arg)
    return overrides


def _one_job_each(overrides: list[str]) -> list[list[str]]:
    """Override lists that together try every value of every sweep (one sweep varied at a time)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(overrides)
    values = [_sweep_values(o) if o.is_sweep_override() else [] for o in parsed]
    first = [
        f"{o.get_key_element()}={v[0]}" if v else str(o.input_line)
        for o, v in zip(parsed, values, strict=True)
    ]
    jobs = [first]
    for i, o in enumerate(parsed):
        for value in values[i][1:]:
            jobs.append([*first[:i], f"{o.get_key_element()}={value}", *first[i + 1 :]])
    return jobs


def _sweep_values(override: Any) -> list[str]:
    """The values of a sweep to check: each of a choice or range; both ends of an interval (a
    search space of Optuna's sweeper, ``tag(log, interval(1e-4, 1e-2))``)."""
    from hydra.core.override_parser.types import IntervalSweep

    sweep = override.value()
    if isinstance(sweep, IntervalSweep):
        return [str(sweep.start), str(sweep.end)]
    return list(override.sweep_string_iterator())


def _check_directory(key: str, path: str) -> None:
    """The run (or sweep) directory can be created: fail here rather than inside Hydra."""
    try:
        Path(path).mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ConfigError(
            f"{key}={path!r}: cannot create the run directory "
            f"({error.strerror or error}); cannot write checkpoints there"
        ) from None


def check_buildable(cfg: Config) -> None:
    """Build the env spec and the network once, so a model that cannot take the env's
    observations (an MLP on images, a CNN on vectors) or a bad gymnasium id fails here."""
    from stampede.envs import env_spec

    spec = env_spec(**dataclasses.asdict(cfg.env))
    model_factory(cfg.model, spec.obs_shape, spec.num_actions, len(cfg.env.tasks))()


def explain(error: BaseException) -> str:
    """One readable line for a composition or validation error, naming the key."""
    from hydra.errors import MissingConfigException
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

    # Hydra and OmegaConf wrap the error that names the key; ours (and the env's) already do.
    ours = (ConfigError, EnvError, MissingConfigException)
    while error.__cause__ is not None and not isinstance(error, ours):
        error = error.__cause__
    if isinstance(error, MissingConfigException) and error.options is not None:
        missing = (error.missing_cfg_file or "").strip("/")
        group, _, option = missing.rpartition("/")
        options = sorted(o for o in error.options if not o.endswith("_schema"))
        return f"{group}={option}: no such option; available: {', '.join(options)}"
    schema = getattr(error, "object_type", None)
    if (
        isinstance(error, ConfigAttributeError | ConfigKeyError)
        and isinstance(schema, type)
        and dataclasses.is_dataclass(schema)
        and error.key not in {f.name for f in dataclasses.fields(schema)}
    ):
        return unknown_key(str(error.full_key), schema)
    if isinstance(error, OmegaConfBaseException) and getattr(error, "full_key", None):
        msg = str(getattr(error, "msg", error)).splitlines()[0]
        return f"{error.full_key}: {msg}"
    return " ".join(str(error).split())

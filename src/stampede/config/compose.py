"""Hydra's side of the schemas: register them, and compose ``conf/`` into a checked ``Config``.

``register_configs`` stores each schema in Hydra's ConfigStore under the name the YAML files of
``conf/<group>/`` extend (``GROUP_SCHEMAS``). ``to_config`` turns a composed DictConfig into the
typed ``Config``, which runs every ``__post_init__`` check; ``load_config`` composes and converts
outside ``@hydra.main`` (tests, benchmarks, the command-line pre-check of ``stampede.cli``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from stampede.config.checks import ConfigError
from stampede.config.models import AtariNetConfig, MLPConfig, NatureNetConfig, ResNetConfig
from stampede.config.resolvers import register_resolvers
from stampede.config.runtime import RuntimeConfig
from stampede.config.schema import Config, LoggerConfig, OptimConfig, VTraceConfig
from stampede.envs import EnvSettings

GROUP_SCHEMAS: dict[str, dict[str, type]] = {
    "env": {"env_schema": EnvSettings},
    "model": {
        "shallow_schema": AtariNetConfig,
        "resnet_schema": ResNetConfig,
        "nature_schema": NatureNetConfig,
        "mlp_schema": MLPConfig,
    },
    "vtrace": {"vtrace_schema": VTraceConfig},
    "optim": {"optim_schema": OptimConfig},
    "runtime": {"runtime_schema": RuntimeConfig},
    "logger": {"logger_schema": LoggerConfig},
}


def register_configs() -> None:
    """Register the schemas with Hydra's ConfigStore (YAML files extend them by name)."""
    from hydra.core.config_store import ConfigStore
    from omegaconf import MISSING, OmegaConf

    cs = ConfigStore.instance()
    root = OmegaConf.structured(Config)
    # The model group fills this slot with its network's schema; a slot typed by the default
    # network's schema would refuse the others (they are siblings, not subclasses).
    root.model = MISSING
    cs.store(name="config_schema", node=root)
    for group, schemas in GROUP_SCHEMAS.items():
        for name, node in schemas.items():
            cs.store(group=group, name=name, node=node)
    register_resolvers()  # ${stampede.games:...} in experiments


def to_config(dict_config: Any) -> Config:
    """Turn a composed DictConfig into the typed, validated ``Config`` (checks run here)."""
    from omegaconf import OmegaConf

    cfg = OmegaConf.to_object(dict_config)
    assert isinstance(cfg, Config)
    _refuse_added_keys(cfg, "")
    return cfg


def _refuse_added_keys(node: Any, prefix: str) -> None:
    """Keys added with ``+key=value`` pass Hydra and land as plain attributes of the schema
    objects, where nothing would read them: refuse them as a misspelt key is refused."""
    names = {f.name for f in dataclasses.fields(node)}
    for key, value in vars(node).items():
        if key not in names:
            raise ConfigError(unknown_key(f"{prefix}{key}", type(node)))
        if dataclasses.is_dataclass(value):
            _refuse_added_keys(value, f"{prefix}{key}.")


def unknown_key(full_key: str, schema: type) -> str:
    """The message for a key that ``schema`` lacks, listing the keys it has."""
    names = ", ".join(f.name for f in dataclasses.fields(schema))
    return f"{full_key}: no such key; allowed: {names}"


def load_config(
    conf_dir: Path, overrides: Sequence[str] = (), config_name: str = "config"
) -> Config:
    """Compose ``conf_dir`` with overrides and validate it outside ``@hydra.main``."""
    from hydra import compose, initialize_config_dir

    register_configs()
    with initialize_config_dir(config_dir=str(Path(conf_dir).resolve()), version_base="1.3"):
        return to_config(compose(config_name=config_name, overrides=list(overrides)))

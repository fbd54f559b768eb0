"""Helpers of the config tests: ``conf/`` composed into a checked ``Config`` as ``run.py`` does.

The test files import these with ``from .conftest import ...``.
"""

from __future__ import annotations

from pathlib import Path

from hydra import compose, initialize_config_dir

from stampede.config.compose import register_configs, to_config
from stampede.config.schema import Config

CONF = Path(__file__).resolve().parents[2] / "conf"


def composed(*overrides: str) -> Config:
    register_configs()  # the schemas the YAML files extend (once is enough; again is harmless)
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return to_config(compose(config_name="config", overrides=list(overrides)))

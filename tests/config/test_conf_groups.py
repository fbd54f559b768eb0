"""Every default lives in one place: each option of a config group composes, and its YAML file
sets only values that differ from its schema's defaults (a repeated default is a second copy
that can drift)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.core.plugins import Plugins
from omegaconf import DictConfig, OmegaConf

from stampede.config.compose import GROUP_SCHEMAS, register_configs, to_config

CONF = Path(__file__).resolve().parents[2] / "conf"
GROUPS = ("env", "model", "optim", "vtrace", "runtime", "logger", "infra")
OPTIONS = [(group, path.stem) for group in GROUPS for path in sorted((CONF / group).glob("*.yaml"))]
# What each option needs besides itself to compose into a valid config.
NEEDS = {("env", "gym"): ["env.gym_id=CartPole-v1"]}
ABSENT = object()  # a key the schema lacks


@pytest.fixture(scope="module", autouse=True)
def _registered() -> None:
    register_configs()
    Plugins.instance()  # imports Hydra's plugins: their launcher schemas are what infra extends


def load(group: str, option: str) -> dict[str, Any]:
    return yaml.safe_load((CONF / group / f"{option}.yaml").read_text()) or {}


def schema_of(group: str, option: str) -> DictConfig:
    """The schema a group file extends: the ``*_schema`` at the end of its defaults chain, or for
    an infra file (``override /hydra/launcher: ...``) the launcher plugin's schema."""
    for entry in load(group, option).get("defaults", []):
        if isinstance(entry, dict):
            (launcher,) = entry.values()
            node = ConfigStore.instance().load(f"hydra/launcher/{launcher}.yaml").node
            return OmegaConf.create({"hydra": {"launcher": node}})
        if entry.endswith("_schema"):
            return OmegaConf.structured(GROUP_SCHEMAS[group][entry])
        return schema_of(group, entry)
    return OmegaConf.create()


def leaves(node: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted key, value) of every value a YAML file sets, its defaults list aside."""
    for key, value in node.items():
        if key == "defaults":
            continue
        if isinstance(value, dict) and value:
            yield from leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


@pytest.mark.parametrize(("group", "option"), OPTIONS)
def test_group_option_composes(group: str, option: str) -> None:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        overrides = [f"{group}={option}", *NEEDS.get((group, option), [])]
        to_config(compose(config_name="config", overrides=overrides))


@pytest.mark.parametrize(("group", "option"), OPTIONS)
def test_group_file_sets_only_what_differs_from_its_schema(group: str, option: str) -> None:
    schema = schema_of(group, option)
    repeated = [
        f"{key}: {value!r}"
        for key, value in leaves(load(group, option))
        if OmegaConf.select(schema, key, default=ABSENT, throw_on_resolution_failure=False) == value
    ]
    assert not repeated, f"conf/{group}/{option}.yaml repeats its schema's defaults: {repeated}"

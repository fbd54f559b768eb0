"""Registering the schemas with Hydra and composing ``conf/`` into a checked ``Config``
(``stampede.config.compose``): the groups, the env schema, and keys no schema has."""

from __future__ import annotations

import pytest
from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from stampede.config.checks import ConfigError
from stampede.config.compose import GROUP_SCHEMAS, load_config, register_configs
from stampede.config.schema import Config, VTraceConfig
from stampede.envs import EnvSettings

from .conftest import CONF, composed


@pytest.mark.parametrize(
    ("overrides", "check"),
    [
        (
            ["env=breakout", "model=resnet"],
            lambda c: c.env.game == "breakout" and c.model.channels == [16, 32, 32],
        ),
        (["env=atari", "env.game=space_invaders"], lambda c: c.env.game == "space_invaders"),
        (["env=cartpole", "model=mlp"], lambda c: c.env.gym_id == "CartPole-v1"),
        (["optim=adam"], lambda c: c.optim.name == "adam"),
        (["model.use_lstm=true"], lambda c: c.model.use_lstm),
        (["debug=fast"], lambda c: c.runtime.batch_size == 4),
    ],
)
def test_groups_compose(overrides: list[str], check) -> None:
    assert check(composed(*overrides))


def test_env_schema_is_the_envs_own_settings() -> None:
    """cfg.env is what the env package builds from: no second copy of a default or a check."""
    assert type(composed().env) is EnvSettings
    assert GROUP_SCHEMAS["env"] == {"env_schema": EnvSettings}


def test_every_group_schema_is_stored_under_the_name_its_yaml_files_extend() -> None:
    register_configs()
    store = ConfigStore.instance()
    for group, schemas in GROUP_SCHEMAS.items():
        for name, schema in schemas.items():
            node = store.load(f"{group}/{name}.yaml").node
            assert OmegaConf.get_type(node) is schema, f"{group}/{name}"
    root = store.load("config_schema.yaml").node
    assert OmegaConf.get_type(root) is Config
    assert OmegaConf.is_missing(root, "model")  # filled by the model group's choice


def test_load_config_composes_the_overrides_into_checked_objects() -> None:
    cfg = load_config(CONF, ["env=cartpole", "model=mlp", "vtrace.discount=0.9"])
    assert isinstance(cfg, Config)
    assert isinstance(cfg.vtrace, VTraceConfig)
    assert (cfg.env.gym_id, cfg.vtrace.discount) == ("CartPole-v1", 0.9)
    with pytest.raises(ConfigError, match=r"vtrace\.discount must be in \[0, 1\], got 1\.5"):
        load_config(CONF, ["vtrace.discount=1.5"])


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("+vtrace.discout=0.9", "vtrace.discout: no such key; allowed: discount, rho_bar, c_bar,"),
        ("+env.frameskip=3", "env.frameskip: no such key; allowed: kind, game, gym_id, backend,"),
        ("+seeds=3", "seeds: no such key; allowed: "),
    ],
)
def test_a_key_added_with_plus_is_refused_listing_the_keys_there_are(
    override: str, message: str
) -> None:
    """``+key=value`` passes Hydra, and nothing would read the key: refused like a misspelt one."""
    with pytest.raises(ConfigError) as refused:
        load_config(CONF, [override])
    assert str(refused.value).startswith(message)

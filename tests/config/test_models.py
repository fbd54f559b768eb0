"""The ``model`` group's schemas made from each network's signature, and the factory that builds the
configured network (``stampede.config.models``)."""

from __future__ import annotations

import inspect
import json
import pickle
from collections.abc import Sequence

import pytest
from omegaconf import OmegaConf
from torch.nn import Linear

from stampede.config.checks import ConfigError
from stampede.config.compose import GROUP_SCHEMAS
from stampede.config.models import (
    ENV_ARGUMENTS,
    MLPConfig,
    ResNetConfig,
    model_factory,
    model_schema,
    network_class,
)
from stampede.models import MLP, ResNet

from .conftest import composed

# A value other than the default for every constructor argument of every network, by name: a new
# argument fails test_every_model_argument_is_settable until it has one here.
ARGUMENT_VALUES = {
    "use_lstm": True,
    "hidden_size": 32,
    "lstm_size": 16,
    "channels": [8, 8],
    "num_blocks": 1,
    "hidden_sizes": [16],
    "activation": "tanh",
}


# Each option of the model group: its network, and an env whose observations it takes.
MODEL_GROUPS = {
    "shallow": ("stampede.models.AtariNet", "pong", (4, 84, 84)),
    "resnet": ("stampede.models.ResNet", "pong", (4, 84, 84)),
    "nature": ("stampede.models.NatureNet", "pong", (4, 84, 84)),
    "mlp": ("stampede.models.MLP", "cartpole", (4,)),
}


def constructor_arguments(target: str) -> list[str]:
    parameters = inspect.signature(network_class(target)).parameters
    return [name for name in parameters if name not in ENV_ARGUMENTS]


@pytest.mark.parametrize(
    ("group", "argument"),
    [
        (group, argument)
        for group, (target, _, _) in MODEL_GROUPS.items()
        for argument in constructor_arguments(target)
    ],
)
def test_every_model_argument_is_settable(group: str, argument: str) -> None:
    """``model.<arg>=`` reaches the constructor for every argument of each network."""
    target, env, obs_shape = MODEL_GROUPS[group]
    value = ARGUMENT_VALUES[argument]
    cfg = composed(f"env={env}", f"model={group}", f"model.{argument}={json.dumps(value)}")
    assert cfg.model._target_ == target
    assert getattr(cfg.model, argument) == value
    make_model = model_factory(cfg.model, obs_shape, 3)
    assert make_model.keywords[argument] == value
    make_model()  # the network takes it


def test_model_schemas_are_the_signatures() -> None:
    """Each model schema has exactly its network's arguments, with the signature's defaults."""
    for schema in GROUP_SCHEMAS["model"].values():
        model = schema()
        parameters = inspect.signature(network_class(model._target_)).parameters
        assert list(model.kwargs()) == constructor_arguments(model._target_)
        for name, value in model.kwargs().items():
            default = parameters[name].default
            assert value == (list(default) if isinstance(default, tuple) else default)


class WidthMLP(MLP):
    """A network of one's own: a required argument and a sequence default."""

    def __init__(
        self, obs_shape: Sequence[int], num_actions: int, width: int, more: Sequence[int] = (4,)
    ) -> None:
        super().__init__(obs_shape, num_actions, hidden_sizes=(width, *more))


def test_model_schema_of_a_new_network() -> None:
    """A required argument is a required key; a tuple default becomes a list Hydra can compose."""
    schema = model_schema(f"{__name__}.WidthMLP")
    node = OmegaConf.structured(schema)
    assert OmegaConf.is_missing(node, "width")
    assert node.more == [4]
    network = model_factory(schema(width=8), (3,), 2)()
    assert [layer.out_features for layer in network.torso if isinstance(layer, Linear)] == [8, 4]


@pytest.mark.parametrize(
    "target", ["torch.nn.Linear", "stampede.models.NoSuchNet", "no_such_module.Net", "MLP", ""]
)
def test_a_target_that_is_no_network_is_refused(target: str) -> None:
    with pytest.raises(
        ConfigError,
        match=rf"model\._target_ must name a stampede\.models\.ActorCritic, got '{target}'",
    ):
        network_class(target)


def test_the_factory_gives_a_multi_task_network_one_value_per_task() -> None:
    one = model_factory(MLPConfig(), (4,), 2)
    assert "num_tasks" not in one.keywords
    assert one().num_tasks == 1
    three = model_factory(MLPConfig(), (4,), 2, num_tasks=3)
    assert three.keywords["num_tasks"] == 3
    assert three().baseline.out_features == 3


def test_factories_and_schemas_are_picklable() -> None:
    """Every process builds its own copy of the network from the factory it is sent."""
    config = ResNetConfig(channels=[8, 8], num_blocks=1)
    assert pickle.loads(pickle.dumps(config)) == config
    network = pickle.loads(pickle.dumps(model_factory(config, [4, 36, 36], 6)))()
    assert isinstance(network, ResNet)
    assert (network.obs_shape, network.num_actions) == ((4, 36, 36), 6)

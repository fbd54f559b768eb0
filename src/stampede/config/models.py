"""The ``model`` group's schemas, made from each network's constructor, and the factory that
builds the configured network.

A network's arguments, their types and their defaults are written once, in its signature;
``model_schema`` turns that signature into the dataclass Hydra composes into, so
``model.<arg>=...`` sets any argument and nothing else. The network checks the values itself when
it is built (``stampede.cli.check_buildable`` builds it once before any process starts).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import types
import typing
from collections import abc
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, make_dataclass
from typing import Any

from stampede.config.checks import ConfigError
from stampede.models import ActorCritic

ENV_ARGUMENTS = ("obs_shape", "num_actions", "num_tasks")  # constructor arguments the env gives


@dataclass
class ModelConfig:
    """A network class (``_target_``) and its constructor arguments but obs_shape/num_actions;
    each network's schema is the subclass `model_schema` makes from its constructor."""

    _target_: str

    def kwargs(self) -> dict[str, Any]:
        """Constructor arguments: every field but ``_target_``."""
        return {k: v for k, v in vars(self).items() if k != "_target_"}


def network_class(target: str) -> type[ActorCritic]:
    """The class that ``target`` (``package.module.Class``) names; ConfigError unless it is an
    ``ActorCritic``."""
    module, _, name = target.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError):
        cls = None
    if not (isinstance(cls, type) and issubclass(cls, ActorCritic)):
        raise ConfigError(f"model._target_ must name a stampede.models.ActorCritic, got {target!r}")
    return cls


def model_schema(target: str) -> type[ModelConfig]:
    """The ``model`` schema of the network ``target`` names: its ``_target_``, and one field per
    constructor argument but obs_shape, num_actions and num_tasks (the env gives those), typed and
    defaulted as the signature says, so ``model.<arg>=...`` sets any argument and nothing else.
    Sequences become lists, which Hydra can compose."""
    cls = network_class(target)
    hints = typing.get_type_hints(cls.__init__)
    fields: list[tuple[str, Any, Any]] = [("_target_", str, field(default=target))]
    for name, param in inspect.signature(cls).parameters.items():
        if name not in ENV_ARGUMENTS:
            fields.append((name, *_schema_field(hints[name], param.default)))
    schema = make_dataclass(f"{cls.__name__}Config", fields, bases=(ModelConfig,))
    schema.__module__ = __name__  # picklable as stampede.config.models.<Name>Config
    return schema


def _schema_field(hint: Any, default: Any) -> tuple[Any, Any]:
    """(type, dataclass field) of one constructor argument."""
    if typing.get_origin(hint) is abc.Sequence:
        hint = types.GenericAlias(list, typing.get_args(hint))  # Sequence[int] -> list[int]
    if default is inspect.Parameter.empty:  # required; keyword-only, so it may follow defaults
        return hint, field(kw_only=True)
    if isinstance(default, abc.Sequence) and not isinstance(default, str):
        return hint, field(default_factory=functools.partial(list, default))
    return hint, field(default=default)


AtariNetConfig = model_schema("stampede.models.AtariNet")
ResNetConfig = model_schema("stampede.models.ResNet")
NatureNetConfig = model_schema("stampede.models.NatureNet")
MLPConfig = model_schema("stampede.models.MLP")


def model_factory(
    model: ModelConfig, obs_shape: Sequence[int], num_actions: int, num_tasks: int = 1
) -> Callable[[], ActorCritic]:
    """A picklable zero-argument constructor for the configured network (used by every process);
    ``num_tasks``: the games of a multi-task run (one baseline output each)."""
    cls = network_class(model._target_)
    kwargs = model.kwargs() | ({"num_tasks": num_tasks} if num_tasks > 1 else {})
    return functools.partial(cls, tuple(obs_shape), num_actions, **kwargs)

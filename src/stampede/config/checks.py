"""``ConfigError`` and the two checks the schemas state their rules with.

A module of its own because several schema modules raise it (``stampede.config.schema``,
``stampede.config.runtime``, ``stampede.config.models``) and import each other.
"""

from __future__ import annotations

from typing import Any

from stampede.errors import UserError


class ConfigError(UserError, ValueError):
    """A configuration value is not allowed; the message names the key, the value and the rule."""


def require(ok: bool, key: str, value: Any, allowed: str) -> None:
    """ConfigError ``<key> must be <allowed>, got <value>`` unless ``ok``."""
    if not ok:
        raise ConfigError(f"{key} must be {allowed}, got {value!r}")


def positive_int(key: str, value: int) -> None:
    """ConfigError unless ``value >= 1``."""
    require(value >= 1, key, value, "a positive integer (>= 1)")

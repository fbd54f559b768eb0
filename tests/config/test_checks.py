"""The two checks the schemas state their rules with (``stampede.config.checks``), and the one-line
message of their ``ConfigError``."""

from __future__ import annotations

import pytest

from stampede.config.checks import ConfigError, positive_int, require


def test_require_passes_or_names_the_key_the_rule_and_the_value() -> None:
    require(True, "optim.lr", -1.0, "> 0")
    with pytest.raises(ConfigError) as refused:
        require(False, "optim.lr", -1.0, "> 0")
    assert str(refused.value) == "optim.lr must be > 0, got -1.0"


def test_the_value_is_shown_as_written_in_python() -> None:
    """Quotes show a string for what it is: ``'1'`` is not the number 1."""
    with pytest.raises(ConfigError) as refused:
        require(False, "runtime.precision", "fp16", "one of ('auto', 'fp32', 'bf16')")
    assert str(refused.value) == (
        "runtime.precision must be one of ('auto', 'fp32', 'bf16'), got 'fp16'"
    )


@pytest.mark.parametrize("value", [0, -3])
def test_positive_int_refuses_zero_and_below(value: int) -> None:
    with pytest.raises(ConfigError) as refused:
        positive_int("runtime.num_actors", value)
    assert str(refused.value) == (
        f"runtime.num_actors must be a positive integer (>= 1), got {value}"
    )


def test_positive_int_takes_one_and_more() -> None:
    positive_int("runtime.num_actors", 1)
    positive_int("runtime.num_actors", 10**6)

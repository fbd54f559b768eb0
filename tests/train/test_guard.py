"""The non-finite guard's naming: which term of a step went bad is what the log and the
failure say."""

from __future__ import annotations

import math

from stampede.train.guard import GUARDED, STEP_KEYS, nonfinite


def step(**bad: float) -> dict[str, float]:
    return dict.fromkeys(STEP_KEYS, 1.0) | bad


def test_a_finite_step_names_nothing() -> None:
    assert nonfinite(step()) == ""
    assert nonfinite(step(**{"learner/kl": math.nan})) == ""  # a diagnostic, not guarded


def test_the_first_bad_loss_term_is_named_before_the_gradient() -> None:
    assert GUARDED == ("loss/pg", "loss/baseline", "loss/entropy")
    assert nonfinite(step(**{"loss/baseline": math.inf})) == "loss/baseline is inf"
    both = step(**{"loss/entropy": math.nan, "learner/grad_norm": math.nan})
    assert nonfinite(both) == "loss/entropy is nan"
    assert nonfinite(step(**{"learner/grad_norm": math.inf})) == "the gradient norm is inf"

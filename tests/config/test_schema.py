"""The typed configuration (``stampede.config.schema``): the documented defaults, and checks that
name the key."""

from __future__ import annotations

import pytest

from stampede.config.checks import ConfigError
from stampede.config.runtime import RuntimeConfig
from stampede.config.schema import OptimConfig, VTraceConfig

from .conftest import composed


def test_defaults_are_the_documented_atari_settings() -> None:
    """The defaults of README's "Defaults and the paper's recipe" (docs/learning.md)."""
    cfg = composed()
    assert (cfg.env.kind, cfg.env.game, cfg.model._target_) == (
        "atari",
        "pong",
        "stampede.models.NatureNet",
    )
    assert (cfg.model.hidden_size, cfg.model.use_lstm) == (512, False)
    r = cfg.runtime
    assert (r.unroll_length, r.batch_size, r.envs_per_actor, r.prefetch) == (32, 32, 8, False)
    v = cfg.vtrace
    assert (v.discount, v.entropy_cost, v.baseline_cost, v.reward_clip) == (0.99, 0.01, 0.5, 1.0)
    assert (v.rho_bar, v.c_bar, v.lambda_, v.pg_clip, v.normalize_advantages) == (
        1.0,
        1.0,
        0.95,
        0.1,
        True,
    )
    o = cfg.optim
    assert (o.name, o.lr, o.eps, o.grad_clip, o.anneal_lr, o.epochs, o.minibatches) == (
        "adam",
        1e-3,
        1e-5,
        40.0,
        False,
        4,
        4,
    )
    assert cfg.total_frames == 200_000_000
    assert (cfg.env.noop_max, cfg.env.frame_skip, cfg.env.frame_stack) == (30, 4, 4)
    assert (cfg.env.max_episode_frames, cfg.env.episodic_life) == (108_000, True)
    assert cfg.logger.wandb.mode == "offline"


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: VTraceConfig(discount=1.5), "vtrace.discount must be in [0, 1], got 1.5"),
        (lambda: VTraceConfig(rho_bar=0.5, c_bar=1.0), "vtrace.rho_bar must be >= vtrace.c_bar"),
        (
            lambda: RuntimeConfig(batch_size=30, envs_per_actor=8),
            "runtime.batch_size must be a multiple",
        ),
        (
            lambda: RuntimeConfig(unroll_length=0),
            "runtime.unroll_length must be a positive integer",
        ),
        (lambda: RuntimeConfig(num_actors=-1), "runtime.num_actors must be a positive integer"),
        (lambda: VTraceConfig(pg_clip=1.0), "vtrace.pg_clip must be in [0, 1"),
        (lambda: OptimConfig(epochs=0), "optim.epochs must be a positive integer"),
        (lambda: RuntimeConfig(inference="gpu"), "runtime.inference must be one of"),
        (lambda: RuntimeConfig(precision="fp16"), "runtime.precision must be one of"),
        (
            lambda: RuntimeConfig(envs_per_actor=2, batch_size=4, inference_groups=3),
            "runtime.inference_groups must be between 1 and runtime.envs_per_actor = 2",
        ),
    ],
)
def test_cross_field_checks_name_the_key(build, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        build()

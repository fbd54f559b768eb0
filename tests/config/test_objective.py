"""The ``objective`` key is checked with the rest of the config, before anything runs."""

from __future__ import annotations

import pytest
from conftest import ROOT

from stampede.config.checks import ConfigError
from stampede.config.compose import load_config
from stampede.config.objective import Objective


def test_objective_key_is_checked_before_anything_runs() -> None:
    conf = ROOT / "conf"
    with pytest.raises(ConfigError, match=r"objective='env/score'.*one of env/episode_return"):
        load_config(conf, ["env=cartpole", "model=mlp", "objective=env/score"])
    with pytest.raises(ConfigError, match=r"set eval.at_end=true"):
        load_config(conf, ["env=cartpole", "model=mlp", "objective=eval/episode_return"])
    with pytest.raises(ConfigError, match=r"'tetris' is not one of env.games"):
        load_config(conf, ["env.games=[pong,breakout]", "env.full_action_space=true",
                           "objective=env/tetris/episode_return"])  # fmt: skip
    cfg = load_config(conf, ["env=cartpole", "model=mlp", "eval.at_end=true",
                             "objective=eval/episode_return_median"])  # fmt: skip
    assert cfg.search_objective.figure == "episode_return_median"


def test_the_parsed_objective_names_its_source_game_and_figure() -> None:
    assert Objective.parse("env/episode_return", [], False) == Objective(
        "env", None, "episode_return"
    )
    parsed = Objective.parse("eval/pong/episode_return_median", ["pong", "breakout"], True)
    assert parsed == Objective("eval", "pong", "episode_return_median")

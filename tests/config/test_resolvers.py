"""The resolvers the experiment configs use: game sets as sweeps and lists, and an Optuna
study's database with its folder made."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from stampede.config.resolvers import games_sweep, register_resolvers, study_storage
from stampede.envs.games import ATARI5, atari57, games


def test_game_sets_as_a_sweep_and_as_a_list() -> None:
    register_resolvers()
    cfg = OmegaConf.create({"s": "${stampede.games:atari5}", "l": "${stampede.game_list:atari5}"})
    assert cfg.s == ",".join(ATARI5)
    assert list(cfg.l) == list(ATARI5)
    assert games_sweep("atari57").split(",") == list(atari57())
    with pytest.raises(ValueError, match="unknown game set 'atari100'; known: atari57, atari5"):
        games("atari100")


def test_study_storage_makes_its_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    url = study_storage("multirun/tune/optuna.db")
    assert url == f"sqlite:///{tmp_path / 'multirun' / 'tune' / 'optuna.db'}"
    assert (tmp_path / "multirun" / "tune").is_dir()

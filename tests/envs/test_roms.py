"""The ROMs ale-py ships (``stampede.envs.roms``): the game ids, each game's ROM, and an unknown
game refused naming ``env.game`` with the ids it may have meant."""

from __future__ import annotations

import pytest

from stampede.envs import EnvError, atari_games, env_spec, make_vec_env
from stampede.envs.roms import rom_path


def test_unknown_game_names_env_game():
    assert "pong" in atari_games()
    assert "space_invaders" in atari_games()
    with pytest.raises(EnvError, match=r"env\.game='not_a_game' is not an ALE game.*atari_games"):
        env_spec(game="not_a_game")
    with pytest.raises(EnvError, match=r"env\.game='Pong'"):
        make_vec_env(1, 0, game="Pong")


def test_every_game_id_has_its_rom():
    games = atari_games()
    assert games == sorted(games)
    assert len(games) > 57
    assert all(rom_path(game).is_file() for game in games)
    assert rom_path("pong").name == "pong.bin"


def test_an_unknown_game_lists_the_games_with_its_first_letters_or_else_the_first_ones():
    with pytest.raises(EnvError, match=r"such as space_invaders, space_war; \d+ in all"):
        rom_path("spaceinvaders")
    with pytest.raises(EnvError, match=r"such as adventure, air_raid, alien, amidar,"):
        rom_path("zork")

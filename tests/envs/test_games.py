"""The named game sets (``stampede.envs.games``) and the package's data files they are read from."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from stampede.envs import games as games_module
from stampede.envs.games import (
    ATARI5,
    CLASSIC5,
    DEV5,
    IMPALA_SCORES_CSV,
    atari57,
    games,
    read_data_csv,
)


@pytest.fixture
def fresh_atari57() -> Iterator[None]:
    """``atari57`` reads its file anew here and again after the test (it caches the list)."""
    atari57.cache_clear()
    yield
    atari57.cache_clear()


def test_each_named_set_is_its_game_list():
    assert games("atari5") == ATARI5
    assert games("classic5") == CLASSIC5
    assert games("dev5") == DEV5
    assert set(ATARI5) | set(CLASSIC5) | set(DEV5) <= set(atari57())
    assert games("atari57") == atari57()
    assert games("atari57")[:3] == ("alien", "amidar", "assault")


def test_data_rows_are_keyed_by_the_header_and_skip_the_provenance_notes():
    rows = read_data_csv(IMPALA_SCORES_CSV)
    assert len(rows) == 57
    assert list(rows[0]) == ["game", "ale_id", "impala_deep_score"]
    assert rows[0] == {"game": "Alien", "ale_id": "alien", "impala_deep_score": "15962.10"}
    assert not any(row["game"].startswith("#") for row in rows)


def test_a_missing_data_file_says_where_it_was_expected():
    with pytest.raises(
        FileNotFoundError,
        match=r"'no_such\.csv' not found in the installed package .*stampede/data/.*pip install -e",
    ):
        read_data_csv("no_such.csv")


@pytest.mark.usefixtures("fresh_atari57")
def test_a_scores_file_without_57_distinct_games_is_refused(monkeypatch):
    rows = read_data_csv(IMPALA_SCORES_CSV)
    monkeypatch.setattr(games_module, "read_data_csv", lambda _: [*rows[:-1], rows[0]])
    with pytest.raises(ValueError, match=r"must list 57 distinct games, got 56 distinct of 57"):
        atari57()

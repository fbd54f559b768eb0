"""The Atari ROMs ale-py ships: which games there are, and where each one's ROM is."""

from __future__ import annotations

import functools
from pathlib import Path

from stampede.envs.spec import EnvError


@functools.cache
def atari_games() -> list[str]:
    """ALE ROM ids shipped with ale-py, snake_case (``"pong"``, ``"space_invaders"``)."""
    from ale_py import roms

    return sorted(roms.get_all_rom_ids())


def rom_path(game: str) -> Path:
    """Path of the ROM of ``game``, or EnvError naming ``env.game`` and some known games."""
    from ale_py import roms

    path = roms.get_rom_path(game) if game in atari_games() else None
    if path is None:
        games = atari_games()
        close = [g for g in games if g[:3] == game[:3]] or games[:8]
        raise EnvError(
            f"env.game={game!r} is not an ALE game id (snake_case ROM names such as "
            f"{', '.join(close[:8])}; {len(games)} in all, see stampede.envs.atari_games())"
        )
    return Path(path)

"""One Atari game on the Arcade Learning Environment, with the paper's episode protocol.

IMPALA (Espeholt et al. 2018, arXiv 1802.01561) evaluates Atari with the DQN Nature protocol
(Mnih et al. 2015): up to ``noop_max`` random no-ops at the start of a game, each action repeated
``frame_skip`` times with a max over the last two raw frames, the end of a life as the end of a
training episode, and a cap of 108,000 frames (30 minutes) per game. ``AtariGame`` does the
emulator side of that on ``ale_py.ALEInterface`` directly (no gymnasium wrapper stack: one
Python call per frame is the whole overhead); resizing and stacking are batched over a vector of
games in ``stampede.envs.vector``.

The details follow ale-py's C++ ``AtariVectorEnv`` (checked against ale-py 0.12) so that both
Atari backends produce the same observations for the same seed and actions:

- the number of no-ops is uniform in {0, ..., noop_max}, drawn from a per-game mt19937 seeded
  with the game's seed (the C++ draws the same numbers);
- the frame cap counts emulator frames after the no-ops, and an action repeat stops early at a
  game over or at the cap;
- a life is lost when ``lives()`` drops and is still above zero (losing the last life is a
  game over); the game then simply continues.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from stampede.envs.preprocessing import max_pool
from stampede.envs.roms import rom_path

if TYPE_CHECKING:  # ale_py registers gymnasium ids when imported: import it only when used
    import ale_py

    from stampede.envs.settings import EnvSettings


def new_ale(settings: EnvSettings, seed: int) -> ale_py.ALEInterface:
    """An ``ALEInterface`` with ``settings.game`` loaded and its own RNG seeded with ``seed``.

    Sticky actions (Machado et al. 2018) are ALE's own, drawn from that RNG.
    """
    import ale_py

    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)  # no banner per emulator
    ale = ale_py.ALEInterface()
    ale.setFloat("repeat_action_probability", float(settings.repeat_action_probability))
    ale.setInt("random_seed", int(seed))
    ale.loadROM(str(rom_path(settings.game)))
    return ale


def action_set(ale: ale_py.ALEInterface, full_action_space: bool) -> list[ale_py.Action]:
    """The agent's actions: all 18 joystick actions, or the game's minimal set (Pong: 6)."""
    return list(ale.getLegalActionSet() if full_action_space else ale.getMinimalActionSet())


def uniform_below(rng: np.random.RandomState, n: int) -> int:
    """Uniform int in [0, n) from 32-bit draws, Lemire's multiply-shift with rejection.

    ``RandomState(seed)`` draws the raw mt19937 stream of C++ ``std::mt19937(seed)``, and
    libstdc++'s ``uniform_int_distribution`` maps 32-bit draws this way: so our no-op counts
    equal those of ale-py's C++ vector for the same seed (checked with ale-py 0.12).
    """
    threshold = (2**32 - n) % n
    while True:
        product = int(rng.randint(0, 2**32, dtype=np.uint32)) * n
        if product % 2**32 >= threshold:
            return product >> 32


@dataclass
class StepOutcome:
    """What one agent step did to one game."""

    reward: float
    game_over: bool  # terminal: the game itself ended
    truncated: bool  # hit max_episode_frames without a game over
    life_lost: bool  # lives() dropped and the game goes on


class AtariGame:
    """One ALE game: seeded resets with random no-ops, action repeat with a two-frame max.

    Frames come out as raw grayscale [H, W] uint8 (210x160), written into the caller's buffer.
    """

    def __init__(self, settings: EnvSettings, seed: int = 0) -> None:
        self.settings = settings
        self.ale = new_ale(settings, seed)
        self.actions = action_set(self.ale, settings.full_action_space)
        height, width = self.ale.getScreenDims()
        self.screen_hw = (int(height), int(width))
        self._second_last = np.zeros(self.screen_hw, dtype=np.uint8)
        self._rng = np.random.RandomState(seed)
        self._untouched_seed: int | None = seed  # ALE as loaded with this seed, never played
        self._lives = 0
        self._frames = 0  # emulator frames since the no-ops, for the frame cap

    def reset(self, out: np.ndarray, seed: int | None = None) -> None:
        """Start a new game (reseeding the emulator and the no-op RNG when ``seed`` is given).

        Writes the first frame into ``out`` [H, W].
        """
        ale = self.ale
        if seed is not None:
            # Reloading the ROM is how ALE applies a new seed (it rebuilds its RNG and system);
            # it takes ~0.2 s, so skip it when the emulator is still as loaded with this seed.
            if seed != self._untouched_seed:
                ale.setInt("random_seed", int(seed))
                ale.loadROM(str(rom_path(self.settings.game)))
            self._rng = np.random.RandomState(seed)
        self._untouched_seed = None
        ale.reset_game()
        for _ in range(uniform_below(self._rng, self.settings.noop_max + 1)):
            ale.act(0)  # 0 is NOOP in ALE's full action numbering
            if ale.game_over():
                ale.reset_game()
        ale.getScreenGrayscale(out)
        self._lives = ale.lives()
        self._frames = 0

    def step(self, action: int, out: np.ndarray) -> StepOutcome:
        """Repeat ``action`` (an index into ``self.actions``) for up to ``frame_skip`` frames.

        Writes the max of the last two frames into ``out`` [H, W]. When the game ends or is
        truncated mid-repeat the remaining frames are skipped and ``out`` is left stale: the
        caller resets the game and overwrites it.
        """
        ale, skip, cap = self.ale, self.settings.frame_skip, self.settings.max_episode_frames
        ale_action = self.actions[action]
        reward, game_over, frames = 0, False, self._frames
        for repeat in range(skip, 0, -1):  # repeat counts down: 2 and 1 are the last two frames
            reward += ale.act(ale_action)
            frames += 1
            game_over = ale.game_over()
            if game_over or frames >= cap:
                break
            if repeat == 2:
                ale.getScreenGrayscale(self._second_last)
            elif repeat == 1:
                ale.getScreenGrayscale(out)
                if skip > 1:
                    max_pool(out, self._second_last, out=out)
        self._frames = frames
        lives = ale.lives()
        life_lost = self._lives > lives > 0
        self._lives = lives
        truncated = frames >= cap and not game_over
        return StepOutcome(float(reward), game_over, truncated, life_lost and not game_over)

"""One ALE game (``stampede.envs.atari``): seeded no-op starts, action repeat with the max of the
last two frames, sticky actions, and the frame cap."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from stampede.envs import EnvSettings
from stampede.envs.atari import AtariGame, StepOutcome, new_ale, uniform_below


def play(
    game: AtariGame, seed: int, actions: Sequence[int]
) -> tuple[np.ndarray, list[StepOutcome]]:
    """reset(seed), then one step per action: the frames [T + 1, 210, 160] and the outcomes."""
    frame = np.zeros(game.screen_hw, dtype=np.uint8)
    game.reset(frame, seed=seed)
    frames, outcomes = [frame.copy()], []
    for action in actions:
        outcomes.append(game.step(int(action), frame))
        frames.append(frame.copy())
    return np.stack(frames), outcomes


def test_uniform_below_stays_in_range_and_covers_it():
    rng = np.random.RandomState(0)
    draws = [uniform_below(rng, 31) for _ in range(2000)]
    assert min(draws) == 0
    assert max(draws) == 30
    assert len(set(draws)) == 31


def test_sticky_action_probability_reaches_ale():
    game = AtariGame(EnvSettings(game="pong", repeat_action_probability=0.25))
    assert game.ale.getFloat("repeat_action_probability") == pytest.approx(0.25)


def test_a_step_repeats_the_action_and_keeps_the_max_of_the_last_two_frames():
    """Against a bare emulator: frame_skip frames of the action, their rewards summed, and the
    pixel-wise max of the last two screens, which keeps flickering sprites (Space Invaders')."""
    settings = EnvSettings(game="space_invaders", noop_max=0)
    game = AtariGame(settings, seed=0)
    reference = new_ale(settings, seed=0)
    reference.reset_game()
    out = np.zeros(game.screen_hw, dtype=np.uint8)
    game.reset(out)
    np.testing.assert_array_equal(out, reference.getScreenGrayscale())
    fire = game.actions[1]
    pooled_differs = False
    for _ in range(50):
        outcome = game.step(1, out)
        reward, screens = 0.0, []
        for _ in range(settings.frame_skip):
            reward += reference.act(fire)
            screens.append(reference.getScreenGrayscale())
        assert outcome.reward == reward
        np.testing.assert_array_equal(out, np.maximum(screens[-2], screens[-1]))
        pooled_differs |= bool((out != screens[-1]).any())
    assert pooled_differs  # the max showed something the last frame alone did not


def test_the_frame_cap_truncates_mid_repeat_counting_from_each_reset():
    """10 frames at 4 per step: steps 1 and 2 play 8, step 3 stops after 2 more. Truncated is
    not a game over, and a reset starts the count again."""
    game = AtariGame(EnvSettings(game="pong", noop_max=0, max_episode_frames=10))
    for _ in range(2):
        _, outcomes = play(game, 0, [0, 0, 0])
        assert [o.truncated for o in outcomes] == [False, False, True]
        assert not any(o.game_over or o.life_lost for o in outcomes)


def test_a_reset_with_a_seed_replays_the_game_sticky_actions_included():
    """A reset with the seed the game was built with, after play, restarts the same game: the
    emulator's own RNG (which draws the sticky actions) is reseeded, not only the no-op count."""
    game = AtariGame(EnvSettings(game="breakout", repeat_action_probability=0.25), seed=3)
    actions = np.random.default_rng(0).integers(0, len(game.actions), size=150)
    frames_a, outcomes_a = play(game, 3, actions)
    frames_b, outcomes_b = play(game, 3, actions)
    np.testing.assert_array_equal(frames_a, frames_b)
    assert outcomes_a == outcomes_b
    frames_c, _ = play(game, 4, actions)
    assert (frames_c != frames_a).any()

"""The time budget: a process's stage fractions cover its wall time and never exceed it."""

from __future__ import annotations

import time

import pytest

from stampede.train.timing import StageClock


def test_a_lap_inside_a_stage_splits_it_between_the_two_laps() -> None:
    """The loops log (and lap) from within a stage: the stage's time before the lap belongs to
    the closing lap, the rest to the next, so neither lap's stages add up to more than its wall."""
    clock = StageClock(("work", "log"))
    with clock.stage("work"):
        time.sleep(0.05)
    with clock.stage("log"):
        time.sleep(0.05)
        first, first_wall = clock.lap()
        time.sleep(0.05)
    second, second_wall = clock.lap()
    assert first.sum() == pytest.approx(first_wall, rel=1e-9)  # the stages tile the lap
    assert second.sum() <= second_wall
    assert first[0] >= 0.05  # the work stage
    assert first[1] >= 0.05  # the log stage up to the lap
    assert second[0] == 0
    assert 0.05 <= second[1] <= second_wall  # the log stage after the lap


def test_the_time_between_two_stages_counts_to_the_next() -> None:
    """The loop's moments outside any stage (bookkeeping, or another thread holding the GIL)
    are not lost from the budget: a short window's fractions still sum to 1."""
    clock = StageClock(("work", "log"))
    clock.lap()
    with clock.stage("work"):
        time.sleep(0.01)
    time.sleep(0.05)  # between stages
    with clock.stage("log"):
        seconds, wall = clock.lap()
    assert 0.01 <= seconds[0] < 0.05
    assert seconds[1] >= 0.05
    assert seconds.sum() == pytest.approx(wall, rel=1e-9)


def test_stages_do_not_nest() -> None:
    clock = StageClock(("work", "log"))
    refused = pytest.raises(RuntimeError, match="'log' inside stage 'work'")
    with clock.stage("work"), refused, clock.stage("log"):
        pass
    with clock.stage("log"):  # the refused stage left the clock usable
        pass
    assert clock.lap()[0][1] >= 0

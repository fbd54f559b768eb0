"""Where a process's wall time goes: seconds per named stage, reported as fractions.

Each process of a run (every actor, the learner) keeps a `StageClock` over the stages of its
loop; the fractions ``seconds[stage] / wall`` are logged as ``time/actor/<stage>`` and
``time/learner/<stage>``, so a stall or a slowdown names its stage (as TorchBeast's Timings and
Cleanba's ``stats/*`` do). The stages tile the loop: the moments between two stages (the loop's
own bookkeeping, or waiting for the GIL held by another thread of the process) count to the
stage that follows, so a process's fractions sum to 1 and never more.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np

# An actor: waiting for a free slot, stepping the envs, choosing actions, writing the slot.
ACTOR_STAGES = ("wait", "env", "inference", "write")
# The learner: waiting for a batch, forward + loss + backward, optimizer step, publishing the
# parameters to the actors, and logging / checkpointing / evaluation.
LEARNER_STAGES = ("wait", "forward_backward", "optimizer", "publish", "log")


class StageClock:
    """Wall seconds per stage since the last `lap` (or since construction).

    Stages do not nest. A stage's time starts where the previous stage (or the lap) ended, so
    the time between two stages is the next one's. A lap taken inside a stage (the loops log
    from within one) splits it: the part before the lap is the closing lap's, the rest the next
    one's; such a lap's stages add up to its wall time exactly.
    """

    def __init__(self, stages: Sequence[str]) -> None:
        self.stages = tuple(stages)
        self._index = {name: i for i, name in enumerate(self.stages)}
        self.seconds = np.zeros(len(self.stages))
        self._lap_started = time.perf_counter()
        self._running: int | None = None  # the stage inside whose ``with`` block we are
        self._since = self._lap_started  # when the time not yet added to `seconds` began

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Add the wall time of the ``with`` block, and of the gap before it, to ``name``."""
        if self._running is not None:
            raise RuntimeError(f"stage {name!r} inside stage {self.stages[self._running]!r}")
        self._running = self._index[name]  # its time runs from `_since`: the previous end
        try:
            yield
        finally:
            now = time.perf_counter()
            self.seconds[self._running] += now - self._since
            self._running, self._since = None, now

    def lap(self) -> tuple[np.ndarray, float]:
        """(seconds per stage, wall seconds) since the last lap; starts the next one."""
        now = time.perf_counter()
        if self._running is not None:
            self.seconds[self._running] += now - self._since
        self._since = now
        seconds, wall = self.seconds, now - self._lap_started
        self.seconds, self._lap_started = np.zeros(len(self.stages)), now
        return seconds, wall


def fractions(
    prefix: str, stages: Sequence[str], seconds: np.ndarray, wall: float
) -> dict[str, float]:
    """``{f"{prefix}/{stage}": seconds[i] / wall}``; empty when no wall time passed."""
    if wall <= 0:
        return {}
    return {f"{prefix}/{stage}": float(s / wall) for stage, s in zip(stages, seconds, strict=True)}

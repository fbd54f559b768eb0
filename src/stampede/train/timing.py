"""Where a process's wall time goes: seconds per named stage, reported as fractions.

Each process of a run (every actor, the learner) keeps a `StageClock` over the stages of its
loop; the fractions ``seconds[stage] / wall`` are logged as ``time/actor/<stage>`` and
``time/learner/<stage>``, so a stall or a slowdown names its stage (as TorchBeast's Timings and
Cleanba's ``stats/*`` do). The stages cover the whole loop, so a process's fractions sum to
about 1 and never more; what they miss is the loop's own bookkeeping.
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

    Stages do not nest. A lap taken inside a stage (the loops log from within one) splits it:
    the part before the lap is the closing lap's, the rest the next one's.
    """

    def __init__(self, stages: Sequence[str]) -> None:
        self.stages = tuple(stages)
        self._index = {name: i for i, name in enumerate(self.stages)}
        self.seconds = np.zeros(len(self.stages))
        self._lap_started = time.perf_counter()
        self._running: int | None = None  # the stage inside whose ``with`` block we are
        self._since = 0.0  # when its time not yet added to `seconds` began

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Add the wall time of the ``with`` block to ``name``."""
        if self._running is not None:
            raise RuntimeError(f"stage {name!r} inside stage {self.stages[self._running]!r}")
        self._running, self._since = self._index[name], time.perf_counter()
        try:
            yield
        finally:
            self.seconds[self._running] += time.perf_counter() - self._since
            self._running = None

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

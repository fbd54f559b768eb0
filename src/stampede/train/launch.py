"""Start a training run: this process is one rank of it (the only one, or one under torchrun or
SLURM). Join the ranks' process group, claim the run directory, train, leave the group.

Two runs on one run directory would interleave their metrics and mix their checkpoints, so rank 0
holds the directory's lock (``stampede.rundir.lock``) for the whole run, before anything is written
to it or an actor starts; every rank is refused if another run holds it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from stampede.config.schema import Config
from stampede.rundir import lock as run_lock
from stampede.rundir.lock import RunDirBusy
from stampede.train import distributed
from stampede.train.trainer import Trainer


def train(cfg: Config, run_dir: Path) -> int | None:
    """Train in ``run_dir`` (rank 0's, in a distributed run) until ``cfg.total_frames``; return
    the signal (Ctrl-C, SIGTERM, SIGUSR2) that stopped it before then, if one did."""
    rank = distributed.setup(cfg.torch_device.type)
    try:
        with _claimed(run_dir, rank) as run_dir:
            return Trainer(cfg, run_dir, rank).train()
    finally:
        distributed.teardown()


@contextlib.contextmanager
def _claimed(run_dir: Path, rank: distributed.Rank) -> Iterator[Path]:
    """Rank 0's run directory, locked by rank 0 for the ``with`` block. The other ranks share
    rank 0's directory (under torchrun each resolves its own timestamped one) and learn of a
    refusal from rank 0, instead of waiting for it at the first collective."""
    with contextlib.ExitStack() as held:
        refusal = None
        if rank.is_main:
            try:
                held.enter_context(run_lock.hold(run_dir))
            except RunDirBusy as busy:
                refusal = str(busy)
        if rank.distributed:
            run_dir, refusal = distributed.broadcast_object((run_dir, refusal))
        if refusal is not None:
            raise RunDirBusy(refusal)
        yield run_dir

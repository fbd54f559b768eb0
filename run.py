"""Train or evaluate an IMPALA agent: `python run.py env=breakout model=resnet`.

`mode=train` (the default) trains in Hydra's run directory and returns the run's `objective` (a
sweeper such as Optuna's reads it); `mode=eval checkpoint=<run dir or
file>` evaluates a stored policy. Bad input (a config, a checkpoint, a busy run directory) exits 2
with one line on stderr; a run that fails (actors keep failing, updates keep going non-finite)
logs why and exits 1. Ctrl-C or SIGTERM stops a run after its current update with a checkpoint
(exit 0); in a multirun it also stops the sweep (exit 130 or 143), which the same command resumes.
"""

import logging
import signal
import sys
from pathlib import Path

import hydra

from stampede.cli import check_command_line
from stampede.config.compose import register_configs, to_config
from stampede.errors import RunFailure, UserError

register_configs()


@hydra.main(config_path="conf", config_name="config", version_base="1.3")
def main(dict_config) -> float | None:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from stampede.eval.run import evaluate_checkpoint
    from stampede.search import objective
    from stampede.train.launch import train

    cfg = to_config(dict_config)
    try:
        if cfg.mode == "eval":
            evaluate_checkpoint(cfg)
            return None
        hydra_cfg = HydraConfig.get()
        run_dir = Path(hydra_cfg.runtime.output_dir)
        stopped = train(cfg, run_dir)
        if stopped is not None:  # cut short: no objective, a sweep's next job does not start
            _stopped(stopped, hydra_cfg.mode == RunMode.MULTIRUN)
            return None
        value = objective.value(cfg.search_objective, run_dir)  # what a sweep reads
        logging.getLogger("stampede").info("objective %s = %.4g", cfg.objective, value)
        return value
    except RunFailure as failure:
        logging.getLogger("stampede").error("%s", failure)
        raise SystemExit(1) from None
    except UserError as error:  # one line
        print(f"stampede: {error}", file=sys.stderr)
        raise SystemExit(2) from None


def _stopped(signum: int, multirun: bool) -> None:
    """A run stopped by a signal before ``total_frames``, or during its final evaluation (its
    checkpoint is written; the same command goes on from there). In a
    multirun, Ctrl-C and SIGTERM end the process (exit 128 + signal, the shell's convention) so
    that the sweep stops there instead of starting its next job; a sweeper records no objective.
    SIGUSR2 is a preemption, which submitit's own handler has already requeued."""
    name = signal.Signals(signum).name
    logging.getLogger("stampede").warning(
        "stopped by %s before the end of the run (total_frames, then its final evaluation); "
        "the same command resumes it",
        name,
    )
    if multirun and signum in (signal.SIGINT, signal.SIGTERM):
        raise SystemExit(128 + signum)


if __name__ == "__main__":
    check_command_line(sys.argv[1:], Path(__file__).parent / "conf")
    main()

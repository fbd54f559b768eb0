"""Train or evaluate an IMPALA agent: `python run.py env=breakout model=resnet`.

`mode=train` (the default) trains in Hydra's run directory and returns the run's `objective` (a
sweeper such as Optuna's reads it); `mode=eval checkpoint=<run dir or
file>` evaluates a stored policy. Bad input (a config, a checkpoint, a busy run directory) exits 2
with one line on stderr; a run that fails (actors keep failing, updates keep going non-finite)
logs why and exits 1.
"""

import logging
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

    from stampede.eval.run import evaluate_checkpoint
    from stampede.search import objective
    from stampede.train.launch import train

    cfg = to_config(dict_config)
    try:
        if cfg.mode == "eval":
            evaluate_checkpoint(cfg)
            return None
        run_dir = Path(HydraConfig.get().runtime.output_dir)
        train(cfg, run_dir)
        value = objective.value(cfg.search_objective, run_dir)  # what a sweep reads
        logging.getLogger("stampede").info("objective %s = %.4g", cfg.objective, value)
        return value
    except RunFailure as failure:
        logging.getLogger("stampede").error("%s", failure)
        raise SystemExit(1) from None
    except UserError as error:  # one line
        print(f"stampede: {error}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    check_command_line(sys.argv[1:], Path(__file__).parent / "conf")
    main()

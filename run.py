"""Train or evaluate an IMPALA agent: `python run.py env=breakout model=resnet`."""

import sys
from pathlib import Path

import hydra

from stampede.config import check_command_line, register_configs, to_config

register_configs()


@hydra.main(config_path="conf", config_name="config", version_base="1.3")
def main(dict_config) -> None:
    from stampede.runner import main as run

    run(to_config(dict_config))


if __name__ == "__main__":
    check_command_line(sys.argv[1:], Path(__file__).parent / "conf")
    main()

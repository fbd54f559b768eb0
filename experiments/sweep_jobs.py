"""List the jobs a sweep would launch, without launching anything (a dry run of --multirun).

    python experiments/sweep_jobs.py +experiment=atari57            # 171 lines: game and seed
    python experiments/sweep_jobs.py +experiment=atari5 seed=1,2    # 10: the command line wins

It composes the config as `run.py --multirun` would, resolves the experiment's
``hydra.sweeper.params`` (``${stampede.games:...}`` included) and expands them with the
command line through Hydra's basic sweeper, one line of overrides per job.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

CONF = Path(__file__).resolve().parents[1] / "conf"


def sweep_jobs(overrides: Sequence[str], conf_dir: Path = CONF) -> list[list[str]]:
    """The override list of every job of `run.py --multirun <overrides>`, in launch order."""
    from hydra import compose, initialize_config_dir
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    from stampede.config.compose import register_configs

    register_configs()
    parser = OverridesParser.create()
    # Compose with the first value of each command-line sweep: only the sweeper params matter.
    fixed = [
        f"{o.get_key_element()}={next(iter(o.sweep_string_iterator()))}"
        if o.is_sweep_override()
        else o.input_line
        for o in parser.parse_overrides(list(overrides))
    ]
    with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
        cfg = compose("config", overrides=fixed, return_hydra_config=True)
    params = cfg.hydra.sweeper.params
    resolved = OmegaConf.to_container(params, resolve=True) if params is not None else {}
    assert isinstance(resolved, dict)
    lines = [f"{key}={value}" for key, value in resolved.items()] + list(overrides)
    (jobs,) = BasicSweeper.split_arguments(parser.parse_overrides(lines), None)
    return [list(job) for job in jobs]


if __name__ == "__main__":
    jobs = sweep_jobs(sys.argv[1:])
    for number, job in enumerate(jobs):
        print(f"#{number}: {' '.join(job)}")
    print(f"{len(jobs)} jobs", file=sys.stderr)

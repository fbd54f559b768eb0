"""The PBT controller as a Hydra sweeper (the decisions and the state: ``stampede.search.pbt``).

Each round launches every member through the configured launcher, as one job with the command
line's overrides plus the member's: ``seed`` (+ member index), ``total_frames`` (the round's end),
the evolving values, and ``hydra.sweep.subdir=member_<k>``, its run directory for the whole run.
So the same command runs the members one after another in this process (``infra=local``), as local
processes (``infra=submitit_local``) or as SLURM jobs (``infra=slurm``); a member's job resumes
from its checkpoint at each round, and a preempted SLURM job requeues itself and resumes while the
launcher waits for its result.
"""

from __future__ import annotations

import copy
import functools
import json
import logging
import math
import sys
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import IntervalSweep
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict

from stampede.config.checks import ConfigError
from stampede.config.compose import to_config
from stampede.config.schema import Config
from stampede.rundir.sinks import WandbSink
from stampede.search import objective, pbt

log = logging.getLogger(__name__)


class PBTSweeper(Sweeper):
    def __init__(
        self,
        members: int,
        interval_frames: int,
        fraction: float,
        perturb: list[float],
        resample_probability: float,
        params: DictConfig | None,
    ) -> None:
        self.settings = functools.partial(
            pbt.Settings,
            members=members,
            interval_frames=interval_frames,
            fraction=fraction,
            perturb=tuple(perturb),
            resample_probability=resample_probability,
        )
        self.params = {str(k): str(v) for k, v in (params or {}).items()}

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        from hydra.core.plugins import Plugins

        self.hydra_config = config
        self.hydra_context = hydra_context
        self.member_launcher = Plugins.instance().instantiate_launcher(
            config=config, hydra_context=hydra_context, task_function=task_function
        )

    def sweep(self, arguments: list[str]) -> Any:
        sweep_dir = Path(self.hydra_config.hydra.sweep.dir)
        try:  # bad settings: one line and exit 2, before any member starts
            cfg = _task_config(self.hydra_config)
            bounds = {name: _bound(name, text) for name, text in self.params.items()}
            settings = self.settings(total_frames=cfg.total_frames, seed=cfg.seed, params=bounds)
            _check(cfg, settings, arguments)
            population = pbt.Population.load_or_start(sweep_dir, settings)
        except ConfigError as error:
            print(f"stampede: config error: {error}", file=sys.stderr)
            raise SystemExit(2) from None
        while population.round < settings.rounds:
            if population.pending is None:  # else: the round ran, its copies did not all finish
                self._run_round(cfg, population, settings, arguments, sweep_dir)
            _finish_round(population, settings, sweep_dir)
            _log_round(cfg, sweep_dir, population)
        best = max(range(settings.members), key=lambda k: pbt.rank_key(_score(population, k)))
        log.info(
            "PBT done: best member %s (recent %s %.4g) with %s; lineage in %s",
            pbt.member_name(best), cfg.objective, _score(population, best),
            population.params[best], sweep_dir / pbt.STATE_DIR / pbt.LINEAGE_FILE,
        )  # fmt: skip
        return population.lineage

    def _run_round(
        self,
        cfg: Config,
        population: pbt.Population,
        settings: pbt.Settings,
        arguments: list[str],
        sweep_dir: Path,
    ) -> None:
        """Train every member to the round's frames, score them, decide the exploits, and
        record the decisions (``pending``) before any checkpoint is copied."""
        r = population.round
        fixed = [a for a in arguments if _key(a) not in {"seed", "total_frames"}]
        if r + 1 < settings.rounds and cfg.search_objective.source != "eval":
            # eval.at_end evaluates the members when the population finishes, not every round
            fixed = [a for a in fixed if _key(a) != "eval.at_end"] + ["eval.at_end=false"]
        jobs = [
            _member_overrides(fixed, cfg.seed, k, population, settings)
            for k in range(settings.members)
        ]
        log.info(
            "PBT round %d/%d: every member trains to %d frames",
            r + 1,
            settings.rounds,
            settings.round_frames(r),
        )
        for result in self.member_launcher.launch(jobs, initial_job_idx=r * settings.members):
            _ = result.return_value  # a failed member stops the controller, with its error
        dirs = [pbt.member_dir(sweep_dir, k) for k in range(settings.members)]
        starts = population.start_frames()
        wanted = cfg.search_objective
        scores = [objective.value(wanted, d, f) for d, f in zip(dirs, starts, strict=True)]
        for k, score in enumerate(scores):
            if math.isnan(score):
                log.warning(
                    "PBT: %s has no %s for round %d (no game finished in it): ranked last; "
                    "a longer hydra.sweeper.interval_frames lets every member finish games",
                    pbt.member_name(k), cfg.objective, r + 1,
                )  # fmt: skip
        last = r + 1 == settings.rounds
        exploits = [] if last else pbt.decide(scores, population.params, settings, r)
        population.pending = {"scores": scores, "exploits": exploits}
        population.save(sweep_dir)


def _finish_round(population: pbt.Population, settings: pbt.Settings, sweep_dir: Path) -> None:
    """Copy the decided checkpoints, write the round's lineage, move to the next round."""
    decided = population.pending
    assert decided is not None
    r, scores = population.round, decided["scores"]
    copies = {e["member"]: e for e in decided["exploits"]}
    rows = []
    for k in range(settings.members):
        row: dict[str, Any] = {
            "round": r,
            "frames": pbt.trained_frames(pbt.member_dir(sweep_dir, k)),
            "member": k,
            "score": scores[k],
            "params": population.params[k],
            "copied_from": None,
        }
        if k in copies:
            donor = copies[k]["donor"]
            copied = pbt.copy_checkpoint(
                pbt.member_dir(sweep_dir, donor), pbt.member_dir(sweep_dir, k)
            )
            row |= {
                "copied_from": donor,
                "donor_score": scores[donor],
                "donor_params": population.params[donor],
                "new_params": copies[k]["params"],
                **copied,
            }
            log.info(
                "PBT: %s copies %s (score %.4g < %.4g), continues with %s",
                pbt.member_name(k),
                pbt.member_name(donor),
                scores[k],
                scores[donor],
                copies[k]["params"],
            )
        rows.append(row)
    for k, exploit in copies.items():
        population.params[k] = exploit["params"]
    population.lineage.extend(rows)
    population.pending = None
    population.round += 1
    population.save(sweep_dir)


def _score(population: pbt.Population, member: int) -> float:
    """The member's score in the last round it was ranked."""
    scores = [row["score"] for row in population.lineage if row["member"] == member]
    return scores[-1] if scores else math.nan


def _member_overrides(
    fixed: list[str], seed: int, member: int, population: pbt.Population, settings: pbt.Settings
) -> list[str]:
    values = [f"{name}={value!r}" for name, value in population.params[member].items()]
    return [
        *fixed,
        f"seed={seed + member}",
        f"total_frames={settings.round_frames(population.round)}",
        *values,
        f"hydra.sweep.subdir={pbt.member_name(member)}",
    ]


def _task_config(config: DictConfig) -> Config:
    """The run's typed config (every member's, but for its own values): checks it once here."""
    task = copy.deepcopy(config)
    with open_dict(task):
        del task["hydra"]
    return to_config(task)


def _check(cfg: Config, settings: pbt.Settings, arguments: list[str]) -> None:
    """Refuse what would make the population meaningless, naming the key."""
    if cfg.optim.anneal_lr:
        raise ConfigError(
            "optim.anneal_lr=true: under PBT each round is a run of its own length, so the "
            "schedule would restart every round; set optim.anneal_lr=false (PBT evolves optim.lr)"
        )
    keys = OmegaConf.structured(cfg)
    for name in settings.params:
        if OmegaConf.select(keys, name, default=None) is None:
            raise ConfigError(f"hydra.sweeper.params.{name}: no such config key to evolve")
        if any(_key(a) == name for a in arguments):
            raise ConfigError(
                f"{name} is evolved by PBT (hydra.sweeper.params): drop {name}=... from the "
                "command line"
            )


def _key(argument: str) -> str:
    return argument.split("=", 1)[0].lstrip("+~")


def _bound(name: str, text: str) -> pbt.Bound:
    """``interval(a, b)`` or ``tag(log, interval(a, b))``, parsed as Hydra parses sweeps."""
    value = OverridesParser.create().parse_override(f"{name}={text}").value()
    if not isinstance(value, IntervalSweep) or value.start is None or value.end is None:
        raise ConfigError(
            f"hydra.sweeper.params.{name}={text!r}: expected interval(low, high) or "
            "tag(log, interval(low, high))"
        )
    return pbt.Bound(float(value.start), float(value.end), "log" in value.tags)


def _log_round(cfg: Config, sweep_dir: Path, population: pbt.Population) -> None:
    """The round just finished to the controller's own W&B run (group: the members'): each
    member's score and values, the number of exploits and the lineage table so far. The run is
    opened for the round only: members that train in this process open theirs in between."""
    w = cfg.logger.wandb
    if w.mode == "disabled":
        return
    import wandb

    rows = [row for row in population.lineage if row["round"] == population.round - 1]
    metrics: dict[str, Any] = {"env/frames": rows[0]["frames"], "pbt/round": rows[0]["round"]}
    metrics["pbt/exploits"] = sum(row["copied_from"] is not None for row in rows)
    for row in rows:
        name = pbt.member_name(row["member"])
        metrics[f"pbt/{name}/score"] = row["score"]
        metrics |= {f"pbt/{name}/{k}": v for k, v in row["params"].items()}
    columns = ["round", "frames", "member", "score", "copied_from", "params", "new_params"]
    data = [[_cell(row.get(c)) for c in columns] for row in population.lineage]
    directory = sweep_dir / pbt.STATE_DIR
    tags = [*w.tags, "pbt"]
    group = w.group or cfg.name
    sink = WandbSink(
        directory, w.mode, w.project, w.entity, group, tags, f"{cfg.name}/pbt", population.settings
    )
    try:
        sink.run.log(
            {**metrics, "pbt/lineage": wandb.Table(columns=list[str | int](columns), data=data)}
        )
    finally:
        sink.close()


def _cell(value: Any) -> Any:
    """A lineage value as a W&B table cell (a dict of values as its JSON text)."""
    return json.dumps(value) if isinstance(value, dict) else value

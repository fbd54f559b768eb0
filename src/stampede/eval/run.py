"""Evaluate a run with its config: the learner's policy during and after training
(``evaluate_run``), or a stored checkpoint (``evaluate_checkpoint``: ``python run.py mode=eval
checkpoint=<run dir or file> eval.episodes=10 eval.video=true``).

The games are played by ``stampede.eval.protocol`` with the ``cfg.eval`` settings; the results are
written by ``stampede.eval.results``. A checkpoint is evaluated with the training config stored in
it, so env and network need not be repeated on the command line. Every way in which a checkpoint
or the eval settings cannot be used raises ``CheckpointError`` or ``EvalError`` with a one-line
message naming the value and what was expected; ``run.py`` prints it and exits 2.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stampede.config.models import model_factory
from stampede.config.runtime import usable_cpus
from stampede.config.schema import Config, EvalConfig
from stampede.envs import EnvError, env_spec
from stampede.eval.policy import EvalError
from stampede.eval.protocol import Evaluation, eval_seed, evaluate
from stampede.eval.results import (
    VIDEO_KEY,
    EvalRecord,
    eval_metrics,
    format_result,
    read_eval,
    write_eval,
)
from stampede.eval.video import VIDEO_DIRNAME
from stampede.models import ActorCritic
from stampede.rundir import checkpoint
from stampede.rundir.checkpoint import CheckpointError
from stampede.rundir.checkpoint_state import check_fits, spec_fingerprint, stored_config
from stampede.rundir.files import EVAL_FILE, MULTITASK_EVAL_DIR

if TYPE_CHECKING:
    from stampede.rundir.sinks import MetricLogger

log = logging.getLogger("stampede")


def evaluate_run(
    model: ActorCritic,
    cfg: Config,
    run_dir: Path,
    frames: int,
    checkpoint_path: str | None,
    logger: MetricLogger | None,
    should_stop: Callable[[], bool] | None = None,
    threads: int = 1,
) -> list[Evaluation]:
    """Evaluate ``model`` with the ``cfg.eval`` settings and write ``<run_dir>/eval.json``; one
    evaluation per game of a multi-task run (``env.games``), each in ``<run_dir>/eval/<game>/``.

    What the runner calls when training ends (``cfg.eval.at_end``) and every
    ``cfg.eval.every_frames``. eval.json holds the latest evaluation, in the format
    ``stampede.report.report`` reads; every evaluation is also appended to ``eval_history.jsonl``.
    With ``cfg.eval.video`` the mp4 goes to ``<run_dir>/videos/<game>_<frames>.mp4``. The
    ``eval/*`` metrics (``eval/<game>/*`` for a multi-task run) and the video go to every sink
    of ``logger`` at ``env/frames``. ``threads``: for torch and the env vector while it plays
    (`evaluate`). ``should_stop`` (asked before every step) abandons the evaluation with
    `EvalStopped`; the games already evaluated keep their eval.json.
    """
    return [
        _evaluate_game(
            model, cfg, task, Path(run_dir), frames, checkpoint_path, logger, should_stop, threads
        )
        for task in range(len(cfg.env.tasks))
    ]


def evaluated_at(run_dir: Path, cfg: Config, frames: int) -> bool:
    """Whether every game of the run already has an evaluation of the policy at ``frames``
    with the ``cfg.eval`` protocol (episodes, greedy or not) in its eval.json: a finished run
    started again (a relaunched sweep) need not play its final evaluation twice
    (`stampede.train.trainer.Trainer.train`)."""
    for task in range(len(cfg.env.tasks)):
        try:
            record = read_eval(results_dir(run_dir, cfg, task) / EVAL_FILE)
        except (OSError, ValueError, TypeError, KeyError):
            return False
        if (record.frames, record.episodes, record.greedy) != (
            frames,
            cfg.eval.episodes,
            cfg.eval.greedy,
        ):
            return False
    return True


def results_dir(run_dir: Path, cfg: Config, task: int) -> Path:
    """Where the evaluation of game ``task`` of the run goes: the run directory, or
    ``<run_dir>/eval/<game>`` for a multi-task run."""
    if cfg.env.games:
        return Path(run_dir) / MULTITASK_EVAL_DIR / cfg.env.tasks[task]
    return Path(run_dir)


def _evaluate_game(
    model: ActorCritic,
    cfg: Config,
    task: int,
    run_dir: Path,
    frames: int,
    checkpoint_path: str | None,
    logger: MetricLogger | None,
    should_stop: Callable[[], bool] | None,
    threads: int,
) -> Evaluation:
    """``evaluate_run`` for one game (task) of the run."""
    e, game = cfg.eval, cfg.env.tasks[task]
    log.info(
        "evaluating %s at %d frames: %d games on %d envs (%s actions, threads=%d)",
        game,
        frames,
        e.episodes,
        min(e.num_envs, e.episodes),
        "greedy" if e.greedy else "sampled",
        threads,
    )
    evaluation = evaluate(
        model,
        dataclasses.asdict(cfg.env.task(task)),
        episodes=e.episodes,
        num_envs=e.num_envs,
        seed=eval_seed(cfg.seed),
        greedy=e.greedy,
        reward_clip=cfg.vtrace.reward_clip,
        device=next(model.parameters()).device,
        video_dir=Path(run_dir) / VIDEO_DIRNAME if e.video else None,
        video_name=f"{game}_{frames:012d}",
        task=task,
        should_stop=should_stop,
        threads=threads,
    )
    record = EvalRecord.of(evaluation, cfg, frames, checkpoint_path, task)
    results = results_dir(run_dir, cfg, task)
    try:
        write_eval(results, record, evaluation)
    except OSError as error:
        raise EvalError(
            f"cannot write the evaluation results ({EVAL_FILE}) to {results}: "
            f"{error.strerror or error}; evaluation needs a writable run directory"
        ) from None
    if logger is not None:
        videos = {VIDEO_KEY: evaluation.video} if evaluation.video is not None else {}
        logger.write(eval_metrics(evaluation, frames, game if cfg.env.games else None), videos)
    return evaluation


# ------------------------------------------------------------------------------ checkpoints


def evaluate_checkpoint(cfg: Config) -> list[Evaluation]:
    """``python run.py mode=eval checkpoint=<run dir or file>``: evaluate a stored policy.

    Loads the checkpoint (``weights_only``), rebuilds env and network from the training config
    stored in it (no need to repeat env=/model=), takes ``eval.*`` and ``device`` from ``cfg``,
    evaluates, prints the statistics and writes eval.json (and the mp4) into the checkpoint's run
    directory, where ``stampede-report`` and the notebooks find them (not into this eval job's
    own directory, which only gets Hydra's log: a second eval.json there would count twice).
    """
    assert cfg.checkpoint is not None  # Config checks this for mode=eval
    path = checkpoint.resolve(cfg.checkpoint).resolve()
    try:
        state = checkpoint.load_file(path)
    except OSError as error:
        raise CheckpointError(
            f"checkpoint={cfg.checkpoint!r}: cannot read {path}: {error.strerror or error}"
        ) from None
    train_cfg = training_config(state, path, eval_cfg=cfg.eval, device=cfg.device)
    try:
        spec = env_spec(**dataclasses.asdict(train_cfg.env))
    except EnvError as error:
        raise CheckpointError(f"{path}: its env cannot be made here: {error}") from None
    # Network and env come from the stored config; what that env gives here must still be what
    # the network was trained on.
    advice = (
        "it was trained on an env with other observations or actions than its stored env config "
        "gives here (another ale-py or gymnasium version?)"
    )
    check_fits(state, spec_fingerprint(spec), path, advice)
    tasks = len(train_cfg.env.tasks)
    model = model_factory(train_cfg.model, spec.obs_shape, spec.num_actions, tasks)()
    try:
        model.load_state_dict(state["model"])
    except (KeyError, RuntimeError) as error:
        detail = " ".join(str(error).split())  # torch lists the mismatches over several lines
        raise CheckpointError(f"{path}: cannot load the network: {detail}") from None
    model.to(train_cfg.torch_device)
    frames = int(state.get("frames", 0))
    run_dir = checkpoint_run_dir(path)
    evaluations = evaluate_run(
        model, train_cfg, run_dir, frames, str(path), logger=None, threads=usable_cpus()
    )
    for task, evaluation in enumerate(evaluations):
        print(format_result(evaluation, train_cfg, frames, path, task), flush=True)
        print(f"  results: {results_dir(run_dir, train_cfg, task) / EVAL_FILE}", flush=True)
    return evaluations


def checkpoint_run_dir(path: Path) -> Path:
    """The run directory a checkpoint file belongs to (the parent of its checkpoints/)."""
    path = Path(path).resolve()
    parent = path.parent
    return parent.parent if parent.name == checkpoint.CHECKPOINT_DIR else parent


def training_config(
    state: dict[str, Any], path: Path, *, eval_cfg: EvalConfig, device: str
) -> Config:
    """The validated training ``Config`` stored in a checkpoint, set to evaluate it with
    ``eval_cfg`` on ``device`` (``checkpoint_state.stored_config``)."""
    return stored_config(
        state, path, eval=eval_cfg, device=device, mode="eval", checkpoint=str(path)
    )

"""The training loop and its processes: one training run (one rank of it) in one run directory.

A ``Trainer`` builds the env spec, model and optimizer in this process first (a bad env id or
model fails in seconds), resumes from the run directory's newest checkpoint
(``stampede.rundir.checkpoint_state``), allocates the shared rollout buffers, starts the actor
processes, then learns from the batches they fill (``stampede.train.batch_feed``) until
``total_frames``. Ctrl-C or SIGTERM stops the actors and writes a final checkpoint; an actor's
exception stops the run with its traceback (``ActorFailure``), leaving a valid checkpoint.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import threading
import time
from pathlib import Path
from types import FrameType

import torch

from stampede.algo.popart import PopArt
from stampede.config.models import model_factory
from stampede.config.runtime import usable_cpus
from stampede.config.schema import Config
from stampede.envs import env_spec
from stampede.envs.settings import env_tasks
from stampede.models import ActorCritic
from stampede.rundir import checkpoint, checkpoint_state
from stampede.rundir.sinks import MetricLogger
from stampede.train import distributed, processes
from stampede.train.batch_feed import BatchFeed
from stampede.train.games import GameFrames
from stampede.train.learner import Learner
from stampede.train.pool import ActorPool
from stampede.train.timing import LEARNER_STAGES, fractions
from stampede.train.window import Window, run_logger

log = logging.getLogger("stampede")

_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR2)


class Trainer:
    """One training run in one run directory (one rank, in distributed runs)."""

    def __init__(self, cfg: Config, run_dir: Path, rank: distributed.Rank | None = None) -> None:
        self.cfg, self.run_dir = cfg, run_dir
        self.rank = rank or distributed.Rank()
        self.device = distributed.device_for(self.rank, cfg.torch_device)
        if cfg.runtime.deterministic and self.device.type == "cuda":
            # cuBLAS is deterministic only with a fixed workspace (set before its first use)
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.manual_seed(cfg.seed)  # identical initial parameters on every rank
        self.spec = env_spec(**dataclasses.asdict(cfg.env))
        self.games = tuple(cfg.env.games)  # a multi-task run's games in task order; else ()
        tasks = len(cfg.env.tasks)  # the games of a multi-task run; else the one game
        r = cfg.runtime
        slots = r.actors * r.envs_per_actor * self.rank.world_size
        # The task of every env slot of the run (all ranks); fails here if a game gets none.
        self.slot_tasks = env_tasks(tasks, slots) if self.games else None
        self.make_model = model_factory(
            cfg.model, self.spec.obs_shape, self.spec.num_actions, tasks
        )
        self.model: ActorCritic = self.make_model().to(self.device)
        reduce = distributed.average_gradients if self.rank.distributed else None
        popart = None
        if cfg.vtrace.popart:
            sum_ranks = distributed.all_reduce_sum if self.rank.distributed else None
            popart = PopArt(tasks, cfg.vtrace.popart_step_size, all_reduce=sum_ranks)
            popart.to(self.device)
        self.learner = Learner(
            self.model,
            cfg.vtrace,
            cfg.optim,
            cfg.total_frames,
            reduce_gradients=reduce,
            popart=popart,
            precision=cfg.runtime.resolved_precision(self.device),
            compile=cfg.runtime.compile,
            cuda_graph=cfg.runtime.cuda_graph,
            max_nonfinite_updates=cfg.runtime.max_nonfinite_updates,
        )
        self._loop_started = time.monotonic()
        self.stop_signal: int | None = None
        self._stopping = threading.Event()  # set once the loop ends: the batch feed returns
        if self.rank.is_main:
            checkpoint_state.prepare(run_dir, cfg, self.model)
        self.progress = checkpoint_state.resume(
            run_dir, cfg, self.spec, self.model, self.learner.optimizer, popart
        )
        if self.rank.distributed:
            distributed.broadcast_model(self.model)
        self.game_frames = GameFrames(
            self.games,
            self.progress.task_frames,
            r.unroll_length * self.spec.frames_per_step,
            distributed.all_reduce_sum if self.rank.distributed else None,
        )

    @property
    def frames_per_update(self) -> int:
        """Environment frames consumed by one update of all ranks together."""
        r = self.cfg.runtime
        return r.unroll_length * r.batch_size * self.spec.frames_per_step * self.rank.world_size

    @property
    def elapsed_s(self) -> float:
        """Training wall time so far, summed over the run's resumes."""
        return self.progress.train_s + time.monotonic() - self._loop_started

    def save_checkpoint(self) -> Path | None:
        """Rank 0 writes the checkpoint (all ranks hold the same parameters)."""
        if not self.rank.is_main:
            return None
        progress = dataclasses.replace(
            self.progress, train_s=self.elapsed_s, task_frames=self.game_frames.frames
        )
        model, optimizer, popart = self.model, self.learner.optimizer, self.learner.popart
        return checkpoint_state.save(
            self.run_dir, self.cfg, self.spec, model, optimizer, progress, popart
        )

    # -------------------------------------------------------------------- processes

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        log.warning("received %s: stopping after this update", signal.Signals(signum).name)
        self.request_stop(signum)

    def request_stop(self, signum: int = signal.SIGTERM) -> None:
        """Finish the current update, write a checkpoint, stop the actors (thread-safe)."""
        self.stop_signal = signum
        self._stopping.set()

    def _start_actors(self) -> ActorPool:
        # The policy the actors (or the inference server) read: a copy of the learner's
        # parameters, published after each update. On CPU it lives in shared memory; on a GPU it
        # stays on the device (CUDA IPC).
        self.published = self.make_model().to(self.device)
        self.published.load_state_dict(self.model.state_dict())
        self.published.eval()
        if self.device.type == "cpu":
            self.published.share_memory()
        self.buffers = processes.rollout_buffers(self.cfg.runtime, self.spec, self.model)
        return processes.start_pool(
            self.cfg,
            self.spec,
            self.published,
            self.buffers,
            self.device,
            self.rank.rank,
            self.progress,
            self.slot_tasks,
        )

    # ------------------------------------------------------------------------ train

    def train(self) -> int | None:
        """Train to ``total_frames`` and evaluate (``eval.at_end``); return the signal that
        stopped it before the end of both, if one did (a resumed run does what is left)."""
        cfg, r = self.cfg, self.cfg.runtime
        if self._finished():
            log.info(
                "the run in %s is finished (%d of %d frames%s): nothing left to do",
                self.run_dir,
                self.progress.frames,
                cfg.total_frames,
                ", its evaluation done" if cfg.eval.at_end else "",
            )
            return None
        if self.progress.torch_rng is None:
            torch.manual_seed(cfg.seed)
        else:  # a resumed run draws what it would have drawn had it not stopped
            torch.set_rng_state(self.progress.torch_rng)
        torch.set_num_threads(r.learner_torch_threads)
        torch.use_deterministic_algorithms(r.deterministic)
        previous = {s: signal.signal(s, self._on_signal) for s in _STOP_SIGNALS}
        logger = run_logger(cfg, self.run_dir, self.rank.is_main, self.progress.frames)
        slow = r.precision_warning(self.device)
        if slow is not None:
            log.warning("%s", slow)
        pool = self._start_actors()
        log.info(
            "training %s with %s on %s, rank %d/%d, run dir %s",
            cfg.env.name,
            cfg.model._target_.rsplit(".", 1)[-1],
            self.device,
            self.rank.rank,
            self.rank.world_size,
            self.run_dir,
        )
        log.info("layout: %s", processes.layout(r, self.device))
        feed = BatchFeed(
            pool, self.buffers, r.slots_per_batch, self.device, r.prefetch, self._stopping
        )
        feed.start()
        completed = False
        try:
            self._loop(pool, feed, logger)
            completed = self.progress.frames >= cfg.total_frames
        finally:
            feed.stop()
            path = self.save_checkpoint()
            pool.stop()
            try:  # the final evaluation logs its metrics, so it runs before the logger closes
                if completed and cfg.eval.at_end:
                    # The actors have stopped: evaluation has the CPUs to itself.
                    completed = self._evaluate(path, logger, usable_cpus())
            finally:
                logger.close()
                for s, handler in previous.items():
                    signal.signal(s, handler)
        log.info(
            "rank %d/%d done: updates=%d frames=%d parameter_digest=%s",
            self.rank.rank,
            self.rank.world_size,
            self.progress.updates,
            self.progress.frames,
            checkpoint.content_digest(list(self.model.parameters())),  # equal across ranks
        )
        requeue = previous[signal.SIGUSR2]
        if self.stop_signal == signal.SIGUSR2 and callable(requeue):
            # Under submitit this is its preemption/time-limit handler: it requeues the job,
            # which resumes from the checkpoint just written in this same run directory.
            log.info("handing SIGUSR2 to the job's own handler (requeue)")
            requeue(signal.SIGUSR2, None)
        return None if completed else self.stop_signal

    def _finished(self) -> bool:
        """Whether the run trained its ``total_frames`` already and, with ``eval.at_end``, has its
        final evaluation in eval.json: a finished run started again (a relaunched sweep or queue)
        starts no actor and writes no line to its logs. The same answer on every rank."""
        from stampede.eval.run import evaluated_at

        cfg, frames = self.cfg, self.progress.frames
        if frames < cfg.total_frames:  # every rank resumed the same checkpoint: the same answer
            return False
        pending = (
            cfg.eval.at_end and self.rank.is_main and not evaluated_at(self.run_dir, cfg, frames)
        )
        if self.rank.distributed:  # rank 0 alone knows whether its evaluation is pending
            pending = distributed.any_rank(pending, self.device)
        return not pending

    def _loop(self, pool: ActorPool, feed: BatchFeed, logger: MetricLogger) -> None:
        cfg, progress = self.cfg, self.progress
        clock = self.learner.clock
        clock.lap()  # the time budget starts with the loop
        self._loop_started = time.monotonic()
        scale = (self.spec.frames_per_step, self.rank.world_size, self.games)
        window = Window(progress.frames, *scale)
        last_checkpoint = time.monotonic()
        while True:  # every statement of an iteration is inside a stage of the time budget
            with clock.stage("wait"):
                batch = None if self._should_stop() else feed.get()
            if batch is None:
                break
            metrics = self.learner.update(batch, progress.frames)
            with clock.stage("publish"):
                self._publish(pool)
                feed.request()
            with clock.stage("log"):
                self._after_update(batch, metrics, window, logger)
                if self._line_due(window):
                    logger.write(
                        window.line(progress.frames, progress.updates, self.game_frames.frames)
                        | (self.learner.popart.metrics(self.games) if self.learner.popart else {})
                        | pool.inference_metrics()
                        | {
                            "actors/restarts": pool.restarts,
                            "learner/skipped_updates": self.learner.skipped,
                            "time/elapsed_s": self.elapsed_s,
                        }
                        | fractions("time/learner", LEARNER_STAGES, *clock.lap())
                    )
                    window = Window(progress.frames, *scale)
                if time.monotonic() - last_checkpoint >= cfg.checkpointing.interval_s:
                    self.save_checkpoint()
                    last_checkpoint = time.monotonic()
                every, frames = cfg.eval.every_frames, progress.frames
                if every and frames // every > (frames - self.frames_per_update) // every:
                    self._evaluate(None, logger, cfg.runtime.actor_threads)

    def _line_due(self, window: Window) -> bool:
        """Whether the metric line of ``window`` is written now (the run's last update: always)."""
        cfg, progress = self.cfg, self.progress
        every = cfg.logger.interval_in_updates(cfg.runtime.deterministic)
        due = progress.updates % every == 0 if every else window.age_s >= cfg.logger.interval_s
        return due or progress.frames >= cfg.total_frames

    def _after_update(
        self,
        batch: dict[str, torch.Tensor],
        metrics: dict[str, float],
        window: Window,
        logger: MetricLogger,
    ) -> None:
        """Count the update and add it to the window."""
        self.progress.frames += self.frames_per_update
        self.progress.updates += 1
        if self.games:
            self.game_frames.add(batch["task"][0])  # [T + 1, B] -> [B]: one task a trajectory
        lag = self.progress.updates - 1 - batch["policy_version"].double().mean()
        metrics["learner/policy_lag"] = float(lag)
        window.add(metrics, batch)
        returns, lengths, tasks = window.new_episodes
        games = self.game_frames.of(tasks) if self.games else None
        logger.write_episodes(self.progress.frames, self.elapsed_s, returns, lengths, games)

    def _evaluate(self, path: Path | None, logger: MetricLogger, threads: int) -> bool:
        """Evaluate the learner's policy with ``cfg.eval`` (rank 0) on ``threads`` threads:
        eval.json in the run dir, ``eval/*`` to every sink of ``logger``. False where a stop
        signal came first: the evaluation is abandoned, to be played when the run resumes."""
        if not self.rank.is_main:
            return True
        from stampede.eval.protocol import EvalStopped
        from stampede.eval.run import evaluate_run

        where, frames = str(path) if path else None, self.progress.frames
        try:
            evaluate_run(
                self.model,
                self.cfg,
                self.run_dir,
                frames,
                where,
                logger,
                should_stop=lambda: self.stop_signal is not None,
                threads=threads,
            )
        except EvalStopped:
            assert self.stop_signal is not None
            log.warning(
                "evaluation at %d frames abandoned (%s): none of its games is reported",
                frames,
                signal.Signals(self.stop_signal).name,
            )
            return False
        return True

    def _should_stop(self) -> bool:
        stop = self.progress.frames >= self.cfg.total_frames or self.stop_signal is not None
        if self.rank.distributed:  # all ranks must leave at the same update (gradients sync)
            stop = distributed.any_rank(stop, self.device)
        return stop

    def _publish(self, pool: ActorPool) -> None:
        """Copy the learner's parameters into the actors' policy and bump the version."""
        with torch.no_grad():
            for dst, src in zip(self.published.parameters(), self.model.parameters(), strict=True):
                dst.copy_(src)
        pool.set_version(self.progress.updates + 1)

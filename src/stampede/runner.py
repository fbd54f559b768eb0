"""The runner: owns processes, checkpoints, signals and shutdown.

Data path (DESIGN.md): build the env spec, model and optimizer in this process first (so a bad
env id or model fails in seconds), restore the newest checkpoint of the run directory, allocate
the shared rollout buffers, start the actor processes, then learn until ``total_frames``. Ctrl-C
or SIGTERM stops the actors, writes a final checkpoint and exits 0; an actor's exception is shown
with its traceback and the run exits non-zero, leaving a valid checkpoint.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import math
import queue
import signal
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np
import torch
import torch.multiprocessing as mp
from omegaconf import OmegaConf

from stampede import checkpoint, distributed
from stampede.actor import ActorSetup
from stampede.buffers import RolloutBuffers, rollout_spec
from stampede.config import Config, ConfigError, model_factory, usable_cpus
from stampede.envs import EnvSpec, env_spec
from stampede.learner import Learner
from stampede.logging import MetricLogger
from stampede.models import ActorCritic
from stampede.pool import ActorFailure, ActorPool
from stampede.timing import ACTOR_STAGES, LEARNER_STAGES, fractions

log = logging.getLogger("stampede")

CONFIG_FILE = "config.yaml"


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR2)
_STOPPED = "stopped"  # the batch thread's last item


class NumericalFailure(RuntimeError):
    """Too many consecutive updates had a non-finite loss or gradient."""


def main(cfg: Config) -> None:
    """Entry point behind ``run.py``: train or evaluate in Hydra's run directory."""
    from hydra.core.hydra_config import HydraConfig

    run_dir = Path(HydraConfig.get().runtime.output_dir)
    if cfg.mode == "eval":
        from stampede.evaluate import evaluate_checkpoint

        try:
            evaluate_checkpoint(cfg, run_dir)
        except (checkpoint.CheckpointError, ConfigError) as error:  # bad input: one line
            print(f"stampede: {error}", file=sys.stderr)
            raise SystemExit(2) from None
        return
    rank = distributed.setup(cfg.torch_device.type)
    try:
        if rank.distributed:  # under torchrun each rank resolves its own timestamped directory
            run_dir = distributed.broadcast_object(run_dir)
        Trainer(cfg, run_dir, rank).train()
    except (ActorFailure, NumericalFailure) as failure:
        log.error("%s", failure)
        raise SystemExit(1) from None
    except (checkpoint.CheckpointError, ConfigError) as error:  # bad input: one line, no trace
        print(f"stampede: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    finally:
        distributed.teardown()


def config_yaml(cfg: Config) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))


def fingerprint(cfg: Config, spec: EnvSpec) -> dict[str, Any]:
    """What a checkpoint must match to be resumed: the network and the environment it acts in."""
    return {
        "model": cfg.model._target_,
        "model_kwargs": repr(sorted(cfg.model.kwargs().items())),
        "env": cfg.env.name,
        "obs_shape": list(spec.obs_shape),
        "num_actions": spec.num_actions,
    }


def _actor_context() -> Any:
    """Actor processes fork from a server that has imported torch and the envs already, so a
    (re)started actor is up in a fraction of a second; the server itself never touches CUDA."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["stampede.actor"])
    return ctx


def parameter_digest(model: torch.nn.Module) -> str:
    """SHA-256 of all parameters' bytes: equal digests mean identical parameters (across ranks)."""
    sha = hashlib.sha256()
    for p in model.parameters():
        sha.update(p.detach().cpu().contiguous().numpy().tobytes())
    return sha.hexdigest()[:16]


class Trainer:
    """One training run in one run directory (one rank, in distributed runs)."""

    def __init__(self, cfg: Config, run_dir: Path, rank: distributed.Rank | None = None) -> None:
        self.cfg, self.run_dir = cfg, run_dir
        self.rank = rank or distributed.Rank()
        self.device = distributed.device_for(self.rank, cfg.torch_device)
        torch.manual_seed(cfg.seed)  # identical initial parameters on every rank
        self.spec = env_spec(**dataclasses.asdict(cfg.env))
        self.make_model = model_factory(cfg.model, self.spec.obs_shape, self.spec.num_actions)
        self.model: ActorCritic = self.make_model().to(self.device)
        reduce = distributed.average_gradients if self.rank.distributed else None
        self.learner = Learner(
            self.model,
            cfg.vtrace,
            cfg.optim,
            cfg.total_frames,
            reduce_gradients=reduce,
        )
        self.frames = self.updates = self.generation = 0
        self.train_s = 0.0  # seconds spent in the training loop, over all resumes
        self._torch_rng: torch.Tensor | None = None  # the learner's RNG state when resumed
        self._loop_started = time.monotonic()
        self.stop_signal: int | None = None
        self._stopping = threading.Event()  # set once the loop ends: the batch thread returns
        self._want_batch = threading.Semaphore(1)  # runtime.prefetch=false: gather on request
        if self.rank.is_main:
            # model + optimizer state (at most two buffers per parameter) + room for the rest
            model_bytes = sum(
                t.numel() * t.element_size() for t in self.model.state_dict().values()
            )
            checkpoint.check_writable(checkpoint.checkpoint_dir(run_dir), 3 * model_bytes + 2**20)
            (run_dir / CONFIG_FILE).write_text(config_yaml(cfg))
        self._restore()
        if self.rank.distributed:
            distributed.broadcast_model(self.model)

    # ------------------------------------------------------------------ checkpoints

    @property
    def frames_per_update(self) -> int:
        """Environment frames consumed by one update of all ranks together."""
        r = self.cfg.runtime
        return r.unroll_length * r.batch_size * self.spec.frames_per_step * self.rank.world_size

    def _state(self) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.learner.optimizer.state_dict(),
            "frames": self.frames,
            "updates": self.updates,
            "generation": self.generation,
            "train_s": self.elapsed_s,
            "torch_rng": torch.get_rng_state(),
            "config": config_yaml(self.cfg),
            "fingerprint": fingerprint(self.cfg, self.spec),
        }

    def save_checkpoint(self) -> Path | None:
        """Rank 0 writes the checkpoint (all ranks hold the same parameters)."""
        if not self.rank.is_main:
            return None
        path = checkpoint.save(
            checkpoint.checkpoint_dir(self.run_dir),
            self.frames,
            self._state(),
            keep=self.cfg.checkpointing.keep,
        )
        log.info("checkpoint %s (frames=%d, updates=%d)", path.name, self.frames, self.updates)
        return path

    def _restore(self) -> None:
        found = checkpoint.load_latest(checkpoint.checkpoint_dir(self.run_dir))
        if found is None:
            return
        path, state = found
        expected, written = fingerprint(self.cfg, self.spec), state.get("fingerprint") or {}
        if written != expected:
            diff = "; ".join(
                f"{k}: checkpoint {written.get(k)!r}, this run {v!r}"
                for k, v in expected.items()
                if written.get(k) != v
            )
            raise checkpoint.CheckpointError(
                f"{path} was written for another model or env ({diff}); resume with the same "
                f"config or use another run directory (hydra.run.dir=...)"
            )
        try:
            self.model.load_state_dict(state["model"])
            self.learner.optimizer.load_state_dict(state["optimizer"])
        except (KeyError, RuntimeError, ValueError) as error:
            raise checkpoint.CheckpointError(f"{path}: cannot restore: {error}") from None
        self.frames, self.updates = int(state["frames"]), int(state["updates"])
        self.generation = int(state["generation"]) + 1
        self.train_s = float(state.get("train_s", 0.0))  # absent in checkpoints before 0.2
        self._torch_rng = state["torch_rng"]  # train() continues this stream (minibatch draws)
        log.info("resumed from %s: frames=%d updates=%d", path, self.frames, self.updates)

    # -------------------------------------------------------------------- processes

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        log.warning("received %s: stopping after this update", signal.Signals(signum).name)
        self.request_stop(signum)

    def request_stop(self, signum: int = signal.SIGTERM) -> None:
        """Finish the current update, write a checkpoint, stop the actors (thread-safe)."""
        self.stop_signal = signum
        self._stopping.set()

    def _start_actors(self) -> ActorPool:
        cfg, r = self.cfg, self.cfg.runtime
        # The policy the actors read: a copy of the learner's parameters, published after each
        # update. On CPU it lives in shared memory; on a GPU it stays on the device (CUDA IPC).
        self.published = self.make_model().to(self.device)
        self.published.load_state_dict(self.model.state_dict())
        self.published.eval()
        if self.device.type == "cpu":
            self.published.share_memory()
        core = [tuple(t.shape) for t in self.model.initial_state(r.envs_per_actor)]
        spec = rollout_spec(self.spec, r.unroll_length, r.envs_per_actor, core)
        self.buffers = RolloutBuffers(spec, r.buffer_slots)
        env_kwargs = dataclasses.asdict(cfg.env)
        setups = [
            ActorSetup(
                actor_id=i,
                rank=self.rank.rank,
                generation=self.generation,
                seed=cfg.seed,
                num_envs=r.envs_per_actor,
                unroll_length=r.unroll_length,
                reward_clip=cfg.vtrace.reward_clip,
                env_kwargs=env_kwargs,
                device=str(self.device),
                threads=r.actor_threads,
            )
            for i in range(r.actors)
        ]
        pool = ActorPool(
            _actor_context(),
            setups,
            self.published,
            self.buffers,
            self.updates,
            max_restarts=r.max_actor_restarts,
            restart_window_s=r.actor_restart_window_s,
            timeout_s=r.actor_timeout_s,
        )
        pool.start()
        return pool

    # ---------------------------------------------------------------------- batches

    def _batches(self, pool: ActorPool, out: queue.Queue[Any]) -> None:
        """Batch thread: gather the next batch while the learner works on the current one, or,
        with ``runtime.prefetch: false``, only once the learner has published its last update
        (fresher data: a lower policy lag for a short wait)."""
        r = self.cfg.runtime
        stopping = self._stopping.is_set
        try:
            while not stopping():
                if not r.prefetch:
                    while not self._want_batch.acquire(timeout=0.5):
                        if stopping():
                            break
                indices = []
                for _ in range(r.slots_per_batch):
                    index = pool.next_full_slot(stopping)
                    if index is None:
                        break
                    indices.append(index)
                if len(indices) < r.slots_per_batch:
                    break
                batch = self.buffers.gather(indices, self.device)
                for index in indices:
                    pool.release(index)
                out.put(batch)
            out.put(_STOPPED)  # wakes the main loop if it is waiting for a batch
        except BaseException as error:  # handed to the main thread, which re-raises it
            out.put(error)

    # ------------------------------------------------------------------------ train

    def train(self) -> None:
        cfg = self.cfg
        if self._torch_rng is None:
            torch.manual_seed(cfg.seed)
        else:  # a resumed run draws what it would have drawn had it not stopped
            torch.set_rng_state(self._torch_rng)
        torch.set_num_threads(cfg.runtime.learner_threads or usable_cpus())
        previous = {s: signal.signal(s, self._on_signal) for s in _STOP_SIGNALS}
        logger = self._logger()
        pool = self._start_actors()
        log.info(
            "training %s with %s on %s: %d actors x %d envs, rank %d/%d, run dir %s",
            cfg.env.name,
            cfg.model._target_.rsplit(".", 1)[-1],
            self.device,
            cfg.runtime.actors,
            cfg.runtime.envs_per_actor,
            self.rank.rank,
            self.rank.world_size,
            self.run_dir,
        )
        batches: queue.Queue[Any] = queue.Queue(maxsize=1)
        threading.Thread(target=self._batches, args=(pool, batches), daemon=True).start()
        completed = False
        try:
            self._loop(pool, batches, logger)
            completed = self.frames >= cfg.total_frames
        finally:
            self._stopping.set()
            path = self.save_checkpoint()
            pool.stop()
            try:  # the final evaluation logs to W&B, so it runs before the logger closes
                if completed and cfg.eval.at_end:
                    self._evaluate(path)
            finally:
                logger.close()
                for s, handler in previous.items():
                    signal.signal(s, handler)
        log.info(
            "rank %d/%d done: updates=%d frames=%d parameter_digest=%s",
            self.rank.rank,
            self.rank.world_size,
            self.updates,
            self.frames,
            parameter_digest(self.model),
        )
        requeue = previous[signal.SIGUSR2]
        if self.stop_signal == signal.SIGUSR2 and callable(requeue):
            # Under submitit this is its preemption/time-limit handler: it requeues the job,
            # which resumes from the checkpoint just written in this same run directory.
            log.info("handing SIGUSR2 to the job's own handler (requeue)")
            requeue(signal.SIGUSR2, None)

    def _logger(self) -> MetricLogger:
        cfg, main_rank = self.cfg, self.rank.is_main
        w = cfg.logger.wandb
        return MetricLogger(
            self.run_dir,
            jsonl=cfg.logger.jsonl and main_rank,
            wandb_mode=w.mode if main_rank else "disabled",
            wandb_project=w.project,
            wandb_entity=w.entity,
            wandb_group=w.group or cfg.name,
            wandb_tags=list(w.tags),
            run_name=self.run_dir.name,
            config=OmegaConf.to_container(OmegaConf.structured(cfg)),  # type: ignore[arg-type]
            total_frames=cfg.total_frames,
            start_frames=self.frames,
            progress=cfg.logger.progress and main_rank,
        )

    def _loop(self, pool: ActorPool, batches: queue.Queue[Any], logger: MetricLogger) -> None:
        cfg = self.cfg
        clock = self.learner.clock
        clock.lap()  # the time budget starts with the loop
        self._loop_started = time.monotonic()
        window = _Window(self.frames)
        last_checkpoint = time.monotonic()
        while True:  # every statement of an iteration is inside a stage of the time budget
            with clock.stage("wait"):
                item: Any = _STOPPED if self._should_stop() else batches.get()
            if isinstance(item, BaseException):
                raise item
            if item is _STOPPED:
                break
            metrics = self.learner.update(item, self.frames)
            with clock.stage("publish"):
                self._publish(pool)
                if not cfg.runtime.prefetch:  # the batch thread waits for this request
                    self._want_batch.release()
            with clock.stage("log"):
                self._after_update(pool, item, metrics, window, logger)
                if window.age_s >= cfg.logger.interval_s or self.frames >= cfg.total_frames:
                    logger.write(
                        window.line(
                            self.frames,
                            self.updates,
                            self.spec.frames_per_step,
                            self.rank.world_size,
                        )
                        | {
                            "actors/restarts": pool.restarts,
                            "learner/skipped_updates": self.learner.skipped,
                            "time/elapsed_s": self.elapsed_s,
                        }
                        | fractions("time/learner", LEARNER_STAGES, *clock.lap())
                    )
                    window = _Window(self.frames)
                if time.monotonic() - last_checkpoint >= cfg.checkpointing.interval_s:
                    self.save_checkpoint()
                    last_checkpoint = time.monotonic()
                every = cfg.eval.every_frames
                if every and self.frames // every > (self.frames - self.frames_per_update) // every:
                    self._evaluate(None)

    def _after_update(
        self,
        pool: ActorPool,
        batch: dict[str, torch.Tensor],
        metrics: dict[str, float],
        window: _Window,
        logger: MetricLogger,
    ) -> None:
        """Count the update, stop on a run of non-finite updates, add it to the window."""
        self.frames += self.frames_per_update
        self.updates += 1
        if self.learner.consecutive_skips >= self.cfg.runtime.max_nonfinite_updates:
            raise NumericalFailure(
                f"{self.learner.consecutive_skips} consecutive updates were skipped because "
                f"{self.learner.last_nonfinite} (runtime.max_nonfinite_updates="
                f"{self.cfg.runtime.max_nonfinite_updates}); the checkpoint holds the last good "
                f"parameters"
            )
        metrics["learner/policy_lag"] = float(
            self.updates - 1 - batch["policy_version"].double().mean()
        )
        window.add(metrics, batch)
        logger.write_episodes(self.frames, self.elapsed_s, *window.new_episodes)

    @property
    def elapsed_s(self) -> float:
        """Training wall time so far, summed over the run's resumes."""
        return self.train_s + time.monotonic() - self._loop_started

    def _evaluate(self, path: Path | None) -> None:
        """Evaluate the learner's policy with ``cfg.eval`` (rank 0): eval.json in the run dir."""
        if self.rank.is_main:
            from stampede.evaluate import evaluate_run

            evaluate_run(
                self.model, self.cfg, self.run_dir, self.frames, str(path) if path else None
            )

    def _should_stop(self) -> bool:
        stop = self.frames >= self.cfg.total_frames or self.stop_signal is not None
        if self.rank.distributed:  # all ranks must leave at the same update (gradients sync)
            stop = distributed.any_rank(stop, self.device)
        return stop

    def _publish(self, pool: ActorPool) -> None:
        """Copy the learner's parameters into the actors' policy and bump the version."""
        with torch.no_grad():
            for dst, src in zip(self.published.parameters(), self.model.parameters(), strict=True):
                dst.copy_(src)
        pool.set_version(self.updates + 1)


# An update whose loss or gradient is not finite was skipped; its metrics stay out of the means.
_FINITE_KEYS = ("loss/pg", "loss/baseline", "loss/entropy", "learner/grad_norm")


class _Window:
    """Metrics of the updates since the last log line, averaged, and the games that ended."""

    def __init__(self, frames: int) -> None:
        self.started, self.frames = time.monotonic(), frames
        self.sums: dict[str, float] = defaultdict(float)
        self.counts: dict[str, int] = defaultdict(int)
        self.skipped = 0  # updates skipped for a non-finite loss or gradient in this interval
        self.actor_time = np.zeros(len(ACTOR_STAGES) + 1)  # seconds per stage, then wall
        self.returns: list[float] = []
        self.lengths: list[int] = []
        self.new_episodes: tuple[list[float], list[int]] = ([], [])

    @property
    def age_s(self) -> float:
        return time.monotonic() - self.started

    def add(self, metrics: dict[str, float], batch: dict[str, torch.Tensor]) -> None:
        """Add an update's metrics (those of a skipped, non-finite update only to the count of
        skipped ones, so one NaN does not blank the interval) and its finished games."""
        if all(math.isfinite(metrics[k]) for k in _FINITE_KEYS if k in metrics):
            for key, value in metrics.items():
                if math.isfinite(value):  # e.g. explained variance of targets that never vary
                    self.sums[key] += value
                    self.counts[key] += 1
        else:
            self.skipped += 1
        self.actor_time += batch["actor_time"].sum(0).numpy()  # [S, stages + 1] -> [stages + 1]
        # Step 0 of a slot repeats the last step of the previous one: count episodes from 1 on.
        ended = batch["episode_return"][1:].isfinite()
        returns = batch["episode_return"][1:][ended].tolist()
        lengths = batch["episode_length"][1:][ended].tolist()
        self.returns += returns
        self.lengths += lengths
        self.new_episodes = (returns, lengths)

    def line(
        self, frames: int, updates: int, frames_per_step: int, world_size: int
    ) -> dict[str, float | int]:
        fps = (frames - self.frames) / max(self.age_s, 1e-9)
        line: dict[str, float | int] = {k: v / self.counts[k] for k, v in self.sums.items()}
        line["learner/skipped_in_interval"] = self.skipped
        line |= {
            "env/frames": frames,
            "learner/updates": updates,
            "perf/fps": fps,
            "perf/sps": fps / frames_per_step,
            "perf/fps_per_rank": fps / world_size,
        }
        line |= fractions("time/actor", ACTOR_STAGES, self.actor_time[:-1], self.actor_time[-1])
        if self.returns:
            line["env/episode_return"] = sum(self.returns) / len(self.returns)
            line["env/episode_length"] = sum(self.lengths) / len(self.lengths)
            line["env/episodes"] = len(self.returns)
        return line

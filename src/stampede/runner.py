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
import queue
import signal
import threading
import time
from collections import defaultdict
from pathlib import Path
from types import FrameType
from typing import Any

import torch
import torch.multiprocessing as mp
from omegaconf import OmegaConf

from stampede import checkpoint, distributed
from stampede.actor import ActorSetup, run_actor
from stampede.buffers import RolloutBuffers, rollout_spec
from stampede.config import Config, model_factory
from stampede.envs import EnvSpec, env_spec
from stampede.learner import Learner
from stampede.logging import MetricLogger
from stampede.models import ActorCritic
from stampede.optim import build_optimizer

log = logging.getLogger("stampede")

CONFIG_FILE = "config.yaml"
_POLL_S = 0.5


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR2)


class ActorFailure(RuntimeError):
    """An actor process raised or died; the message carries its traceback or exit code."""


def main(cfg: Config) -> None:
    """Entry point behind ``run.py``: train or evaluate in Hydra's run directory."""
    from hydra.core.hydra_config import HydraConfig

    run_dir = Path(HydraConfig.get().runtime.output_dir)
    if cfg.mode == "eval":
        from stampede.evaluate import evaluate_checkpoint

        evaluate_checkpoint(cfg, run_dir)
        return
    rank = distributed.setup(cfg.torch_device.type)
    try:
        if rank.distributed:  # under torchrun each rank resolves its own timestamped directory
            run_dir = distributed.broadcast_object(run_dir)
        Trainer(cfg, run_dir, rank).train()
    except ActorFailure as failure:
        log.error("%s", failure)
        raise SystemExit(1) from None
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
        o = cfg.optim
        self.optimizer = build_optimizer(
            self.model.parameters(),
            o.name,
            o.lr,
            eps=o.eps,
            alpha=o.alpha,
            momentum=o.momentum,
            tf_style=o.tf_style,
            betas=o.betas,
            weight_decay=o.weight_decay,
        )
        reduce = distributed.average_gradients if self.rank.distributed else None
        self.learner = Learner(
            self.model,
            self.optimizer,
            cfg.vtrace,
            cfg.optim,
            cfg.total_frames,
            reduce_gradients=reduce,
        )
        self.frames = self.updates = self.generation = 0
        self.stop_signal: int | None = None
        if self.rank.is_main:
            run_dir.mkdir(parents=True, exist_ok=True)
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
            "optimizer": self.optimizer.state_dict(),
            "frames": self.frames,
            "updates": self.updates,
            "generation": self.generation,
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
        expected = fingerprint(self.cfg, self.spec)
        if state.get("fingerprint") != expected:
            raise checkpoint.CheckpointError(
                f"{path} does not fit this run: it was written for {state.get('fingerprint')}, "
                f"this run is {expected}; use another run directory (hydra.run.dir=...)"
            )
        try:
            self.model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
        except (KeyError, RuntimeError, ValueError) as error:
            raise checkpoint.CheckpointError(f"{path}: cannot restore: {error}") from None
        self.frames, self.updates = int(state["frames"]), int(state["updates"])
        self.generation = int(state["generation"]) + 1
        torch.set_rng_state(state["torch_rng"])
        log.info("resumed from %s: frames=%d updates=%d", path, self.frames, self.updates)

    # -------------------------------------------------------------------- processes

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        log.warning("received %s: stopping after this update", signal.Signals(signum).name)
        self.request_stop(signum)

    def request_stop(self, signum: int = signal.SIGTERM) -> None:
        """Finish the current update, write a checkpoint, stop the actors (thread-safe)."""
        self.stop_signal = signum

    def _start_actors(self) -> None:
        cfg, r = self.cfg, self.cfg.runtime
        ctx = mp.get_context("spawn")
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
        self.free_queue, self.full_queue, self.errors = ctx.Queue(), ctx.Queue(), ctx.Queue()
        self.version = ctx.Value("q", self.updates, lock=False)
        self.stop = ctx.Event()
        for index in range(self.buffers.num_slots):
            self.free_queue.put(index)
        env_kwargs = dataclasses.asdict(cfg.env)
        self.actors = []
        for actor_id in range(r.num_actors):
            setup = ActorSetup(
                actor_id=actor_id,
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
            process = ctx.Process(
                target=run_actor,
                name=f"actor-{actor_id}",
                daemon=True,
                args=(
                    setup,
                    self.published,
                    self.buffers,
                    self.free_queue,
                    self.full_queue,
                    self.version,
                    self.stop,
                    self.errors,
                ),
            )
            process.start()
            self.actors.append(process)

    def _check_actors(self) -> None:
        """Raise ActorFailure if an actor reported an exception or died."""
        try:
            actor_id, trace = self.errors.get_nowait()
        except queue.Empty:
            pass
        else:
            raise ActorFailure(f"actor {actor_id} failed:\n{trace}")
        for actor_id, process in enumerate(self.actors):
            if process.exitcode is not None:
                time.sleep(_POLL_S)  # give a dying actor's traceback time to arrive
                try:
                    other_id, trace = self.errors.get_nowait()
                    raise ActorFailure(f"actor {other_id} failed:\n{trace}")
                except queue.Empty:
                    raise ActorFailure(
                        f"actor {actor_id} died with exit code {process.exitcode}"
                    ) from None

    def _stop_actors(self) -> None:
        self.stop.set()
        for _ in self.actors:
            self.free_queue.put(None)
        deadline = time.time() + 5.0
        for process in self.actors:
            process.join(timeout=max(0.0, deadline - time.time()))
            if process.is_alive():
                process.kill()
                process.join()

    # ---------------------------------------------------------------------- batches

    def _next_slot(self) -> int:
        while True:
            if self.stop_signal is not None or self.stop.is_set():
                raise _Stopped
            try:
                return int(self.full_queue.get(timeout=_POLL_S))
            except queue.Empty:
                self._check_actors()

    def _batches(self, out: queue.Queue[Any]) -> None:
        """Prefetch thread: gather the next batch while the learner works on the current one."""
        r = self.cfg.runtime
        try:
            while True:
                indices = [self._next_slot() for _ in range(r.slots_per_batch)]
                batch = self.buffers.gather(indices, self.device)
                for index in indices:
                    self.free_queue.put(index)
                out.put(batch)
        except BaseException as error:  # handed to the main thread, which re-raises it
            out.put(error)

    # ------------------------------------------------------------------------ train

    def train(self) -> None:
        cfg = self.cfg
        torch.manual_seed(cfg.seed + self.generation)
        if cfg.runtime.learner_threads:
            torch.set_num_threads(cfg.runtime.learner_threads)
        previous = {s: signal.signal(s, self._on_signal) for s in _STOP_SIGNALS}
        w, main_rank = cfg.logger.wandb, self.rank.is_main
        logger = MetricLogger(
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
        self._start_actors()
        log.info(
            "training %s with %s on %s: %d actors x %d envs, run dir %s",
            cfg.env.name,
            cfg.model._target_.rsplit(".", 1)[-1],
            self.device,
            cfg.runtime.num_actors,
            cfg.runtime.envs_per_actor,
            self.run_dir,
        )
        batches: queue.Queue[Any] = queue.Queue(maxsize=1)
        threading.Thread(target=self._batches, args=(batches,), daemon=True).start()
        try:
            self._loop(batches, logger)
        except _Stopped:
            pass
        finally:
            self.stop.set()
            self.save_checkpoint()
            self._stop_actors()
            logger.close()
            for s, handler in previous.items():
                signal.signal(s, handler)
        log.info("rank %d/%d done: updates=%d frames=%d parameter_digest=%s", self.rank.rank,
                 self.rank.world_size, self.updates, self.frames, parameter_digest(self.model))
        requeue = previous[signal.SIGUSR2]
        if self.stop_signal == signal.SIGUSR2 and callable(requeue):
            # Under submitit this is its preemption/time-limit handler: it requeues the job,
            # which resumes from the checkpoint just written in this same run directory.
            log.info("handing SIGUSR2 to the job's own handler (requeue)")
            requeue(signal.SIGUSR2, None)

    def _loop(self, batches: queue.Queue[Any], logger: MetricLogger) -> None:
        cfg = self.cfg
        sums: dict[str, float] = defaultdict(float)
        returns: list[float] = []
        lengths: list[float] = []
        count, last_log, last_frames = 0, time.time(), self.frames
        last_checkpoint = time.time()
        while not self._should_stop():
            item = batches.get()
            if isinstance(item, BaseException):
                raise item
            metrics = self.learner.update(item, self.frames)
            self._publish()
            self.frames += self.frames_per_update
            self.updates += 1
            metrics["learner/policy_lag"] = float(
                self.updates - 1 - item["policy_version"].double().mean()
            )
            for key, value in metrics.items():
                sums[key] += value
            count += 1
            # Step 0 of a slot repeats the last step of the previous one: count episodes from 1 on.
            ended = item["episode_return"][1:].isfinite()
            new_returns = item["episode_return"][1:][ended].tolist()
            new_lengths = item["episode_length"][1:][ended].tolist()
            logger.write_episodes(self.frames, new_returns, new_lengths)
            returns += new_returns
            lengths += new_lengths
            now = time.time()
            if now - last_log >= cfg.logger.interval_s or self.frames >= cfg.total_frames:
                fps = (self.frames - last_frames) / max(now - last_log, 1e-9)
                line: dict[str, float | int] = {key: value / count for key, value in sums.items()}
                line |= {
                    "env/frames": self.frames,
                    "learner/updates": self.updates,
                    "perf/fps": fps,
                    "perf/sps": fps / self.spec.frames_per_step,
                    "perf/fps_per_rank": fps / self.rank.world_size,
                }
                if returns:
                    line["env/episode_return"] = sum(returns) / len(returns)
                    line["env/episode_length"] = sum(lengths) / len(lengths)
                    line["env/episodes"] = len(returns)
                logger.write(line)
                sums.clear()
                returns, lengths, count = [], [], 0
                last_log, last_frames = now, self.frames
            if now - last_checkpoint >= cfg.checkpointing.interval_s:
                self.save_checkpoint()
                last_checkpoint = now

    def _should_stop(self) -> bool:
        stop = self.frames >= self.cfg.total_frames or self.stop_signal is not None
        if self.rank.distributed:  # all ranks must leave at the same update (gradients sync)
            stop = distributed.any_rank(stop, self.device)
        return stop

    def _publish(self) -> None:
        """Copy the learner's parameters into the actors' policy and bump the version."""
        with torch.no_grad():
            for dst, src in zip(self.published.parameters(), self.model.parameters(), strict=True):
                dst.copy_(src)
        self.version.value = self.updates + 1


class _Stopped(Exception):
    """Raised in the batch thread when the run is stopping."""

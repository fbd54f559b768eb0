"""The learner step: batch -> V-trace losses -> clipped optimizer step -> metrics.

IMPALA (Espeholt et al. 2018): the learner evaluates the current policy pi on trajectories that
behaviour policies mu produced, corrects the lag with V-trace (section 4), and updates with the
policy-gradient, baseline and entropy losses. The learning rate decays linearly to 0 over
``total_frames`` (the paper's schedule) and the global gradient norm is clipped.

With ``optim.epochs > 1`` the learner takes several steps on each batch, keeping the V-trace
targets and advantages of the first (as PPO keeps its advantages across epochs: recomputed
with a value head that has just fitted this batch they shrink towards noise); ``vtrace.pg_clip``
then keeps the policy within a PPO-style trust region around the policy it had when the batch
arrived. ``optim.epochs: 1``
(the paper) is one step per batch, and the clip has no effect.

The update reads nothing to the host until its end, so a GPU runs its steps back to back: the
metrics stay device tensors and are read once per update, and off the CPU a step whose loss or
gradient is not finite is undone on the device (`Undo`) instead of being tested on the host
first. With
``runtime.precision: bf16`` the network's forward runs under autocast in bfloat16; V-trace and
the losses stay in float32. ``runtime.compile`` runs that forward through `torch.compile`.

With PopArt (``vtrace.popart``, ``stampede.algo.popart``) the network's baseline outputs are
normalised per task: each batch first moves the task statistics towards its V-trace targets
(rescaling the baseline head so that the unnormalised values stay as they were), then the
losses are computed in normalised space.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor

from stampede.algo.losses import impala_loss_stats, moments, return_range
from stampede.algo.optim import build_optimizer, linear_lr
from stampede.algo.popart import PopArt
from stampede.config.checks import ConfigError
from stampede.config.schema import OptimConfig, VTraceConfig
from stampede.models import ActorCritic, ModelOutput, clip_reward, precision_context
from stampede.train import buffers
from stampede.train.graphed import GraphedStep
from stampede.train.guard import GUARDED, STEP_KEYS, NumericalFailure, Undo, nonfinite
from stampede.train.minibatch import Arrival, batch_tasks, part_of, random_split
from stampede.train.timing import LEARNER_STAGES, StageClock

log = logging.getLogger("stampede")


class _Taken(NamedTuple):
    """One step of an update, for `Learner._finish`."""

    stats: Tensor  # [len(STEP_KEYS)] on the device, not read yet
    undo: Undo | None  # what to put back if it is the first skipped step; None: host-decided
    skipped: bool  # known on the host to be skipped: the update stops there


class Learner:
    """Owns the model and its optimizer; ``update`` does one step on a [T + 1, B] batch.

    ``precision`` (``runtime.precision``): "fp32", or "bf16" to run the network's forward under
    `torch.autocast` in bfloat16 (its outputs are cast back to float32 for V-trace and the
    losses; the parameters, gradients and optimizer stay float32). ``compile``
    (``runtime.compile``): run that forward through ``torch.compile(model)``, compiled at its
    first call; ``self.model`` stays the plain module (checkpoints, publishing, evaluation).
    """

    def __init__(
        self,
        model: ActorCritic,
        vtrace: VTraceConfig,
        optim: OptimConfig,
        total_frames: int,
        reduce_gradients: Callable[[list[Tensor]], None] | None = None,
        popart: PopArt | None = None,
        *,
        precision: str = "fp32",
        compile: bool = False,
        cuda_graph: bool = False,
        max_nonfinite_updates: int = 0,
    ) -> None:
        if precision not in ("fp32", "bf16"):
            raise ValueError(f"runtime.precision must be fp32 or bf16 here, got {precision!r}")
        self.model = model
        self.popart = popart  # per-task value normalisation, or None
        self.precision = precision
        # The loss's forward; torch.compile wraps the module and shares its parameters.
        self._forward: Callable[..., ModelOutput] = torch.compile(model) if compile else model
        o = optim
        self.optimizer = build_optimizer(
            model.parameters(),
            o.name,
            o.lr,
            eps=o.eps,
            alpha=o.alpha,
            momentum=o.momentum,
            tf_style=o.tf_style,
            betas=o.betas,
            weight_decay=o.weight_decay,
        )
        self.vtrace = vtrace
        self.optim = optim
        self.total_frames = total_frames
        self.reduce_gradients = reduce_gradients  # all-reduce across ranks (distributed runs)
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.skipped = 0  # updates skipped for a non-finite loss or gradient, in all
        self.consecutive_skips = 0
        self.last_nonfinite = ""  # what went non-finite last, e.g. "loss/baseline is nan"
        self.max_nonfinite_updates = max_nonfinite_updates  # in a row stop the run; 0: never
        # Off the CPU a step's finiteness is not read before the step (that would wait for the
        # device at every step): a non-finite step is undone there instead (`Undo`). On the CPU
        # the read is free and skipping is cheaper than saving and undoing.
        self.undo_on_device = self.params[0].device.type != "cpu"
        # The learner process's time budget; the runner times the stages outside `update`.
        self.clock = StageClock(LEARNER_STAGES)
        self.graphed: GraphedStep | None = None
        if cuda_graph:
            self.graphed = self._graphed_step()

    def _graphed_step(self) -> GraphedStep:
        """The minibatch step on fixed buffers (`stampede.train.graphed`); on CUDA its optimizer
        reads the lr from a device tensor and keeps its state there (``capturable``)."""
        if self.popart is not None or self.reduce_gradients is not None:
            raise ConfigError(
                "runtime.cuda_graph=true supports one rank without vtrace.popart (a graph holds "
                "neither PopArt's host-side statistics nor the gradient all-reduce)"
            )
        device = self.params[0].device
        if device.type == "cuda":
            for group in self.optimizer.param_groups:
                group["lr"] = torch.tensor(float(group["lr"]), device=device)
                group["capturable"] = True

        def losses(batch: dict[str, Tensor], arrival: Arrival) -> tuple[Tensor, Tensor]:
            loss, (stats, _) = self._losses(batch, arrival)
            return loss, stats

        max_norm = self.optim.grad_clip if self.optim.grad_clip > 0 else float("inf")
        return GraphedStep(losses, self.params, self.optimizer, max_norm)

    def update(self, batch: dict[str, Tensor], frames: int) -> dict[str, float]:
        """``optim.epochs`` passes over a batch whose time-major fields are [T + 1, B, ...],
        each in ``optim.minibatches`` optimizer steps on a random split of its B trajectories
        (one step per pass by default). The metrics are those of the first step.

        The stats stay on the device and are read to the host once, at the end. Off the CPU
        (``undo_on_device``) so is every step's finiteness: the steps run back to back, and from
        the first non-finite one on each is undone on the device (the stages then time the
        launches; the device's time shows in the "optimizer" stage, where the stats are read)."""
        splits, width = self.optim.minibatches, batch["action"].shape[1]
        lr = linear_lr(self.optim.lr, frames, self.total_frames, self.optim.anneal_lr)
        if self.graphed is not None and self.optimizer.state:  # after a first, eager update
            return self._graphed_update(batch, lr)
        # Every minibatch needs the whole batch's V-trace, computed once; PopArt moves its
        # statistics towards those targets before any step.
        # A return range is the whole batch's even in one minibatch.
        whole = splits > 1 or self.popart is not None or self.vtrace.advantage_stats == "returns"
        arrival = self._first_look(batch) if whole else None
        device = self.params[0].device
        ok = torch.ones((), dtype=torch.bool, device=device)  # every step so far was finite
        taken: list[_Taken] = []
        for _ in range(self.optim.epochs):
            with self.clock.stage("forward_backward"):  # a new random split each pass
                parts = random_split(width, splits, device) if splits > 1 else (None,)
            for columns in parts:
                with self.clock.stage("forward_backward"):
                    stats, now = self._backward(*part_of(batch, arrival, columns))
                arrival = arrival or now
                with self.clock.stage("optimizer"):
                    ok, step = self._step(stats, ok, lr)
                taken.append(step)
                if step.skipped:  # known on the host: the rest of the update is skipped too
                    return self._finish(taken, lr)
        return self._finish(taken, lr)

    def _graphed_update(self, batch: dict[str, Tensor], lr: float) -> dict[str, float]:
        """`update` with each minibatch step one `GraphedStep` run (a CUDA graph replay): the
        batch's first look, then each step's minibatch copied into the step's fixed buffers.
        From the update's first non-finite step on, the steps are undone inside the step; the
        update's stats are read once, at its end, as in `update`."""
        assert self.graphed is not None
        splits, width = self.optim.minibatches, batch["action"].shape[1]
        arrival = self._first_look(batch)
        self._set_lr(lr)
        self.graphed.start_update()
        taken: list[_Taken] = []
        for _ in range(self.optim.epochs):
            with self.clock.stage("forward_backward"):
                parts = (
                    random_split(width, splits, batch["action"].device) if splits > 1 else (None,)
                )
                for columns in parts:
                    part, part_arrival = part_of(batch, arrival, columns)
                    assert part_arrival is not None  # the first look's, never this step's own
                    self.graphed.load(part, part_arrival)
                    taken.append(_Taken(self.graphed.run(), None, False))
        return self._finish(taken, lr)

    def _first_look(self, batch: dict[str, Tensor]) -> Arrival:
        """The batch's policy logits and V-trace returns before any step; PopArt's statistics
        move towards those targets here."""
        with self.clock.stage("forward_backward"), torch.no_grad():
            _, (_, arrival) = self._losses(batch, None)
            if self.popart is not None:
                task = batch_tasks(batch)[0]  # [T + 1, B] -> [B]: a trajectory has one task
                self.popart.update(arrival.returns.vs, task, self.model.baseline)
        return arrival

    def _backward(
        self, batch: dict[str, Tensor], arrival: Arrival | None
    ) -> tuple[Tensor, Arrival]:
        """Loss and gradients of the batch (all-reduced across ranks), with the V-trace returns
        and anchor policy of ``arrival`` (None: from this forward pass); the loss's stats
        [len(METRIC_KEYS)] on the device and this pass's own policy logits and returns."""
        loss, (stats, now) = self._losses(batch, arrival)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.reduce_gradients is not None:
            self.reduce_gradients([p.grad for p in self.params if p.grad is not None])
        return stats, now

    def _losses(
        self, batch: dict[str, Tensor], arrival: Arrival | None
    ) -> tuple[Tensor, tuple[Tensor, Arrival]]:
        """The IMPALA loss of a batch and its stats, policy logits and V-trace returns."""
        v, task = self.vtrace, batch_tasks(batch)
        # The network over all T + 1 steps of the batch, with its inputs at each x_t as stored.
        cache = self.graphed is None  # a graph's capture records the casts, not a cache
        with precision_context(self.precision, self.params[0].device, cache):
            out = self._forward(
                batch["obs"],
                batch["last_action"],
                clip_reward(batch["reward"], v.reward_clip),
                batch["done"],
                buffers.core_state(batch),
                task=task,
            )
        # V-trace and the losses in float32 whatever the forward ran in (no-ops in fp32).
        logits, values = out.policy_logits.float(), out.baseline.float()  # [T + 1, B, (A)]
        scale = None
        if self.popart is not None:  # normalised outputs -> V; sigma of each loss step's task
            values = self.popart.denormalise(values, task)
            scale = self.popart.scale_and_shift(task[:-1], values.dtype)[0]  # [T, B]
        # Normalised with what the batch's first look kept, or (None) each minibatch's own.
        batch_moments = (
            arrival.advantage_moments if arrival and v.advantage_stats != "minibatch" else None
        )
        # The loss's T steps: x_t's side and the transition x_t -> x_{t+1}, [T, B] each.
        s = buffers.transitions(
            batch, logits, values, discount=v.discount, reward_clip=v.reward_clip
        )
        loss, stats, returns = impala_loss_stats(
            target_logits=s.pi_logits_t,
            values=s.v_t,
            bootstrap_value=s.bootstrap_value,
            behaviour_logits=s.mu_logits_t,
            actions=s.a_t,
            rewards=s.r_t,
            discounts=s.discount_t,
            baseline_cost=v.baseline_cost,
            entropy_cost=v.entropy_cost,
            rho_bar=v.rho_bar,
            c_bar=v.c_bar,
            pg_rho_bar=v.pg_rho_bar,
            lambda_=v.lambda_,
            normalize_advantages=v.normalize_advantages,
            advantage_moments=batch_moments,
            anchor_logits=arrival.pi_logits_t if arrival else None,
            pg_clip=v.pg_clip,
            returns=arrival.returns if arrival else None,
            scale=scale,
        )
        if arrival is None:  # the batch's first look: what its advantages are normalised with
            pg, vs = returns.pg_advantages, returns.vs
            if scale is not None:
                pg, vs = pg / scale, vs / scale
            seen = return_range(vs) if v.advantage_stats == "returns" else moments(pg)
        else:
            seen = arrival.advantage_moments
        return loss, (stats, Arrival(s.pi_logits_t.detach(), returns, seen))

    def _step(self, stats: Tensor, ok: Tensor, lr: float) -> tuple[Tensor, _Taken]:
        """Clip, then step the optimizer at ``lr``, keeping the step only if it and every step
        before it in this update (``ok``) had finite loss terms and gradient norm. The new
        ``ok`` and the step's record for `_finish`."""
        max_norm = self.optim.grad_clip if self.optim.grad_clip > 0 else float("inf")
        grad_norm = torch.nn.utils.clip_grad_norm_(self.params, max_norm)  # [], not read
        stats = torch.cat([stats, grad_norm.reshape(1).to(stats.dtype)])
        ok = ok & torch.isfinite(stats[: len(GUARDED)]).all() & torch.isfinite(grad_norm)
        # The optimizer's first step creates its state, and a skipped step must not: with no
        # state to put back, decide on the host (one read of one flag), until a step succeeds.
        if not self.undo_on_device or self._state_missing():
            skipped = not ok.item()
            if not skipped:
                self._set_lr(lr)
                self.optimizer.step()
            return ok, _Taken(stats, None, skipped)
        undo = Undo(self.optimizer, ok.device)
        self._set_lr(lr)
        self.optimizer.step()
        undo.unless(ok)
        return ok, _Taken(stats, undo, False)

    def _state_missing(self) -> bool:
        """Whether a parameter with a gradient has no optimizer state yet (host-side only)."""
        state = self.optimizer.state
        return any(p.grad is not None and not state.get(p) for p in self.params)

    def _set_lr(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            if isinstance(group["lr"], Tensor):  # a CUDA graph's: read where it lies
                group["lr"].fill_(lr)
            else:
                group["lr"] = lr

    def _finish(self, taken: list[_Taken], lr: float) -> dict[str, float]:
        """Read the update's stats to the host, once; at its first non-finite step (if any) put
        back what the device could not, name the term and count the skip. The first step's
        metrics (`STEP_KEYS`), ``learner/lr``, and ``learner/skipped`` (1.0 if the update was
        skipped, else 0.0)."""
        with self.clock.stage("optimizer"):
            rows = torch.stack([step.stats for step in taken]).tolist()  # [steps, STEP_KEYS]
            metrics = [dict(zip(STEP_KEYS, row, strict=True)) for row in rows]
            first_bad = next((k for k, m in enumerate(metrics) if nonfinite(m)), None)
            if first_bad is not None:  # skipped from that step on: the rest of the passes too
                self.last_nonfinite = nonfinite(metrics[first_bad])
                undo = taken[first_bad].undo
                if undo is not None:  # None: decided on the host, nothing was stepped
                    undo.restore()
                self.optimizer.zero_grad(set_to_none=True)
            self._count(first_bad is not None)
        return metrics[0] | {"learner/lr": lr, "learner/skipped": float(first_bad is not None)}

    def _count(self, skipped: bool) -> None:
        """An update with a non-finite step is skipped from that step on (the rest of its
        passes too: the batch or the parameters are bad); count it and the run of them, and
        stop the run after ``max_nonfinite_updates`` in a row (NumericalFailure)."""
        self.skipped += skipped
        self.consecutive_skips = self.consecutive_skips + 1 if skipped else 0
        if skipped:
            log.warning("update skipped: %s", self.last_nonfinite)
        limit = self.max_nonfinite_updates
        if limit and self.consecutive_skips >= limit:
            raise NumericalFailure(
                f"{self.consecutive_skips} consecutive updates were skipped because "
                f"{self.last_nonfinite} (runtime.max_nonfinite_updates={limit}); the "
                f"checkpoint holds the last good parameters"
            )

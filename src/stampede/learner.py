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

With PopArt (``vtrace.popart``, ``stampede.popart``) the network's baseline outputs are normalised
per task: each batch first moves the task statistics towards its V-trace targets (rescaling the
baseline head so that the unnormalised values stay as they were), then the losses are computed
in normalised space.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor

from stampede import buffers
from stampede.config import OptimConfig, VTraceConfig
from stampede.losses import impala_loss
from stampede.models import ActorCritic, clip_reward
from stampede.optim import build_optimizer, linear_lr
from stampede.popart import PopArt
from stampede.timing import LEARNER_STAGES, StageClock
from stampede.vtrace import VTraceReturns


class _Arrival(NamedTuple):
    """The batch as the learner first saw it: its policy logits pi_logits_t [T, B, A] and V-trace
    returns, kept for the later steps on that batch (``optim.epochs > 1``)."""

    pi_logits_t: Tensor
    returns: VTraceReturns

    def columns(self, index: Tensor) -> _Arrival:
        """The same for the trajectories ``index`` of the batch ([T, B] -> [T, len(index)])."""
        r = self.returns
        return _Arrival(
            self.pi_logits_t[:, index],
            r._replace(
                vs=r.vs[:, index],
                pg_advantages=r.pg_advantages[:, index],
                log_rhos=r.log_rhos[:, index],
            ),
        )


def _task(batch: dict[str, Tensor]) -> Tensor:
    """The task id of every step, [T + 1, B] (all 0 for a batch without one: a single task)."""
    if "task" in batch:
        return batch["task"]
    return torch.zeros_like(batch["action"])


def _columns(batch: dict[str, Tensor], index: Tensor) -> dict[str, Tensor]:
    """Trajectories ``index`` of a batch: time-major fields [T + 1, B, ...] and the LSTM state
    [layers, B, H] keep those columns; per-slot fields (``buffers.PER_SLOT``) stay whole."""
    return {name: t if name in buffers.PER_SLOT else t[:, index] for name, t in batch.items()}


class Learner:
    """Owns the model and its optimizer; ``update`` does one step on a [T + 1, B] batch."""

    def __init__(
        self,
        model: ActorCritic,
        vtrace: VTraceConfig,
        optim: OptimConfig,
        total_frames: int,
        reduce_gradients: Callable[[list[Tensor]], None] | None = None,
        popart: PopArt | None = None,
    ) -> None:
        self.model = model
        self.popart = popart  # per-task value normalisation, or None
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
        # The learner process's time budget; the runner times the stages outside `update`.
        self.clock = StageClock(LEARNER_STAGES)

    def update(self, batch: dict[str, Tensor], frames: int) -> dict[str, float]:
        """``optim.epochs`` passes over a batch whose time-major fields are [T + 1, B, ...],
        each in ``optim.minibatches`` optimizer steps on a random split of its B trajectories
        (one step per pass by default). The metrics are those of the first step."""
        first: dict[str, float] = {}
        arrival: _Arrival | None = None
        splits, width = self.optim.minibatches, batch["action"].shape[1]
        # Every minibatch needs the whole batch's V-trace, computed once; PopArt moves its
        # statistics towards those targets before any step.
        if splits > 1 or self.popart is not None:
            with self.clock.stage("forward_backward"), torch.no_grad():
                _, (_, arrival) = self._losses(batch, None)
                if self.popart is not None:
                    task = _task(batch)[0]  # [T + 1, B] -> [B]: a trajectory has one task
                    self.popart.update(arrival.returns.vs, task, self.model.baseline)
        stepped, skipped = 0, False
        while stepped < self.optim.epochs * splits and not skipped:
            with self.clock.stage("forward_backward"):
                if stepped % splits == 0:  # a new pass: a new random split of the trajectories
                    parts = (torch.randperm(width) if splits > 1 else torch.arange(width)).chunk(
                        splits
                    )
                columns = parts[stepped % splits]
                part = _columns(batch, columns) if splits > 1 else batch
                given = arrival.columns(columns) if arrival and splits > 1 else arrival
                metrics, now = self._backward(part, given)
            with self.clock.stage("optimizer"):
                metrics, skipped = self._step(metrics, frames)
            first, arrival, stepped = first or metrics, arrival or now, stepped + 1
        self._count(skipped)
        return first

    def _backward(
        self, batch: dict[str, Tensor], arrival: _Arrival | None
    ) -> tuple[dict[str, float], _Arrival]:
        """Loss and gradients of the batch (all-reduced across ranks), with the V-trace returns
        and anchor policy of ``arrival`` (None: from this forward pass); the loss's metrics and
        this pass's own policy logits and returns."""
        loss, (metrics, now) = self._losses(batch, arrival)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.reduce_gradients is not None:
            self.reduce_gradients([p.grad for p in self.params if p.grad is not None])
        return metrics, now

    def _losses(
        self, batch: dict[str, Tensor], arrival: _Arrival | None
    ) -> tuple[Tensor, tuple[dict[str, float], _Arrival]]:
        """The IMPALA loss of a batch and its metrics, policy logits and V-trace returns."""
        v, task = self.vtrace, _task(batch)
        # The network over all T + 1 steps of the batch, with its inputs at each x_t as stored.
        out = self.model(
            batch["obs"],
            batch["last_action"],
            clip_reward(batch["reward"], v.reward_clip),
            batch["done"],
            buffers.core_state(batch),
            task=task,
        )
        values, scale = out.baseline, None  # [T + 1, B]
        if self.popart is not None:  # normalised outputs -> V; sigma of each loss step's task
            values = self.popart.denormalise(values, task)
            scale = self.popart.scale_and_shift(task[:-1], values.dtype)[0]  # [T, B]
        # The loss's T steps: x_t's side and the transition x_t -> x_{t+1}, [T, B] each.
        s = buffers.transitions(
            batch, out.policy_logits, values, discount=v.discount, reward_clip=v.reward_clip
        )
        loss, metrics, returns = impala_loss(
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
            anchor_logits=arrival.pi_logits_t if arrival else None,
            pg_clip=v.pg_clip,
            returns=arrival.returns if arrival else None,
            scale=scale,
        )
        return loss, (metrics, _Arrival(s.pi_logits_t.detach(), returns))

    def _step(self, metrics: dict[str, float], frames: int) -> tuple[dict[str, float], bool]:
        """Clip, then step the optimizer unless the loss or gradient is not finite; the metrics
        and whether the step was skipped."""
        max_norm = self.optim.grad_clip if self.optim.grad_clip > 0 else float("inf")
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.params, max_norm))
        metrics["learner/grad_norm"] = grad_norm
        metrics["learner/lr"] = linear_lr(
            self.optim.lr, frames, self.total_frames, self.optim.anneal_lr
        )
        bad = self._nonfinite(metrics, grad_norm)
        if bad:  # skip: parameters and optimizer state keep their last good values
            self.last_nonfinite = bad
            self.optimizer.zero_grad(set_to_none=True)
            return metrics, True
        for group in self.optimizer.param_groups:
            group["lr"] = metrics["learner/lr"]
        self.optimizer.step()
        return metrics, False

    def _count(self, skipped: bool) -> None:
        """An update with a non-finite step is skipped from that step on (the rest of its
        passes too: the batch or the parameters are bad); count it and the run of them."""
        self.skipped += skipped
        self.consecutive_skips = self.consecutive_skips + 1 if skipped else 0

    @staticmethod
    def _nonfinite(metrics: dict[str, float], grad_norm: float) -> str:
        """Which term went non-finite ('' if none): a loss term first, else the gradient."""
        for key in ("loss/pg", "loss/baseline", "loss/entropy"):
            if not math.isfinite(metrics[key]):
                return f"{key} is {metrics[key]}"
        if not math.isfinite(grad_norm):
            return f"the gradient norm is {grad_norm}"
        return ""

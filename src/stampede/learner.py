"""The learner step: batch -> V-trace losses -> clipped optimizer step -> metrics.

IMPALA (Espeholt et al. 2018): the learner evaluates the current policy pi on trajectories that
behaviour policies mu produced, corrects the lag with V-trace (section 4), and updates with the
policy-gradient, baseline and entropy losses. The learning rate decays linearly to 0 over
``total_frames`` (the paper's schedule) and the global gradient norm is clipped.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from stampede import buffers
from stampede.actor import clip_reward
from stampede.config import OptimConfig, VTraceConfig
from stampede.losses import impala_loss
from stampede.models import ActorCritic
from stampede.optim import build_optimizer, linear_lr


class Learner:
    """Owns the model and its optimizer; ``update`` does one step on a [T + 1, B] batch."""

    def __init__(
        self,
        model: ActorCritic,
        vtrace: VTraceConfig,
        optim: OptimConfig,
        total_frames: int,
        reduce_gradients: Callable[[list[Tensor]], None] | None = None,
    ) -> None:
        self.model = model
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

    def update(self, batch: dict[str, Tensor], frames: int) -> dict[str, float]:
        """One optimizer step on a batch whose time-major fields are [T + 1, B, ...]."""
        v = self.vtrace
        core_state = buffers.core_state(batch)
        out = self.model(
            batch["obs"],
            batch["last_action"],
            clip_reward(batch["reward"], v.reward_clip),
            batch["done"],
            core_state,
        )
        # Step t of the loss uses x_t's outputs and the transition x_t -> x_{t+1}:
        # outputs at [:-1] ([T, B]); rewards and episode ends of the transition at [1:].
        not_done = (~batch["done"][1:]).to(out.baseline.dtype)
        loss, metrics = impala_loss(
            target_logits=out.policy_logits[:-1],
            values=out.baseline[:-1],
            bootstrap_value=out.baseline[-1],  # V(x_T): [B]
            behaviour_logits=batch["logits"][:-1],
            actions=batch["action"][:-1],
            rewards=clip_reward(batch["reward"][1:], v.reward_clip),
            discounts=v.discount * not_done,
            baseline_cost=v.baseline_cost,
            entropy_cost=v.entropy_cost,
            rho_bar=v.rho_bar,
            c_bar=v.c_bar,
            pg_rho_bar=v.pg_rho_bar,
            lambda_=v.lambda_,
        )
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.reduce_gradients is not None:
            self.reduce_gradients([p.grad for p in self.params if p.grad is not None])
        max_norm = self.optim.grad_clip if self.optim.grad_clip > 0 else float("inf")
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.params, max_norm))
        metrics["learner/grad_norm"] = grad_norm
        metrics["learner/lr"] = linear_lr(
            self.optim.lr, frames, self.total_frames, self.optim.anneal_lr
        )
        bad = self._nonfinite(metrics, grad_norm)
        if bad:  # skip: parameters and optimizer state keep their last good values
            self.skipped += 1
            self.consecutive_skips += 1
            self.last_nonfinite = bad
            self.optimizer.zero_grad(set_to_none=True)
            return metrics
        self.consecutive_skips = 0
        for group in self.optimizer.param_groups:
            group["lr"] = metrics["learner/lr"]
        self.optimizer.step()
        return metrics

    @staticmethod
    def _nonfinite(metrics: dict[str, float], grad_norm: float) -> str:
        """Which term went non-finite ('' if none): a loss term first, else the gradient."""
        for key in ("loss/pg", "loss/baseline", "loss/entropy"):
            if not math.isfinite(metrics[key]):
                return f"{key} is {metrics[key]}"
        if not math.isfinite(grad_norm):
            return f"the gradient norm is {grad_norm}"
        return ""

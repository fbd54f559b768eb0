"""IMPALA's learner losses (Espeholt et al. 2018, arXiv 1802.01561, section 4.2): the one copy.

All losses reduce by a **sum** over time and batch ([T, B]), as the paper's TensorFlow
implementation does, not a mean: the gradient grows with T * B, and the paper's learning
rates assume this. Targets and advantages come from `stampede.vtrace` and are treated as
constants (detached) here.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from stampede import vtrace

METRIC_KEYS = (
    "loss/pg",
    "loss/baseline",
    "loss/entropy",
    "loss/total",
    "vtrace/rho_mean",
    "vtrace/rho_clipped_frac",
)


def _check_shape(name: str, t: Tensor, expected: list[int], ref_name: str) -> None:
    if list(t.shape) != expected:
        raise ValueError(
            f"losses: {name} must have shape [T, B] = {expected} like {ref_name}, "
            f"got {list(t.shape)}"
        )


def _check_logits(logits: Tensor) -> None:
    if logits.dim() != 3:
        raise ValueError(f"losses: logits must have shape [T, B, A], got {list(logits.shape)}")


def policy_gradient_loss(logits: Tensor, actions: Tensor, advantages: Tensor) -> Tensor:
    """-sum_{t,b} log pi(a_t|x_t) * A_t, the V-trace actor loss (paper section 4.2).

    Args:
        logits: [T, B, A] target-policy logits (gradients flow into them).
        actions: [T, B] integer actions taken.
        advantages: [T, B] e.g. `VTraceReturns.pg_advantages`; detached here.
    """
    _check_logits(logits)
    _check_shape("actions", actions, list(logits.shape[:2]), "logits")
    _check_shape("advantages", advantages, list(logits.shape[:2]), "logits")
    log_pi_t = vtrace.action_log_probs(logits, actions)  # [T, B]
    return -(log_pi_t * advantages.detach()).sum()


def baseline_loss(values: Tensor, targets: Tensor) -> Tensor:
    """0.5 * sum_{t,b} (v_t - V(x_t))^2, the value regression to V-trace targets v_t.

    Args:
        values: [T, B] V(x_t) (gradients flow into them).
        targets: [T, B] e.g. `VTraceReturns.vs`; detached here.
    """
    _check_shape("targets", targets, list(values.shape), "values")
    return 0.5 * ((targets.detach() - values) ** 2).sum()


def entropy_loss(logits: Tensor) -> Tensor:
    """sum_{t,b,a} pi log pi: the *negative* entropy of the policy, [T, B, A] -> [].

    Minimising ``entropy_cost * entropy_loss`` therefore maximises entropy (exploration bonus).
    """
    _check_logits(logits)
    log_pi = F.log_softmax(logits, dim=-1)  # [T, B, A]
    return (log_pi.exp() * log_pi).sum()


def impala_loss(
    target_logits: Tensor,
    values: Tensor,
    bootstrap_value: Tensor,
    behaviour_logits: Tensor,
    actions: Tensor,
    rewards: Tensor,
    discounts: Tensor,
    *,
    baseline_cost: float,
    entropy_cost: float,
    rho_bar: float,
    c_bar: float,
    pg_rho_bar: float,
    lambda_: float,
) -> tuple[Tensor, dict[str, float]]:
    """The full IMPALA loss: pg + baseline_cost * baseline + entropy_cost * entropy.

    Args:
        target_logits: [T, B, A] learner policy logits pi (gradients flow).
        values: [T, B] learner values V(x_t) (gradients flow).
        bootstrap_value: [B] V(x_T) after the unroll (used as a target only, no gradient).
        behaviour_logits: [T, B, A] actor policy logits mu at acting time.
        actions: [T, B] integer actions; rewards: [T, B]; discounts: [T, B] gamma * (1 - done).
        baseline_cost, entropy_cost: weights of the baseline and entropy terms.
        rho_bar, c_bar, pg_rho_bar, lambda_: V-trace clips, see `stampede.vtrace`.

    Returns:
        (total loss, metrics). ``metrics`` has exactly `METRIC_KEYS` as Python floats;
        "loss/baseline" and "loss/entropy" are the *weighted* terms (cost included), so
        loss/pg + loss/baseline + loss/entropy == loss/total, as in TorchBeast's logs.
    """
    returns = vtrace.from_logits(
        behaviour_logits,
        target_logits,
        actions,
        discounts,
        rewards,
        values,
        bootstrap_value,
        rho_bar=rho_bar,
        c_bar=c_bar,
        pg_rho_bar=pg_rho_bar,
        lambda_=lambda_,
    )
    pg = policy_gradient_loss(target_logits, actions, returns.pg_advantages)
    baseline = baseline_cost * baseline_loss(values, returns.vs)
    entropy = entropy_cost * entropy_loss(target_logits)
    total = pg + baseline + entropy
    stats = torch.stack(
        [pg, baseline, entropy, total, returns.rho_mean, returns.rho_clipped_frac]
    ).detach()
    metrics = dict(zip(METRIC_KEYS, stats.tolist(), strict=True))  # one device sync, not six
    return total, metrics

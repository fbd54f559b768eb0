"""IMPALA's learner losses (Espeholt et al. 2018, arXiv 1802.01561, section 4.2): the one copy.

All losses reduce by a **sum** over time and batch ([T, B]), as the paper's TensorFlow
implementation does, not a mean: the gradient grows with T * B, and the paper's learning
rates assume this. Targets and advantages come from `stampede.algo.vtrace` and are treated as
constants (detached) here.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from stampede.algo import vtrace

METRIC_KEYS = (
    "loss/pg",
    "loss/baseline",
    "loss/entropy",
    "loss/total",
    "vtrace/rho_mean",
    "vtrace/rho_clipped_frac",
    "learner/entropy",
    "learner/explained_variance",
    "learner/kl",
    "learner/adv_mean",
    "learner/adv_std",
    "learner/reward_density",
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


def clipped_policy_gradient_loss(
    logits: Tensor, anchor_logits: Tensor, actions: Tensor, advantages: Tensor, clip: float
) -> Tensor:
    """-sum_{t,b} min(r_t A_t, clip(r_t, 1 - clip, 1 + clip) A_t), r_t = pi(a_t|x_t) / pi_0(a_t|x_t)

    PPO's clipped surrogate (Schulman et al. 2017, arXiv 1707.06347) around ``anchor_logits``,
    the learner's own policy pi_0 when the batch arrived: it lets the learner take several
    steps on one batch (``optim.epochs``) without moving the policy far from where the V-trace
    advantages were measured. At pi == pi_0 its gradient is `policy_gradient_loss`'s.

    Args:
        logits: [T, B, A] current policy logits (gradients flow into them).
        anchor_logits: [T, B, A] pi_0's logits; detached here.
        actions: [T, B] integer actions taken; advantages: [T, B], detached here.
        clip: the ratio's half-width (0.1 in PPO's Atari runs), > 0.
    """
    _check_logits(logits)
    _check_shape("actions", actions, list(logits.shape[:2]), "logits")
    _check_shape("advantages", advantages, list(logits.shape[:2]), "logits")
    log_ratio = vtrace.action_log_probs(logits, actions) - vtrace.action_log_probs(
        anchor_logits.detach(), actions
    )  # [T, B]
    ratio = log_ratio.exp()
    adv = advantages.detach()
    surrogate = torch.minimum(ratio * adv, ratio.clamp(1.0 - clip, 1.0 + clip) * adv)
    return -surrogate.sum()


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


def explained_variance(values: Tensor, targets: Tensor) -> Tensor:
    """1 - Var[targets - values] / Var[targets] over all [T, B] entries ([] tensor).

    1 means V predicts its targets exactly, 0 no better than their mean, < 0 worse. NaN when the
    targets do not vary (nothing to explain).
    """
    return 1.0 - (targets - values).var(unbiased=False) / targets.var(unbiased=False)


def diagnostics(
    target_logits: Tensor,
    behaviour_logits: Tensor,
    values: Tensor,
    returns: vtrace.VTraceReturns,
    rewards: Tensor,
) -> Tensor:
    """[6] learning diagnostics, in the order of `METRIC_KEYS`' last six, all per step means:
    policy entropy of pi (nats), explained variance of V against the V-trace targets,
    KL(mu || pi) (how far the learner moved from the behaviour policy), the mean and std of the
    pg advantages, and the reward density: the fraction of steps whose reward r_t [T, B] is not
    zero (a game whose rewards are rare gives most minibatches advantages with no reward in
    them, only the baseline's errors)."""
    with torch.no_grad():
        log_pi = F.log_softmax(target_logits, dim=-1)  # [T, B, A]
        log_mu = F.log_softmax(behaviour_logits, dim=-1)  # [T, B, A]
        entropy = -(log_pi.exp() * log_pi).sum(-1).mean()
        kl = (log_mu.exp() * (log_mu - log_pi)).sum(-1).mean()
        ev = explained_variance(values.detach(), returns.vs)
        adv = returns.pg_advantages
        density = (rewards != 0).to(adv.dtype).mean()
        return torch.stack([entropy, ev, kl, adv.mean(), adv.std(unbiased=False), density])


def impala_loss_stats(
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
    normalize_advantages: bool = False,
    advantage_moments: Tensor | None = None,
    anchor_logits: Tensor | None = None,
    pg_clip: float = 0.0,
    returns: vtrace.VTraceReturns | None = None,
    scale: Tensor | None = None,
) -> tuple[Tensor, Tensor, vtrace.VTraceReturns]:
    """The full IMPALA loss: pg + baseline_cost * baseline + entropy_cost * entropy.

    Step t is x_t and the transition x_t -> x_{t+1}; `stampede.train.buffers.transitions` cuts a
    rollout into these arguments (its fields ``pi_logits_t``, ``v_t``, ``bootstrap_value``,
    ``mu_logits_t``, ``a_t``, ``r_t``, ``discount_t``).

    Args:
        target_logits: [T, B, A] learner policy logits pi at x_t (gradients flow).
        values: [T, B] learner values V(x_t) (gradients flow).
        bootstrap_value: [B] V(x_T) after the unroll (used as a target only, no gradient).
        behaviour_logits: [T, B, A] actor policy logits mu at x_t, at acting time.
        actions: [T, B] integer actions a_t; rewards: [T, B] r_t, of the transition;
            discounts: [T, B] gamma, or 0 where the transition ended an episode.
        baseline_cost, entropy_cost: weights of the baseline and entropy terms.
        rho_bar, c_bar, pg_rho_bar, lambda_: V-trace clips, see `stampede.algo.vtrace`.
        normalize_advantages: scale the pg advantages to zero mean and unit std over the batch
            before the policy-gradient loss (not in the paper; PPO's practice). The metrics
            ``learner/adv_*`` describe them before scaling.
        advantage_moments: [2] the shift and scale to normalise with instead of these
            advantages' own mean and std (the whole batch's moments when the arguments are one
            of its minibatches, or `return_range`); None: their own.
        anchor_logits, pg_clip: with ``pg_clip > 0``, the policy term is
            `clipped_policy_gradient_loss` around ``anchor_logits`` [T, B, A] (the learner's
            policy when the batch arrived) instead of `policy_gradient_loss`.
        returns: V-trace targets and advantages computed before (the learner's later steps on a
            batch reuse those of its first, as PPO keeps its advantages across epochs);
            None computes them from the arguments.
        scale: PopArt's sigma of each step's task, [T, B] (`stampede.algo.popart`): V-trace runs on
            the unnormalised ``values``, and the baseline and policy-gradient terms are computed
            in normalised space, on (v_s - V) / sigma and A / sigma (Hessel et al. 2019). None:
            no normalisation.

    Returns:
        (total loss, stats, the V-trace returns used). ``stats`` is a detached
        [len(METRIC_KEYS)] tensor on the inputs' device, the metrics in `METRIC_KEYS` order, not
        read to the host (`impala_loss` reads them);
        "loss/baseline" and "loss/entropy" are the *weighted* terms (cost included), so
        loss/pg + loss/baseline + loss/entropy == loss/total, as in TorchBeast's logs; the
        ``learner/*`` diagnostics are per-step means (see `diagnostics`).
    """
    returns = returns or vtrace.from_logits(
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
    targets, advantages = returns.vs, returns.pg_advantages
    if scale is not None:  # [T, B] each: PopArt's normalised space, (v_s - mu) / sigma - n(x)
        values, targets, advantages = values / scale, targets / scale, advantages / scale
    seen = returns._replace(vs=targets, pg_advantages=advantages)  # what the diagnostics describe
    if normalize_advantages:  # [T, B] -> zero mean, unit std over the batch (or as given)
        mean, std = advantage_moments if advantage_moments is not None else moments(advantages)
        advantages = (advantages - mean) / (std + 1e-8)
    if pg_clip > 0 and anchor_logits is not None:
        pg = clipped_policy_gradient_loss(
            target_logits, anchor_logits, actions, advantages, pg_clip
        )
    else:
        pg = policy_gradient_loss(target_logits, actions, advantages)
    baseline = baseline_cost * baseline_loss(values, targets)
    entropy = entropy_cost * entropy_loss(target_logits)
    total = pg + baseline + entropy
    terms = torch.stack([pg, baseline, entropy, total, returns.rho_mean, returns.rho_clipped_frac])
    diag = diagnostics(target_logits, behaviour_logits, values, seen, rewards)
    return total, torch.cat([terms.detach(), diag]), returns


def moments(advantages: Tensor) -> Tensor:
    """[2]: the mean and (population) std of ``advantages``, which advantage normalisation uses."""
    return torch.stack([advantages.mean(), advantages.std(unbiased=False)])


def return_range(targets: Tensor, low: float = 0.05, high: float = 0.95) -> Tensor:
    """[2]: 0 and max(1, P95 - P5) of the value targets, the (shift, scale) with which DreamerV3
    (Hafner et al. 2023, arXiv 2301.04104) normalises returns: advantages of a game whose
    returns span less than 1 are not scaled up, those of one that spans more are scaled down."""
    spread = torch.quantile(targets.flatten(), high) - torch.quantile(targets.flatten(), low)
    return torch.stack([torch.zeros_like(spread), spread.clamp(min=1.0)])


def impala_loss(*args: Any, **kwargs: Any) -> tuple[Tensor, dict[str, float], vtrace.VTraceReturns]:
    """`impala_loss_stats` (the same arguments) with its stats read to the host: (total loss,
    metrics, returns), ``metrics`` exactly `METRIC_KEYS` as Python floats. One device sync per
    call; the learner keeps the stats on the device instead and reads them once per update."""
    total, stats, returns = impala_loss_stats(*args, **kwargs)
    return total, dict(zip(METRIC_KEYS, stats.tolist(), strict=True)), returns

"""V-trace off-policy value targets (Espeholt et al. 2018, "IMPALA", arXiv 1802.01561, section 4).

Pure torch math on time-major ``[T, B]`` tensors: no config, no I/O. Targets are computed
under ``torch.no_grad`` so gradients never flow through them (the paper stops them too).

Notation (paper, eq. 1 and Remarks 1-2), for s in [0, T) with v_T = V(x_T) = bootstrap_value:

    rho_t   = min(rho_bar, pi(a_t|x_t) / mu(a_t|x_t))
    c_t     = lambda * min(c_bar, pi(a_t|x_t) / mu(a_t|x_t))          (Remark 2)
    delta_t = rho_t * (r_t + gamma_t * V(x_{t+1}) - V(x_t))
    v_s     = V(x_s) + delta_s + gamma_s * c_s * (v_{s+1} - V(x_{s+1}))  (Remark 1)

``gamma_t`` is the per-step discount and already carries episode ends: gamma, or 0 where the
transition x_t -> x_{t+1} ended an episode. The policy-gradient advantage (section 4.2) is
pg_rho_t * (r_t + gamma_t * v_{t+1} - V(x_t)), with pg_rho_t = min(pg_rho_bar, pi/mu).

The code writes these indices as rlax does: ``r_t``, ``discount_t`` (gamma_t), ``v_t`` (V(x_t)),
``v_tp1`` (V(x_{t+1})), ``rho_t``. rlax anchors a step at the state its transition reaches, so
its ``v_tm1``, ``v_t``, ``rho_tm1`` are our ``v_t``, ``v_tp1``, ``rho_t``; ``r_t`` and
``discount_t`` mean the same in both. ``stampede.train.buffers.transitions`` cuts a
[T + 1, B] rollout into these [T, B] steps.

Clip values are floats > 0; pass ``math.inf`` to switch a clip off (None is not accepted).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor


class VTraceReturns(NamedTuple):
    vs: Tensor  # [T, B] v-trace value targets v_s (detached)
    pg_advantages: Tensor  # [T, B] pg_rho_t * (r_t + gamma_t * v_{t+1} - V(x_t)) (detached)
    log_rhos: Tensor  # [T, B] log pi(a_t|x_t) - log mu(a_t|x_t) (detached)
    rho_mean: Tensor  # [] mean of the unclipped importance weights
    rho_clipped_frac: Tensor  # [] fraction of importance weights above rho_bar


_DIMS = {1: "[B]", 2: "[T, B]", 3: "[T, B, A]"}


def _check_leading(name: str, t: Tensor, ndim: int) -> None:
    """The tensor that fixes T, B (and A): a non-empty float tensor with ``ndim`` dims."""
    if t.dim() != ndim or 0 in t.shape or not t.is_floating_point():
        raise ValueError(
            f"vtrace: {name} must be a non-empty float tensor of shape {_DIMS[ndim]}, "
            f"got {t.dtype} {list(t.shape)}"
        )


def _check(
    name: str, t: Tensor, shape: list[int], ref: Tensor, ref_name: str, dtype: bool = True
) -> None:
    """Raise ValueError unless ``t`` has ``shape`` and the device (and dtype) of ``ref``."""
    if list(t.shape) != shape:
        raise ValueError(
            f"vtrace: {name} must have shape {_DIMS[len(shape)]} = {shape} like {ref_name}, "
            f"got {list(t.shape)}"
        )
    if dtype and t.dtype != ref.dtype:
        raise ValueError(f"vtrace: {name} must be {ref.dtype} like {ref_name}, got {t.dtype}")
    if t.device != ref.device:
        raise ValueError(f"vtrace: {name} must be on {ref.device} like {ref_name}, got {t.device}")


def _check_time_major(
    ref: Tensor,
    ref_name: str,
    discounts: Tensor,
    rewards: Tensor,
    values: Tensor,
    bootstrap: Tensor,
) -> None:
    """[T, B] inputs and the [B] bootstrap must match ``ref``'s leading dims, dtype and device."""
    T, B = ref.shape[:2]
    for name, t in (("discounts", discounts), ("rewards", rewards), ("values", values)):
        _check(name, t, [T, B], ref, ref_name)
    _check("bootstrap_value", bootstrap, [B], ref, ref_name)


def _check_clips(rho_bar: float, c_bar: float, pg_rho_bar: float, lambda_: float) -> None:
    for name, value in (("rho_bar", rho_bar), ("c_bar", c_bar), ("pg_rho_bar", pg_rho_bar)):
        if not isinstance(value, int | float) or not value > 0:  # `not >` also rejects NaN
            raise ValueError(f"vtrace: {name} must be a float > 0 (math.inf: no clip), got {value}")
    if not isinstance(lambda_, int | float) or not 0.0 <= lambda_ <= 1.0:
        raise ValueError(f"vtrace: lambda_ must be in [0, 1], got {lambda_}")


def from_importance_weights(
    log_rhos: Tensor,
    discounts: Tensor,
    rewards: Tensor,
    values: Tensor,
    bootstrap_value: Tensor,
    *,
    rho_bar: float = 1.0,
    c_bar: float = 1.0,
    pg_rho_bar: float = 1.0,
    lambda_: float = 1.0,
) -> VTraceReturns:
    """V-trace targets and advantages from log importance weights (paper eq. 1, Remarks 1-2).

    Args:
        log_rhos: [T, B] log(pi(a_t|x_t) / mu(a_t|x_t)), unclipped.
        discounts: [T, B] gamma_t, zero where the episode ended at step t.
        rewards: [T, B] r_t.
        values: [T, B] V(x_t) from the learner's current network.
        bootstrap_value: [B] V(x_T), the value of the state after the unroll.
        rho_bar, c_bar, pg_rho_bar: truncation levels (> 0; math.inf disables one).
        lambda_: trace-cutting factor in [0, 1] of Remark 2.
    """
    _check_clips(rho_bar, c_bar, pg_rho_bar, lambda_)
    _check_leading("log_rhos", log_rhos, ndim=2)
    _check_time_major(log_rhos, "log_rhos", discounts, rewards, values, bootstrap_value)
    with torch.no_grad():
        log_rhos = log_rhos.detach()  # returned; no_grad alone would hand back the input
        r_t, discount_t, v_t = rewards, discounts, values  # [T, B] each, the paper's names
        ratio_t = torch.exp(log_rhos)  # pi(a_t|x_t) / mu(a_t|x_t), unclipped
        rho_t = torch.clamp(ratio_t, max=rho_bar)
        c_t = lambda_ * torch.clamp(ratio_t, max=c_bar)
        # [T, B]: V(x_{t+1}), shifted one step forward in time, bootstrap at t = T - 1.
        v_tp1 = torch.cat([v_t[1:], bootstrap_value.unsqueeze(0)], dim=0)
        delta_t = rho_t * (r_t + discount_t * v_tp1 - v_t)

        recurse = _traces_at_once if log_rhos.device.type == "cuda" else _traces_backwards
        vs = v_t + recurse(delta_t, discount_t * c_t)

        # [T, B]: v_{t+1}, shifted one step forward in time, bootstrap at t = T - 1.
        vs_tp1 = torch.cat([vs[1:], bootstrap_value.unsqueeze(0)], dim=0)
        pg_rho_t = torch.clamp(ratio_t, max=pg_rho_bar)
        pg_advantages = pg_rho_t * (r_t + discount_t * vs_tp1 - v_t)

        rho_mean = ratio_t.mean()
        rho_clipped_frac = (ratio_t > rho_bar).to(ratio_t.dtype).mean()
    return VTraceReturns(vs, pg_advantages, log_rhos, rho_mean, rho_clipped_frac)


def _traces_backwards(delta_t: Tensor, discount_c_t: Tensor) -> Tensor:
    """v_s - V(x_s) [T, B] by Remark 1 backwards in time, v_T - V(x_T) = 0:
    vs_minus_v[s] = delta_s + gamma_s c_s vs_minus_v[s + 1]. One fused kernel per step, written
    in place: the CPU's path, where T kernels cost less than `_traces_at_once`'s [T, T, B]."""
    vs_minus_v = torch.empty_like(delta_t)
    acc = torch.zeros_like(delta_t[0])  # [B]
    for s in reversed(range(delta_t.shape[0])):
        acc = torch.addcmul(delta_t[s], discount_c_t[s], acc, out=vs_minus_v[s])
    return vs_minus_v


def _traces_at_once(delta_t: Tensor, discount_c_t: Tensor) -> Tensor:
    """The same sum in a fixed handful of kernels, whatever T: the GPU's path, where
    `_traces_backwards`' T launches bound the time (and a CUDA graph would capture them all).

    Unrolled, vs_minus_v[s] = sum_{k >= s} (prod_{s <= i < k} gamma_i c_i) delta_k: a [T, T, B]
    matrix of trace products times delta. Row s of ``factors`` is 1 up to column s and
    gamma_{k-1} c_{k-1} at column k > s, so its running product along k is that matrix's row
    (exact with zeros: an episode's end cuts the trace without dividing by 0); the columns
    k < s are masked out.
    """
    steps = torch.arange(delta_t.shape[0], device=delta_t.device)
    k_after_s = (steps.unsqueeze(0) > steps.unsqueeze(1)).unsqueeze(-1)  # [T (s), T (k), 1]
    k_before_s = (steps.unsqueeze(0) < steps.unsqueeze(1)).unsqueeze(-1)
    a_before_k = torch.cat([torch.ones_like(discount_c_t[:1]), discount_c_t[:-1]])  # [T, B]
    factors = torch.where(k_after_s, a_before_k.unsqueeze(0), 1.0)  # [T, T, B]
    traces = torch.cumprod(factors, dim=1).masked_fill(k_before_s, 0.0)
    return torch.einsum("skb,kb->sb", traces, delta_t)


def action_log_probs(logits: Tensor, actions: Tensor) -> Tensor:
    """log pi(a_t|x_t) [T, B] from logits [T, B, A] and integer actions [T, B] in [0, A)."""
    # [T, B, 1] index for gather along the action axis, squeezed back to [T, B].
    index = actions.to(torch.int64).unsqueeze(-1)
    return F.log_softmax(logits, dim=-1).gather(-1, index).squeeze(-1)


def from_logits(
    behaviour_logits: Tensor,
    target_logits: Tensor,
    actions: Tensor,
    discounts: Tensor,
    rewards: Tensor,
    values: Tensor,
    bootstrap_value: Tensor,
    *,
    rho_bar: float = 1.0,
    c_bar: float = 1.0,
    pg_rho_bar: float = 1.0,
    lambda_: float = 1.0,
) -> VTraceReturns:
    """V-trace from the behaviour (mu) and target (pi) policies' logits.

    Args:
        behaviour_logits, target_logits: [T, B, A] unnormalised log-probabilities.
        actions: [T, B] integer actions taken by the behaviour policy, in [0, A) (not checked:
            that would synchronise with the GPU).
        discounts, rewards, values, bootstrap_value, clips: as in `from_importance_weights`.
    """
    _check_leading("target_logits", target_logits, ndim=3)
    T_B_A = list(target_logits.shape)
    _check("behaviour_logits", behaviour_logits, T_B_A, target_logits, "target_logits")
    _check("actions", actions, T_B_A[:2], target_logits, "target_logits", dtype=False)
    if actions.is_floating_point() or actions.is_complex():
        raise ValueError(f"vtrace: actions must be an integer tensor, got {actions.dtype}")
    _check_time_major(target_logits, "target_logits", discounts, rewards, values, bootstrap_value)
    with torch.no_grad():
        log_pi_t = action_log_probs(target_logits, actions)  # [T, B]
        log_mu_t = action_log_probs(behaviour_logits, actions)  # [T, B]
        log_rhos = log_pi_t - log_mu_t
    clips = {"rho_bar": rho_bar, "c_bar": c_bar, "pg_rho_bar": pg_rho_bar, "lambda_": lambda_}
    return from_importance_weights(log_rhos, discounts, rewards, values, bootstrap_value, **clips)


__all__ = ["VTraceReturns", "action_log_probs", "from_importance_weights", "from_logits"]

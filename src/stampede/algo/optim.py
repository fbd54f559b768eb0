"""Optimizers and the learning-rate schedule.

The IMPALA paper (Espeholt et al. 2018, appendix) trains with TensorFlow 1's RMSProp, whose update
differs from ``torch.optim.RMSprop`` in two ways that matter at the paper's eps = 0.01:

    ms_t  = decay * ms_{t-1} + (1 - decay) * g_t^2,   ms_0 = 1       (torch starts at 0)
    mom_t = momentum * mom_{t-1} + lr * g_t / sqrt(ms_t + eps)       (torch: sqrt(ms_t) + eps)
    theta_t = theta_{t-1} - mom_t

``RMSpropTF`` implements that form; ``build_optimizer`` picks it or a PyTorch optimizer by name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from torch import Tensor


class RMSpropTF(torch.optim.Optimizer):
    """RMSProp as in TensorFlow 1 (eps inside the square root, mean square initialised to 1)."""

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict[str, Any]],
        lr: float = 6e-4,
        alpha: float = 0.99,
        eps: float = 0.01,
        momentum: float = 0.0,
    ) -> None:
        if lr <= 0 or eps <= 0 or not 0 <= alpha < 1 or not 0 <= momentum < 1:
            raise ValueError(
                f"RMSpropTF: need lr > 0, eps > 0, 0 <= alpha < 1, 0 <= momentum < 1; "
                f"got lr={lr}, eps={eps}, alpha={alpha}, momentum={momentum}"
            )
        super().__init__(params, {"lr": lr, "alpha": alpha, "eps": eps, "momentum": momentum})

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            grads = [p.grad for p in params]
            states = [self.state[p] for p in params]
            for p, state in zip(params, states, strict=True):
                if not state:
                    state["square_avg"] = torch.ones_like(p)
                    state["momentum_buffer"] = torch.zeros_like(p)
            square_avg = [s["square_avg"] for s in states]
            momentum_buffer = [s["momentum_buffer"] for s in states]
            alpha, lr = group["alpha"], group["lr"]
            # ms <- alpha * ms + (1 - alpha) * g^2
            torch._foreach_mul_(square_avg, alpha)
            torch._foreach_addcmul_(square_avg, grads, grads, value=1 - alpha)
            # step = g / sqrt(ms + eps)
            denom = torch._foreach_add(square_avg, group["eps"])
            torch._foreach_sqrt_(denom)
            # mom <- momentum * mom + lr * step; theta <- theta - mom
            torch._foreach_mul_(momentum_buffer, group["momentum"])
            torch._foreach_addcdiv_(momentum_buffer, grads, denom, value=lr)
            torch._foreach_sub_(params, momentum_buffer)
        return loss


def build_optimizer(
    params: Iterable[Tensor],
    name: str,
    lr: float,
    *,
    eps: float,
    alpha: float,
    momentum: float,
    tf_style: bool,
    betas: Sequence[float],
    weight_decay: float,
) -> torch.optim.Optimizer:
    """The optimizer named by ``optim.name`` ('rmsprop' or 'adam') with the configured settings."""
    if name == "rmsprop" and tf_style:
        if weight_decay:
            raise ValueError("optim.weight_decay is not supported with optim.tf_style=true")
        return RMSpropTF(params, lr=lr, alpha=alpha, eps=eps, momentum=momentum)
    if name == "rmsprop":
        return torch.optim.RMSprop(
            params, lr=lr, alpha=alpha, eps=eps, momentum=momentum, weight_decay=weight_decay
        )
    if name == "adam":
        beta1, beta2 = betas
        return torch.optim.Adam(
            params, lr=lr, betas=(beta1, beta2), eps=eps, weight_decay=weight_decay
        )
    raise ValueError(f"optim.name must be 'rmsprop' or 'adam', got {name!r}")


def linear_lr(base_lr: float, frames: int, total_frames: int, anneal: bool) -> float:
    """The paper's schedule: lr decays linearly from ``base_lr`` to 0 over ``total_frames``."""
    if not anneal:
        return base_lr
    return base_lr * max(0.0, 1.0 - frames / total_frames)

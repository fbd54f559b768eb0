"""The learner's guard against a non-finite update (a NaN reward from a faulty env, an
overflowing loss): which term went bad, how a step that was taken anyway is put back, and the
failure that stops a run after too many in a row.

On the CPU the learner reads a step's finiteness before stepping (the read is free). Off the CPU
it steps without waiting for the device and undoes a bad step there (`Undo`): the update reads
its stats to the host once, at its end.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from stampede.algo.losses import METRIC_KEYS
from stampede.errors import RunFailure

# One optimizer step's stats, in this order: the loss's metrics, then the gradient norm before
# clipping. A step is skipped when a term of GUARDED or the gradient norm is not finite.
STEP_KEYS = (*METRIC_KEYS, "learner/grad_norm")
GUARDED = ("loss/pg", "loss/baseline", "loss/entropy")
assert METRIC_KEYS[: len(GUARDED)] == GUARDED  # the device checks them as stats[:3]


class NumericalFailure(RunFailure):
    """Too many consecutive updates had a non-finite loss or gradient."""


class Undo:
    """What one optimizer step may change, saved before it, so that a step found non-finite on
    the device can be undone without reading anything to the host.

    The parameters and the optimizer state on the flag's device are put back at once,
    ``torch.where(ok, after, before)`` (`unless`); what lives elsewhere (each group's lr; torch
    Adam counts its steps in CPU tensors for CUDA parameters) is put back by `restore`, once the
    update has read its flags, for the first skipped step (the later ones are undone on the
    device: their flag stays false).
    """

    def __init__(self, optimizer: torch.optim.Optimizer, device: torch.device) -> None:
        self.groups = optimizer.param_groups
        self.lrs = [g["lr"] for g in self.groups]
        params = [p for g in self.groups for p in g["params"]]
        state = optimizer.state
        tensors = params + [
            v for p in params for v in state.get(p, {}).values() if isinstance(v, Tensor)
        ]
        with torch.no_grad():
            self.here = [(t, t.clone()) for t in tensors if t.device == device]
            self.elsewhere = [(t, t.clone()) for t in tensors if t.device != device]

    @torch.no_grad()
    def unless(self, ok: Tensor) -> None:
        """After the step: keep it where ``ok`` (a [] bool on the device), else put back."""
        for t, before in self.here:
            torch.where(ok, t, before, out=t)
        self.here = []  # the copies are not needed any more

    @torch.no_grad()
    def restore(self) -> None:
        """The step was skipped: put back the host side too."""
        for group, lr in zip(self.groups, self.lrs, strict=True):
            group["lr"] = lr
        for t, before in self.elsewhere:
            t.copy_(before)


def nonfinite(metrics: dict[str, float]) -> str:
    """Which term of a step went non-finite ('' if none): a loss term first, else the gradient."""
    for key in GUARDED:
        if not math.isfinite(metrics[key]):
            return f"{key} is {metrics[key]}"
    grad_norm = metrics["learner/grad_norm"]
    if not math.isfinite(grad_norm):
        return f"the gradient norm is {grad_norm}"
    return ""

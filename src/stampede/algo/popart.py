"""PopArt: per-task normalisation of the value targets that preserves the network's outputs.

Hessel et al. 2019 ("Multi-task Deep Reinforcement Learning with PopArt", arXiv 1809.04474),
after van Hasselt et al. 2016 (arXiv 1602.07714). Games' returns differ by orders of magnitude,
so in a multi-task agent the high-scoring games would dominate one value loss and the policy
gradient. PopArt keeps, for each task i, running moments of its value targets,

    mu_i <- (1 - beta) mu_i + beta E[v],   nu_i <- (1 - beta) nu_i + beta E[v^2],
    sigma_i = sqrt(nu_i - mu_i^2), clipped to [min_scale, max_scale],

and the network's baseline output n_i(x) for task i is *normalised*: V_i(x) = sigma_i n_i(x) + mu_i.
V-trace runs on the unnormalised V; the baseline loss regresses n_i on (v_s - mu_i) / sigma_i and
the policy gradient uses the advantage divided by sigma_i (``stampede.algo.losses.impala_loss``'s
``scale``). When the statistics move, the last layer's row i is rescaled ("ART"),

    w_i <- w_i sigma_i / sigma_i',   b_i <- (sigma_i b_i + mu_i - mu_i') / sigma_i',

so that every unnormalised output V_i(x) is exactly what it was ("Preserving Outputs Precisely").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn


class PopArt(nn.Module):
    """Per-task running moments of value targets (buffers ``mu`` and ``nu``, [num_tasks]).

    ``step_size`` is beta (3e-4 in the paper's multi-task Atari agent). ``all_reduce`` sums
    tensors across learner ranks (distributed runs) so that every rank keeps the same moments.
    Its ``state_dict`` is part of a run's checkpoint.
    """

    mu: Tensor
    nu: Tensor

    def __init__(
        self,
        num_tasks: int,
        step_size: float = 3e-4,
        min_scale: float = 1e-4,
        max_scale: float = 1e6,
        all_reduce: Callable[[Tensor], None] | None = None,
    ) -> None:
        super().__init__()
        if num_tasks < 1 or not 0.0 < step_size <= 1.0 or not 0.0 < min_scale <= max_scale:
            raise ValueError(
                f"PopArt: need num_tasks >= 1, step_size in (0, 1] and 0 < min_scale <= "
                f"max_scale, got {num_tasks}, {step_size}, {min_scale}, {max_scale}"
            )
        self.step_size, self.min_scale, self.max_scale = step_size, min_scale, max_scale
        self.all_reduce = all_reduce
        self.register_buffer("mu", torch.zeros(num_tasks, dtype=torch.float64))
        self.register_buffer("nu", torch.ones(num_tasks, dtype=torch.float64))  # sigma starts at 1

    @property
    def sigma(self) -> Tensor:
        """[num_tasks] the scale of each task's targets, sqrt(nu - mu^2) clipped."""
        variance = (self.nu - self.mu**2).clamp(min=0.0)
        return variance.sqrt().clamp(self.min_scale, self.max_scale)

    def scale_and_shift(self, task: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """(sigma, mu) of each entry's task: ``task`` int [...] -> two [...] tensors of dtype."""
        return self.sigma.to(dtype)[task], self.mu.to(dtype)[task]

    def denormalise(self, normalised: Tensor, task: Tensor) -> Tensor:
        """V = sigma n + mu, entry by entry: ``normalised`` and ``task`` of one shape."""
        sigma, mu = self.scale_and_shift(task, normalised.dtype)
        return sigma * normalised + mu

    def normalise(self, value: Tensor, task: Tensor) -> Tensor:
        """n = (V - mu) / sigma, entry by entry (the inverse of ``denormalise``)."""
        sigma, mu = self.scale_and_shift(task, value.dtype)
        return (value - mu) / sigma

    @torch.no_grad()
    def update(self, targets: Tensor, task: Tensor, head: nn.Linear) -> None:
        """Move each task's moments towards the batch's targets, then rescale the baseline
        ``head`` (one output row per task) so that its unnormalised outputs do not change.

        targets: [T, B] unnormalised value targets (V-trace's v_s); task: [B] the task of each
        trajectory. A task absent from the batch (on every rank) keeps its moments, and a
        trajectory with a non-finite target (a faulty env; the learner skips that update) is left
        out, so one NaN cannot poison the statistics for the rest of the run.
        """
        num_tasks = self.mu.numel()
        finite = torch.isfinite(targets).all(0)  # [B]
        v = torch.where(finite, targets.double(), 0.0)  # [T, B]
        per_column = torch.stack([v.sum(0), (v**2).sum(0)])  # [2, B]
        sums = torch.zeros(3, num_tasks, dtype=torch.float64, device=targets.device)
        sums[:2].index_add_(1, task, per_column)  # [2, K]: sum of v and of v^2 per task
        sums[2].index_add_(0, task, finite.double() * targets.shape[0])  # steps per task
        if self.all_reduce is not None:
            self.all_reduce(sums)
        present = sums[2] > 0
        count = sums[2].clamp(min=1.0)
        beta = torch.where(present, self.step_size, 0.0)
        old_sigma, old_mu = self.sigma, self.mu.clone()
        self.mu.mul_(1 - beta).add_(beta * sums[0] / count)
        self.nu.mul_(1 - beta).add_(beta * sums[1] / count)
        new_sigma = self.sigma
        ratio = (old_sigma / new_sigma).to(head.weight.dtype)  # [K]
        head.weight.mul_(ratio[:, None])
        head.bias.copy_(
            ((old_sigma * head.bias.double() + old_mu - self.mu) / new_sigma).to(head.bias.dtype)
        )

    def extra_repr(self) -> str:
        return f"num_tasks={self.mu.numel()}, step_size={self.step_size}"

    def metrics(self, games: Sequence[str]) -> dict[str, float]:
        """``popart/<game>/mu`` and ``popart/<game>/sigma``: each task's target statistics
        (``games``: the task names in task order)."""
        metrics = {}
        for task, game in enumerate(games):
            metrics[f"popart/{game}/mu"] = float(self.mu[task])
            metrics[f"popart/{game}/sigma"] = float(self.sigma[task])
        return metrics

"""PopArt (Hessel et al. 2019): output preservation, normalised V-trace, statistics, resume."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from stampede.algo import vtrace
from stampede.algo.losses import impala_loss
from stampede.algo.popart import PopArt
from stampede.config.schema import Config, OptimConfig, VTraceConfig
from stampede.envs import EnvSpec
from stampede.models import MLP
from stampede.rundir import checkpoint_state
from stampede.rundir.checkpoint import CheckpointError
from stampede.train.learner import Learner

T, B, OBS, A, K = 5, 6, 4, 3, 3
TASK = torch.tensor([0, 0, 1, 1, 2, 2])  # [B]: the task of each trajectory


def inputs(seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(T + 1, B, OBS, generator=g)
    last_action = torch.randint(0, A, (T + 1, B), generator=g)
    reward = torch.randn(T + 1, B, generator=g)
    done = torch.zeros(T + 1, B, dtype=torch.bool)
    return obs, last_action, reward, done


def values(model: MLP, popart: PopArt) -> torch.Tensor:
    """The unnormalised V of every step, [T + 1, B]."""
    task = TASK.expand(T + 1, B)
    with torch.no_grad():
        return popart.denormalise(model(*inputs(), task=task).baseline, task)


def test_the_statistics_update_preserves_every_unnormalised_output() -> None:
    """The paper's invariant: after mu and sigma move, sigma' n'(x) + mu' == sigma n(x) + mu, to
    1e-5 in units of the task's scale sigma' (float32 holds a value near mu ~ 10^4 to ~1e-3)."""
    torch.manual_seed(0)
    model, popart = MLP((OBS,), A, num_tasks=K), PopArt(K, step_size=0.3)
    g = torch.Generator().manual_seed(1)
    # Targets of very different scales per task, as games' returns are.
    scales = torch.tensor([1.0, 100.0, 10_000.0])[TASK]  # [B]
    for _ in range(20):
        before = values(model, popart)
        targets = scales * (torch.randn(T, B, generator=g) + 3.0)  # [T, B]
        popart.update(targets, TASK, model.baseline)
        after = values(model, popart)
        unit = popart.sigma[TASK].float()  # [B]
        torch.testing.assert_close(after / unit, before / unit, rtol=1e-5, atol=1e-5)
    assert popart.sigma[2] > 1000 * popart.sigma[0]  # the statistics did move, apart


def test_a_task_absent_from_the_batch_keeps_its_statistics() -> None:
    torch.manual_seed(0)
    model, popart = MLP((OBS,), A, num_tasks=K), PopArt(K, step_size=0.5)
    weight = model.baseline.weight[2].clone()
    popart.update(torch.full((T, 4), 7.0), TASK[:4], model.baseline)  # tasks 0 and 1 only
    assert popart.mu[2] == 0
    assert popart.nu[2] == 1
    assert torch.equal(model.baseline.weight[2], weight)
    assert popart.mu[0] == pytest.approx(3.5)
    assert popart.mu[1] == pytest.approx(3.5)


def test_a_non_finite_target_leaves_the_statistics_alone() -> None:
    head = torch.nn.Linear(8, K)
    popart = PopArt(K, step_size=0.5)
    targets = torch.full((T, B), 4.0)
    targets[2, 0] = float("nan")  # trajectory 0 (task 0); trajectory 1 (task 0) is fine
    targets[:, 4:] = float("inf")  # both trajectories of task 2
    popart.update(targets, TASK, head)
    assert popart.mu[0] == pytest.approx(2.0)  # from trajectory 1 alone
    assert popart.mu[2] == 0.0
    assert torch.isfinite(popart.nu).all()
    assert torch.isfinite(head.weight).all()


def test_the_statistics_converge_to_the_true_mean_and_scale_of_each_task() -> None:
    g = torch.Generator().manual_seed(0)
    head = torch.nn.Linear(8, 2)
    popart = PopArt(2, step_size=0.01)
    mean, std = torch.tensor([250.0, -0.5]), torch.tensor([40.0, 0.2])
    task = torch.tensor([0, 1] * 4)  # [8]
    for _ in range(2000):
        popart.update(mean[task] + std[task] * torch.randn(T, 8, generator=g), task, head)
    torch.testing.assert_close(popart.mu.float(), mean, rtol=0.03, atol=0.01)
    torch.testing.assert_close(popart.sigma.float(), std, rtol=0.05, atol=0.0)


def test_normalised_vtrace_targets_denormalise_to_the_unnormalised_ones() -> None:
    """V-trace runs on V = sigma n + mu; the loss sees (v_s - mu) / sigma and A / sigma. The
    targets, de-normalised, are those of a network that outputs V itself, and the baseline
    loss's gradient on n is n - (v_s - mu) / sigma, the paper's normalised regression."""
    g = torch.Generator().manual_seed(0)
    popart = PopArt(K)
    popart.mu.copy_(torch.tensor([5.0, -300.0, 0.1], dtype=torch.float64))
    popart.nu.copy_(popart.mu**2 + torch.tensor([4.0, 900.0, 0.01], dtype=torch.float64))
    task = TASK.expand(T, B)
    v_plain = torch.randn(T, B, generator=g) * 50  # what a plain network would output
    bootstrap = torch.randn(B, generator=g) * 50
    n = popart.normalise(v_plain, task).requires_grad_()  # what the PopArt network outputs
    args = dict(
        behaviour_logits=torch.randn(T, B, A, generator=g),
        target_logits=torch.randn(T, B, A, generator=g),
        actions=torch.randint(0, A, (T, B), generator=g),
        discounts=torch.full((T, B), 0.99),
        rewards=torch.randn(T, B, generator=g),
    )
    plain = vtrace.from_logits(values=v_plain, bootstrap_value=bootstrap, **args)
    sigma = popart.scale_and_shift(task, torch.float32)[0]
    costs = dict(baseline_cost=1.0, entropy_cost=0.0, rho_bar=1.0, c_bar=1.0, pg_rho_bar=1.0)
    loss, metrics, used = impala_loss(
        values=popart.denormalise(n, task),
        bootstrap_value=bootstrap,
        lambda_=1.0,
        scale=sigma,
        **args,
        **costs,
    )
    close = dict(rtol=1e-5, atol=1e-4)  # float32 values of size ~300
    torch.testing.assert_close(used.vs, plain.vs, **close)  # V-trace on the unnormalised values
    normalised = popart.normalise(used.vs, task)
    torch.testing.assert_close(popart.denormalise(normalised, task), plain.vs, **close)
    (grad,) = torch.autograd.grad(loss, n)  # only the baseline term reaches the values
    torch.testing.assert_close(grad, n.detach() - normalised, rtol=1e-4, atol=1e-4)
    expected_pg = -(
        vtrace.action_log_probs(args["target_logits"], args["actions"])
        * plain.pg_advantages
        / sigma
    ).sum()
    assert metrics["loss/pg"] == pytest.approx(float(expected_pg), rel=1e-5)


def test_the_learner_moves_the_statistics_before_its_step_and_keeps_the_values() -> None:
    torch.manual_seed(0)
    model = MLP((OBS,), A, num_tasks=K)
    popart = PopArt(K, step_size=0.5)
    optim = OptimConfig(name="adam", lr=1e-9, anneal_lr=False)  # a step too small to matter
    settings = VTraceConfig(discount=0.9, reward_clip=0.0)  # raw rewards: targets far from 1
    learner = Learner(model, settings, optim, total_frames=1000, popart=popart)
    obs, last_action, reward, done = inputs()
    batch = {
        "obs": obs,
        "last_action": last_action,
        "reward": reward * 30,
        "done": done,
        "action": last_action,
        "logits": torch.zeros(T + 1, B, A),
        "task": TASK.expand(T + 1, B).clone(),
    }
    before = values(model, popart)
    learner.update(batch, frames=0)
    assert not torch.equal(popart.mu, torch.zeros(K, dtype=torch.float64))
    torch.testing.assert_close(values(model, popart), before, rtol=1e-4, atol=1e-4)


def test_resume_restores_the_statistics_exactly(tmp_path: Path) -> None:
    spec = EnvSpec((OBS,), np.dtype(np.float32), A, 1)
    cfg = Config()
    torch.manual_seed(0)
    model = MLP((OBS,), A, num_tasks=K)
    optimizer = torch.optim.Adam(model.parameters())
    popart = PopArt(K, step_size=0.1)
    for seed in range(3):
        g = torch.Generator().manual_seed(seed)
        popart.update(torch.randn(T, B, generator=g) * 17 + 4, TASK, model.baseline)
    progress = checkpoint_state.Progress(frames=100, updates=2, task_frames=[40, 30, 30])
    checkpoint_state.save(tmp_path, cfg, spec, model, optimizer, progress, popart)

    fresh = PopArt(K, step_size=0.1)
    again = MLP((OBS,), A, num_tasks=K)
    resumed = checkpoint_state.resume(
        tmp_path, cfg, spec, again, torch.optim.Adam(again.parameters()), fresh
    )
    assert torch.equal(fresh.mu, popart.mu)
    assert torch.equal(fresh.nu, popart.nu)
    assert resumed.task_frames == [40, 30, 30]
    with pytest.raises(CheckpointError, match=r"vtrace.popart=true"):
        checkpoint_state.resume(tmp_path, cfg, spec, again, torch.optim.Adam(again.parameters()))


def test_popart_settings_are_checked() -> None:
    from stampede.config.checks import ConfigError

    with pytest.raises(ConfigError, match=r"vtrace.popart_step_size"):
        VTraceConfig(popart=True, popart_step_size=0.0)
    with pytest.raises(ValueError, match=r"step_size"):
        PopArt(2, step_size=2.0)

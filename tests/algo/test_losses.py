"""Tests for stampede.algo.losses: values, analytic gradients, and the composed IMPALA loss."""

from __future__ import annotations

import math
import re

import pytest
import torch
import torch.nn.functional as F

from stampede.algo import losses, vtrace

T, B, A = 3, 2, 4
f64 = torch.float64


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(0)


def randn(gen, *shape, requires_grad=False):
    return torch.randn(*shape, generator=gen, dtype=f64).requires_grad_(requires_grad)


def entropy(logits):
    p = torch.softmax(logits, -1)
    return -(p * torch.log(p)).sum()


def test_policy_gradient_loss_value_and_gradient(gen):
    logits = randn(gen, T, B, A, requires_grad=True)
    actions = torch.randint(0, A, (T, B), generator=gen)
    advantages = randn(gen, T, B, requires_grad=True)
    loss = losses.policy_gradient_loss(logits, actions, advantages)

    p = torch.softmax(logits.detach(), -1)  # [T, B, A]
    log_p_a = torch.log(p.gather(-1, actions[..., None]))[..., 0]  # [T, B]
    torch.testing.assert_close(loss, -(log_p_a * advantages.detach()).sum())

    loss.backward()
    # d/dlogits of -adv * log softmax(logits)[a] = -adv * (onehot(a) - softmax(logits)).
    onehot = F.one_hot(actions, A).to(f64)  # [T, B, A]
    expected = -advantages.detach()[..., None] * (onehot - p)  # [T, B, A]
    torch.testing.assert_close(logits.grad, expected)
    assert advantages.grad is None  # advantages are constants


def test_policy_gradient_loss_by_hand():
    # T = B = 1, two actions with equal logits: pi(a) = 0.5, advantage 2 -> loss = -2 log 0.5.
    logits = torch.zeros(1, 1, 2, dtype=f64, requires_grad=True)
    loss = losses.policy_gradient_loss(
        logits, torch.tensor([[1]]), torch.tensor([[2.0]], dtype=f64)
    )
    assert loss.item() == pytest.approx(2 * math.log(2))
    loss.backward()
    # -2 * (onehot(1) - [0.5, 0.5]) = [1, -1]: descending raises the logit of the action taken.
    torch.testing.assert_close(logits.grad, torch.tensor([[[1.0, -1.0]]], dtype=f64))


def test_clipped_pg_at_the_anchor_has_the_plain_pg_gradient(gen):
    logits = randn(gen, T, B, A, requires_grad=True)
    actions = torch.randint(0, A, (T, B), generator=gen)
    advantages = randn(gen, T, B)
    losses.clipped_policy_gradient_loss(logits, logits, actions, advantages, 0.1).backward()
    clipped_grad = logits.grad.clone()
    logits.grad = None
    losses.policy_gradient_loss(logits, actions, advantages).backward()
    torch.testing.assert_close(clipped_grad, logits.grad)


def test_clipped_pg_by_hand():
    # Two actions; the anchor had pi_0(a=1) = 0.5. Now pi(1) = sigmoid(1) = 0.731: r = 1.462.
    logits = torch.tensor([[[0.0, 1.0]]], dtype=f64, requires_grad=True)
    anchor = torch.zeros(1, 1, 2, dtype=f64)
    action = torch.tensor([[1]])
    r = 2 * torch.sigmoid(torch.tensor(1.0, dtype=f64)).item()
    # A = +2: min(r * 2, 1.2 * 2) = 2.4, clipped, so no gradient (no push beyond 1 + clip).
    loss = losses.clipped_policy_gradient_loss(logits, anchor, action, torch.tensor([[2.0]]), 0.2)
    assert loss.item() == pytest.approx(-2.4)
    loss.backward()
    torch.testing.assert_close(logits.grad, torch.zeros(1, 1, 2, dtype=f64))
    # A = -2: min(-2 r, -2.4) = -2 r, unclipped: the gradient pulls pi(1) back down.
    logits.grad = None
    loss = losses.clipped_policy_gradient_loss(logits, anchor, action, torch.tensor([[-2.0]]), 0.2)
    assert loss.item() == pytest.approx(2 * r)
    loss.backward()
    # d(2 r)/dlogits = 2 r (onehot(1) - pi) = 2 r [-(1 - p), 1 - p], p = pi(1).
    p = r / 2
    torch.testing.assert_close(
        logits.grad, torch.tensor([[[-2 * r * (1 - p), 2 * r * (1 - p)]]], dtype=f64)
    )


def test_baseline_loss_value_and_gradient(gen):
    values = randn(gen, T, B, requires_grad=True)
    targets = randn(gen, T, B, requires_grad=True)
    loss = losses.baseline_loss(values, targets)
    torch.testing.assert_close(loss, 0.5 * ((targets - values) ** 2).sum())
    loss.backward()
    torch.testing.assert_close(values.grad, (values - targets).detach())
    assert targets.grad is None  # targets are constants


def test_entropy_loss_is_negative_entropy_and_descent_raises_entropy(gen):
    logits = randn(gen, T, B, A, requires_grad=True)
    loss = losses.entropy_loss(logits)
    torch.testing.assert_close(loss, -entropy(logits.detach()))
    loss.backward()
    stepped = logits.detach() - 0.1 * logits.grad
    assert entropy(stepped) > entropy(logits.detach())
    # Uniform policies have the largest entropy, T * B * log A.
    uniform = losses.entropy_loss(torch.zeros(T, B, A, dtype=f64))
    assert uniform.item() == pytest.approx(-T * B * math.log(A))
    assert loss.item() > uniform.item()


def impala_inputs(gen, requires_grad=True):
    """All float inputs require grad, so the test sees which ones the loss touches."""
    return {
        "target_logits": randn(gen, T, B, A, requires_grad=requires_grad),
        "values": randn(gen, T, B, requires_grad=requires_grad),
        "bootstrap_value": randn(gen, B, requires_grad=requires_grad),
        "behaviour_logits": randn(gen, T, B, A, requires_grad=requires_grad),
        "actions": torch.randint(0, A, (T, B), generator=gen),
        "rewards": randn(gen, T, B, requires_grad=requires_grad),
        "discounts": torch.full((T, B), 0.99, dtype=f64, requires_grad=requires_grad),
    }


COSTS = {
    "baseline_cost": 0.5,
    "entropy_cost": 0.01,
    "rho_bar": 1.0,
    "c_bar": 0.9,
    "pg_rho_bar": 1.0,
    "lambda_": 0.95,
}


def test_impala_loss_composes_the_parts(gen):
    inputs = impala_inputs(gen, requires_grad=False)
    total, metrics, _ = losses.impala_loss(**inputs, **COSTS)

    vt = vtrace.from_logits(
        inputs["behaviour_logits"],
        inputs["target_logits"],
        inputs["actions"],
        inputs["discounts"],
        inputs["rewards"],
        inputs["values"],
        inputs["bootstrap_value"],
        rho_bar=1.0,
        c_bar=0.9,
        pg_rho_bar=1.0,
        lambda_=0.95,
    )
    pg = losses.policy_gradient_loss(inputs["target_logits"], inputs["actions"], vt.pg_advantages)
    baseline = 0.5 * losses.baseline_loss(inputs["values"], vt.vs)
    ent = 0.01 * losses.entropy_loss(inputs["target_logits"])
    torch.testing.assert_close(total, pg + baseline + ent)

    assert list(metrics) == [
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
    ]
    assert all(type(v) is float for v in metrics.values())
    assert metrics["loss/pg"] == pytest.approx(pg.item())
    assert metrics["loss/baseline"] == pytest.approx(baseline.item())  # weighted by its cost
    assert metrics["loss/entropy"] == pytest.approx(ent.item())
    assert metrics["loss/total"] == pytest.approx(total.item())
    assert metrics["vtrace/rho_mean"] == pytest.approx(vt.rho_mean.item())
    assert metrics["vtrace/rho_clipped_frac"] == pytest.approx(vt.rho_clipped_frac.item())


def test_impala_loss_gradients_reach_only_logits_and_values(gen):
    inputs = impala_inputs(gen)
    total, _, _ = losses.impala_loss(**inputs, **COSTS)
    total.backward()
    for name in ("target_logits", "values"):
        grad = inputs[name].grad
        assert grad is not None, name
        assert torch.isfinite(grad).all(), name
        assert grad.abs().sum() > 0, name
    for name in ("bootstrap_value", "behaviour_logits", "rewards", "discounts"):
        assert inputs[name].grad is None, name


def test_impala_loss_with_zero_costs_is_the_pg_loss(gen):
    inputs = impala_inputs(gen, requires_grad=False)
    costs = {**COSTS, "baseline_cost": 0.0, "entropy_cost": 0.0}
    total, metrics, _ = losses.impala_loss(**inputs, **costs)
    assert metrics["loss/baseline"] == metrics["loss/entropy"] == 0.0
    assert total.item() == pytest.approx(metrics["loss/pg"])


def test_normalised_advantages_use_the_moments_given_else_their_own(gen):
    inputs = impala_inputs(gen, requires_grad=False)
    costs = {**COSTS, "baseline_cost": 0.0, "entropy_cost": 0.0, "normalize_advantages": True}
    _, own, returns = losses.impala_loss(**inputs, **costs)
    adv = returns.pg_advantages
    by_hand = (adv - adv.mean()) / (adv.std(unbiased=False) + 1e-8)
    pg = losses.policy_gradient_loss(inputs["target_logits"], inputs["actions"], by_hand)
    assert own["loss/pg"] == pytest.approx(pg.item())
    # A minibatch normalised with its batch's moments: here a batch with 3x the spread.
    batch = torch.tensor([adv.mean().item() + 1.0, 3 * adv.std(unbiased=False).item()], dtype=f64)
    _, given, _ = losses.impala_loss(**inputs, **costs, advantage_moments=batch)
    scaled = (adv - batch[0]) / (batch[1] + 1e-8)
    pg = losses.policy_gradient_loss(inputs["target_logits"], inputs["actions"], scaled)
    assert given["loss/pg"] == pytest.approx(pg.item())
    assert given["learner/adv_std"] == own["learner/adv_std"]  # diagnostics: before scaling
    torch.testing.assert_close(losses.moments(adv), torch.stack([adv.mean(), adv.std(False)]))


def test_the_return_range_scales_down_a_wide_spread_and_never_up():
    targets = torch.arange(101, dtype=f64).reshape(1, 101) / 10  # 0.0 ... 10.0: P5 0.5, P95 9.5
    torch.testing.assert_close(losses.return_range(targets), torch.tensor([0.0, 9.0], dtype=f64))
    narrow = targets / 100  # a spread of 0.09: advantages keep their size
    torch.testing.assert_close(losses.return_range(narrow), torch.tensor([0.0, 1.0], dtype=f64))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: losses.policy_gradient_loss(
                torch.zeros(T, B, A), torch.zeros(T, B + 1, dtype=torch.int64), torch.zeros(T, B)
            ),
            "losses: actions must have shape [T, B] = [3, 2] like logits, got [3, 3]",
        ),
        (
            lambda: losses.policy_gradient_loss(
                torch.zeros(T, B, A), torch.zeros(T, B, dtype=torch.int64), torch.zeros(T)
            ),
            "losses: advantages must have shape [T, B] = [3, 2] like logits, got [3]",
        ),
        (
            lambda: losses.baseline_loss(torch.zeros(T, B), torch.zeros(T + 1, B)),
            "losses: targets must have shape [T, B] = [3, 2] like values, got [4, 2]",
        ),
        (
            lambda: losses.entropy_loss(torch.zeros(T, A)),
            "losses: logits must have shape [T, B, A], got [3, 4]",
        ),
    ],
)
def test_bad_shapes_raise_our_message(call, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        call()


def test_diagnostics_by_hand():
    # T = B = 1, two actions. pi = softmax([0, ln 3]) = [1/4, 3/4], mu = [1/2, 1/2].
    target = torch.tensor([[[0.0, math.log(3.0)]]], dtype=f64)
    behaviour = torch.zeros(1, 1, 2, dtype=f64)
    values = torch.tensor([[1.0]], dtype=f64)
    returns = vtrace.VTraceReturns(
        vs=torch.tensor([[3.0]], dtype=f64),
        pg_advantages=torch.tensor([[2.0]], dtype=f64),
        log_rhos=torch.zeros(1, 1, dtype=f64),
        rho_mean=torch.tensor(1.0, dtype=f64),
        rho_clipped_frac=torch.tensor(0.0, dtype=f64),
    )
    rewards = torch.tensor([[0.0]], dtype=f64)
    entropy_, ev, kl, adv_mean, adv_std, density = losses.diagnostics(
        target, behaviour, values, returns, rewards
    )
    assert entropy_.item() == pytest.approx(-(0.25 * math.log(0.25) + 0.75 * math.log(0.75)))
    # KL(mu || pi) = 1/2 ln(1/2 / 1/4) + 1/2 ln(1/2 / 3/4)
    assert kl.item() == pytest.approx(0.5 * math.log(2) + 0.5 * math.log(2 / 3))
    assert math.isnan(ev.item())  # one target: no variance to explain
    assert (adv_mean.item(), adv_std.item()) == (2.0, 0.0)
    assert density.item() == 0.0


def test_reward_density_counts_steps_with_a_reward_of_either_sign():
    # T = 4, B = 2: rewards at 3 of the 8 steps (a negative one counts too).
    target = torch.zeros(4, 2, 3, dtype=f64)
    returns = vtrace.VTraceReturns(
        vs=torch.zeros(4, 2, dtype=f64),
        pg_advantages=torch.zeros(4, 2, dtype=f64),
        log_rhos=torch.zeros(4, 2, dtype=f64),
        rho_mean=torch.tensor(1.0, dtype=f64),
        rho_clipped_frac=torch.tensor(0.0, dtype=f64),
    )
    rewards = torch.tensor([[0.0, 1.0], [0.0, 0.0], [-1.0, 0.0], [0.0, 0.5]], dtype=f64)
    density = losses.diagnostics(target, target, torch.zeros(4, 2, dtype=f64), returns, rewards)[5]
    assert density.item() == 3 / 8


def test_explained_variance_is_one_for_exact_values_and_zero_for_the_mean():
    targets = torch.tensor([[1.0, 2.0], [3.0, 6.0]], dtype=f64)
    assert losses.explained_variance(targets, targets).item() == pytest.approx(1.0)
    mean = torch.full_like(targets, targets.mean().item())
    assert losses.explained_variance(mean, targets).item() == pytest.approx(0.0)
    assert losses.explained_variance(-targets, targets).item() < 0

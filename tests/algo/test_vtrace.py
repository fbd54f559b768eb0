"""Tests for stampede.algo.vtrace against the IMPALA paper (arXiv 1802.01561, section 4, eq. 1)."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
from conftest import assert_close_ulps

from stampede.algo import vtrace

T, B = 20, 32


def ground_truth(log_rhos, discounts, rewards, values, bootstrap, rho_bar, c_bar, pg_rho_bar, lam):
    """Eq. 1 written out literally, in float64 Python, one (s, b) at a time.

    v_s = V(x_s) + sum_{t=s}^{T-1} (prod_{i=s}^{t-1} gamma_i c_i) delta_t,
    delta_t = rho_t (r_t + gamma_t V(x_{t+1}) - V(x_t)), with V(x_T) = bootstrap.
    The paper's gamma^{t-s} becomes prod_{i=s}^{t-1} gamma_i with per-step discounts.
    """
    n, m = log_rhos.shape
    vs = np.zeros((n, m))
    adv = np.zeros((n, m))
    for b in range(m):
        V = [*values[:, b].tolist(), float(bootstrap[b])]  # V(x_0) ... V(x_T)
        ratio = [math.exp(x) for x in log_rhos[:, b]]  # pi / mu
        rho = [min(rho_bar, x) for x in ratio]
        c = [lam * min(c_bar, x) for x in ratio]
        gamma, r = discounts[:, b].tolist(), rewards[:, b].tolist()
        delta = [rho[t] * (r[t] + gamma[t] * V[t + 1] - V[t]) for t in range(n)]
        for s in range(n):
            total = 0.0
            for t in range(s, n):
                coef = 1.0
                for i in range(s, t):
                    coef *= gamma[i] * c[i]
                total += coef * delta[t]
            vs[s, b] = V[s] + total
        v_next = [*vs[1:, b].tolist(), float(bootstrap[b])]  # v_{s+1}, v_T = V(x_T)
        for s in range(n):
            adv[s, b] = min(pg_rho_bar, ratio[s]) * (r[s] + gamma[s] * v_next[s] - V[s])
    return vs, adv


def random_inputs(rng, t=T, b=B):
    """Rhos spread over [0.1, 3] (across every clip level used below); ~10% episode ends."""
    log_rhos = np.log(rng.uniform(0.1, 3.0, size=(t, b)))
    discounts = 0.99 * (rng.uniform(size=(t, b)) > 0.1)
    rewards = rng.normal(size=(t, b))
    values = rng.normal(size=(t, b))
    bootstrap = rng.normal(size=(b,))
    return log_rhos, discounts, rewards, values, bootstrap


def to_torch(arrays, dtype=torch.float64, device="cpu"):
    return [torch.as_tensor(a, dtype=dtype, device=device) for a in arrays]


def run(arrays, dtype=torch.float64, **clips):
    return vtrace.from_importance_weights(*to_torch(arrays, dtype), **clips)


CLIPS = [
    # rho_bar, c_bar, pg_rho_bar, lambda_
    (1.0, 1.0, 1.0, 1.0),  # the paper's default
    (1.0, 0.9, 1.0, 1.0),  # c_bar < rho_bar
    (2.0, 1.5, 1.0, 0.9),  # above-1 clips and a lambda
    (0.5, 1.0, 2.0, 1.0),  # rho_bar < c_bar: allowed here, forbidden by the config layer
    (math.inf, math.inf, math.inf, 1.0),  # no clipping at all
    (1.0, 1.0, 1.0, 0.0),  # lambda = 0: one-step targets
]


@pytest.fixture(params=["backwards", "at_once"])
def recursion(request, monkeypatch):
    """Each way of summing the traces: backwards in time (the CPU's), all at once (CUDA's)."""
    if request.param == "at_once":  # the CUDA path, on the CPU
        monkeypatch.setattr(vtrace, "_traces_backwards", vtrace._traces_at_once)
    return request.param


@pytest.mark.parametrize("batch", [1, B])
@pytest.mark.parametrize(("rho_bar", "c_bar", "pg_rho_bar", "lam"), CLIPS)
def test_matches_ground_truth_float64(batch, rho_bar, c_bar, pg_rho_bar, lam, recursion):
    arrays = random_inputs(np.random.default_rng(0), b=batch)
    out = run(arrays, rho_bar=rho_bar, c_bar=c_bar, pg_rho_bar=pg_rho_bar, lambda_=lam)
    vs, adv = ground_truth(*arrays, rho_bar, c_bar, pg_rho_bar, lam)
    np.testing.assert_allclose(out.vs.numpy(), vs, rtol=0, atol=1e-6)
    np.testing.assert_allclose(out.pg_advantages.numpy(), adv, rtol=0, atol=1e-6)
    rhos = np.exp(arrays[0])
    assert out.rho_mean.item() == pytest.approx(rhos.mean(), abs=1e-12)
    assert out.rho_clipped_frac.item() == pytest.approx((rhos > rho_bar).mean(), abs=1e-12)
    assert out.vs.dtype == torch.float64
    assert out.vs.shape == (T, batch)


def test_the_two_recursions_agree_in_float32_within_a_few_ulps():
    """Horner backwards against products then a sum: different rounding, the same V-trace."""
    log_rhos, discounts, rewards, values, _ = to_torch(
        random_inputs(np.random.default_rng(3), t=32, b=8), torch.float32
    )
    ratio = log_rhos.exp()
    delta = ratio.clamp(max=1.0) * (rewards + discounts * values.roll(-1, 0) - values)
    a = discounts * 0.95 * ratio.clamp(max=1.0)
    backwards, at_once = vtrace._traces_backwards(delta, a), vtrace._traces_at_once(delta, a)
    assert_close_ulps(at_once, backwards, ulps=16)
    assert backwards.abs().max() > 1.0  # traces long enough to differ in rounding at all


def test_hand_computed_fixture():
    # T = 3, B = 1, gamma = 0.9 everywhere, rho_bar = c_bar = pg_rho_bar = lambda = 1.
    # pi/mu = [2, 0.5, 1] -> rho = c = [1, 0.5, 1]; r = [1, 2, 3]; V = [0.5, 1, 1.5]; V(x_3) = 2.
    # delta_2 = 1   * (3 + 0.9 * 2.0 - 1.5) = 3.3
    # delta_1 = 0.5 * (2 + 0.9 * 1.5 - 1.0) = 1.175
    # delta_0 = 1   * (1 + 0.9 * 1.0 - 0.5) = 1.4
    # v_2 = 1.5 + 3.3                                = 4.8
    # v_1 = 1.0 + 1.175 + 0.9 * 0.5 * (4.8 - 1.5)     = 3.66
    # v_0 = 0.5 + 1.4   + 0.9 * 1.0 * (3.66 - 1.0)    = 4.294
    # adv_0 = 1   * (1 + 0.9 * 3.66 - 0.5) = 3.794
    # adv_1 = 0.5 * (2 + 0.9 * 4.8  - 1.0) = 2.66
    # adv_2 = 1   * (3 + 0.9 * 2.0  - 1.5) = 3.3
    # rho_mean = 3.5 / 3; only pi/mu = 2 is above rho_bar -> clipped fraction 1/3.
    col = [[math.log(2.0)], [math.log(0.5)], [0.0]]
    arrays = (col, [[0.9]] * 3, [[1.0], [2.0], [3.0]], [[0.5], [1.0], [1.5]], [2.0])
    out = run(arrays)
    torch.testing.assert_close(out.vs[:, 0], torch.tensor([4.294, 3.66, 4.8], dtype=torch.float64))
    torch.testing.assert_close(
        out.pg_advantages[:, 0], torch.tensor([3.794, 2.66, 3.3], dtype=torch.float64)
    )
    assert out.rho_mean.item() == pytest.approx(3.5 / 3)
    assert out.rho_clipped_frac.item() == pytest.approx(1 / 3)


@pytest.mark.parametrize("batch", [1, B])
def test_on_policy_gives_n_step_returns(batch):
    """rho = 1, c_bar = rho_bar = lambda = 1: v_s is the bootstrapped n-step return (any V)."""
    _, discounts, rewards, values, bootstrap = random_inputs(np.random.default_rng(1), b=batch)
    out = run((np.zeros((T, batch)), discounts, rewards, values, bootstrap))
    expected = np.zeros((T, batch))
    for s in range(T):
        ret, scale = 0.0, np.ones(batch)
        for t in range(s, T):
            ret = ret + scale * rewards[t]
            scale = scale * discounts[t]
        expected[s] = ret + scale * bootstrap
    np.testing.assert_allclose(out.vs.numpy(), expected, rtol=0, atol=1e-10)
    next_expected = np.concatenate([expected[1:], bootstrap[None]])  # [T, B]: v_{s+1}
    np.testing.assert_allclose(
        out.pg_advantages.numpy(), rewards + discounts * next_expected - values, atol=1e-10
    )


def test_lambda_zero_gives_one_step_targets():
    log_rhos, discounts, rewards, values, bootstrap = random_inputs(np.random.default_rng(2))
    out = run((log_rhos, discounts, rewards, values, bootstrap), lambda_=0.0)
    v_tp1 = np.concatenate([values[1:], bootstrap[None]])  # [T, B]: V(x_{t+1})
    rho = np.minimum(1.0, np.exp(log_rhos))
    expected = values + rho * (rewards + discounts * v_tp1 - values)
    np.testing.assert_allclose(out.vs.numpy(), expected, rtol=0, atol=1e-10)


def test_splitting_the_batch_changes_nothing():
    arrays = random_inputs(np.random.default_rng(3))
    full = run(arrays, c_bar=0.9)
    left = run([a[..., :10] for a in arrays], c_bar=0.9)
    right = run([a[..., 10:] for a in arrays], c_bar=0.9)
    torch.testing.assert_close(full.vs, torch.cat([left.vs, right.vs], dim=1))
    torch.testing.assert_close(
        full.pg_advantages, torch.cat([left.pg_advantages, right.pg_advantages], dim=1)
    )


def test_episode_end_cuts_the_trace():
    rng = np.random.default_rng(4)
    log_rhos, discounts, rewards, values, bootstrap = random_inputs(rng)
    discounts[:] = 0.99
    k = 7
    discounts[k] = 0.0  # the episode ends after step k
    full = run((log_rhos, discounts, rewards, values, bootstrap))

    # Anything after step k (including the bootstrap) cannot change targets up to k.
    changed = [a.copy() for a in (log_rhos, discounts, rewards, values)]
    for a in changed:
        a[k + 1 :] = rng.normal(size=a[k + 1 :].shape)
    other = run((*changed, rng.normal(size=B)))
    torch.testing.assert_close(other.vs[: k + 1], full.vs[: k + 1])
    torch.testing.assert_close(other.pg_advantages[: k + 1], full.pg_advantages[: k + 1])

    # And splitting the unroll at the episode end gives the same targets on both sides.
    series = (log_rhos, discounts, rewards, values)
    head = run((*(a[: k + 1] for a in series), values[0]))  # any bootstrap: discounts[k] = 0
    tail = run((*(a[k + 1 :] for a in series), bootstrap))
    torch.testing.assert_close(torch.cat([head.vs, tail.vs]), full.vs)
    torch.testing.assert_close(
        torch.cat([head.pg_advantages, tail.pg_advantages]), full.pg_advantages
    )


def test_float32_follows_inputs_and_is_close():
    arrays = random_inputs(np.random.default_rng(5))
    out = run(arrays, dtype=torch.float32, c_bar=0.9)
    vs, adv = ground_truth(*arrays, 1.0, 0.9, 1.0, 1.0)
    assert out.vs.dtype == out.pg_advantages.dtype == out.rho_mean.dtype == torch.float32
    np.testing.assert_allclose(out.vs.numpy(), vs, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(out.pg_advantages.numpy(), adv, rtol=1e-4, atol=1e-4)


def logits_inputs(rng, num_actions=5, dtype=torch.float64):
    behaviour = torch.as_tensor(rng.normal(size=(T, B, num_actions)), dtype=dtype)
    target = torch.as_tensor(rng.normal(size=(T, B, num_actions)), dtype=dtype)
    actions = torch.as_tensor(rng.integers(0, num_actions, size=(T, B)))
    _, discounts, rewards, values, bootstrap = to_torch(random_inputs(rng), dtype)
    return behaviour, target, actions, discounts, rewards, values, bootstrap


def test_from_logits_uses_the_probability_ratio():
    behaviour, target, actions, *rest = logits_inputs(np.random.default_rng(6))
    out = vtrace.from_logits(behaviour, target, actions, *rest, c_bar=0.9)
    pi = torch.softmax(target, -1).gather(-1, actions[..., None])[..., 0]  # [T, B]
    mu = torch.softmax(behaviour, -1).gather(-1, actions[..., None])[..., 0]  # [T, B]
    torch.testing.assert_close(out.log_rhos, torch.log(pi / mu))
    again = vtrace.from_importance_weights(torch.log(pi / mu), *rest, c_bar=0.9)
    torch.testing.assert_close(out.vs, again.vs)
    torch.testing.assert_close(out.pg_advantages, again.pg_advantages)
    # Integer actions of another width are accepted.
    narrow = vtrace.from_logits(behaviour, target, actions.int(), *rest, c_bar=0.9)
    torch.testing.assert_close(narrow.vs, out.vs)


def test_targets_carry_no_gradient():
    behaviour, target, actions, discounts, rewards, values, bootstrap = logits_inputs(
        np.random.default_rng(7)
    )
    for t in (target, values, bootstrap):
        t.requires_grad_(True)
    out = vtrace.from_logits(behaviour, target, actions, discounts, rewards, values, bootstrap)
    assert not out.vs.requires_grad
    assert not out.pg_advantages.requires_grad
    assert not out.log_rhos.requires_grad
    log_rhos = torch.zeros(T, B, dtype=torch.float64, requires_grad=True)
    out = vtrace.from_importance_weights(log_rhos, discounts, rewards, values, bootstrap)
    assert not out.vs.requires_grad
    assert not out.pg_advantages.requires_grad
    assert not out.log_rhos.requires_grad


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu():
    cpu_inputs = logits_inputs(np.random.default_rng(8), dtype=torch.float32)
    cuda_inputs = [t.cuda() for t in cpu_inputs]
    on_cpu = vtrace.from_logits(*cpu_inputs, c_bar=0.9)
    on_cuda = vtrace.from_logits(*cuda_inputs, c_bar=0.9)
    assert on_cuda.vs.is_cuda
    assert on_cuda.vs.dtype == torch.float32
    for a, b in zip(on_cpu, on_cuda, strict=True):
        torch.testing.assert_close(b.cpu(), a, rtol=1e-5, atol=1e-5)


def _valid():
    return to_torch(random_inputs(np.random.default_rng(9)))


def _with(index, value):
    args = _valid()
    args[index] = value
    return args


f64 = torch.float64
BAD_INPUTS = [
    (
        _with(2, torch.zeros(T, B - 1, dtype=f64)),
        "vtrace: rewards must have shape [T, B] = [20, 32] like log_rhos, got [20, 31]",
    ),
    (
        _with(1, torch.zeros(B, T, dtype=f64)),
        "vtrace: discounts must have shape [T, B] = [20, 32] like log_rhos, got [32, 20]",
    ),
    (
        _with(4, torch.zeros(T, dtype=f64)),
        "vtrace: bootstrap_value must have shape [B] = [32] like log_rhos, got [20]",
    ),
    (
        _with(3, torch.zeros(T, B, dtype=torch.float32)),
        "vtrace: values must be torch.float64 like log_rhos, got torch.float32",
    ),
    (
        _with(3, torch.zeros(T, B, dtype=f64, device="meta")),
        "vtrace: values must be on cpu like log_rhos, got meta",
    ),
    (
        _with(0, torch.zeros(T * B, dtype=f64)),
        "vtrace: log_rhos must be a non-empty float tensor of shape [T, B], "
        "got torch.float64 [640]",
    ),
    (
        _with(0, torch.zeros(0, B, dtype=f64)),
        "vtrace: log_rhos must be a non-empty float tensor of shape [T, B], "
        "got torch.float64 [0, 32]",
    ),
    (
        _with(0, torch.zeros(T, B, dtype=torch.int64)),
        "vtrace: log_rhos must be a non-empty float tensor of shape [T, B], got torch.int64",
    ),
]


@pytest.mark.parametrize(("args", "message"), BAD_INPUTS)
def test_bad_inputs_raise_our_message(args, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        vtrace.from_importance_weights(*args)


@pytest.mark.parametrize(
    ("clips", "message"),
    [
        ({"rho_bar": 0.0}, "vtrace: rho_bar must be a float > 0"),
        ({"c_bar": -1.0}, "vtrace: c_bar must be a float > 0"),
        ({"pg_rho_bar": math.nan}, "vtrace: pg_rho_bar must be a float > 0"),
        ({"rho_bar": None}, "vtrace: rho_bar must be a float > 0"),
        ({"lambda_": 1.5}, "vtrace: lambda_ must be in [0, 1], got 1.5"),
    ],
)
def test_bad_clips_raise(clips, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        vtrace.from_importance_weights(*_valid(), **clips)


def test_bad_logits_inputs_raise_our_message():
    behaviour, target, actions, *rest = logits_inputs(np.random.default_rng(10))
    cases = [
        (
            (behaviour[..., :4], target, actions),
            "vtrace: behaviour_logits must have shape [T, B, A] = [20, 32, 5] like target_logits, "
            "got [20, 32, 4]",
        ),
        (
            (behaviour, target, actions[:, :3]),
            "vtrace: actions must have shape [T, B] = [20, 32] like target_logits, got [20, 3]",
        ),
        (
            (behaviour, target, actions.double()),
            "vtrace: actions must be an integer tensor, got torch.float64",
        ),
        (
            (behaviour, target[:, :, 0], actions),
            "vtrace: target_logits must be a non-empty float tensor of shape [T, B, A]",
        ),
        (
            (behaviour, target, actions, rest[0][:, :5]),
            "vtrace: discounts must have shape [T, B] = [20, 32] like target_logits, got [20, 5]",
        ),
    ]
    for head, message in cases:
        args = [*head, *rest[len(head) - 3 :]]
        with pytest.raises(ValueError, match=re.escape(message)):
            vtrace.from_logits(*args)

"""RMSpropTF against TF1's RMSProp written out by hand, and the paper's linear lr schedule."""

from __future__ import annotations

import math

import pytest
import torch

from stampede.algo.optim import RMSpropTF, linear_lr


def tf1_rmsprop(theta0, grads, lrs, decay, eps, momentum):
    """tf.compat.v1.train.RMSPropOptimizer (centered=False), one float at a time:

        ms_t    = decay * ms_{t-1} + (1 - decay) * g_t^2,     ms_0 = 1
        mom_t   = momentum * mom_{t-1} + lr_t * g_t / sqrt(ms_t + eps),   mom_0 = 0
        theta_t = theta_{t-1} - mom_t

    theta0: list of floats; grads: one list of floats per step; lrs: the lr of each step.
    Returns theta after every step (one list per step).
    """
    theta = list(theta0)
    ms = [1.0] * len(theta)
    mom = [0.0] * len(theta)
    history = []
    for g, lr in zip(grads, lrs, strict=True):
        for i, g_i in enumerate(g):
            ms[i] = decay * ms[i] + (1.0 - decay) * g_i * g_i
            mom[i] = momentum * mom[i] + lr * g_i / math.sqrt(ms[i] + eps)
            theta[i] = theta[i] - mom[i]
        history.append(list(theta))
    return history


THETA0 = [0.5, -1.25, 2.0, 0.0, 3.5, -0.75]
# Gradients of mixed sign and scale (tiny ones, where eps and ms_0 = 1 dominate; large ones,
# where g^2 moves the accumulator far from 1), and a zero one.
GRADS = [
    [0.1, -2.0, 30.0, 1e-4, 0.0, -0.5],
    [-0.3, -1.5, 10.0, 2e-4, 0.0, 4.0],
    [0.2, 3.0, -25.0, -1e-4, 0.0, -6.0],
    [0.05, 0.5, 5.0, 3e-4, 0.0, 0.25],
    [-0.4, -0.1, -1.0, 1e-4, 0.0, 8.0],
]


def run_rmsprop_tf(grads, lrs, **kwargs):
    """Our optimizer on a float64 tensor with the given gradient and lr at each step."""
    theta = torch.tensor(THETA0, dtype=torch.float64, requires_grad=True)
    opt = RMSpropTF([theta], lr=lrs[0], **kwargs)
    history = []
    for g, lr in zip(grads, lrs, strict=True):
        opt.param_groups[0]["lr"] = lr  # as the learner sets it before each step
        theta.grad = torch.tensor(g, dtype=torch.float64)
        opt.step()
        history.append(theta.detach().tolist())
    return history


@pytest.mark.parametrize(
    ("decay", "eps", "momentum"),
    [(0.99, 0.01, 0.0), (0.99, 0.01, 0.9), (0.9, 0.1, 0.5), (0.95, 1e-5, 0.0)],
)
def test_rmsprop_tf_follows_tf1_update_step_by_step(decay, eps, momentum) -> None:
    lrs = [6e-4, 5e-4, 4e-4, 3e-3, 1e-2]  # the schedule changes lr between steps
    ours = run_rmsprop_tf(GRADS, lrs, alpha=decay, eps=eps, momentum=momentum)
    expected = tf1_rmsprop(THETA0, GRADS, lrs, decay, eps, momentum)
    for step, (got, want) in enumerate(zip(ours, expected, strict=True)):
        assert got == pytest.approx(want, rel=0, abs=1e-6), f"step {step + 1}"


def test_rmsprop_tf_is_not_torch_rmsprop_at_the_papers_eps() -> None:
    """The two differences matter at eps = 0.01: this test tells the forms apart."""
    lrs = [6e-4] * len(GRADS)
    ours = run_rmsprop_tf(GRADS, lrs, alpha=0.99, eps=0.01)
    theta = torch.tensor(THETA0, dtype=torch.float64, requires_grad=True)
    torch_opt = torch.optim.RMSprop([theta], lr=6e-4, alpha=0.99, eps=0.01)
    for g in GRADS:
        theta.grad = torch.tensor(g, dtype=torch.float64)
        torch_opt.step()
    gap = max(abs(a - b) for a, b in zip(ours[-1], theta.detach().tolist(), strict=True))
    assert gap > 1e-3  # far above the 1e-6 the TF1 comparison holds to


def test_rmsprop_tf_first_step_starts_from_a_unit_accumulator() -> None:
    # ms_1 = 0.99 * 1 + 0.01 * 0.04 = 0.9904; step = lr * g / sqrt(0.9904 + 0.01) = lr * g / ~1
    theta = torch.tensor([1.0], dtype=torch.float64, requires_grad=True)
    opt = RMSpropTF([theta], lr=0.1, alpha=0.99, eps=0.01)
    theta.grad = torch.tensor([0.2], dtype=torch.float64)
    opt.step()
    assert theta.item() == pytest.approx(1.0 - 0.1 * 0.2 / math.sqrt(0.9904 + 0.01), abs=1e-12)


def test_rmsprop_tf_state_survives_a_checkpoint_round_trip() -> None:
    """A resumed run continues the accumulator and momentum, not a fresh ms = 1."""
    lrs = [1e-2] * len(GRADS)
    expected = tf1_rmsprop(THETA0, GRADS, lrs, 0.99, 0.01, 0.9)
    theta = torch.tensor(THETA0, dtype=torch.float64, requires_grad=True)
    opt = RMSpropTF([theta], lr=1e-2, alpha=0.99, eps=0.01, momentum=0.9)
    for g in GRADS[:2]:
        theta.grad = torch.tensor(g, dtype=torch.float64)
        opt.step()
    saved = opt.state_dict()
    resumed = RMSpropTF([theta], lr=1e-2, alpha=0.99, eps=0.01, momentum=0.9)
    resumed.load_state_dict(saved)
    for g in GRADS[2:]:
        theta.grad = torch.tensor(g, dtype=torch.float64)
        resumed.step()
    assert theta.detach().tolist() == pytest.approx(expected[-1], rel=0, abs=1e-6)


def test_rmsprop_tf_leaves_parameters_without_gradient_alone() -> None:
    a = torch.tensor([1.0, 2.0], requires_grad=True)
    b = torch.tensor([3.0, 4.0], requires_grad=True)
    opt = RMSpropTF([a, b], lr=0.1)
    a.grad = torch.tensor([1.0, -1.0])
    opt.step()
    assert b.tolist() == [3.0, 4.0]
    assert b not in opt.state or not opt.state[b]
    assert a.tolist() != [1.0, 2.0]


@pytest.mark.parametrize(
    "bad",
    [{"lr": 0.0}, {"eps": 0.0}, {"alpha": 1.0}, {"alpha": -0.1}, {"momentum": 1.0}],
)
def test_rmsprop_tf_rejects_settings_outside_its_domain(bad) -> None:
    with pytest.raises(ValueError, match=f"{next(iter(bad))}={next(iter(bad.values()))}"):
        RMSpropTF([torch.zeros(1, requires_grad=True)], **bad)


# ---------------------------------------------------------------------------- linear_lr


@pytest.mark.parametrize(
    ("frames", "expected"),
    [
        (0, 6e-4),  # start: the configured lr
        (250_000, 4.5e-4),  # a quarter of the way: 3/4 of it
        (500_000, 3e-4),  # the middle: half
        (1_000_000, 0.0),  # the end: zero
        (1_000_001, 0.0),  # past the end: stays at zero, never negative
        (3_000_000, 0.0),
    ],
)
def test_linear_lr_decays_to_zero_over_total_frames(frames, expected) -> None:
    assert linear_lr(6e-4, frames, 1_000_000, anneal=True) == pytest.approx(
        expected, rel=1e-12, abs=1e-18
    )


@pytest.mark.parametrize("frames", [0, 500_000, 1_000_000, 5_000_000])
def test_linear_lr_without_annealing_is_constant(frames) -> None:
    assert linear_lr(6e-4, frames, 1_000_000, anneal=False) == 6e-4

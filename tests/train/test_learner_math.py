"""One `Learner.update` on a tiny batch against the IMPALA loss gradient computed by hand.

The network is an `ActorCritic` with no torso layer, so its outputs are linear in a feature vector
f(x_t) = [obs_t, clip(r_{t-1}), one_hot(a_{t-1})] and can be written out here:
logits_t = W_pi f + b_pi, V(x_t) = w_v . f + b_v. For T = 2 the V-trace targets (paper eq. 1,
Remark 1) and advantages (section 4.2) are written as scalars, so the expected step is the
paper's formulas, not the project's vtrace or losses modules.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from stampede.config.schema import OptimConfig, VTraceConfig
from stampede.models import ActorCritic
from stampede.train.learner import Learner

T, OBS, A = 2, 3, 3
LR = 0.1
TOTAL_FRAMES = 1000
VT = {
    "discount": 0.9,
    "rho_bar": 1.5,
    "c_bar": 0.9,
    "pg_rho_bar": 1.2,
    "lambda_": 0.8,
    "baseline_cost": 0.5,
    "entropy_cost": 0.01,
    "reward_clip": 1.0,
    "normalize_advantages": False,  # the paper's loss, one step per batch
    "pg_clip": 0.0,
}
# The paper's optimizer (optim=rmsprop): one step per batch.
PAPER_OPTIM = {"name": "rmsprop", "eps": 0.01, "epochs": 1, "minibatches": 1}
# pi(a_t|x_t) / mu(a_t|x_t) of each [t, b]: above every clip, between the clips, below them.
RATIOS = [[2.0, 0.8], [0.6, 1.3]]


def features(batch: dict[str, torch.Tensor], t: int, b: int) -> torch.Tensor:
    """f(x_t) of column b: [obs_t, r_{t-1} clipped to [-1, 1], one_hot(a_{t-1})], float64."""
    r = max(-1.0, min(1.0, float(batch["reward"][t, b])))
    one_hot = [1.0 if a == int(batch["last_action"][t, b]) else 0.0 for a in range(A)]
    return torch.tensor([*batch["obs"][t, b].tolist(), r, *one_hot], dtype=torch.float64)


def heads(params, batch, t, b):
    """(logits [A], V(x_t)) of column b at step t for params (W_pi, b_pi, w_v, b_v)."""
    W_pi, b_pi, w_v, b_v = params
    f = features(batch, t, b)
    return W_pi @ f + b_pi, (w_v @ f + b_v)[0]


def impala_loss_by_hand(params, batch, vt):
    """Sum over columns b of the IMPALA loss for T = 2, written out step by step."""
    total = torch.zeros((), dtype=torch.float64)
    for b in range(batch["obs"].shape[1]):
        logits, V = zip(*(heads(params, batch, t, b) for t in range(T + 1)), strict=True)
        Vd = [v.detach() for v in V]  # targets are constants (the paper stops their gradient)
        log_pi, ratio = [], []
        for t in range(T):
            a = int(batch["action"][t, b])
            log_pi.append(torch.log_softmax(logits[t], -1)[a])
            log_mu = torch.log_softmax(batch["logits"][t, b].double(), -1)[a]
            ratio.append(math.exp(log_pi[t].item() - log_mu.item()))
        rho = [min(vt["rho_bar"], x) for x in ratio]
        c = [vt["lambda_"] * min(vt["c_bar"], x) for x in ratio]
        pg_rho = [min(vt["pg_rho_bar"], x) for x in ratio]
        # Transition t is x_t -> x_{t+1}: its reward and episode end are stored at step t + 1.
        r = [max(-1.0, min(1.0, float(batch["reward"][t + 1, b]))) for t in range(T)]
        gamma = [vt["discount"] * (0.0 if batch["done"][t + 1, b] else 1.0) for t in range(T)]
        # V-trace, backwards from v_2 = V(x_2).
        v2 = Vd[2]
        delta1 = rho[1] * (r[1] + gamma[1] * v2 - Vd[1])
        v1 = Vd[1] + delta1
        delta0 = rho[0] * (r[0] + gamma[0] * Vd[1] - Vd[0])
        v0 = Vd[0] + delta0 + gamma[0] * c[0] * (v1 - Vd[1])
        adv = [
            pg_rho[0] * (r[0] + gamma[0] * v1 - Vd[0]),
            pg_rho[1] * (r[1] + gamma[1] * v2 - Vd[1]),
        ]
        pg = -(log_pi[0] * adv[0] + log_pi[1] * adv[1])
        baseline = 0.5 * ((v0 - V[0]) ** 2 + (v1 - V[1]) ** 2)
        neg_entropy = sum(
            (torch.softmax(logits[t], -1) * torch.log_softmax(logits[t], -1)).sum()
            for t in range(T)
        )
        total = total + pg + vt["baseline_cost"] * baseline + vt["entropy_cost"] * neg_entropy
    return total


class Linear(ActorCritic):
    """The project's core and heads on the raw observation: heads on [obs, r, one_hot(a)].
    (``MLP(hidden_sizes=())`` promises this but raises today.)"""

    def __init__(self) -> None:
        super().__init__((OBS,), A, nn.Identity(), torso_size=OBS)


def tiny_model() -> Linear:
    model = Linear()
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():  # away from the near-uniform init so every term has a gradient
        for p in model.parameters():
            p.copy_(0.5 * torch.randn(p.shape, generator=g))
    return model


def params_of(model: Linear) -> list[torch.Tensor]:
    """(W_pi, b_pi, w_v, b_v) as float64 leaves."""
    names = ["policy.weight", "policy.bias", "baseline.weight", "baseline.bias"]
    named = dict(model.named_parameters())
    assert sorted(named) == sorted(names)  # nothing else to update
    return [named[n].detach().double().requires_grad_() for n in names]


def tiny_batch(model: Linear, columns: int) -> dict[str, torch.Tensor]:
    """[T + 1, B] fields, B = columns (1 or 2); behaviour logits chosen so pi/mu hits RATIOS
    at the initial params.

    Column 0 has done[0] (an episode started at x_0: no effect on the loss), column 1 has
    done[2] (the transition x_1 -> x_2 ended an episode: gamma_1 = 0). Rewards go past the
    clip [-1, 1].
    """
    g = torch.Generator().manual_seed(1)
    batch = {
        "obs": torch.randn(T + 1, 2, OBS, generator=g),
        "reward": torch.tensor([[5.0, -3.0], [2.0, 0.3], [-0.4, -1.7]]),
        "done": torch.tensor([[True, False], [False, False], [False, True]]),
        "last_action": torch.tensor([[0, 2], [1, 0], [2, 1]]),
        "action": torch.tensor([[1, 0], [2, 2], [0, 1]]),  # the last step's is never used
    }
    params = params_of(model)
    logits = torch.zeros(T + 1, 2, A)
    for t in range(T):
        for b in range(2):
            a = int(batch["action"][t, b])
            pi_a = float(torch.softmax(heads(params, batch, t, b)[0].detach(), -1)[a])
            mu_a = pi_a / RATIOS[t][b]
            assert 0 < mu_a < 1, "fixture: pick other ratios or params"
            mu = torch.full((A,), (1 - mu_a) / (A - 1))
            mu[a] = mu_a
            logits[t, b] = mu.log()
    batch["logits"] = logits
    return {name: t[:, :columns].contiguous() for name, t in batch.items()}


def learner(model: Linear, sgd: bool, **optim) -> Learner:
    cfg = OptimConfig(lr=LR, **{**PAPER_OPTIM, "anneal_lr": False, "grad_clip": 0.0, **optim})
    lrn = Learner(model, VTraceConfig(**VT), cfg, total_frames=TOTAL_FRAMES)
    if sgd:  # plain theta <- theta - lr * g; the learner still sets each step's lr
        lrn.optimizer = torch.optim.SGD(model.parameters(), lr=123.0)
    return lrn


def hand_gradient(model: Linear, batch):
    """(loss, params before, d loss / d params) of the hand-written loss, float64."""
    params = params_of(model)
    loss = impala_loss_by_hand(params, batch, VT)
    grads = torch.autograd.grad(loss, params)
    return loss.detach(), [p.detach() for p in params], list(grads)


def after_update(model: Linear, lrn: Learner, batch, frames: int = 0):
    metrics = lrn.update(batch, frames=frames)
    return metrics, [p.detach().double() for p in params_of(model)]


@pytest.mark.parametrize("columns", [1, 2])
def test_one_sgd_step_is_minus_lr_times_the_impala_gradient(columns) -> None:
    model = tiny_model()
    batch = tiny_batch(model, columns)
    loss, before, grads = hand_gradient(model, batch)
    metrics, after = after_update(model, learner(model, sgd=True), batch)
    assert metrics["loss/total"] == pytest.approx(float(loss), rel=1e-5)
    for p0, g, p1 in zip(before, grads, after, strict=True):
        assert float(g.abs().max()) > 1e-3  # every parameter gets a real gradient
        torch.testing.assert_close(p1, p0 - LR * g, rtol=1e-5, atol=1e-6)


def test_the_step_uses_the_annealed_lr() -> None:
    model = tiny_model()
    batch = tiny_batch(model, 2)
    _, before, grads = hand_gradient(model, batch)
    lrn = learner(model, sgd=True, anneal_lr=True)
    metrics, after = after_update(model, lrn, batch, frames=TOTAL_FRAMES // 4)
    assert metrics["learner/lr"] == pytest.approx(0.75 * LR)
    for p0, g, p1 in zip(before, grads, after, strict=True):
        torch.testing.assert_close(p1, p0 - 0.75 * LR * g, rtol=1e-5, atol=1e-6)


def test_the_step_clips_the_global_gradient_norm() -> None:
    model = tiny_model()
    batch = tiny_batch(model, 2)
    _, before, grads = hand_gradient(model, batch)
    norm = math.sqrt(sum(float((g**2).sum()) for g in grads))
    clip = 0.25 * norm
    metrics, after = after_update(model, learner(model, sgd=True, grad_clip=clip), batch)
    assert metrics["learner/grad_norm"] == pytest.approx(norm, rel=1e-5)  # before clipping
    for p0, g, p1 in zip(before, grads, after, strict=True):
        torch.testing.assert_close(p1, p0 - LR * g * (clip / norm), rtol=1e-5, atol=1e-6)


def test_rmsprop_takes_tf1_rmsprops_first_step() -> None:
    """optim=rmsprop (tf_style): ms_1 = alpha + (1 - alpha) g^2 from ms_0 = 1."""
    model = tiny_model()
    batch = tiny_batch(model, 2)
    _, before, grads = hand_gradient(model, batch)
    cfg = OptimConfig(**PAPER_OPTIM)
    _, after = after_update(model, learner(model, sgd=False), batch)
    for p0, g, p1 in zip(before, grads, after, strict=True):
        ms = cfg.alpha + (1 - cfg.alpha) * g**2
        torch.testing.assert_close(p1, p0 - LR * g / (ms + cfg.eps).sqrt(), rtol=1e-5, atol=1e-6)

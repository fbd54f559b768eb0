"""The learner's minibatch step on fixed buffers (stampede.train.graphed, runtime.cuda_graph).

On the CPU the step runs eagerly: these tests check that it is the eager learner's update and
keeps the non-finite undo, and that the configs a graph cannot hold are refused by name. The
``gpu`` tests record it as a CUDA graph and replay it (skipped without CUDA;
benchmarks/gpu_check.sh runs them).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from conftest import CONF

from stampede.config.checks import ConfigError
from stampede.config.compose import load_config
from stampede.config.schema import OptimConfig, VTraceConfig
from stampede.models import MLP
from stampede.train import graphed
from stampede.train.learner import Learner

T, B, OBS, A = 5, 4, 4, 3
OPTIM = OptimConfig(name="adam", lr=3e-3, epochs=2, minibatches=2, grad_clip=1.0)
VTRACE = VTraceConfig(lambda_=0.95, normalize_advantages=True, pg_clip=0.1)


def batch(seed: int, device: str = "cpu") -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    fields = {
        "obs": torch.randn(T + 1, B, OBS, generator=g),
        "reward": torch.randn(T + 1, B, generator=g),
        "done": torch.rand(T + 1, B, generator=g) < 0.1,
        "last_action": torch.randint(0, A, (T + 1, B), generator=g),
        "action": torch.randint(0, A, (T + 1, B), generator=g),
        "logits": torch.randn(T + 1, B, A, generator=g),
    }
    return {k: v.to(device) for k, v in fields.items()}


def learner(cuda_graph: bool, device: str = "cpu", **optim: object) -> Learner:
    torch.manual_seed(0)
    model = MLP((OBS,), A, hidden_sizes=(16,)).to(device)
    cfg = dataclasses.replace(OPTIM, **optim)
    return Learner(model, VTRACE, cfg, total_frames=10_000, cuda_graph=cuda_graph)


def train(lrn: Learner, updates: int, device: str = "cpu") -> list[dict[str, float]]:
    """``updates`` updates on batches 0, 1, ..., the minibatch splits drawn from seed 7."""
    torch.manual_seed(7)
    return [lrn.update(batch(k, device), frames=1000 * k) for k in range(updates)]


def assert_same_training(a: Learner, b: Learner) -> None:
    for p, q in zip(a.model.parameters(), b.model.parameters(), strict=True):
        torch.testing.assert_close(p, q)  # float32 tolerance: two paths, same arithmetic


def test_the_fixed_buffer_step_is_the_eager_learners_update() -> None:
    eager, fixed = learner(cuda_graph=False), learner(cuda_graph=True)
    assert fixed.graphed is not None
    m_eager, m_fixed = train(eager, 4), train(fixed, 4)
    assert fixed.graphed.steps == 3 * OPTIM.epochs * OPTIM.minibatches  # the first: eager
    assert_same_training(eager, fixed)
    for x, y in zip(m_eager, m_fixed, strict=True):
        assert x.keys() == y.keys()
        assert y == pytest.approx(x, rel=1e-4, abs=1e-6)
    start = [p.detach().clone() for p in fixed.model.parameters()]
    train(fixed, 1)
    assert any(not torch.equal(p, s) for p, s in zip(fixed.model.parameters(), start, strict=True))


def test_a_nonfinite_step_is_undone_inside_the_step_and_counted() -> None:
    lrn = learner(cuda_graph=True)
    train(lrn, 2)  # the optimizer has its state: the next update takes the fixed-buffer path
    before = [p.detach().clone() for p in lrn.model.parameters()]
    state = {k: v.clone() for k, v in lrn.optimizer.state[next(lrn.model.parameters())].items()}
    bad = batch(5)
    bad["reward"][2, 1] = float("nan")
    assert lrn.graphed is not None
    steps = lrn.graphed.steps
    metrics = lrn.update(bad, frames=5000)
    assert lrn.graphed.steps == steps + OPTIM.epochs * OPTIM.minibatches  # every step ran
    assert metrics["learner/skipped"] == 1.0
    assert lrn.skipped == 1
    for p, s in zip(lrn.model.parameters(), before, strict=True):
        assert torch.equal(p, s)
    after = lrn.optimizer.state[next(lrn.model.parameters())]
    for key, value in state.items():
        assert torch.equal(after[key], value), key
    good = lrn.update(batch(6), frames=6000)  # the next update's flag starts finite again
    assert good["learner/skipped"] == 0.0


def test_the_learning_rate_is_set_each_update_without_a_new_step() -> None:
    lrn = learner(cuda_graph=True, anneal_lr=True)
    train(lrn, 2)
    lrn.update(batch(3), frames=5000)  # half of total_frames: half the lr
    assert [g["lr"] for g in lrn.optimizer.param_groups] == [pytest.approx(OPTIM.lr / 2)]


def test_without_cuda_graph_is_refused_on_the_cpu_by_name() -> None:
    with pytest.raises(
        ConfigError, match=r"runtime.cuda_graph=true needs a CUDA GPU, and device='cpu'"
    ):
        load_config(CONF, ["device=cpu", "runtime.cuda_graph=true"])


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["model.use_lstm=true"], "does not support model.use_lstm=true"),
        (["vtrace.popart=true"], "does not support vtrace.popart=true"),
        (["env=atari", "env.games=[pong,breakout]", "env.full_action_space=true"], "env.games"),
        (["optim=rmsprop"], "does not support optim.tf_style=true"),
        (["optim.minibatches=3"], "runtime.batch_size=32 is not a multiple of optim.minibatches=3"),
        (["runtime.compile=true"], "runtime.cuda_graph=true and runtime.compile=true: choose one"),
    ],
)
def test_what_a_graph_cannot_hold_is_refused_by_name(monkeypatch, overrides, message) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # device=auto would be CUDA
    with pytest.raises(ConfigError, match=message):
        load_config(CONF, ["runtime.cuda_graph=true", *overrides])


# --------------------------------------------------------------------------------- on a GPU

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.mark.gpu
@needs_cuda
def test_the_captured_step_is_the_eager_update_on_cuda() -> None:
    eager, captured = learner(False, "cuda"), learner(True, "cuda")
    updates = 1 + graphed.WARMUP_STEPS  # the first update eager, then warm-up, capture, replays
    m_eager, m_captured = train(eager, updates, "cuda"), train(captured, updates, "cuda")
    assert captured.graphed is not None
    assert captured.graphed.graph is not None  # recorded, and replayed since
    assert_same_training(eager, captured)
    assert m_captured[-1] == pytest.approx(m_eager[-1], rel=1e-4, abs=1e-5)


@pytest.mark.gpu
@needs_cuda
def test_a_captured_nonfinite_step_is_undone_on_cuda() -> None:
    lrn = learner(True, "cuda")
    train(lrn, 1 + graphed.WARMUP_STEPS, "cuda")
    assert lrn.graphed is not None
    assert lrn.graphed.graph is not None
    before = [p.detach().clone() for p in lrn.model.parameters()]
    bad = batch(9, "cuda")
    bad["reward"][1, 0] = float("inf")
    assert lrn.update(bad, frames=9000)["learner/skipped"] == 1.0
    for p, s in zip(lrn.model.parameters(), before, strict=True):
        assert torch.equal(p, s)

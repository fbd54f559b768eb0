"""The learner's update on a small batch: epochs, the trust region, the time budget."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from stampede.algo.losses import moments, return_range
from stampede.config.checks import ConfigError
from stampede.config.schema import OptimConfig, VTraceConfig
from stampede.models import MLP
from stampede.train import learner as learner_module
from stampede.train.guard import Undo
from stampede.train.learner import Learner

T, B, OBS, A = 5, 3, 4, 2


def batch(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "obs": torch.randn(T + 1, B, OBS, generator=g),
        "reward": torch.randn(T + 1, B, generator=g),
        "done": torch.zeros(T + 1, B, dtype=torch.bool),
        "last_action": torch.randint(0, A, (T + 1, B), generator=g),
        "action": torch.randint(0, A, (T + 1, B), generator=g),
        "logits": torch.randn(T + 1, B, A, generator=g),
    }


# One step per batch unless a test asks for more; the loss without advantage scaling.
OPTIM = OptimConfig(lr=1e-2, epochs=1, minibatches=1)
VTRACE = VTraceConfig(lambda_=1.0, normalize_advantages=False, pg_clip=0.1)


def learner(**optim: object) -> Learner:
    torch.manual_seed(0)
    model = MLP((OBS,), A, hidden_sizes=(8,))
    cfg = dataclasses.replace(OPTIM, **optim)
    return Learner(model, VTRACE, cfg, total_frames=1000)


def test_epochs_take_that_many_optimizer_steps_and_report_the_first(monkeypatch) -> None:
    one, three = learner(epochs=1), learner(epochs=3)
    steps = []
    monkeypatch.setattr(three.optimizer, "step", lambda: steps.append(1))
    first = one.update(batch(), frames=0)
    metrics = three.update(batch(), frames=0)
    assert len(steps) == 3
    assert metrics == pytest.approx(first)  # the metrics of the batch as it arrived


def test_later_epochs_move_the_parameters_further() -> None:
    one, three = learner(epochs=1), learner(epochs=3)
    start = [p.detach().clone() for p in one.model.parameters()]
    one.update(batch(), frames=0)
    three.update(batch(), frames=0)
    moved = [
        sum(
            float((p.detach() - s).norm()) for p, s in zip(m.model.parameters(), start, strict=True)
        )
        for m in (one, three)
    ]
    assert moved[1] > 1.5 * moved[0]


def test_update_time_is_split_into_its_stages() -> None:
    lrn = learner(epochs=2)
    lrn.clock.lap()
    lrn.update(batch(), frames=0)
    seconds, wall = lrn.clock.lap()
    stage = dict(zip(lrn.clock.stages, seconds, strict=True))
    assert stage["forward_backward"] > 0
    assert stage["optimizer"] > 0
    assert stage["forward_backward"] + stage["optimizer"] <= wall


def test_minibatches_split_the_trajectories_and_keep_the_arrival_targets(monkeypatch) -> None:
    lrn = learner(epochs=2, minibatches=3)
    widths = []
    original = lrn._backward

    def spy(part, arrival):
        widths.append((part["obs"].shape[1], arrival.returns.vs.shape[1] if arrival else None))
        return original(part, arrival)

    monkeypatch.setattr(lrn, "_backward", spy)
    lrn.update(batch(), frames=0)
    # 2 passes x 3 minibatches of one trajectory each, all with the batch's V-trace targets.
    assert widths == [(1, 1)] * 6


@pytest.mark.parametrize("stats", ["minibatch", "batch", "returns"])
def test_minibatches_normalise_with_the_batchs_advantage_moments_if_asked(
    monkeypatch, stats: str
) -> None:
    lrn = learner(epochs=2, minibatches=3)
    lrn.vtrace = dataclasses.replace(VTRACE, normalize_advantages=True, advantage_stats=stats)
    given, arrivals = [], []
    original_loss, original_look = learner_module.impala_loss_stats, lrn._first_look

    def loss_spy(**kwargs):
        given.append(kwargs["advantage_moments"])
        return original_loss(**kwargs)

    def look_spy(part):
        arrivals.append(original_look(part))
        return arrivals[-1]

    monkeypatch.setattr(learner_module, "impala_loss_stats", loss_spy)
    monkeypatch.setattr(lrn, "_first_look", look_spy)
    lrn.update(batch(), frames=0)
    (arrival,) = arrivals
    kept = (
        return_range(arrival.returns.vs)
        if stats == "returns"
        else moments(arrival.returns.pg_advantages)
    )
    torch.testing.assert_close(arrival.advantage_moments, kept)
    assert given[0] is None  # the first look, over the whole batch
    steps = given[1:]
    assert len(steps) == 6
    if stats == "minibatch":
        assert steps == [None] * 6
    else:  # every minibatch step: what the whole batch's first look kept
        assert all(m is arrival.advantage_moments for m in steps)


def test_a_return_range_is_the_whole_batchs_in_one_minibatch_too(monkeypatch) -> None:
    lrn = learner(epochs=1, minibatches=1)
    lrn.vtrace = dataclasses.replace(VTRACE, normalize_advantages=True, advantage_stats="returns")
    given = []
    original_loss = learner_module.impala_loss_stats

    def loss_spy(**kwargs):
        given.append(kwargs["advantage_moments"])
        return original_loss(**kwargs)

    monkeypatch.setattr(learner_module, "impala_loss_stats", loss_spy)
    lrn.update(batch(), frames=0)
    first_look, step = given
    assert first_look is None
    assert step is not None
    assert step[0] == 0.0  # returns are scaled, not shifted
    assert step[1] >= 1.0


def test_advantage_stats_without_normalised_advantages_is_refused() -> None:
    with pytest.raises(ConfigError, match="advantage_stats='returns' scales the advantages only"):
        VTraceConfig(normalize_advantages=False, advantage_stats="returns")


def test_an_unknown_advantage_stats_names_the_key() -> None:
    with pytest.raises(
        ConfigError,
        match=r"vtrace.advantage_stats must be one of \('minibatch', 'batch', 'returns'\), "
        r"got 'trajectory'",
    ):
        VTraceConfig(advantage_stats="trajectory")


# ------------------------------------------------------------------ the non-finite guard


def nan_batch() -> dict[str, torch.Tensor]:
    bad = batch(1)
    bad["reward"][2, 1] = float("nan")  # a faulty env: V-trace's targets and loss/baseline
    return bad


def snapshot(lrn: Learner) -> tuple[list[torch.Tensor], dict, list[float]]:
    """Parameters, optimizer state and each group's lr, copied."""
    params = [p.detach().clone() for p in lrn.model.parameters()]
    state = {
        i: {k: v.clone() for k, v in lrn.optimizer.state[p].items()}
        for i, p in enumerate(lrn.model.parameters())
        if p in lrn.optimizer.state
    }
    return params, state, [g["lr"] for g in lrn.optimizer.param_groups]


def assert_same(a, b) -> None:
    (pa, sa, la), (pb, sb, lb) = a, b
    assert la == lb
    assert sa.keys() == sb.keys()
    for x, y in zip(pa, pb, strict=True):
        assert torch.equal(x, y)
    for i in sa:
        assert sa[i].keys() == sb[i].keys()
        for k in sa[i]:
            assert torch.equal(sa[i][k], sb[i][k]), (i, k)


@pytest.mark.parametrize("on_device", [False, True], ids=["host", "device"])
@pytest.mark.parametrize("warm", [False, True], ids=["first", "warm"])
def test_a_nonfinite_update_changes_nothing_and_is_counted(warm, on_device) -> None:
    """Decided on the host (the CPU's way, and the run's first step anywhere: the optimizer has
    no state yet) or undone on the device (a GPU's way, forced here on the CPU)."""
    lrn = learner(epochs=2, anneal_lr=True)
    lrn.undo_on_device = on_device
    if warm:
        lrn.update(batch(), frames=0)
    before = snapshot(lrn)
    metrics = lrn.update(nan_batch(), frames=500)  # another lr: it must not stick either
    assert_same(snapshot(lrn), before)
    assert all(p.grad is None for p in lrn.model.parameters())
    assert (lrn.skipped, lrn.consecutive_skips) == (1, 1)
    assert lrn.last_nonfinite == "loss/pg is nan"  # the first of the terms checked
    assert math.isnan(metrics["loss/pg"])
    lrn.update(nan_batch(), frames=0)
    assert (lrn.skipped, lrn.consecutive_skips) == (2, 2)
    lrn.update(batch(), frames=0)
    assert (lrn.skipped, lrn.consecutive_skips) == (2, 0)
    assert all(torch.isfinite(p).all() for p in lrn.model.parameters())


@pytest.mark.parametrize("on_device", [False, True], ids=["host", "device"])
def test_a_nonfinite_later_step_keeps_the_update_up_to_it(monkeypatch, on_device) -> None:
    """Epoch 2 of 3 goes non-finite: the update is the first epoch's step alone, counted as
    skipped, and its metrics are still the first step's. On the host the update stops there;
    on the device the third step runs and is undone too."""
    one, three = learner(), learner()
    for lrn in (one, three):
        lrn.update(batch(1), frames=0)  # the optimizer has its state
    three.optim = dataclasses.replace(three.optim, epochs=3)
    three.undo_on_device = on_device
    calls = []
    original = three._backward

    def poisoned(part, arrival):
        stats, now = original(part, arrival)
        calls.append(1)
        return (stats * float("nan") if len(calls) == 2 else stats), now

    monkeypatch.setattr(three, "_backward", poisoned)
    first = one.update(batch(), frames=0)
    metrics = three.update(batch(), frames=0)
    assert len(calls) == (3 if on_device else 2)
    assert_same(snapshot(three), snapshot(one))
    assert metrics.pop("learner/skipped") == 1.0
    assert first.pop("learner/skipped") == 0.0
    assert metrics == pytest.approx(first)
    assert (three.skipped, three.last_nonfinite) == (1, "loss/pg is nan")


@pytest.mark.parametrize("on_device", [False, True], ids=["host", "device"])
def test_an_infinite_gradient_is_named(on_device) -> None:
    lrn = learner()
    lrn.undo_on_device = on_device
    lrn.update(batch(1), frames=0)
    before = snapshot(lrn)
    hook = next(lrn.model.parameters()).register_hook(lambda g: g * float("inf"))
    metrics = lrn.update(batch(), frames=0)
    hook.remove()
    assert_same(snapshot(lrn), before)
    assert math.isfinite(metrics["loss/total"])
    assert lrn.last_nonfinite.startswith("the gradient norm is ")


def test_what_lives_off_the_device_is_put_back_after_the_read() -> None:
    """torch Adam keeps its step counts in CPU tensors for CUDA parameters: `Undo` cannot put
    them back with the device's flag, only once the update knows the step was skipped. Here the
    "device" is one no tensor is on, so everything is of that kind."""
    lrn = learner()
    lrn.update(batch(1), frames=0)
    before = snapshot(lrn)
    undo = Undo(lrn.optimizer, torch.device("meta"))
    lrn.update(batch(), frames=0)
    assert undo.here == []
    undo.restore()
    assert_same(snapshot(lrn), before)


def test_an_update_reads_the_device_once(monkeypatch) -> None:
    """Off the CPU, metrics and the guard stay on the device through every step; one read at
    the end. (The default optimizer: torch Adam reads its step counts with ``item``, CPU tensors
    that stay on the host for CUDA parameters too, so no device read.)"""
    lrn = learner(epochs=2, minibatches=3, name="rmsprop")
    assert not lrn.undo_on_device  # on the CPU reading the flag costs nothing
    lrn.undo_on_device = True  # as on a GPU
    lrn.update(batch(1), frames=0)  # the optimizer's state exists from here on
    reads = []
    for name in ("item", "tolist", "__bool__", "__float__", "__int__"):
        original = getattr(torch.Tensor, name)

        def spy(self, *args, _name=name, _original=original):
            reads.append(_name)
            return _original(self, *args)

        monkeypatch.setattr(torch.Tensor, name, spy)
    lrn.update(batch(), frames=0)
    assert reads == ["tolist"]


# ------------------------------------------------------------------ precision and compile


def test_bf16_updates_in_float32_close_to_fp32() -> None:
    """The forward in bfloat16 (autocast on the CPU), V-trace and the losses in float32."""
    fp32 = learner()
    bf16 = learner()
    bf16.precision = "bf16"
    expected = fp32.update(batch(), frames=0)
    metrics = bf16.update(batch(), frames=0)
    assert all(math.isfinite(metrics[k]) for k in ("loss/total", "learner/grad_norm"))
    assert metrics["loss/total"] == pytest.approx(expected["loss/total"], rel=0.05, abs=0.05)
    assert bf16.skipped == 0
    assert all(p.dtype == torch.float32 for p in bf16.model.parameters())
    for a, b in zip(fp32.model.parameters(), bf16.model.parameters(), strict=True):
        torch.testing.assert_close(b, a, rtol=0.05, atol=2e-3)
    state = bf16.optimizer.state
    assert all(t.dtype == torch.float32 for s in state.values() for t in s.values())


def test_an_unknown_precision_names_the_key() -> None:
    with pytest.raises(ValueError, match=r"runtime.precision"):
        Learner(MLP((OBS,), A), VTraceConfig(), OptimConfig(), 1000, precision="fp16")


def test_compile_trains_the_plain_module_the_same() -> None:
    torch.manual_seed(0)
    model = MLP((OBS,), A, hidden_sizes=(8,))
    compiled = Learner(model, VTRACE, OPTIM, total_frames=1000, compile=True)
    plain = learner()
    assert compiled.model is model  # checkpoints and publishing see the plain module
    for seed in range(2):
        expected = plain.update(batch(seed), frames=0)
        metrics = compiled.update(batch(seed), frames=0)
        assert metrics == pytest.approx(expected, rel=1e-4, abs=1e-5)
    for a, b in zip(plain.model.parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5)

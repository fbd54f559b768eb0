"""The learner's update on a small batch: epochs, the trust region, the time budget."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from stampede.config import OptimConfig, VTraceConfig
from stampede.learner import Learner
from stampede.models import MLP

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


def learner(**optim: object) -> Learner:
    torch.manual_seed(0)
    model = MLP((OBS,), A, hidden_sizes=(8,))
    cfg = dataclasses.replace(OptimConfig(name="adam", lr=1e-2, anneal_lr=False), **optim)
    return Learner(model, VTraceConfig(pg_clip=0.1), cfg, total_frames=1000)


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

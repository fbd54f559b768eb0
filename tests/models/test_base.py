"""The actor-critic skeleton every network shares (``stampede.models.base``): output shapes, LSTM
resets, the inputs that reach the heads, per-task values and the checks on every input."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
from torch import Tensor

from stampede.models import (
    MLP,
    ActorCritic,
    AtariNet,
    ModelOutput,
    NatureNet,
    ResNet,
    precision_context,
)

from .conftest import ATARI_OBS, make_inputs

MODELS: dict[str, Callable[[bool], ActorCritic]] = {
    "shallow": lambda lstm: AtariNet(ATARI_OBS, 6, use_lstm=lstm),
    "resnet": lambda lstm: ResNet(ATARI_OBS, 6, use_lstm=lstm),
    "nature": lambda lstm: NatureNet(ATARI_OBS, 6, use_lstm=lstm),
    "mlp": lambda lstm: MLP((4,), 6, use_lstm=lstm),
}


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("use_lstm", [False, True])
@pytest.mark.parametrize(("steps", "batch"), [(1, 1), (1, 3), (5, 1), (5, 3)])
def test_output_shapes(name: str, use_lstm: bool, steps: int, batch: int) -> None:
    torch.manual_seed(0)
    model = MODELS[name](use_lstm)
    out = model(*make_inputs(model.obs_shape, 6, steps, batch))
    assert isinstance(out, ModelOutput)
    assert out.policy_logits.shape == (steps, batch, 6)
    assert out.baseline.shape == (steps, batch)
    if use_lstm:
        assert [tuple(s.shape) for s in out.core_state] == [(1, batch, model.lstm_size)] * 2
        assert model.lstm_size == {"mlp": 64, "nature": 512}.get(name, 256)  # = hidden_size
    else:
        assert out.core_state == ()


def test_initial_state() -> None:
    assert MLP((4,), 2).initial_state(3) == ()
    h, c = AtariNet(ATARI_OBS, 6, use_lstm=True).initial_state(3, device="cpu")
    assert h.shape == c.shape == (1, 3, 256)
    assert not h.any()
    assert not c.any()


def random_state(model: ActorCritic, batch: int) -> tuple[Tensor, ...]:
    g = torch.Generator().manual_seed(1)
    return tuple(torch.randn(1, batch, model.lstm_size, generator=g) for _ in range(2))


@pytest.mark.parametrize("name", ["mlp", "shallow"])
def test_done_zeroes_lstm_state_from_that_step(name: str) -> None:
    torch.manual_seed(0)
    model = MODELS[name](True)
    T, B, t = 6, 2, 3
    obs, last_action, reward, done = make_inputs(model.obs_shape, 6, T, B)
    done[t, 0] = True  # env 0 starts a new episode at step t; env 1 does not
    full = model(obs, last_action, reward, done, random_state(model, B))
    fresh = model(obs[t:], last_action[t:], reward[t:], done[t:], model.initial_state(B))
    # Env 0: from step t on, as if the run had started at t with a zero state.
    torch.testing.assert_close(full.policy_logits[t:, 0], fresh.policy_logits[:, 0])
    torch.testing.assert_close(full.baseline[t:, 0], fresh.baseline[:, 0])
    # Env 1: its state carried over, so it differs from a fresh start at every step.
    diff = (full.policy_logits[t:, 1] - fresh.policy_logits[:, 1]).abs().amax(dim=-1)
    assert (diff > 1e-6).all()


def test_done_at_step_zero_discards_given_state() -> None:
    torch.manual_seed(0)
    model = MLP((4,), 3, use_lstm=True)
    inputs = make_inputs((4,), 3, steps=4, batch=2)
    inputs[3][0] = True
    given = model(*inputs, random_state(model, 2))
    zero = model(*inputs, model.initial_state(2))
    torch.testing.assert_close(given.policy_logits, zero.policy_logits)
    torch.testing.assert_close(given.core_state, zero.core_state)


def test_empty_core_state_means_zeros() -> None:
    torch.manual_seed(0)
    model = MLP((4,), 3, use_lstm=True)
    inputs = make_inputs((4,), 3, steps=3, batch=2)
    torch.testing.assert_close(model(*inputs), model(*inputs, model.initial_state(2)))


@pytest.mark.parametrize("name", ["mlp", "shallow"])
def test_sequence_equals_step_by_step(name: str) -> None:
    torch.manual_seed(0)
    model = MODELS[name](True)
    T, B = 7, 3
    obs, last_action, reward, done = make_inputs(model.obs_shape, 6, T, B)
    # Resets at several steps, some shared between envs, one at t=0, one at the last step.
    for t, b in [(0, 1), (2, 0), (2, 2), (4, 1), (6, 0)]:
        done[t, b] = True
    state = random_state(model, B)
    whole = model(obs, last_action, reward, done, state)
    logits, baselines = [], []
    for t in range(T):
        step = model(
            obs[t : t + 1], last_action[t : t + 1], reward[t : t + 1], done[t : t + 1], state
        )
        state = step.core_state
        logits.append(step.policy_logits)
        baselines.append(step.baseline)
    torch.testing.assert_close(whole.policy_logits, torch.cat(logits))
    torch.testing.assert_close(whole.baseline, torch.cat(baselines))
    torch.testing.assert_close(whole.core_state, state)


def test_reward_and_last_action_reach_the_heads() -> None:
    torch.manual_seed(0)
    model = MLP((4,), 3)
    obs, last_action, reward, done = make_inputs((4,), 3, steps=2, batch=2)
    base = model(obs, last_action, reward, done).baseline
    assert not torch.allclose(base, model(obs, last_action, -reward, done).baseline)
    assert not torch.allclose(base, model(obs, (last_action + 1) % 3, reward, done).baseline)


def test_uint8_observations_are_scaled() -> None:
    torch.manual_seed(0)
    model = AtariNet(ATARI_OBS, 6, use_lstm=True)
    obs, last_action, reward, done = make_inputs(ATARI_OBS, 6, steps=2, batch=2)
    from_uint8 = model(obs, last_action, reward, done)
    from_float = model(obs.float() / 255.0, last_action, reward, done)
    torch.testing.assert_close(from_uint8, from_float)
    unscaled = model(obs.float(), last_action, reward, done)
    assert not torch.allclose(from_uint8.policy_logits, unscaled.policy_logits)


@pytest.mark.parametrize("name", MODELS)
def test_initial_policy_is_near_uniform(name: str) -> None:
    torch.manual_seed(0)
    model = MODELS[name](False)
    logits = model(*make_inputs(model.obs_shape, 6, steps=2, batch=4)).policy_logits
    entropy = -(logits.softmax(-1) * logits.log_softmax(-1)).sum(-1)
    assert (entropy > 0.999 * math.log(6)).all()


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("use_lstm", [False, True])
def test_backward_reaches_every_parameter(name: str, use_lstm: bool) -> None:
    torch.manual_seed(0)
    model = MODELS[name](use_lstm)
    out = model(*make_inputs(model.obs_shape, 6, steps=3, batch=2))
    (out.policy_logits.square().sum() + out.baseline.square().sum()).backward()
    for pname, p in model.named_parameters():
        assert p.grad is not None, pname
        assert torch.isfinite(p.grad).all(), pname
        assert p.grad.abs().sum() > 0, pname


def test_constructors_accept_hydra_lists() -> None:
    pytest.importorskip("hydra")
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    cfg = OmegaConf.create({"_target_": "stampede.models.ResNet", "channels": [8, 16]})
    model = instantiate(cfg, obs_shape=OmegaConf.create([4, 84, 84]), num_actions=6)
    assert isinstance(model, ResNet)
    assert model.obs_shape == ATARI_OBS
    cfg = OmegaConf.create({"_target_": "stampede.models.MLP", "hidden_sizes": [32]})
    assert isinstance(instantiate(cfg, obs_shape=[4], num_actions=2), MLP)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"obs": torch.zeros(2, 3, 5)}, r"obs must have shape \[T, B, \*\(4,\)\], got \(2, 3, 5\)"),
        ({"obs": torch.zeros(2, 4)}, r"obs must have shape \[T, B, \*\(4,\)\], got \(2, 4\)"),
        ({"last_action": torch.zeros(2, dtype=torch.int64)}, r"last_action must have shape"),
        ({"reward": torch.zeros(3, 2)}, r"reward must have shape \[T, B\] = \(2, 3\)"),
        ({"done": torch.zeros(2, 3)}, r"done must be a bool tensor"),
        ({"last_action": torch.zeros(2, 3)}, r"last_action must be an integer tensor"),
    ],
)
def test_forward_rejects_mismatched_inputs(change: dict[str, Tensor], message: str) -> None:
    model = MLP((4,), 2)
    obs, last_action, reward, done = make_inputs((4,), 2, steps=2, batch=3)
    args = {"obs": obs, "last_action": last_action, "reward": reward, "done": done} | change
    with pytest.raises(ValueError, match=message):
        model(**args)


def test_forward_rejects_wrong_core_state() -> None:
    inputs = make_inputs((4,), 2, steps=2, batch=3)
    with pytest.raises(
        ValueError, match=r"has no LSTM \(use_lstm=False\) and takes core_state=\(\)"
    ):
        MLP((4,), 2)(*inputs, (torch.zeros(1, 3, 64), torch.zeros(1, 3, 64)))
    with pytest.raises(
        ValueError, match=r"core_state must be \(h, c\), each of shape \(1, 3, 64\)"
    ):
        MLP((4,), 2, use_lstm=True)(*inputs, (torch.zeros(1, 2, 64), torch.zeros(1, 2, 64)))


def test_bad_constructor_arguments() -> None:
    with pytest.raises(ValueError, match="num_actions must be >= 1, got 0"):
        AtariNet(ATARI_OBS, 0)
    with pytest.raises(ValueError, match="model MLP: lstm_size must be >= 1, got 0"):
        MLP((4,), 2, use_lstm=True, hidden_size=0)
    with pytest.raises(ValueError, match="model NatureNet: num_tasks must be >= 1, got 0"):
        NatureNet(ATARI_OBS, 6, num_tasks=0)


def test_task_must_be_an_integer_tensor_of_shape_t_b() -> None:
    model = MLP((4,), 2, num_tasks=3)
    inputs = make_inputs((4,), 2, steps=2, batch=3)
    assert model(*inputs, task=torch.full((2, 3), 2)).baseline.shape == (2, 3)
    with pytest.raises(
        ValueError, match=r"task must be an integer tensor of shape \[T, B\] = \(2, 3\)"
    ):
        model(*inputs, task=torch.zeros(3, 2, dtype=torch.int64))
    with pytest.raises(ValueError, match=r"got torch\.float32 \(2, 3\)"):
        model(*inputs, task=torch.zeros(2, 3))


def test_one_task_networks_ignore_task() -> None:
    torch.manual_seed(0)
    model = MLP((4,), 2)
    inputs = make_inputs((4,), 2, steps=2, batch=3)
    torch.testing.assert_close(
        model(*inputs), model(*inputs, task=torch.zeros(2, 3, dtype=torch.long))
    )


def test_bf16_precision_runs_the_network_in_bfloat16_close_to_fp32() -> None:
    torch.manual_seed(0)
    model = AtariNet(ATARI_OBS, 6)
    inputs = make_inputs(ATARI_OBS, 6, steps=2, batch=3)
    cpu = torch.device("cpu")
    with precision_context("fp32", cpu):
        full = model(*inputs)
    with precision_context("bf16", cpu):
        half = model(*inputs)
    assert full.policy_logits.dtype == torch.float32
    assert half.policy_logits.dtype == torch.bfloat16
    assert half.baseline.dtype == torch.bfloat16
    torch.testing.assert_close(half.baseline.float(), full.baseline, atol=0.05, rtol=0.05)

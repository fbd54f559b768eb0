"""Tests for stampede.models: sizes from the IMPALA paper's Fig. 3, shapes, LSTM resets."""

from __future__ import annotations

import math
import re
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
)

ATARI_OBS = (4, 84, 84)


def num_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


# Hand counts for obs (4, 84, 84), 6 actions (Pong's minimal set); weights + biases.
#
# Shared core, A = 6: core input = 256 (FC) + 1 (reward) + 6 (one-hot action) = 263.
#   no LSTM: policy 263*6 + 6 = 1_584, baseline 263*1 + 1 = 264            -> heads 1_848
#   LSTM 256: W_ih 4*256*263 = 269_312, W_hh 4*256*256 = 262_144,
#             b_ih + b_hh = 2*1_024 = 2_048                                 -> 533_504
#             policy 256*6 + 6 = 1_542, baseline 256 + 1 = 257              -> heads 1_799
#
# AtariNet torso: 84 -> (84-8)//4+1 = 20 -> (20-4)//2+1 = 9, so 32*9*9 = 2_592 features.
#   conv1 4*16*8*8 + 16 = 4_112; conv2 16*32*4*4 + 32 = 8_224; fc 2_592*256 + 256 = 663_808
#   torso = 676_144;  no LSTM: 676_144 + 1_848 = 677_992
#                     LSTM:    676_144 + 533_504 + 1_799 = 1_211_447
#
# ResNet torso: each max-pool (3x3, stride 2, pad 1) maps n -> ceil(n/2): 84 -> 42 -> 21 -> 11,
# so 32*11*11 = 3_872 features. A 3x3 conv c_in -> c_out has 9*c_in*c_out + c_out parameters.
#   stack 1: conv 4->16 592;  4 convs 16->16 at 2_320 = 9_280   -> 9_872
#   stack 2: conv 16->32 4_640; 4 convs 32->32 at 9_248 = 36_992 -> 41_632
#   stack 3: conv 32->32 9_248; 4 convs at 9_248 = 36_992        -> 46_240
#   fc 3_872*256 + 256 = 991_488; torso = 9_872 + 41_632 + 46_240 + 991_488 = 1_089_232
#   no LSTM: 1_089_232 + 1_848 = 1_091_080;  LSTM: 1_089_232 + 533_504 + 1_799 = 1_624_535
#
# NatureNet torso: 84 -> 20 -> 9 -> (9-3)//1+1 = 7, so 64*7*7 = 3_136 features, FC 512.
#   conv1 4*32*8*8 + 32 = 8_224; conv2 32*64*4*4 + 64 = 32_832; conv3 64*64*3*3 + 64 = 36_928;
#   fc 3_136*512 + 512 = 1_606_144; torso = 1_684_128. Core input 512+6+1 = 519:
#   no LSTM: policy 519*6+6 = 3_120, baseline 520 -> 1_684_128 + 3_640 = 1_687_768
#   LSTM 519 -> 512: 4*512*(519+512) + 2*4*512 = 2_115_584; heads 512*6+6 + 513 = 3_591
#            -> 1_684_128 + 2_115_584 + 3_591 = 3_803_303
@pytest.mark.parametrize(
    ("cls", "use_lstm", "expected"),
    [
        (AtariNet, False, 677_992),
        (AtariNet, True, 1_211_447),
        (ResNet, False, 1_091_080),
        (ResNet, True, 1_624_535),
        (NatureNet, False, 1_687_768),
        (NatureNet, True, 3_803_303),
    ],
)
def test_parameter_counts_match_hand_count(
    cls: Callable[..., ActorCritic], use_lstm: bool, expected: int
) -> None:
    assert num_params(cls(ATARI_OBS, 6, use_lstm=use_lstm)) == expected


def test_mlp_parameter_count() -> None:
    # obs 4, hidden (64, 64), 2 actions: 4*64+64 = 320, 64*64+64 = 4_160;
    # core input 64+1+2 = 67: policy 67*2+2 = 136, baseline 68 -> 4_684.
    assert num_params(MLP((4,), 2)) == 4_684


def test_mlp_without_hidden_layers_is_linear_in_its_inputs() -> None:
    # hidden_sizes=() (documented as a linear torso): core input 4+1+2 = 7 features,
    # policy 7*2+2 = 16, baseline 8 -> 24 parameters, and no torso layer at all.
    model = MLP((4,), 2, hidden_sizes=())
    assert num_params(model) == 24
    assert len(model.torso) == 0


def make_inputs(
    obs_shape: tuple[int, ...], num_actions: int, steps: int, batch: int, seed: int = 0
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Random [T, B] inputs (obs, last_action, reward, done), done all False; uint8 images."""
    g = torch.Generator().manual_seed(seed)
    if len(obs_shape) > 1:
        obs = torch.randint(0, 256, (steps, batch, *obs_shape), generator=g, dtype=torch.uint8)
    else:
        obs = torch.randn(steps, batch, *obs_shape, generator=g)
    last_action = torch.randint(0, num_actions, (steps, batch), generator=g)
    reward = torch.rand(steps, batch, generator=g) * 2 - 1
    done = torch.zeros(steps, batch, dtype=torch.bool)
    return obs, last_action, reward, done


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


def test_mlp_rejects_image_shape() -> None:
    expected = (
        "model MLP takes flat vector observations, got observation shape (4, 84, 84); "
        "use model=nature, model=shallow or model=resnet for images"
    )
    with pytest.raises(ValueError, match=re.escape(expected)):
        MLP((4, 84, 84), 6)


@pytest.mark.parametrize("cls", [AtariNet, NatureNet, ResNet])
def test_image_models_reject_vector_shape(cls: Callable[..., ActorCritic]) -> None:
    with pytest.raises(ValueError, match=r"got observation shape \(4,\); use model=mlp"):
        cls((4,), 2)


def test_atarinet_names_minimum_image_size() -> None:
    with pytest.raises(ValueError, match=r"at least 20x20 pixels.*\(4, 84, 19\)"):
        AtariNet((4, 84, 19), 6)
    smallest = AtariNet((1, 20, 20), 3)  # 20 -> 4 -> 1 pixel
    assert smallest(*make_inputs((1, 20, 20), 3, steps=1, batch=2)).policy_logits.shape == (1, 2, 3)


def test_naturenet_names_minimum_image_size() -> None:
    with pytest.raises(ValueError, match=r"NatureNet needs images of at least 36x36 pixels"):
        NatureNet((4, 35, 84), 6)
    smallest = NatureNet((1, 36, 36), 3)  # 36 -> 8 -> 3 -> 1 pixel
    assert smallest(*make_inputs((1, 36, 36), 3, steps=1, batch=2)).baseline.shape == (1, 2)


def test_resnet_takes_any_image_size() -> None:
    model = ResNet((3, 7, 5), 3, channels=(8, 8), num_blocks=1)
    assert model(*make_inputs((3, 7, 5), 3, steps=2, batch=1)).baseline.shape == (2, 1)


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
    with pytest.raises(ValueError, match=r"activation must be one of \['relu', 'tanh'\]"):
        MLP((4,), 2, activation="gelu")
    with pytest.raises(ValueError, match=r"takes image observations \[C, H, W\]"):
        ResNet((84, 84), 6)

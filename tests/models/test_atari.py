"""The Atari networks (``stampede.models.atari``): sizes from the IMPALA paper's Fig. 3 and the
DQN paper, and the image sizes each one takes."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from stampede.models import ActorCritic, AtariNet, NatureNet, ResNet
from stampede.models.atari import ResidualBlock

from .conftest import ATARI_OBS, make_inputs, num_params


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


def test_resnet_takes_only_image_shapes_and_sensible_stacks() -> None:
    with pytest.raises(ValueError, match=r"takes image observations \[C, H, W\]"):
        ResNet((84, 84), 6)
    with pytest.raises(ValueError, match=r"channels must be non-empty and >= 1, got \(\)"):
        ResNet(ATARI_OBS, 6, channels=())
    with pytest.raises(ValueError, match=r"channels must be non-empty and >= 1, got \(16, 0\)"):
        ResNet(ATARI_OBS, 6, channels=(16, 0))
    with pytest.raises(ValueError, match=r"num_blocks must be >= 0, got -1"):
        ResNet(ATARI_OBS, 6, num_blocks=-1)
    no_blocks = ResNet(ATARI_OBS, 6, num_blocks=0)
    assert not any(isinstance(m, ResidualBlock) for m in no_blocks.modules())


@pytest.mark.parametrize("cls", [AtariNet, NatureNet, ResNet])
def test_the_lstm_width_defaults_to_hidden_size_and_can_differ(
    cls: Callable[..., ActorCritic],
) -> None:
    assert cls(ATARI_OBS, 6, use_lstm=True, hidden_size=64).lstm_size == 64
    model = cls(ATARI_OBS, 6, use_lstm=True, hidden_size=64, lstm_size=32)
    out = model(*make_inputs(ATARI_OBS, 6, steps=2, batch=3))
    assert [tuple(s.shape) for s in out.core_state] == [(1, 3, 32)] * 2
    assert model.core is not None
    assert model.core.input_size == 64 + 1 + 6  # features, last reward, one-hot last action


def test_resnet_residual_branches_start_near_the_identity() -> None:
    """The last convolution of each residual branch starts with gain 0.1, the first with the
    ReLU gain sqrt(2): every block's output starts close to its input."""
    model = ResNet((4, 16, 16), 6)  # small frames: the blocks are the same, the FC layer small
    blocks = [m for m in model.modules() if isinstance(m, ResidualBlock)]
    assert len(blocks) == 6
    for block in blocks:
        first = torch.linalg.matrix_norm(block.conv0.weight.flatten(1), ord=2)
        last = torch.linalg.matrix_norm(block.conv1.weight.flatten(1), ord=2)
        torch.testing.assert_close(first, torch.tensor(2**0.5))
        torch.testing.assert_close(last, torch.tensor(0.1))

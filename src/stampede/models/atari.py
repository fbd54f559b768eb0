"""The two Atari networks of IMPALA (Espeholt et al. 2018, arXiv 1802.01561, Fig. 3), and the
DQN network (Mnih et al. 2015) that PPO and MonoBeast use.

``num_tasks`` (multi-task runs) is the number of baseline outputs (`ActorCritic`). All take
channel-first image stacks [C, H, W] (e.g. 4 grey 84x84 frames, uint8) and end in
a ReLU'd FC layer of `hidden_size` units (256 in the IMPALA paper, 512 in the DQN network) that
feeds the shared core of `ActorCritic`. The optional LSTM has `lstm_size` units, by default
`hidden_size` (256, as in the paper).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from stampede.models.base import ActorCritic, as_shape, check_positive

# Unpadded convolutions as (out channels, kernel, stride): the paper's shallow torso, and the
# DQN torso of Mnih et al. 2015 (Nature), the network of PPO's and MonoBeast's Atari runs.
_SHALLOW_CONVS = ((16, 8, 4), (32, 4, 2))
_NATURE_CONVS = ((32, 8, 4), (64, 4, 2), (64, 3, 1))


def _check_image_shape(model: str, obs_shape: Sequence[int]) -> tuple[int, int, int]:
    """Return obs_shape as (C, H, W), or raise our ValueError naming the fix."""
    shape = as_shape(obs_shape)
    if len(shape) == 1:
        raise ValueError(
            f"model {model} takes image observations [C, H, W], got observation shape "
            f"{shape}; use model=mlp for flat vector observations"
        )
    if len(shape) != 3 or min(shape) < 1:
        raise ValueError(
            f"model {model} takes image observations [C, H, W] (channels first), "
            f"got observation shape {shape}"
        )
    return shape[0], shape[1], shape[2]


def _out_size(size: int, convs: Sequence[tuple[int, int, int]]) -> int:
    """Spatial size after unpadded convolutions (0 if the image is too small)."""
    for _, kernel, stride in convs:
        if size < kernel:
            return 0
        size = (size - kernel) // stride + 1
    return size


def _min_size(convs: Sequence[tuple[int, int, int]]) -> int:
    """Smallest image side for which every convolution produces >= 1 pixel."""
    size = 1
    while _out_size(size, convs) < 1:
        size += 1
    return size


def _conv_torso(
    model: str,
    obs_shape: Sequence[int],
    convs: Sequence[tuple[int, int, int]],
    hidden_size: int,
) -> tuple[tuple[int, int, int], nn.Sequential]:
    """(C, H, W) and the torso: each convolution then ReLU, then FC hidden_size, ReLU."""
    C, H, W = _check_image_shape(model, obs_shape)
    check_positive(model, hidden_size=hidden_size)
    out_h, out_w = _out_size(H, convs), _out_size(W, convs)
    if out_h < 1 or out_w < 1:
        side = _min_size(convs)
        layers = ", ".join(f"{k}x{k} stride {s}" for _, k, s in convs)
        raise ValueError(
            f"model {model} needs images of at least {side}x{side} pixels (convolutions "
            f"{layers}, no padding), got observation shape {(C, H, W)}; use model=resnet for "
            f"small images"
        )
    layers_: list[nn.Module] = []
    in_channels = C
    for channels, kernel, stride in convs:
        layers_ += [nn.Conv2d(in_channels, channels, kernel_size=kernel, stride=stride), nn.ReLU()]
        in_channels = channels
    torso = nn.Sequential(
        *layers_,
        nn.Flatten(),  # [N, c, h, w] -> [N, c*h*w]
        nn.Linear(in_channels * out_h * out_w, hidden_size),
        nn.ReLU(),
    )
    return (C, H, W), torso


class AtariNet(ActorCritic):
    """The paper's shallow network (Fig. 3, left).

    conv 16 8x8 stride 4, ReLU, conv 32 4x4 stride 2, ReLU, FC hidden_size, ReLU; no padding,
    so 84x84 frames give 9x9x32 features. Images need at least 20x20 pixels.
    """

    def __init__(
        self,
        obs_shape: Sequence[int],
        num_actions: int,
        use_lstm: bool = False,
        hidden_size: int = 256,
        lstm_size: int | None = None,
        num_tasks: int = 1,
    ) -> None:
        shape, torso = _conv_torso("AtariNet", obs_shape, _SHALLOW_CONVS, hidden_size)
        lstm = hidden_size if lstm_size is None else lstm_size
        super().__init__(shape, num_actions, torso, hidden_size, use_lstm, lstm, num_tasks)


class NatureNet(ActorCritic):
    """The DQN network of Mnih et al. 2015 ("Human-level control through deep reinforcement
    learning", Nature), the torso of PPO's Atari runs (Schulman et al. 2017) and of TorchBeast's
    MonoBeast: about 2.5x the shallow network's parameters and 3x its compute.

    conv 32 8x8 stride 4, conv 64 4x4 stride 2, conv 64 3x3 stride 1, each with ReLU, then FC
    hidden_size (512), ReLU; no padding, so 84x84 frames give 7x7x64 features. Images need at
    least 36x36 pixels.
    """

    def __init__(
        self,
        obs_shape: Sequence[int],
        num_actions: int,
        use_lstm: bool = False,
        hidden_size: int = 512,
        lstm_size: int | None = None,
        num_tasks: int = 1,
    ) -> None:
        shape, torso = _conv_torso("NatureNet", obs_shape, _NATURE_CONVS, hidden_size)
        lstm = hidden_size if lstm_size is None else lstm_size
        super().__init__(shape, num_actions, torso, hidden_size, use_lstm, lstm, num_tasks)


class ResidualBlock(nn.Module):
    """x + conv3x3(ReLU(conv3x3(ReLU(x)))), channels and size preserved (Fig. 3, right)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv0 = nn.Conv2d(channels, channels, kernel_size=3, padding=1)
        self.conv1 = nn.Conv2d(channels, channels, kernel_size=3, padding=1)

    def forward(self, x: Tensor) -> Tensor:
        y = self.conv0(torch.relu(x))
        y = self.conv1(torch.relu(y))
        return x + y


def _conv_stack(in_channels: int, out_channels: int, num_blocks: int) -> nn.Sequential:
    """conv 3x3 stride 1, max-pool 3x3 stride 2 (padding 1, halving H and W, rounding up),
    then num_blocks residual blocks."""
    return nn.Sequential(
        nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1),
        nn.MaxPool2d(kernel_size=3, stride=2, padding=1),
        *(ResidualBlock(out_channels) for _ in range(num_blocks)),
    )


class ResNet(ActorCritic):
    """The paper's deep network (Fig. 3, right).

    One stack per entry of `channels` ((16, 32, 32) in the paper), each of conv 3x3, max-pool
    3x3 stride 2 and `num_blocks` residual blocks; then ReLU, FC hidden_size, ReLU. Every
    convolution is padded, so any image size works (84x84 gives 11x11x32 features).
    """

    def __init__(
        self,
        obs_shape: Sequence[int],
        num_actions: int,
        use_lstm: bool = False,
        hidden_size: int = 256,
        channels: Sequence[int] = (16, 32, 32),
        num_blocks: int = 2,
        lstm_size: int | None = None,
        num_tasks: int = 1,
    ) -> None:
        C, H, W = _check_image_shape("ResNet", obs_shape)
        widths = tuple(int(c) for c in channels)
        if not widths or min(widths) < 1:
            raise ValueError(f"model ResNet: channels must be non-empty and >= 1, got {widths}")
        if num_blocks < 0:
            raise ValueError(f"model ResNet: num_blocks must be >= 0, got {num_blocks}")
        check_positive("ResNet", hidden_size=hidden_size)
        stacks = [
            _conv_stack(c_in, c_out, num_blocks)
            for c_in, c_out in zip((C, *widths[:-1]), widths, strict=True)
        ]
        out_h, out_w = H, W
        for _ in widths:  # each pool with padding 1, stride 2 maps n -> ceil(n / 2)
            out_h, out_w = (out_h + 1) // 2, (out_w + 1) // 2
        torso = nn.Sequential(
            *stacks,
            nn.ReLU(),
            nn.Flatten(),  # [N, c, h, w] -> [N, c*h*w]
            nn.Linear(widths[-1] * out_h * out_w, hidden_size),
            nn.ReLU(),
        )
        lstm = hidden_size if lstm_size is None else lstm_size
        super().__init__((C, H, W), num_actions, torso, hidden_size, use_lstm, lstm, num_tasks)

    def _init_weights(self) -> None:
        """As `ActorCritic`'s, but the last convolution of each residual branch starts small
        (gain 0.1, in the spirit of Goyal et al. 2017's zero-init): every block starts close to
        the identity, so the features keep their scale through the 6 blocks instead of growing
        with each addition (with gain sqrt(2) everywhere, std 4.6 on Pong frames; with this,
        0.9), and gradients still reach every layer from the first step."""
        super()._init_weights()
        for module in self.torso.modules():
            if isinstance(module, ResidualBlock):
                nn.init.orthogonal_(module.conv1.weight, gain=0.1)

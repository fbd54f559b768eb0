"""Frame preprocessing of the DQN Nature protocol (Mnih et al. 2015), used by IMPALA's Atari runs.

Pure array functions on uint8 frames, no emulator: max over the last two raw frames, area
resize to ``screen_size`` x ``screen_size``, and the frame stack with the newest frame last.
The resize reproduces OpenCV's ``INTER_AREA`` (the filter ale-py's C++ vector uses) in float32
with the same weights and summation order, so both Atari backends give identical pixels.
"""

from __future__ import annotations

import numpy as np


def max_pool(frame_a: np.ndarray, frame_b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Pixel-wise max of two raw frames [..., H, W] uint8.

    Atari sprites flicker (drawn on alternate frames); the max over the last two frames of an
    action repeat shows every object (Mnih et al. 2015, Methods, "Preprocessing").
    """
    if frame_a.shape != frame_b.shape:
        raise ValueError(
            f"max_pool needs frames of one shape, got {frame_a.shape} and {frame_b.shape}"
        )
    return np.maximum(frame_a, frame_b, out=out)


def _area_taps(in_size: int, out_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Source indices and weights [K, out_size] of a 1-D area (box) filter, K taps per output.

    Output pixel i covers the source interval [i * s, (i + 1) * s), s = in_size / out_size; each
    source pixel weighs by the length of its overlap divided by the interval's length. Slivers
    under 1e-3 pixel are dropped and the weights rounded to float32, as OpenCV does. Unused taps
    carry weight 0 at index 0.
    """
    scale = 1.0 / (out_size / in_size)  # OpenCV's double-precision form of in/out
    taps: list[list[tuple[int, float]]] = []
    for i in range(out_size):
        start = i * scale
        end = start + scale
        width = min(scale, in_size - start)
        first, last = int(np.ceil(start)), min(int(np.floor(end)), in_size - 1)
        first = min(first, last)
        row: list[tuple[int, float]] = []
        if first - start > 1e-3:  # partial pixel at the left edge
            row.append((first - 1, (first - start) / width))
        row += [(j, 1.0 / width) for j in range(first, last)]
        if end - last > 1e-3:  # partial pixel at the right edge
            row.append((last, min(end - last, 1.0, width) / width))
        taps.append(row)
    num_taps = max(len(row) for row in taps)
    index = np.zeros((num_taps, out_size), dtype=np.intp)
    weight = np.zeros((num_taps, out_size), dtype=np.float32)
    for i, row in enumerate(taps):
        for k, (j, w) in enumerate(row):
            index[k, i], weight[k, i] = j, w
    return index, weight


class AreaResize:
    """Resize uint8 frames [..., H, W] -> [..., h, w] by area averaging (a box filter).

    The paper's 84x84 grayscale input; area averaging rather than bilinear sampling keeps thin
    objects (Pong's ball) visible after the 2.5x vertical shrink.
    """

    def __init__(self, in_hw: tuple[int, int], out_hw: tuple[int, int]) -> None:
        self.in_hw, self.out_hw = in_hw, out_hw
        self._rows = _area_taps(in_hw[0], out_hw[0])  # ([Ky, h], [Ky, h])
        self._cols = _area_taps(in_hw[1], out_hw[1])  # ([Kx, w], [Kx, w])

    def __call__(self, frames: np.ndarray) -> np.ndarray:
        if frames.shape[-2:] != self.in_hw or frames.dtype != np.uint8:
            raise ValueError(
                f"AreaResize expects uint8 frames [..., {self.in_hw[0]}, {self.in_hw[1]}], "
                f"got {frames.dtype} {frames.shape}"
            )
        if self.in_hw == self.out_hw:
            return frames.copy()
        # Horizontal pass, taps summed in order: [..., H, W] -> [..., H, w].
        col_index, col_weight = self._cols
        across = frames[..., col_index[0]] * col_weight[0]  # uint8 * float32 -> float32
        for k in range(1, col_index.shape[0]):
            across += frames[..., col_index[k]] * col_weight[k]
        # Vertical pass: [..., H, w] -> [..., h, w].
        row_index, row_weight = self._rows
        out = across[..., row_index[0], :] * row_weight[0][:, None]
        for k in range(1, row_index.shape[0]):
            out += across[..., row_index[k], :] * row_weight[k][:, None]
        # Round half to even, like OpenCV's saturate_cast; the weights sum to 1 so no clipping.
        return np.rint(out).astype(np.uint8)


def push_frame(stack: np.ndarray, frame: np.ndarray) -> None:
    """Shift ``stack`` [..., K, h, w] one slot towards the past and put ``frame`` [..., h, w] last.

    Channels-first, oldest first: slot K-1 always holds the newest frame.
    """
    # [..., K-1, h, w] <- frames t-K+2 .. t; numpy buffers the overlapping copy.
    stack[..., :-1, :, :] = stack[..., 1:, :, :]
    stack[..., -1, :, :] = frame


def restart_stack(stack: np.ndarray, frame: np.ndarray) -> None:
    """Start a new episode's ``stack`` [..., K, h, w]: zeros, then ``frame`` [..., h, w] last.

    Zero padding (not copies of the first frame) is what ale-py's C++ vector does; we match it so
    the backends agree, and an episode's first steps never show the previous episode's frames.
    """
    stack[..., :-1, :, :] = 0
    stack[..., -1, :, :] = frame

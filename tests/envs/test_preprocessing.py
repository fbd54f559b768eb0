"""The DQN Nature frame preprocessing (``stampede.envs.preprocessing``) on hand-made arrays: the max
over two frames, the area resize, and the frame stack."""

from __future__ import annotations

import numpy as np
import pytest

from stampede.envs.preprocessing import AreaResize, max_pool, push_frame, restart_stack


def test_max_pool_takes_the_pixelwise_max_of_two_frames():
    older = np.array([[0, 5], [9, 1]], dtype=np.uint8)
    newer = np.array([[3, 2], [9, 7]], dtype=np.uint8)
    np.testing.assert_array_equal(max_pool(older, newer), [[3, 5], [9, 7]])
    with pytest.raises(ValueError, match="one shape"):
        max_pool(older, newer[:1])


def test_area_resize_averages_whole_and_partial_pixels():
    # 5 -> 2 pixels: each output covers 2.5 inputs, weights 0.4, 0.4, 0.2 | 0.2, 0.4, 0.4.
    row = np.array([[10, 20, 30, 40, 50]], dtype=np.uint8)
    np.testing.assert_array_equal(AreaResize((1, 5), (1, 2))(row), [[18, 42]])
    # Integer factor 2: block means 2.5 and 3.5 round half to even, to 2 and 4.
    image = np.array([[2, 3, 3, 4], [2, 3, 3, 4]], dtype=np.uint8)
    np.testing.assert_array_equal(AreaResize((2, 4), (1, 2))(image), [[2, 4]])


def test_area_resize_keeps_flat_images_flat_and_batches():
    frames = np.stack([np.full((210, 160), v, dtype=np.uint8) for v in (0, 7, 255)])
    out = AreaResize((210, 160), (84, 84))(frames)
    assert out.shape == (3, 84, 84)
    assert out.dtype == np.uint8
    np.testing.assert_array_equal(out[:, 0, 0], [0, 7, 255])
    assert (out == out[:, :1, :1]).all()


def test_area_resize_keeps_the_mean_brightness():
    """Each output pixel is a weighted mean whose weights sum to 1: only rounding moves the mean."""
    frames = np.random.default_rng(0).integers(0, 256, size=(4, 210, 160), dtype=np.uint8)
    out = AreaResize((210, 160), (84, 84))(frames)
    assert np.abs(out.mean(axis=(1, 2)) - frames.mean(axis=(1, 2))).max() < 0.5


def test_area_resize_keeps_a_one_pixel_line_visible_wherever_it_is():
    """Why area averaging: a 1-pixel line (Pong's ball) is never sampled away by the 2.5x shrink.
    A row fully inside one output row weighs 1/2.5 there (255 -> 102); one split between two
    output rows weighs 0.5/2.5 in each (-> 51)."""
    frames = np.zeros((210, 210, 160), dtype=np.uint8)
    frames[np.arange(210), np.arange(210), :] = 255  # frame i: row i lit
    brightest = AreaResize((210, 160), (84, 84))(frames).max(axis=(1, 2))
    assert brightest.min() == 51
    assert brightest.max() == 102


def test_area_resize_refuses_frames_of_another_size_or_dtype():
    resize = AreaResize((210, 160), (84, 84))
    expected = r"expects uint8 frames \[\.\.\., 210, 160\], got uint8 \(84, 84\)"
    with pytest.raises(ValueError, match=expected):
        resize(np.zeros((84, 84), dtype=np.uint8))
    with pytest.raises(ValueError, match=r"got float32 \(210, 160\)"):
        resize(np.zeros((210, 160), dtype=np.float32))


def test_area_resize_to_the_same_size_copies():
    frame = np.arange(6, dtype=np.uint8).reshape(2, 3)
    out = AreaResize((2, 3), (2, 3))(frame)
    np.testing.assert_array_equal(out, frame)
    out[0, 0] = 99
    assert frame[0, 0] == 0


def test_frame_stack_shifts_with_the_newest_frame_last():
    stack = np.arange(4, dtype=np.uint8)[:, None, None].repeat(2, 1).repeat(2, 2)  # [4, 2, 2]
    push_frame(stack, np.full((2, 2), 9, dtype=np.uint8))
    np.testing.assert_array_equal(stack[:, 0, 0], [1, 2, 3, 9])
    restart_stack(stack, np.full((2, 2), 5, dtype=np.uint8))
    np.testing.assert_array_equal(stack[:, 0, 0], [0, 0, 0, 5])


def test_frame_stacks_of_a_vector_shift_together_each_with_its_own_frame():
    stacks = np.zeros((2, 3, 1, 1), dtype=np.uint8)  # [E, K, h, w]
    push_frame(stacks, np.array([[[1]], [[7]]], dtype=np.uint8))  # [E, h, w]
    push_frame(stacks, np.array([[[2]], [[8]]], dtype=np.uint8))
    np.testing.assert_array_equal(stacks[:, :, 0, 0], [[0, 1, 2], [0, 7, 8]])
    restart_stack(stacks, np.array([[[5]], [[6]]], dtype=np.uint8))
    np.testing.assert_array_equal(stacks[:, :, 0, 0], [[0, 0, 5], [0, 0, 6]])

"""Minibatches: each pass splits the B trajectories anew, every trajectory in exactly one
minibatch; a minibatch takes its columns of every time-major field and keeps per-slot fields."""

from __future__ import annotations

import torch

from stampede.train.minibatch import columns_of, part_of, random_split


def test_a_split_covers_every_trajectory_once_in_near_equal_parts() -> None:
    torch.manual_seed(0)
    parts = random_split(10, 3, torch.device("cpu"))
    assert [len(p) for p in parts] == [4, 4, 2]
    assert sorted(torch.cat(parts).tolist()) == list(range(10))
    again = random_split(10, 3, torch.device("cpu"))
    assert not all(torch.equal(a, b) for a, b in zip(parts, again, strict=True))


def test_columns_of_a_batch() -> None:
    T, B = 3, 4
    batch = {
        "obs": torch.arange((T + 1) * B).reshape(T + 1, B),
        "core_state_0": torch.arange(2 * B).reshape(1, B, 2).float(),  # [layers, B, H]
        "policy_version": torch.tensor([7, 8]),  # per slot: kept whole
    }
    picked = columns_of(batch, torch.tensor([3, 1]))
    assert picked["obs"].tolist() == [[3, 1], [7, 5], [11, 9], [15, 13]]
    assert picked["core_state_0"][0].tolist() == [[6.0, 7.0], [2.0, 3.0]]
    assert picked["policy_version"].tolist() == [7, 8]
    whole, arrival = part_of(batch, None, None)
    assert whole is batch
    assert arrival is None

"""The learner batch that `RolloutBuffers.gather` assembles from rollout slots.

Every slot is filled with values that encode where they came from (slot s, step t, env e), so
a batch entry names the slot, step and env it was read from.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from stampede.envs import EnvSpec
from stampede.train import buffers
from stampede.train.buffers import RolloutBuffers, rollout_spec
from stampede.train.timing import ACTOR_STAGES

T, E, OBS, A, H, SLOTS = 3, 2, 4, 5, 6, 5  # unroll, envs per actor, obs size, actions, LSTM
ENV = EnvSpec(obs_shape=(OBS,), obs_dtype=np.dtype(np.float32), num_actions=A, frames_per_step=1)


def code(s: int, t: int, e: int) -> int:
    """The value written at slot s, step t, env e (all distinct for the sizes above)."""
    return 1000 * s + 10 * t + e


def filled(core: bool = True) -> RolloutBuffers:
    core_shapes = [(1, E, H), (1, E, H)] if core else []
    bufs = RolloutBuffers(rollout_spec(ENV, T, E, core_shapes), SLOTS)
    for s in range(SLOTS):
        slot = bufs.slot(s)
        for t in range(T + 1):
            for e in range(E):
                c = code(s, t, e)
                slot["obs"][t, e] = torch.arange(OBS) + c  # obs[t, e, k] = c + k
                slot["reward"][t, e] = c
                slot["done"][t, e] = c % 3 == 0
                slot["last_action"][t, e] = c
                slot["action"][t, e] = c + 1
                slot["logits"][t, e] = torch.arange(A) + c  # logits[t, e, a] = c + a
                slot["episode_return"][t, e] = -c
                slot["episode_length"][t, e] = c + 2
        for i in range(len(core_shapes)):
            for e in range(E):
                # core_state_i[layer 0, e, h] = 1000 s + 100 i + 10 e + h
                slot[f"core_state_{i}"][0, e] = torch.arange(H) + 1000 * s + 100 * i + 10 * e
        slot["policy_version"].fill_(7 * s + 1)
        slot["actor_time"].copy_(torch.arange(len(ACTOR_STAGES) + 1) + 100.0 * s)
    return bufs


INDICES = [3, 0, 4]  # out of order, not contiguous


def test_time_major_fields_are_t_plus_1_by_slots_times_envs() -> None:
    batch = filled().gather(INDICES, torch.device("cpu"))
    S = len(INDICES)
    expected_shapes = {
        "obs": (T + 1, S * E, OBS),
        "reward": (T + 1, S * E),
        "done": (T + 1, S * E),
        "last_action": (T + 1, S * E),
        "action": (T + 1, S * E),
        "logits": (T + 1, S * E, A),
        "episode_return": (T + 1, S * E),
        "episode_length": (T + 1, S * E),
        "task": (T + 1, S * E),
        "core_state_0": (1, S * E, H),
        "core_state_1": (1, S * E, H),
        "policy_version": (S,),
        "actor_time": (S, len(ACTOR_STAGES) + 1),
    }
    assert {name: tuple(t.shape) for name, t in batch.items()} == expected_shapes


def test_each_column_is_one_env_of_one_slot_in_the_order_asked() -> None:
    """Column j * E + e of the batch is env e of slot INDICES[j], at every step t."""
    batch = filled().gather(INDICES, torch.device("cpu"))
    for j, s in enumerate(INDICES):
        for e in range(E):
            col = j * E + e
            for t in range(T + 1):
                c = code(s, t, e)
                assert batch["obs"][t, col].tolist() == [c + k for k in range(OBS)]
                assert batch["reward"][t, col].item() == c
                assert batch["done"][t, col].item() == (c % 3 == 0)
                assert batch["last_action"][t, col].item() == c
                assert batch["action"][t, col].item() == c + 1
                assert batch["logits"][t, col].tolist() == [c + a for a in range(A)]
                assert batch["episode_return"][t, col].item() == -c
                assert batch["episode_length"][t, col].item() == c + 2
            for i in range(2):  # the LSTM state before step 0 travels with its column
                expected = [1000 * s + 100 * i + 10 * e + h for h in range(H)]
                assert batch[f"core_state_{i}"][0, col].tolist() == expected


def test_per_slot_fields_keep_one_row_per_slot_in_the_order_asked() -> None:
    """`buffers.PER_SLOT` fields have no time or env axis: [S, ...], one row per slot."""
    assert set(buffers.PER_SLOT) == {"policy_version", "actor_time"}
    batch = filled().gather(INDICES, torch.device("cpu"))
    assert batch["policy_version"].tolist() == [7 * s + 1 for s in INDICES]
    for j, s in enumerate(INDICES):
        expected = [100.0 * s + k for k in range(len(ACTOR_STAGES) + 1)]
        assert batch["actor_time"][j].tolist() == expected


def test_dtypes_are_those_of_the_spec() -> None:
    bufs = filled()
    batch = bufs.gather(INDICES, torch.device("cpu"))
    assert {n: t.dtype for n, t in batch.items()} == {n: t.dtype for n, t in bufs.tensors.items()}


@pytest.mark.parametrize("indices", [[2], INDICES])
def test_the_batch_is_a_copy_the_slots_can_be_refilled_under(indices) -> None:
    """The runner releases the slots right after `gather`; actors then overwrite them."""
    bufs = filled()
    batch = bufs.gather(indices, torch.device("cpu"))
    before = {name: t.clone() for name, t in batch.items()}
    for t in bufs.tensors.values():
        t.fill_(0)
    for name, t in batch.items():
        assert torch.equal(t, before[name]), name


@pytest.mark.parametrize("indices", [[2], [4, 1], [0, 1, 2, 3, 4]])
def test_any_number_of_slots_without_lstm_state(indices) -> None:
    batch = filled(core=False).gather(indices, torch.device("cpu"))
    assert buffers.core_state(batch) == ()
    assert batch["reward"].shape == (T + 1, len(indices) * E)
    expected = [[code(s, t, e) for s in indices for e in range(E)] for t in range(T + 1)]
    assert batch["reward"].tolist() == expected


def test_every_field_but_the_per_slot_ones_is_time_major_in_the_spec() -> None:
    """A field added to the spec without a time axis must be listed in PER_SLOT (or be an LSTM
    state), or `gather` would fold its first axis into the batch's columns."""
    spec = rollout_spec(ENV, T, E, [(1, E, H)])
    for name, field in spec.items():
        if name in buffers.PER_SLOT:
            assert field.shape[:2] != (T + 1, E), name
        elif not name.startswith("core_state_"):
            assert field.shape[:2] == (T + 1, E), name


def test_transitions_cut_step_t_into_x_t_and_the_transition_into_x_t_plus_1() -> None:
    """Step t of the loss: x_t's outputs, action and mu at row t; the reward (clipped) and
    episode end of x_t -> x_{t+1} at row t + 1; the bootstrap V(x_T) at row T."""
    B = 2
    batch = filled(core=False).gather([1], torch.device("cpu"))  # [T + 1, B = E]
    batch["reward"] = torch.tensor([[9.0, -9.0], [0.5, 3.0], [-0.25, -4.0], [2.0, 0.0]])
    pi_logits = torch.arange((T + 1) * B * A, dtype=torch.float32).view(T + 1, B, A)
    values = -torch.arange((T + 1) * B, dtype=torch.float32).view(T + 1, B)
    steps = buffers.transitions(batch, pi_logits, values, discount=0.9, reward_clip=1.0)
    assert {name: tuple(x.shape) for name, x in steps._asdict().items()} == {
        "pi_logits_t": (T, B, A),
        "v_t": (T, B),
        "mu_logits_t": (T, B, A),
        "a_t": (T, B),
        "r_t": (T, B),
        "discount_t": (T, B),
        "bootstrap_value": (B,),
    }
    for t in range(T):
        for b in range(B):
            assert steps.pi_logits_t[t, b].tolist() == pi_logits[t, b].tolist()
            assert steps.v_t[t, b].item() == values[t, b].item()
            assert steps.mu_logits_t[t, b].tolist() == [code(1, t, b) + a for a in range(A)]
            assert steps.a_t[t, b].item() == code(1, t, b) + 1
            reward = float(batch["reward"][t + 1, b])
            assert steps.r_t[t, b].item() == max(-1.0, min(1.0, reward))
            ended = code(1, t + 1, b) % 3 == 0  # done[t + 1]: x_t -> x_{t+1} ended an episode
            assert steps.discount_t[t, b].item() == pytest.approx(0.0 if ended else 0.9)
    assert steps.bootstrap_value.tolist() == values[T].tolist()


def test_on_the_cpu_gather_async_is_gather_with_nothing_to_wait_for() -> None:
    bufs = filled()
    batch, copied = bufs.gather_async(INDICES, torch.device("cpu"))
    assert copied is None
    assert buffers.ready(batch, copied) is batch
    expected = bufs.gather(INDICES, torch.device("cpu"))
    assert batch.keys() == expected.keys()
    for name, t in expected.items():
        assert torch.equal(batch[name], t), name


def test_actors_receive_the_slots_without_the_learners_staging() -> None:
    """The buffers travel to every (re)started actor; a GPU learner's pinned staging and copy
    stream stay in the learner process."""
    bufs = filled()
    bufs._staging = object()  # stands in for a `_CudaStaging`
    copy = pickle.loads(pickle.dumps(bufs))
    assert copy._staging is None
    assert bufs._staging is not None
    assert torch.equal(copy.tensors["obs"], bufs.tensors["obs"])

"""One step of the policy for a vector of environments (``stampede.models.policy``) and the
action choice (``select_action``): what the actors, the inference server and evaluation act with."""

from __future__ import annotations

import math
import re

import pytest
import torch
from conftest import assert_close_ulps
from torch import Tensor

from stampede.models import MLP, policy_step, select_action

ATARI_OBS = (4, 84, 84)


def test_select_action_greedy_is_argmax() -> None:
    logits = torch.randn(4, 5, 7, generator=torch.Generator().manual_seed(0))
    actions = select_action(logits, greedy=True)
    assert actions.dtype == torch.int64
    assert torch.equal(actions, logits.argmax(-1))


def test_select_action_samples_follow_softmax() -> None:
    torch.manual_seed(0)
    probs = torch.tensor([0.1, 0.2, 0.3, 0.4])
    n = 40_000
    logits = probs.log().expand(1, n, 4)  # [T=1, B=n, A=4]
    actions = select_action(logits)
    assert actions.shape == (1, n)
    assert actions.dtype == torch.int64
    assert actions.min() >= 0
    assert actions.max() <= 3
    freq = torch.bincount(actions.flatten(), minlength=4).float() / n
    # Binomial std for p <= 0.4 at n = 40k is <= 0.0025; allow 4 std.
    torch.testing.assert_close(freq, probs, atol=0.01, rtol=0)


def test_select_action_rejects_wrong_rank() -> None:
    with pytest.raises(ValueError, match=re.escape("policy_logits must have shape [T, B, A]")):
        select_action(torch.zeros(3, 4))


def policy_inputs() -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(obs [3, 4], a_{t-1} [3], r_{t-1} [3] partly beyond the clip, done [3]) for a 2-action
    MLP of 3 environments."""
    g = torch.Generator().manual_seed(0)
    obs = torch.randn(3, 4, generator=g)
    last_action = torch.randint(0, 2, (3,), generator=g)
    reward = torch.tensor([5.0, -0.5, -3.0])
    done = torch.tensor([True, False, False])
    return obs, last_action, reward, done


def test_policy_step_is_one_time_step_of_the_network_on_clipped_rewards() -> None:
    torch.manual_seed(0)
    model = MLP((4,), 2, use_lstm=True, hidden_size=8, hidden_sizes=[8])
    obs, last_action, reward, done = policy_inputs()
    state = tuple(torch.randn(s.shape) for s in model.initial_state(3))
    step = policy_step(
        model, obs, last_action, reward, done, state, device=torch.device("cpu"), reward_clip=1.0
    )
    # [B, ...] -> [T = 1, B, ...]
    clipped = reward.clamp(-1.0, 1.0)
    out = model(obs[None], last_action[None], clipped[None], done[None], state)
    # Two paths: policy_step runs under inference mode, this forward in grad mode, and oneDNN
    # may pick other matmul kernels for each (on an AVX2 CPU they differed by half an ulp).
    # Sums of at most 16 products: 8 ulps of the output's scale is ample and still catches any
    # change of input (a wrong reward clip moves the logits by far more).
    assert_close_ulps(step.logits, out.policy_logits[0], ulps=8)
    for after, expected in zip(step.core_state, out.core_state, strict=True):
        assert_close_ulps(after, expected, ulps=8)
    assert step.action.shape == (3,)
    assert step.action.dtype == torch.int64
    greedy = policy_step(
        model,
        obs,
        last_action,
        reward,
        done,
        state,
        device=torch.device("cpu"),
        reward_clip=1.0,
        greedy=True,
    )
    assert torch.equal(greedy.action, out.policy_logits[0].argmax(-1))


def test_policy_step_reads_a_nan_reward_as_zero() -> None:
    """A faulty env's NaN reward must not stop the behaviour policy (the learner skips it)."""
    torch.manual_seed(0)
    model = MLP((4,), 2, hidden_sizes=[8])
    obs, last_action, reward, done = policy_inputs()
    cpu = torch.device("cpu")
    nan = policy_step(
        model,
        obs,
        last_action,
        reward.index_fill(0, torch.tensor([1]), math.nan),
        done,
        (),
        device=cpu,
        reward_clip=1.0,
    )
    zero = policy_step(
        model,
        obs,
        last_action,
        reward.index_fill(0, torch.tensor([1]), 0.0),
        done,
        (),
        device=cpu,
        reward_clip=1.0,
    )
    assert torch.isfinite(nan.logits).all()
    torch.testing.assert_close(nan.logits, zero.logits, rtol=0, atol=0)

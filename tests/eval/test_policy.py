"""The evaluation's policy (stampede.eval.policy): the network's own choice for each env, fed the
last action, the clipped last reward and the episode starts, its LSTM state fresh at each start."""

from __future__ import annotations

import numpy as np
import torch

from stampede.eval.policy import Policy
from stampede.models import MLP

B = 3
CPU = torch.device("cpu")


def lstm_mlp() -> MLP:
    torch.manual_seed(0)
    return MLP((4,), 5, use_lstm=True, hidden_size=8, hidden_sizes=[16])


def observations(step: int) -> np.ndarray:
    return np.random.default_rng(step).normal(size=(B, 4)).astype(np.float32)


def forward(model: MLP, obs: np.ndarray, last_action, reward, done, state):
    """The network's own output at one step of B envs ([1, B, ...] inputs)."""
    with torch.no_grad():
        return model(
            torch.from_numpy(obs)[None],
            torch.as_tensor(last_action)[None],
            torch.as_tensor(reward, dtype=torch.float32)[None],
            torch.as_tensor(done)[None],
            state,
        )


def test_greedy_actions_are_the_networks_best_with_the_last_step_as_input() -> None:
    """Step 0 starts a game (done, no last action or reward); step 1 sees a_0 and r_0 clipped
    to the clip the network was trained with, and the done flags the envs returned."""
    model = lstm_mlp()
    policy = Policy(model, B, CPU, greedy=True, reward_clip=1.0)
    state = model.initial_state(B)
    a0 = policy.act(observations(0))
    out = forward(model, observations(0), [0] * B, [0.0] * B, [True] * B, state)
    np.testing.assert_array_equal(a0, out.policy_logits[0].argmax(-1).numpy())
    assert a0.dtype == np.int64
    assert a0.shape == (B,)

    policy.observe(np.array([5.0, -3.0, 0.5]), np.array([False, False, True]))
    a1 = policy.act(observations(1))
    out = forward(
        model, observations(1), a0, [1.0, -1.0, 0.5], [False, False, True], out.core_state
    )
    np.testing.assert_array_equal(a1, out.policy_logits[0].argmax(-1).numpy())


def test_a_new_game_starts_from_a_fresh_lstm_state() -> None:
    """After some steps, an env whose game just ended (done) acts as a fresh policy would; the
    others carry their state on."""
    model = lstm_mlp()
    policy = Policy(model, B, CPU, greedy=True, reward_clip=1.0)
    for step in range(4):
        policy.act(observations(step))
        policy.observe(np.zeros(B), np.zeros(B, dtype=bool))
    policy.observe(np.array([1.0, 0.0, 0.0]), np.array([True, False, False]))
    fresh = Policy(model, B, CPU, greedy=True, reward_clip=1.0)
    fresh.last_action, fresh.reward, fresh.done = policy.last_action, policy.reward, policy.done
    policy.act(observations(9))
    fresh.act(observations(9))
    for carried, new in zip(policy.state, fresh.state, strict=True):  # [layers, B, H] each
        torch.testing.assert_close(carried[:, 0], new[:, 0])  # env 0 started a new game
        assert not torch.allclose(carried[:, 1:], new[:, 1:])  # envs 1, 2 remember their game


def test_sampled_actions_follow_the_torch_seed() -> None:
    model = lstm_mlp()

    def actions(seed: int) -> list[int]:
        torch.manual_seed(seed)
        policy = Policy(model, B, CPU, greedy=False, reward_clip=1.0)
        return [int(a) for step in range(20) for a in policy.act(observations(step))]

    assert actions(1) == actions(1)
    assert actions(1) != actions(2)
    assert set(actions(1)) <= set(range(5))

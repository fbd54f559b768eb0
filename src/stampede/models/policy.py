"""One step of the policy for a vector of environments: the actors' and evaluation's inference.

IMPALA's network (Espeholt et al. 2018, arXiv 1802.01561, Fig. 3) sees, at x_t, the observation,
the last action a_{t-1}, the clipped reward r_{t-1} of the transition into x_t, and whether x_t
starts an episode (the rollout's time convention is in ``stampede.train.buffers``).
``policy_step`` runs it for one time step of B environments and picks a_t; the actors
(``stampede.train.actor``), the inference server (``stampede.train.inference``) and evaluation
(``stampede.eval.policy``) all act through it, so all feed the network as the learner does.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from stampede.models.base import ActorCritic, CoreState, select_action


def clip_reward(reward: Tensor, clip: float) -> Tensor:
    """Rewards clipped to [-clip, clip] as in the paper; ``clip == 0`` leaves them unchanged."""
    return reward.clamp(-clip, clip) if clip > 0 else reward


class PolicyStep(NamedTuple):
    """What the policy did at x_t for B environments."""

    action: Tensor  # [B] int64 a_t, on the CPU (where the envs and rollout buffers are)
    logits: Tensor  # [B, A] the policy's logits at x_t, on the CPU
    core_state: CoreState  # the LSTM state after x_t, on the model's device; () without LSTM


@torch.inference_mode()
def policy_step(
    model: ActorCritic,
    obs: Tensor,
    last_action: Tensor,
    reward: Tensor,
    done: Tensor,
    core_state: CoreState,
    *,
    device: torch.device,
    reward_clip: float,
    greedy: bool = False,
    task: Tensor | None = None,
) -> PolicyStep:
    """a_t for B environments from x_t: obs [B, *obs_shape], last_action a_{t-1} [B], reward
    r_{t-1} [B] (unclipped), done [B] (x_t starts an episode: the model zeroes that environment's
    LSTM state) and the LSTM state before x_t. Inputs on the CPU; the model runs on ``device``.
    a_t is a sample from the softmax, or its argmax if ``greedy``. ``task`` [B]: each env's task
    (multi-task networks need it)."""
    # A non-finite reward from a faulty env must not stop the policy; the learner sees the raw
    # value in the rollout and skips that update.
    reward = clip_reward(torch.nan_to_num(reward, nan=0.0), reward_clip)
    # [B, ...] -> [1, B, ...]: a time axis of length one
    out = model(
        obs.to(device)[None],
        last_action.to(device)[None],
        reward.to(device)[None],
        done.to(device)[None],
        core_state,
        task=None if task is None else task.to(device)[None],
    )
    action = select_action(out.policy_logits, greedy)[0]  # [1, B] -> [B]
    logits = out.policy_logits[0]  # [1, B, A] -> [B, A]
    return PolicyStep(action.cpu(), logits.cpu(), out.core_state)

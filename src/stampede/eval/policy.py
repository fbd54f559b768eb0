"""What an evaluation plays with: a trained network acting for B environments
(``Policy``), and the error an evaluation raises when it cannot run as asked."""

from __future__ import annotations

import numpy as np
import torch

from stampede.errors import UserError
from stampede.models import ActorCritic, policy_step


class EvalError(UserError):
    """Evaluation could not run as asked; the message names the setting and what was expected."""


class Policy:
    """Batched inference for B environments: the actors' ``policy_step`` with its inputs kept.

    Keeps the last action, the last (unclipped) reward, the done flags and the LSTM state between
    steps; the model zeroes the LSTM state of an environment whose ``done`` is set, so a new game
    starts from a fresh state, as in training.
    """

    def __init__(
        self,
        model: ActorCritic,
        batch: int,
        device: torch.device,
        greedy: bool,
        reward_clip: float,
        task: int = 0,
    ) -> None:
        self.model, self.device = model, device
        self.greedy, self.reward_clip = greedy, reward_clip
        self.task = torch.full((batch,), task, dtype=torch.int64)  # a multi-task net's game
        self.state = model.initial_state(batch, device)
        self.last_action = torch.zeros(batch, dtype=torch.int64)
        self.reward = torch.zeros(batch)
        self.done = torch.ones(batch, dtype=torch.bool)  # x_0 starts a game

    def act(self, obs: np.ndarray) -> np.ndarray:
        """a_t [B] from x_t: obs [B, *obs_shape] and the stored a_{t-1}, r_{t-1}, done_t."""
        step = policy_step(
            self.model,
            torch.from_numpy(obs),
            self.last_action,
            self.reward,
            self.done,
            self.state,
            device=self.device,
            reward_clip=self.reward_clip,
            greedy=self.greedy,
            task=self.task,
        )
        self.last_action, self.state = step.action, step.core_state
        return self.last_action.numpy()

    def observe(self, reward: np.ndarray, done: np.ndarray) -> None:
        """Store what the environments returned for the actions just taken ([B] each)."""
        self.reward = torch.as_tensor(reward, dtype=torch.float32)
        self.done = torch.as_tensor(done, dtype=torch.bool)

"""A fully connected network for flat vector observations (CartPole and other classic control).

Not in the IMPALA paper (Espeholt et al. 2018, arXiv 1802.01561); it shares the paper's core
(last reward and one-hot last action, optional LSTM, policy and baseline heads) through
`ActorCritic`, so small problems exercise the same code path as Atari.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from torch import nn

from stampede.models.base import ActorCritic, as_shape, check_positive

_ACTIVATIONS: dict[str, type[nn.Module]] = {"relu": nn.ReLU, "tanh": nn.Tanh}


class MLP(ActorCritic):
    """Linear + activation per entry of `hidden_sizes`; an empty tuple gives a linear torso.

    `hidden_size` is the LSTM core's width (used only with use_lstm=True); the torso's widths
    are `hidden_sizes`.
    """

    def __init__(
        self,
        obs_shape: Sequence[int],
        num_actions: int,
        use_lstm: bool = False,
        hidden_size: int = 64,
        hidden_sizes: Sequence[int] = (64, 64),
        activation: str = "relu",
        num_tasks: int = 1,
    ) -> None:
        shape = as_shape(obs_shape)
        if len(shape) != 1:
            raise ValueError(
                f"model MLP takes flat vector observations, got observation shape {shape}; "
                f"use model=nature, model=shallow or model=resnet for images"
            )
        if activation not in _ACTIVATIONS:
            raise ValueError(
                f"model MLP: activation must be one of {sorted(_ACTIVATIONS)}, got {activation!r}"
            )
        widths = tuple(int(h) for h in hidden_sizes)
        check_positive(
            "MLP", obs_size=shape[0], **{f"hidden_sizes[{i}]": h for i, h in enumerate(widths)}
        )
        layers: list[nn.Module] = []
        for n_in, n_out in itertools.pairwise((shape[0], *widths)):
            layers += [nn.Linear(n_in, n_out), _ACTIVATIONS[activation]()]
        torso = nn.Sequential(*layers)  # empty Sequential is the identity
        torso_size = widths[-1] if widths else shape[0]
        super().__init__(shape, num_actions, torso, torso_size, use_lstm, hidden_size, num_tasks)

    def _init_weights(self) -> None:
        """PyTorch's default init for the torso and the baseline head (small vector inputs keep
        their scale; with orthogonal gain sqrt 2 and Adam at 2e-3, CartPole's policy collapsed
        in 2 of 3 runs); the small policy head of every network."""
        self._init_policy_head()

"""Actor-critic networks: the IMPALA paper's shallow and deep Atari nets, the DQN (Nature) net,
and an MLP.

Hydra builds them with `_target_: stampede.models.AtariNet` (or NatureNet, ResNet, MLP) plus the
env's obs_shape and num_actions; they take plain ints and sequences, never the config. Their
other constructor arguments, with their defaults, are the `model.*` keys
(`stampede.config.models.model_schema`), and they check those values themselves. `policy_step`
is one step of a network's policy, as the actors and evaluation run it.
"""

from stampede.models.atari import AtariNet, NatureNet, ResNet
from stampede.models.base import (
    ActorCritic,
    CoreState,
    ModelOutput,
    precision_context,
    select_action,
)
from stampede.models.mlp import MLP
from stampede.models.policy import PolicyStep, clip_reward, policy_step

__all__ = [
    "MLP",
    "ActorCritic",
    "AtariNet",
    "CoreState",
    "ModelOutput",
    "NatureNet",
    "PolicyStep",
    "ResNet",
    "clip_reward",
    "policy_step",
    "precision_context",
    "select_action",
]

"""Actor-critic networks: the IMPALA paper's shallow and deep Atari nets, and an MLP.

Hydra builds them with `_target_: stampede.models.AtariNet` (or ResNet, MLP) plus the
env's obs_shape and num_actions; they take plain ints and sequences, never the config.
"""

from stampede.models.atari import AtariNet, ResNet
from stampede.models.base import ActorCritic, ModelOutput, select_action
from stampede.models.mlp import MLP

__all__ = ["MLP", "ActorCritic", "AtariNet", "ModelOutput", "ResNet", "select_action"]

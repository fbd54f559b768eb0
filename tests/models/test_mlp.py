"""The fully connected network (``stampede.models.mlp``): its size, its torso, and the observations
and settings it refuses."""

from __future__ import annotations

import re

import pytest
from torch import nn

from stampede.models import MLP

from .conftest import num_params


def test_mlp_parameter_count() -> None:
    # obs 4, hidden (64, 64), 2 actions: 4*64+64 = 320, 64*64+64 = 4_160;
    # core input 64+1+2 = 67: policy 67*2+2 = 136, baseline 68 -> 4_684.
    assert num_params(MLP((4,), 2)) == 4_684


def test_mlp_without_hidden_layers_is_linear_in_its_inputs() -> None:
    # hidden_sizes=() (documented as a linear torso): core input 4+1+2 = 7 features,
    # policy 7*2+2 = 16, baseline 8 -> 24 parameters, and no torso layer at all.
    model = MLP((4,), 2, hidden_sizes=())
    assert num_params(model) == 24
    assert len(model.torso) == 0


def test_mlp_rejects_image_shape() -> None:
    expected = (
        "model MLP takes flat vector observations, got observation shape (4, 84, 84); "
        "use model=nature, model=shallow or model=resnet for images"
    )
    with pytest.raises(ValueError, match=re.escape(expected)):
        MLP((4, 84, 84), 6)


def test_activation_and_widths_of_the_torso() -> None:
    model = MLP((4,), 2, hidden_sizes=(16, 8), activation="tanh")
    assert [type(layer) for layer in model.torso] == [nn.Linear, nn.Tanh, nn.Linear, nn.Tanh]
    assert [layer.out_features for layer in model.torso if isinstance(layer, nn.Linear)] == [16, 8]
    with pytest.raises(ValueError, match=r"activation must be one of \['relu', 'tanh'\]"):
        MLP((4,), 2, activation="gelu")


def test_hidden_size_is_the_lstm_width_only() -> None:
    model = MLP((4,), 2, use_lstm=True, hidden_size=32, hidden_sizes=(16,))
    assert model.lstm_size == 32
    assert model.core is not None
    assert model.core.input_size == 16 + 1 + 2  # torso width, last reward, one-hot last action


def test_every_width_must_be_positive() -> None:
    with pytest.raises(
        ValueError, match=re.escape("model MLP: hidden_sizes[1] must be >= 1, got 0")
    ):
        MLP((4,), 2, hidden_sizes=(8, 0))
    with pytest.raises(ValueError, match=re.escape("model MLP: obs_size must be >= 1, got 0")):
        MLP((0,), 2)

"""Torch models a scenario can name under ``model:``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field, PositiveInt

from flowerbed.core.registry import FEATURES, Params, register

if TYPE_CHECKING:
    from torch import nn


class MLPParams(Params):
    """Fully connected network with ReLU activations."""

    hidden: tuple[PositiveInt, ...] = Field(
        (64,), min_length=1, description="width of each hidden layer (model linear has none)"
    )
    dropout: float = Field(0.0, ge=0, lt=1)


@register("model", "mlp", params=MLPParams, requires=(FEATURES,))
def mlp(params: MLPParams, *, in_features: int, out_features: int) -> nn.Module:
    """Multi-layer perceptron: Linear-ReLU blocks then a linear head."""
    # torch only when a model is built: validating a scenario must stay light.
    from torch import nn

    layers: list[nn.Module] = []
    width = in_features
    for h in params.hidden:
        layers += [nn.Linear(width, h), nn.ReLU()]
        if params.dropout:
            layers.append(nn.Dropout(params.dropout))
        width = h
    layers.append(nn.Linear(width, out_features))
    return nn.Sequential(*layers)


class LinearParams(Params):
    """No parameters: a single affine map (logistic / linear regression)."""


@register("model", "linear", params=LinearParams, requires=(FEATURES,))
def linear(params: LinearParams, *, in_features: int, out_features: int) -> nn.Module:
    """A single linear layer (multinomial logistic regression for classification)."""
    from torch import nn

    del params
    return nn.Linear(in_features, out_features)

"""Torch models a scenario can name under ``model:``."""

from __future__ import annotations

from pydantic import Field
from torch import nn

from flowerbed.core.registry import Params, register


class MLPParams(Params):
    """Fully connected network with ReLU activations."""

    hidden: tuple[int, ...] = Field((64,), description="width of each hidden layer")
    dropout: float = Field(0.0, ge=0, lt=1)


@register("model", "mlp", params=MLPParams)
def mlp(params: MLPParams, *, in_features: int, out_features: int) -> nn.Module:
    """Multi-layer perceptron: Linear-ReLU blocks then a linear head."""
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


@register("model", "linear", params=LinearParams)
def linear(params: LinearParams, *, in_features: int, out_features: int) -> nn.Module:
    """A single linear layer (multinomial logistic regression for classification)."""
    del params
    return nn.Linear(in_features, out_features)

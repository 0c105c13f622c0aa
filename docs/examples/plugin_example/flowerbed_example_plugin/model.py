"""Model ``tanh_mlp``: a small torch network for the ``sgd`` learner."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field

from flowerbed.core.registry import FEATURES, Params, register

if TYPE_CHECKING:
    from torch import nn


class TanhMLPParams(Params):
    """Hidden layers of equal width with tanh activations."""

    width: int = Field(32, ge=1, description="units per hidden layer")
    depth: int = Field(1, ge=1, description="hidden layers")


@register("model", "tanh_mlp", params=TanhMLPParams, requires=(FEATURES,))
def tanh_mlp(params: TanhMLPParams, *, in_features: int, out_features: int) -> nn.Module:
    """Tanh MLP: ``depth`` Linear-Tanh blocks then a linear head (example plugin)."""
    # torch is imported when the model is built, so listing and validating stay light.
    from torch import nn

    layers: list[nn.Module] = []
    width = in_features
    for _ in range(params.depth):
        layers += [nn.Linear(width, params.width), nn.Tanh()]
        width = params.width
    layers.append(nn.Linear(width, out_features))
    return nn.Sequential(*layers)

"""Small convolutional networks of the cross-device benchmarks, on flattened image rows.

``lenet`` is the PyTorch tutorial's LeNet (conv 6, conv 16, fc 120, fc 84), the
``CNN`` of BlazeFL's benchmark; ``simple_cnn`` is pfl-research's CIFAR-10
``simple_cnn`` (conv 32, conv 64, max-pool, fc 128; about 1.63 M parameters
on 3 x 32 x 32 inputs). Both take the flat rows flowerbed's datasets hold
and reshape them to ``channels x side x side`` (square images).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from pydantic import Field

from flowerbed.core.registry import FEATURES, Params, register

if TYPE_CHECKING:
    from torch import nn


class CNNParams(Params):
    """Input channels; the side is ``sqrt(in_features / channels)``."""

    channels: int = Field(3, ge=1, description="image channels (the rows are C x H x W)")


def image_side(in_features: int, channels: int) -> int:
    """The side of square ``channels``-channel images flattened to ``in_features``."""
    side = math.isqrt(in_features // channels)
    if channels * side * side != in_features:
        raise ValueError(
            f"model.channels={channels}: {in_features} features are not "
            f"{channels} square images"
        )
    return side


def _unflatten(channels: int, side: int) -> nn.Module:
    from torch import nn

    return nn.Unflatten(1, (channels, side, side))


@register("model", "lenet", params=CNNParams, requires=(FEATURES,))
def lenet(params: CNNParams, *, in_features: int, out_features: int) -> nn.Module:
    """LeNet-5 style: conv5(6)-pool-conv5(16)-pool-fc120-fc84-head, ReLU."""
    from torch import nn

    side = image_side(in_features, params.channels)
    flat = 16 * (((side - 4) // 2 - 4) // 2) ** 2
    return nn.Sequential(
        _unflatten(params.channels, side),
        nn.Conv2d(params.channels, 6, 5), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(flat, 120), nn.ReLU(),
        nn.Linear(120, 84), nn.ReLU(),
        nn.Linear(84, out_features),
    )


@register("model", "simple_cnn", params=CNNParams, requires=(FEATURES,))
def simple_cnn(params: CNNParams, *, in_features: int, out_features: int) -> nn.Module:
    """conv3(32)-conv3(64)-maxpool2-fc128-head, ReLU (pfl-research's CIFAR-10 model)."""
    from torch import nn

    side = image_side(in_features, params.channels)
    flat = 64 * ((side - 4) // 2) ** 2
    return nn.Sequential(
        _unflatten(params.channels, side),
        nn.Conv2d(params.channels, 32, 3), nn.ReLU(),
        nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(flat, 128), nn.ReLU(),
        nn.Linear(128, out_features),
    )

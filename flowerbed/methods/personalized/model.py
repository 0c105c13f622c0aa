"""An MLP with BatchNorm after every hidden linear layer, for FedBN (Li et al., 2021).

FedBN's networks put a BatchNorm layer after each layer but the last; this is
that shape for feature rows. Modules are named (``fc0, bn0, relu0, ...,
head``), so state-dict keys say what they are (``bn0.running_mean``,
``head.weight``). A training batch of one row (the last of an epoch,
now and then) cannot give batch statistics; it is normalised with the
running ones and leaves them unchanged, as in evaluation.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from pydantic import Field, PositiveInt

from flowerbed.core.registry import FEATURES, Params, register

if TYPE_CHECKING:
    from torch import nn


class MLPBNParams(Params):
    """Hidden widths and BatchNorm's momentum (torch's default 0.1)."""

    hidden: tuple[PositiveInt, ...] = Field((64,), min_length=1, description="hidden widths")
    bn_momentum: float = Field(0.1, gt=0, le=1)


@register("model", "mlp_bn", params=MLPBNParams, requires=(FEATURES,))
def mlp_bn(params: MLPBNParams, *, in_features: int, out_features: int) -> nn.Module:
    """MLP with Linear-BatchNorm-ReLU blocks and a linear head (FedBN's layout)."""
    from collections import OrderedDict

    from torch import nn

    layers: OrderedDict[str, nn.Module] = OrderedDict()
    width = in_features
    for i, h in enumerate(params.hidden):
        layers[f"fc{i}"] = nn.Linear(width, h)
        layers[f"bn{i}"] = _batch_norm_class()(h, momentum=params.bn_momentum)
        layers[f"relu{i}"] = nn.ReLU()
        width = h
    layers["head"] = nn.Linear(width, out_features)
    return nn.Sequential(layers)


@functools.cache
def _batch_norm_class() -> Any:
    """``BatchNorm1d`` that normalises a one-row training batch with its running statistics."""
    import torch
    from torch import nn

    class BatchNorm1d(nn.BatchNorm1d):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if self.training and x.shape[0] == 1:
                return nn.functional.batch_norm(
                    x,
                    self.running_mean,
                    self.running_var,
                    self.weight,
                    self.bias,
                    training=False,
                    eps=self.eps,
                )
            return super().forward(x)

    return BatchNorm1d

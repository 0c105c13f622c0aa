"""Small CPU-sized forecasters over windows ``(B, T, C) -> (B, H, C)``.

``model: dlinear`` (Zeng et al., AAAI 2023: moving-average trend/seasonal
decomposition, one linear map over time each; ``decomposition: false`` is the
plain linear baseline), ``forecast_mlp`` (channel-independent MLP over the
lookback), ``gru_forecaster`` (a GRU over time, its last state read out) and
``patchtst`` (Nie et al., ICLR 2023: channel-independent patches, a small
transformer encoder, a flatten head). Builders take ``in_features = T * C``,
``out_features = H * C`` and ``channels = C``; the torch modules are in
:mod:`flowerbed.models.forecaster_nets`, imported only when a model is built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field, model_validator

from flowerbed.core.registry import Params, register

if TYPE_CHECKING:
    from torch import nn

#: Registered forecaster names (builders take ``channels`` besides the flat sizes).
FORECASTERS = ("dlinear", "forecast_mlp", "gru_forecaster", "patchtst")


def _sizes(in_features: int, out_features: int, channels: int) -> tuple[int, int]:
    """``(T, H)`` from flattened sizes; both must be multiples of ``channels``."""
    if in_features % channels or out_features % channels:
        raise ValueError(
            f"forecaster: in_features={in_features} and out_features={out_features} "
            f"must be multiples of channels={channels}"
        )
    return in_features // channels, out_features // channels


class DLinearParams(Params):
    """Moving-average kernel of the decomposition (odd), or no decomposition."""

    kernel: int = Field(25, ge=3, description="moving-average window (odd)")
    decomposition: bool = Field(True, description="false: one linear map (the Linear baseline)")

    @model_validator(mode="after")
    def _odd(self) -> DLinearParams:
        if self.kernel % 2 == 0:
            raise ValueError(f"kernel must be odd, got {self.kernel}")
        return self


@register("model", "dlinear", params=DLinearParams)
def dlinear(
    params: DLinearParams, *, in_features: int, out_features: int, channels: int = 1
) -> nn.Module:
    """DLinear: trend + seasonal linear maps over time, shared by channels (or plain Linear)."""
    from flowerbed.models.forecaster_nets import DLinear

    t, h = _sizes(in_features, out_features, channels)
    return DLinear(t, h, params.kernel, params.decomposition)


class ForecastMLPParams(Params):
    """Hidden widths and dropout of the channel-independent MLP."""

    hidden: tuple[int, ...] = Field((64, 64), min_length=1)
    dropout: float = Field(0.0, ge=0, lt=1)


@register("model", "forecast_mlp", params=ForecastMLPParams)
def forecast_mlp(
    params: ForecastMLPParams, *, in_features: int, out_features: int, channels: int = 1
) -> nn.Module:
    """MLP from each channel's lookback to its horizon (ReLU, shared by channels)."""
    from flowerbed.models.forecaster_nets import ChannelMLP

    t, h = _sizes(in_features, out_features, channels)
    return ChannelMLP(t, h, params.hidden, params.dropout)


class GRUParams(Params):
    """Hidden size and depth of the GRU."""

    hidden: int = Field(32, ge=1)
    layers: int = Field(1, ge=1)


@register("model", "gru_forecaster", params=GRUParams)
def gru_forecaster(
    params: GRUParams, *, in_features: int, out_features: int, channels: int = 1
) -> nn.Module:
    """GRU over the lookback (all channels as inputs); a linear read-out of the last state."""
    from flowerbed.models.forecaster_nets import GRUForecaster

    t, h = _sizes(in_features, out_features, channels)
    del t
    return GRUForecaster(channels, h, params.hidden, params.layers)


class PatchTSTParams(Params):
    """Patching and size of the small patch transformer."""

    patch_len: int = Field(8, ge=1)
    stride: int = Field(4, ge=1)
    d_model: int = Field(32, ge=2)
    n_heads: int = Field(2, ge=1)
    n_layers: int = Field(2, ge=1)
    ff_mult: int = Field(2, ge=1)
    dropout: float = Field(0.1, ge=0, lt=1)

    @model_validator(mode="after")
    def _heads(self) -> PatchTSTParams:
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        return self


@register("model", "patchtst", params=PatchTSTParams)
def patchtst(
    params: PatchTSTParams, *, in_features: int, out_features: int, channels: int = 1
) -> nn.Module:
    """PatchTST-style: channel-independent patches, transformer encoder, flatten head."""
    from flowerbed.models.forecaster_nets import PatchTST

    t, h = _sizes(in_features, out_features, channels)
    return PatchTST(t, h, params)

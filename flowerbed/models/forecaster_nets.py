"""Torch modules of the forecasters in :mod:`flowerbed.models.forecasters`.

Every module maps a batch of lookbacks ``(B, T, C)`` to horizons ``(B, H, C)``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from flowerbed.models.forecasters import PatchTSTParams


def moving_average(x: torch.Tensor, kernel: int) -> torch.Tensor:
    """Centred moving average over time of ``(B, T, C)``, ends padded by repetition."""
    half = (kernel - 1) // 2
    padded = torch.cat([x[:, :1].expand(-1, half, -1), x, x[:, -1:].expand(-1, half, -1)], 1)
    return F.avg_pool1d(padded.transpose(1, 2), kernel, stride=1).transpose(1, 2)


class DLinear(nn.Module):
    """``Linear_s(x - trend) + Linear_t(trend)`` over time (or one ``Linear`` over time)."""

    def __init__(self, lookback: int, horizon: int, kernel: int, decomposition: bool) -> None:
        super().__init__()
        self.kernel, self.decomposition = kernel, decomposition
        self.seasonal = nn.Linear(lookback, horizon)
        self.trend = nn.Linear(lookback, horizon) if decomposition else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, T, C) -> (B, H, C)``."""
        if self.trend is None:
            return self.seasonal(x.transpose(1, 2)).transpose(1, 2)
        trend = moving_average(x, self.kernel)
        out = self.seasonal((x - trend).transpose(1, 2)) + self.trend(trend.transpose(1, 2))
        return out.transpose(1, 2)


class ChannelMLP(nn.Module):
    """ReLU MLP from a channel's lookback to its horizon, the same for every channel."""

    def __init__(
        self, lookback: int, horizon: int, hidden: tuple[int, ...], dropout: float
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        width = lookback
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU(), nn.Dropout(dropout)]
            width = h
        layers.append(nn.Linear(width, horizon))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, T, C) -> (B, H, C)``."""
        return self.net(x.transpose(1, 2)).transpose(1, 2)


class GRUForecaster(nn.Module):
    """GRU over time; ``Linear(hidden -> H * C)`` on the last hidden state."""

    def __init__(self, channels: int, horizon: int, hidden: int, layers: int) -> None:
        super().__init__()
        self.channels, self.horizon = channels, horizon
        self.gru = nn.GRU(channels, hidden, num_layers=layers, batch_first=True)
        self.head = nn.Linear(hidden, horizon * channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, T, C) -> (B, H, C)``."""
        _, last = self.gru(x)
        return self.head(last[-1]).view(len(x), self.horizon, self.channels)


class PatchTST(nn.Module):
    """Patches of each channel (end padded by ``stride`` repeats), encoder, flatten head."""

    def __init__(self, lookback: int, horizon: int, p: PatchTSTParams) -> None:
        super().__init__()
        self.patch_len, self.stride = min(p.patch_len, lookback), p.stride
        n_patches = (lookback + p.stride - self.patch_len) // p.stride + 1
        self.embed = nn.Linear(self.patch_len, p.d_model)
        self.pos = nn.Parameter(0.02 * torch.randn(n_patches, p.d_model))
        layer = nn.TransformerEncoderLayer(
            p.d_model, p.n_heads, p.ff_mult * p.d_model, p.dropout, batch_first=True,
            norm_first=True,
        )
        self.encoder = nn.TransformerEncoder(layer, p.n_layers, enable_nested_tensor=False)
        self.head = nn.Linear(n_patches * p.d_model, horizon)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, T, C) -> (B, H, C)``."""
        b, _, c = x.shape
        series = x.transpose(1, 2).reshape(b * c, -1)
        series = torch.cat([series, series[:, -1:].expand(-1, self.stride)], dim=1)
        patches = series.unfold(1, self.patch_len, self.stride)  # (B*C, N, P)
        tokens = self.encoder(self.embed(patches) + self.pos)
        out = self.head(tokens.flatten(1))  # (B*C, H)
        return out.view(b, c, -1).transpose(1, 2)

# SPDX-License-Identifier: Apache-2.0
"""A small untrained U-Net for the Deep Image Prior baseline (Ulyanov, Vedaldi, Lempitsky, 2018).

The "skip" encoder-decoder of DIP at a CPU size: per level a stride-2 3x3
conv and a 3x3 conv (BatchNorm, LeakyReLU 0.2), a 1x1 skip branch of
``skip`` channels, bilinear 2x upsampling, then 3x3 and 1x1 convs after the
concatenation; a 1x1 conv and a sigmoid at the top. Used by
:func:`flowerbed.methods.lottery_prior.algorithm_baselines.fit_dip`; not a registered
component (only the Lottery Prior learner builds it).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def _conv(c_in: int, c_out: int, k: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(c_in, c_out, k, stride=stride, padding=k // 2, padding_mode="reflect"),
        nn.BatchNorm2d(c_out),
        nn.LeakyReLU(0.2),
    )


class _Level(nn.Module):
    """One resolution: skip branch, down path, the deeper levels, and the up path."""

    def __init__(self, c_in: int, width: int, skip: int, deeper: nn.Module | None) -> None:
        super().__init__()
        self.skip = _conv(c_in, skip, 1) if skip else None
        self.down = nn.Sequential(_conv(c_in, width, 3, stride=2), _conv(width, width, 3))
        self.deeper = deeper
        self.bn = nn.BatchNorm2d(width + skip)
        self.up = nn.Sequential(_conv(width + skip, width, 3), _conv(width, width, 1))

    def forward(self, x: Tensor) -> Tensor:
        h = self.down(x)
        if self.deeper is not None:
            h = self.deeper(h)
        h = F.interpolate(h, size=x.shape[-2:], mode="bilinear", align_corners=False)
        if self.skip is not None:
            h = torch.cat([self.skip(x), h], dim=1)
        return self.up(self.bn(h))  # type: ignore[no-any-return]


class DipUNet(nn.Module):
    """Encoder-decoder with skips mapping a fixed noise tensor to an image in ``[0, 1]``.

    ``depth`` levels (each halves the resolution; ``H`` and ``W`` divisible by
    ``2**depth``), ``width`` channels per level, ``skip`` channels per skip.
    """

    def __init__(
        self, in_channels: int = 32, out_channels: int = 1, width: int = 16, depth: int = 3,
        skip: int = 4,
    ) -> None:
        super().__init__()
        level: nn.Module | None = None
        for i in reversed(range(depth)):
            level = _Level(in_channels if i == 0 else width, width, skip, level)
        assert level is not None
        self.body = level
        self.head = nn.Conv2d(width, out_channels, 1)

    def forward(self, z: Tensor) -> Tensor:
        """``(N, in, H, W) → (N, out, H, W)`` in ``[0, 1]``."""
        return torch.sigmoid(self.head(self.body(z)))


def parameter_count(net: nn.Module) -> int:
    """Learned parameters of ``net``."""
    return sum(p.numel() for p in net.parameters() if p.requires_grad)

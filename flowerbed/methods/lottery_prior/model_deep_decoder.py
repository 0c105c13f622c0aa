# SPDX-License-Identifier: Apache-2.0
"""Deep Decoder (Heckel & Hand, ICLR 2019): a zero-shot baseline for Lottery Prior.

"Deep Decoder: Concise Image Representations from Untrained Non-convolutional
Networks". Written here from the paper's description (no code copied): a fixed random
input tensor ``B_0`` of ``k`` channels at a low resolution; each layer is a
1x1 convolution (a per-pixel linear map of the ``k`` channels), a 2x
bilinear upsampling, a ReLU and a channel normalisation (every channel
normalised over its pixels, then a learned scale and offset); the last layer
does not upsample and a final 1x1 convolution with a sigmoid gives the
picture. No convolution wider than one pixel, no skip connections: the
network has fewer weights than the picture has pixels, so fitting a noisy
picture cannot reproduce the noise (no early stopping). Not a registered
component; :func:`flowerbed.methods.lottery_prior.algorithm_baselines.fit_deep_decoder`
fits it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class ChannelNorm(nn.Module):
    """Each channel normalised over its pixels (mean 0, variance 1), then scaled and shifted."""

    def __init__(self, channels: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(1, channels, 1, 1))
        self.shift = nn.Parameter(torch.zeros(1, channels, 1, 1))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        """Normalise ``(N, C, H, W)`` per channel over ``H, W``."""
        mean = x.mean(dim=(-2, -1), keepdim=True)
        var = x.var(dim=(-2, -1), keepdim=True, unbiased=False)
        return (x - mean) / torch.sqrt(var + self.eps) * self.scale + self.shift


class DeepDecoder(nn.Module):
    """``ups`` upsampling layers from ``base`` x ``base`` to ``base · 2**ups`` (``k`` channels).

    Layers: ``ups`` x (1x1 conv, 2x bilinear up, ReLU, channel norm), one
    more (1x1 conv, ReLU, channel norm) at full size, then a 1x1 conv to
    ``out_channels`` and a sigmoid.
    """

    def __init__(self, out_channels: int = 1, width: int = 64, ups: int = 4,
                 base: int = 16) -> None:
        super().__init__()
        self.width, self.ups, self.base = width, ups, base
        self.convs = nn.ModuleList([nn.Conv2d(width, width, 1, bias=False)
                                    for _ in range(ups + 1)])
        self.norms = nn.ModuleList([ChannelNorm(width) for _ in range(ups + 1)])
        self.head = nn.Conv2d(width, out_channels, 1, bias=False)

    @property
    def input_shape(self) -> tuple[int, int, int, int]:
        """Shape of the fixed input ``B_0``."""
        return (1, self.width, self.base, self.base)

    def forward(self, z: Tensor) -> Tensor:
        """``B_0`` ``(1, k, base, base)`` to a picture ``(1, out, H, W)`` in ``[0, 1]``."""
        h = z
        for i, (conv, norm) in enumerate(zip(self.convs, self.norms, strict=True)):
            h = conv(h)
            if i < self.ups:
                h = F.interpolate(h, scale_factor=2, mode="bilinear", align_corners=False)
            h = norm(F.relu(h))
        return torch.sigmoid(self.head(h))


#: Weights per pixel of the paper's denoising network (k = 128, 6 layers, 512 x 512 output:
#: 6·128² + 12·128 + 128 = 99,968 weights for 262,144 pixels).
PAPER_RATIO = 99_968 / 512**2


def upsamplings(side: int, base: int = 16) -> int:
    """Upsampling layers from ``base`` to ``side`` (``side / base`` must be a power of two)."""
    ups = 0
    while base * 2**ups < side:
        ups += 1
    if base * 2**ups != side:
        raise ValueError(f"deep decoder: side {side} is not {base} times a power of two")
    return ups


def paper_width(side: int, out_channels: int = 1, base: int = 16) -> int:
    """The channel count ``k`` whose weights per pixel are closest to the paper's (0.38)."""
    layers = upsamplings(side, base) + 1

    def weights(k: int) -> int:
        return layers * (k * k + 2 * k) + k * out_channels

    target = PAPER_RATIO * side * side * out_channels
    return min(range(4, 513), key=lambda k: abs(weights(k) - target))


def for_size(side: int, out_channels: int = 1, width: int | None = None,
             base: int = 16) -> DeepDecoder:
    """A Deep Decoder whose output is ``side`` x ``side``; ``width`` None: :func:`paper_width`."""
    ups = upsamplings(side, base)
    k = paper_width(side, out_channels, base) if width is None else width
    return DeepDecoder(out_channels, k, ups, base)

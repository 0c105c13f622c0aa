"""Torch modules of DNA's local generators (:mod:`flowerbed.models.dna_generators`).

Three families that leave different traces on 28x28 gray images:

- :class:`CondVAE`: conditional convolutional VAE (Kingma & Welling, 2014), decoder by
  nearest-neighbour upsampling and convolutions: smooth, blurry samples;
- :class:`TconvAE`: deterministic autoencoder whose decoder is stride-2 3x3 transposed
  convolutions, whose uneven kernel overlap leaves checkerboard artefacts
  (Odena et al., 2016); it makes reconstructions of real images;
- :class:`FlowNet`: the velocity field of conditional flow matching (Lipman et al.,
  2023, rectified path ``x_t = (1 - t) x_0 + t x_1``), a small U-Net with time and
  class embeddings, sampled with Euler steps.

Kept apart from the pretrain target's params so that only training imports torch.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

SIDE = 28


def _encoder(width: int) -> nn.Sequential:
    """28x28 -> 7x7 feature map, flattened."""
    return nn.Sequential(
        nn.Conv2d(1, width, 4, 2, 1), nn.ReLU(),
        nn.Conv2d(width, 2 * width, 4, 2, 1), nn.ReLU(),
        nn.Flatten(),
    )


class CondVAE(nn.Module):
    """Conditional VAE: ``q(z | x, c)`` and ``p(x | z, c)`` with Bernoulli pixels."""

    def __init__(self, latent: int, classes: int, width: int) -> None:
        super().__init__()
        self.latent, self.classes, self.width = latent, classes, width
        self.enc = _encoder(width)
        self.to_stats = nn.Linear(2 * width * 49 + classes, 2 * latent)
        self.from_z = nn.Linear(latent + classes, 2 * width * 49)
        self.dec = nn.Sequential(
            nn.Upsample(scale_factor=2, mode="nearest"),
            nn.Conv2d(2 * width, width, 3, padding=1), nn.ReLU(),
            nn.Upsample(scale_factor=2, mode="nearest"),
            nn.Conv2d(width, width, 3, padding=1), nn.ReLU(),
            nn.Conv2d(width, 1, 3, padding=1),
        )

    def decode_logits(self, z: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        """Pixel logits ``(n, 1, 28, 28)``."""
        h = self.from_z(torch.cat([z, F.one_hot(c, self.classes).float()], dim=1))
        return self.dec(F.relu(h).view(-1, 2 * self.width, 7, 7))

    def loss(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        """Negative ELBO per image (summed Bernoulli log-likelihood plus KL)."""
        onehot = F.one_hot(c, self.classes).float()
        mu, logvar = self.to_stats(torch.cat([self.enc(x), onehot], dim=1)).chunk(2, dim=1)
        z = mu + torch.randn_like(mu) * (0.5 * logvar).exp()
        rec = F.binary_cross_entropy_with_logits(self.decode_logits(z, c), x, reduction="sum")
        kl = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
        return (rec + kl) / len(x)

    def sample(self, c: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        """Images in [0, 1] of classes ``c`` from the prior."""
        z = torch.randn(len(c), self.latent, generator=gen)
        return torch.sigmoid(self.decode_logits(z, c))


class TconvAE(nn.Module):
    """Autoencoder with a stride-2, 3x3 transposed-convolution decoder (checkerboards)."""

    def __init__(self, latent: int, width: int) -> None:
        super().__init__()
        self.width = width
        self.enc = nn.Sequential(_encoder(width), nn.Linear(2 * width * 49, latent))
        self.from_z = nn.Linear(latent, 2 * width * 49)
        self.dec = nn.Sequential(
            nn.ConvTranspose2d(2 * width, width, 3, stride=2, padding=1, output_padding=1),
            nn.ReLU(),
            nn.ConvTranspose2d(width, 1, 3, stride=2, padding=1, output_padding=1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Reconstruction in [0, 1]."""
        h = F.relu(self.from_z(self.enc(x))).view(-1, 2 * self.width, 7, 7)
        return torch.sigmoid(self.dec(h))

    def loss(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        """Mean squared reconstruction error (the class is not used)."""
        del c
        return F.mse_loss(self(x), x)


def time_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:
    """Sinusoidal embedding of times in [0, 1] (``dim`` even)."""
    half = dim // 2
    freq = torch.exp(-math.log(1000.0) * torch.arange(half, dtype=torch.float32) / half)
    angle = 1000.0 * t[:, None] * freq[None]
    return torch.cat([angle.sin(), angle.cos()], dim=1)


class _Res(nn.Module):
    """Residual block: GroupNorm, SiLU, conv, plus a per-channel embedding shift."""

    def __init__(self, cin: int, cout: int, emb: int) -> None:
        super().__init__()
        self.n1, self.c1 = nn.GroupNorm(8, cin), nn.Conv2d(cin, cout, 3, padding=1)
        self.e = nn.Linear(emb, cout)
        self.n2, self.c2 = nn.GroupNorm(8, cout), nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
        h = self.c1(F.silu(self.n1(x))) + self.e(e)[:, :, None, None]
        return self.skip(x) + self.c2(F.silu(self.n2(h)))


class FlowNet(nn.Module):
    """U-Net velocity field ``v(x_t, t, c)`` for conditional flow matching (pixels in [-1, 1])."""

    def __init__(self, classes: int, width: int) -> None:
        super().__init__()
        w, emb = width, 4 * width
        self.emb_dim = w
        self.t_mlp = nn.Sequential(nn.Linear(w, emb), nn.SiLU(), nn.Linear(emb, emb))
        self.c_emb = nn.Embedding(classes, emb)
        self.inp = nn.Conv2d(1, w, 3, padding=1)
        self.d1, self.down1 = _Res(w, w, emb), nn.Conv2d(w, 2 * w, 4, 2, 1)
        self.d2, self.down2 = _Res(2 * w, 2 * w, emb), nn.Conv2d(2 * w, 2 * w, 4, 2, 1)
        self.mid = _Res(2 * w, 2 * w, emb)
        self.u2 = _Res(4 * w, 2 * w, emb)
        self.u1 = _Res(3 * w, w, emb)
        self.out = nn.Sequential(nn.GroupNorm(8, w), nn.SiLU(), nn.Conv2d(w, 1, 3, padding=1))

    def forward(self, x: torch.Tensor, t: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        """Velocity at ``x`` (``(n, 1, 28, 28)``), times ``t`` ``(n,)``, classes ``c``."""
        e = self.t_mlp(time_embedding(t, self.emb_dim)) + self.c_emb(c)
        h1 = self.d1(self.inp(x), e)                      # 28
        h2 = self.d2(self.down1(h1), e)                   # 14
        h = self.mid(self.down2(h2), e)                   # 7
        h = self.u2(torch.cat([F.interpolate(h, scale_factor=2.0), h2], dim=1), e)
        h = self.u1(torch.cat([F.interpolate(h, scale_factor=2.0), h1], dim=1), e)
        return self.out(h)

    def loss(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        """Flow-matching loss ``‖v(x_t, t, c) - (x_1 - x_0)‖²``, ``x_1`` the image in [-1, 1]."""
        x1 = 2.0 * x - 1.0
        x0 = torch.randn_like(x1)
        t = torch.rand(len(x1))
        xt = (1 - t)[:, None, None, None] * x0 + t[:, None, None, None] * x1
        return F.mse_loss(self(xt, t, c), x1 - x0)

    def sample(self, c: torch.Tensor, gen: torch.Generator, steps: int) -> torch.Tensor:
        """Images in [0, 1] of classes ``c``: Euler integration from noise at t=0 to t=1."""
        x = torch.randn(len(c), 1, SIDE, SIDE, generator=gen)
        for i in range(steps):
            t = torch.full((len(c),), i / steps)
            x = x + self(x, t, c) / steps
        return ((x + 1.0) / 2.0).clamp(0.0, 1.0)

"""Torch modules of DNA's local generators (:mod:`flowerbed.methods.dna.model_generators`).

Three families that leave different traces on 28x28 gray images:

- :class:`CondVAE`: conditional convolutional VAE (Kingma & Welling, 2014), decoder by
  nearest-neighbour upsampling and convolutions: smooth, blurry samples;
- :class:`TconvAE`: deterministic autoencoder whose decoder is stride-2 3x3 transposed
  convolutions, whose uneven kernel overlap leaves checkerboard artefacts
  (Odena et al., 2016); it makes reconstructions of real images;
- :class:`LatentFlow` on :class:`ShuffleAE`: conditional flow matching (Lipman et al.,
  2023) in the latent space of an autoencoder with a pixel-shuffle decoder, like a
  latent diffusion model (a pixel-space U-Net took 3-8 s per step on the shared
  2-core machine, too slow to train here), sampled with Euler steps.

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


class ShuffleAE(nn.Module):
    """The latent space of the flow family: autoencoder with a pixel-shuffle decoder.

    Sub-pixel convolutions (Shi et al., 2016) upsample without the kernel overlap of
    transposed convolutions, so this family's traces differ from :class:`TconvAE`'s.
    A small penalty on the latent norm keeps the codes compact for the flow.
    """

    def __init__(self, latent: int, width: int) -> None:
        super().__init__()
        self.width = width
        self.enc = nn.Sequential(_encoder(width), nn.Linear(2 * width * 49, latent))
        self.from_z = nn.Linear(latent, 2 * width * 49)
        self.dec = nn.Sequential(
            nn.Conv2d(2 * width, 4 * width, 3, padding=1), nn.PixelShuffle(2), nn.ReLU(),
            nn.Conv2d(width, 4, 3, padding=1), nn.PixelShuffle(2),
        )

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        """Images in [0, 1] from latents."""
        h = F.relu(self.from_z(z)).view(-1, 2 * self.width, 7, 7)
        return torch.sigmoid(self.dec(h))

    def loss(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        """Reconstruction error plus ``1e-3 ·`` mean squared latent."""
        del c
        z = self.enc(x)
        return F.mse_loss(self.decode(z), x) + 1e-3 * z.pow(2).mean()


class LatentFlow(nn.Module):
    """Velocity field ``v(z_t, t, c)`` of conditional flow matching on standardised latents.

    Flow matching (Lipman et al., 2023) on the rectified path ``z_t = (1 - t) z_0 + t z_1``
    from Gaussian noise ``z_0`` to a data latent ``z_1``, in the latent space of a
    :class:`ShuffleAE` (a latent-diffusion-style generator, Rombach et al., 2022).
    """

    def __init__(self, latent: int, classes: int, hidden: int = 256) -> None:
        super().__init__()
        self.t_dim = 32
        self.c_emb = nn.Embedding(classes, hidden)
        self.inp = nn.Linear(latent + self.t_dim, hidden)
        self.body = nn.Sequential(nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU(),
                                  nn.Linear(hidden, hidden), nn.SiLU(), nn.Linear(hidden, latent))

    def forward(self, z: torch.Tensor, t: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        """Velocity at latents ``z`` ``(n, latent)``, times ``t`` ``(n,)``, classes ``c``."""
        h = self.inp(torch.cat([z, time_embedding(t, self.t_dim)], dim=1)) + self.c_emb(c)
        out: torch.Tensor = self.body(h)
        return out

    def loss(self, z1: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        """``‖v(z_t, t, c) - (z_1 - z_0)‖²`` at a uniform time."""
        z0 = torch.randn_like(z1)
        t = torch.rand(len(z1))
        zt = (1 - t)[:, None] * z0 + t[:, None] * z1
        return F.mse_loss(self(zt, t, c), z1 - z0)

    def sample(self, c: torch.Tensor, gen: torch.Generator, steps: int, latent: int
               ) -> torch.Tensor:
        """Latents of classes ``c``: Euler integration from noise at t=0 to t=1."""
        z = torch.randn(len(c), latent, generator=gen)
        for i in range(steps):
            z = z + self(z, torch.full((len(c),), i / steps), c) / steps
        return z

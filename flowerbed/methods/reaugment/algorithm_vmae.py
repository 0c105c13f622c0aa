"""ReAugment's augmenter: a variational masked autoencoder (VMAE) over windows (a CVAE).

Part of ReAugment (Yuan et al., arXiv 2409.06282; :mod:`flowerbed.methods.reaugment.algorithm`).
STATED (second-hand summaries): the VMAE has a feature encoder, a decoder, a
prior network and a posterior network; it masks part of an anchor series and
generates a full series; it is pre-trained with a KL and an L2 reconstruction
loss. RECONSTRUCTED: the window ``(L, C)`` is cut into
patches of ``patch_len`` steps (the end padded by repeating the last value);
``mask_ratio`` of the patches are replaced by a learned mask token; a small
transformer (the feature encoder) turns the masked window into context tokens
``c``; the posterior ``q(z | w, c)`` and the prior ``p(z | c)`` are diagonal
Gaussians over one latent ``z ∈ R^latent`` per patch; the decoder maps
``c + W z`` to every patch. Pre-training loss::

    L_pre = mean ‖ŵ - w‖² + β · KL(q(z | w, c) ‖ p(z | c))

(KL summed over latent dimensions, averaged over patches and windows). At
augmentation time ``z ~ p(z | c)`` and the augmented window is the decoder's full
output. The prior head is the policy that REINFORCE fine-tunes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from flowerbed.methods.reaugment.algorithm_ops import adam


@dataclass(frozen=True)
class VMAEConfig:
    """Architecture and pre-training of the augmenter."""

    patch_len: int
    mask_ratio: float
    d_model: int
    latent: int
    layers: int
    beta: float
    pretrain_steps: int
    lr: float
    batch_size: int


def _encoder(d: int, layers: int) -> nn.TransformerEncoder:
    layer = nn.TransformerEncoderLayer(d, 2, 2 * d, 0.0, batch_first=True, norm_first=True)
    return nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)


def _mlp(d_in: int, d_out: int, hidden: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(d_in, hidden), nn.GELU(), nn.Linear(hidden, d_out))


class VMAE(nn.Module):
    """Masked variational autoencoder over windows ``(B, L, C)``; see the module docstring."""

    def __init__(self, length: int, channels: int, cfg: VMAEConfig) -> None:
        super().__init__()
        self.length, self.channels, self.cfg = length, channels, cfg
        self.n_patches = math.ceil(length / cfg.patch_len)
        width, d = cfg.patch_len * channels, cfg.d_model
        self.embed = nn.Linear(width, d)
        self.pos = nn.Parameter(0.02 * torch.randn(self.n_patches, d))
        self.mask_token = nn.Parameter(torch.zeros(d))
        self.encoder = _encoder(d, cfg.layers)
        self.post_embed = nn.Linear(width, d)
        self.posterior = _mlp(2 * d, 2 * cfg.latent, d)
        self.prior = _mlp(d, 2 * cfg.latent, d)
        self.from_latent = nn.Linear(cfg.latent, d)
        self.decoder = _encoder(d, 1)
        self.out = nn.Linear(d, width)

    def patches(self, w: torch.Tensor) -> torch.Tensor:
        """``(B, L, C) -> (B, N, patch_len · C)``, the end padded with the last value."""
        pad = self.n_patches * self.cfg.patch_len - w.shape[1]
        if pad:
            w = torch.cat([w, w[:, -1:].expand(-1, pad, -1)], dim=1)
        return w.reshape(len(w), self.n_patches, -1)

    def sample_mask(self, n: int, gen: torch.Generator) -> torch.Tensor:
        """``(n, N)`` boolean masks, exactly ``round(mask_ratio · N)`` patches each (≥ 1)."""
        k = max(1, round(self.cfg.mask_ratio * self.n_patches))
        order = torch.rand(n, self.n_patches, generator=gen).argsort(dim=1)
        return order < k

    def context(self, w: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Feature encoder on the masked window: tokens ``(B, N, d)``."""
        tokens = self.embed(self.patches(w))
        tokens = torch.where(mask[..., None], self.mask_token.expand_as(tokens), tokens)
        out: torch.Tensor = self.encoder(tokens + self.pos)
        return out

    def prior_params(self, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and log-variance ``(B, N, latent)`` of ``p(z | masked window)``."""
        mu, logvar = self.prior(c).chunk(2, dim=-1)
        return mu, logvar.clamp(-8.0, 4.0)

    def posterior_params(
        self, w: torch.Tensor, c: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and log-variance of ``q(z | window, masked window)``."""
        full = self.post_embed(self.patches(w)) + self.pos
        mu, logvar = self.posterior(torch.cat([full, c], dim=-1)).chunk(2, dim=-1)
        return mu, logvar.clamp(-8.0, 4.0)

    def decode(self, c: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """Full window ``(B, L, C)`` from context tokens and one latent per patch."""
        h = self.decoder(c + self.from_latent(z))
        w = self.out(h).reshape(len(c), -1, self.channels)
        return w[:, : self.length]

    @torch.no_grad()
    def generate(
        self, w: torch.Tensor, gen: torch.Generator, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Augmented windows: mask ``w`` (random masks unless given), ``z ~`` prior, decode."""
        mask = self.sample_mask(len(w), gen) if mask is None else mask
        c = self.context(w, mask)
        mu, logvar = self.prior_params(c)
        z = mu + (0.5 * logvar).exp() * torch.randn(mu.shape, generator=gen)
        return self.decode(c, z)


def gaussian_kl(
    mu_q: torch.Tensor, logvar_q: torch.Tensor, mu_p: torch.Tensor, logvar_p: torch.Tensor
) -> torch.Tensor:
    """``KL(N(mu_q, e^logvar_q) ‖ N(mu_p, e^logvar_p))`` summed over the last axis."""
    ratio = (logvar_q - logvar_p).exp()
    term = ratio + (mu_q - mu_p) ** 2 / logvar_p.exp() - 1.0 - (logvar_q - logvar_p)
    return 0.5 * term.sum(dim=-1)


def pretrain_loss(vmae: VMAE, w: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """``mean ‖ŵ - w‖² + β · KL(q ‖ p)`` on a batch with fresh random masks."""
    mask = vmae.sample_mask(len(w), gen)
    c = vmae.context(w, mask)
    mu_q, logvar_q = vmae.posterior_params(w, c)
    mu_p, logvar_p = vmae.prior_params(c)
    z = mu_q + (0.5 * logvar_q).exp() * torch.randn(mu_q.shape, generator=gen)
    recon = ((vmae.decode(c, z) - w) ** 2).mean()
    kl = gaussian_kl(mu_q, logvar_q, mu_p, logvar_p).mean()
    return recon + vmae.cfg.beta * kl


def batches(n: int, size: int, gen: torch.Generator) -> torch.Tensor:
    """One random mini-batch of indices (without replacement, ``min(size, n)``)."""
    return torch.randperm(n, generator=gen)[: min(size, n)]


def pretrain(vmae: VMAE, windows: torch.Tensor, seed: int) -> list[float]:
    """Pre-train on ``windows`` for ``pretrain_steps`` Adam steps; the loss of every step."""
    cfg = vmae.cfg
    gen = torch.Generator().manual_seed(seed)
    opt = adam(vmae.parameters(), cfg.lr)
    history = []
    vmae.train()
    for _ in range(cfg.pretrain_steps):
        loss = pretrain_loss(vmae, windows[batches(len(windows), cfg.batch_size, gen)], gen)
        opt.zero_grad()
        loss.backward()
        opt.step()
        history.append(loss.item())
    vmae.eval()
    return history

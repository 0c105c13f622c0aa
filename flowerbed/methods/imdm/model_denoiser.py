"""Bidirectional transformer denoiser for masked diffusion (MDLM) with IMDM's ε-mask MLP.

Method: "Infinite Mask Diffusion for Few-Step Distillation" (Yoo, Kim, Lee, Hong, ICML 2026,
arXiv 2605.10518; official code Ugness/IMDM ``models/dit.py::EmbeddingLayer``). A small
DiT-like encoder without time conditioning (the paper's ``time_conditioning: False``):
token + position embeddings, pre-norm transformer blocks, a final norm and a linear head
over the ``V`` data tokens (the SUBS parameterisation never predicts ``[MASK]``).

IMDM changes only the input embedding of masked positions::

    h^i = E[x_t^i] + 1{x_t^i = m} · MLP(ε^i),  MLP = Linear(D, 4d) → GELU → Linear(4d, d)

with the last layer zero-initialised, so a freshly built IMDM computes exactly the MDLM
function for any ε, and an MDLM checkpoint loads into it with only the MLP keys missing.
The finite-state ablation ``num_mask = K`` replaces the MLP with a zero-initialised
``K x d`` table indexed by an integer ε ∈ {0..K-1} (K = 1 is MDLM).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

NoiseType = Literal["rand", "randn", "learnable"]


@dataclass(frozen=True)
class DenoiserConfig:
    """Architecture of :class:`Denoiser` (the learner's params map onto it one to one)."""

    vocab_size: int
    seq_len: int
    hidden: int = 64
    layers: int = 2
    heads: int = 4
    imdm: bool = True
    noise_type: NoiseType = "rand"
    noise_dim: int = 64
    noise_scale: float = 1.0
    num_mask: int = 0
    softcap: float | None = None


class EpsMLP(nn.Module):
    """``Linear(D, 4d) → GELU → Linear(4d, d, bias=False)``, last layer zero-initialised."""

    def __init__(self, noise_dim: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(noise_dim, 4 * hidden)
        self.fc2 = nn.Linear(4 * hidden, hidden, bias=False)
        nn.init.trunc_normal_(self.fc1.weight, std=0.02, a=-0.04, b=0.04)
        nn.init.zeros_(self.fc1.bias)
        nn.init.zeros_(self.fc2.weight)

    def forward(self, eps: torch.Tensor) -> torch.Tensor:
        """``(..., D)`` noise → ``(..., d)`` embedding offsets."""
        out: torch.Tensor = self.fc2(nn.functional.gelu(self.fc1(eps)))
        return out


class Denoiser(nn.Module):
    """``x_t (B, L)`` ids in ``0..V`` (``V`` = ``[MASK]``), ε → clean-token logits ``(B, L, V)``.

    Contract: the output at a position depends on ε only through the masked
    positions' embeddings (ε at an unmasked position is ignored); without an
    ε-MLP (``imdm=False``) ε is ignored entirely (MDLM). ``sample_eps`` draws
    the per-position noise of the configured type.
    """

    def __init__(self, cfg: DenoiserConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.mask_id = cfg.vocab_size
        self.tok = nn.Embedding(cfg.vocab_size + 1, cfg.hidden)
        self.pos = nn.Parameter(torch.zeros(cfg.seq_len, cfg.hidden))
        nn.init.normal_(self.tok.weight, std=0.02)
        nn.init.normal_(self.pos, std=0.02)
        self.eps_mlp: EpsMLP | None = None
        self.eps_table: nn.Embedding | None = None
        if cfg.imdm and cfg.num_mask > 0:
            self.eps_table = nn.Embedding(cfg.num_mask, cfg.hidden)
            nn.init.zeros_(self.eps_table.weight)
        elif cfg.imdm:
            self.eps_mlp = EpsMLP(cfg.noise_dim, cfg.hidden)
            if cfg.noise_type == "learnable":
                self.eps_mu = nn.Parameter(torch.zeros(cfg.noise_dim))
                self.eps_log_sigma = nn.Parameter(torch.zeros(cfg.noise_dim))
        layer = nn.TransformerEncoderLayer(
            cfg.hidden,
            cfg.heads,
            dim_feedforward=4 * cfg.hidden,
            dropout=0.0,
            activation="gelu",
            batch_first=True,
            norm_first=True,
        )
        self.blocks = nn.TransformerEncoder(layer, cfg.layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(cfg.hidden)
        self.head = nn.Linear(cfg.hidden, cfg.vocab_size)

    @property
    def uses_eps(self) -> bool:
        """Whether the output can depend on ε (False for MDLM: no ε-mask module)."""
        return self.eps_mlp is not None or self.eps_table is not None

    # -- noise -------------------------------------------------------------------------------

    def sample_eps(self, batch: int, gen: torch.Generator | None = None) -> torch.Tensor:
        """Fresh ε for every position: ``(B, L, D)`` floats, or ``(B, L)`` ids for ``num_mask``."""
        cfg, shape = self.cfg, (batch, self.cfg.seq_len)
        if cfg.imdm and cfg.num_mask > 0:
            return torch.randint(0, cfg.num_mask, shape, generator=gen)
        full = (*shape, cfg.noise_dim)
        if cfg.noise_type == "rand":
            return (torch.rand(full, generator=gen) * 2 - 1) * cfg.noise_scale
        z = torch.randn(full, generator=gen)
        if cfg.noise_type == "randn":
            return z * cfg.noise_scale
        return z  # learnable: standard normal, mapped by (μ, sigma) in forward

    def eps_embedding(self, eps: torch.Tensor) -> torch.Tensor | None:
        """The ε term ``MLP(ε)`` added to masked positions (None for MDLM)."""
        if self.eps_table is not None:
            out: torch.Tensor = self.eps_table(eps.long())
            return out
        if self.eps_mlp is None:
            return None
        if self.cfg.noise_type == "learnable":
            eps = self.eps_mu + torch.exp(self.eps_log_sigma) * eps
        return self.eps_mlp(eps)

    # -- forward -----------------------------------------------------------------------------

    def forward(self, x_t: torch.Tensor, eps: torch.Tensor | None = None) -> torch.Tensor:
        """Clean-token logits ``(B, L, V)`` (before SUBS carry-over of unmasked positions)."""
        h = self.tok(x_t) + self.pos[: x_t.shape[1]]
        if eps is not None:
            extra = self.eps_embedding(eps)
            if extra is not None:
                masked = (x_t == self.mask_id).unsqueeze(-1).to(h.dtype)
                h = h + masked * extra[:, : x_t.shape[1]]
        logits: torch.Tensor = self.head(self.norm(self.blocks(h)))
        if self.cfg.softcap is not None:
            cap = self.cfg.softcap
            logits = cap * torch.tanh(logits / cap)
        return logits


def build_denoiser(cfg: DenoiserConfig, seed: int) -> Denoiser:
    """A :class:`Denoiser` initialised from ``seed``."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return Denoiser(cfg)


def load_mdlm_into_imdm(imdm: Denoiser, mdlm_state: dict[str, torch.Tensor]) -> None:
    """Load MDLM weights into an IMDM; only ε-mask parameters may be absent from the state."""
    missing, unexpected = imdm.load_state_dict(mdlm_state, strict=False)
    bad = [
        k
        for k in missing
        if not k.startswith(("eps_mlp.", "eps_table.", "eps_mu", "eps_log_sigma"))
    ]
    if bad or unexpected:
        raise ValueError(f"checkpoint does not fit: missing {bad[:3]}, unexpected {unexpected[:3]}")


def num_parameters(module: nn.Module) -> int:
    """Trainable parameter count."""
    return sum(p.numel() for p in module.parameters())

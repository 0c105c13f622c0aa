"""Torch modules of the ``transformer`` model (:mod:`flowerbed.methods.hipe.model`).

Kept apart from the registered params and build function, which a scenario's
validation imports, so that only building the model imports torch.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from flowerbed.methods.hipe import algorithm as hipe
from flowerbed.methods.hipe.model import TransformerParams


class Attention(nn.Module):
    """Multi-head self-attention; rotary (RoPE/HIPE) applied to q and k when given tables."""

    def __init__(self, d_model: int, n_heads: int, dropout: float) -> None:
        super().__init__()
        self.n_heads, self.dropout = n_heads, dropout
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def project(self, x: torch.Tensor, rotary: Rotary | None) -> tuple[torch.Tensor, ...]:
        """Queries, keys and values ``(B, heads, L, head_dim)``, rotated if ``rotary``."""
        b, length, d = x.shape
        q, k, v = (
            t.view(b, length, self.n_heads, d // self.n_heads).transpose(1, 2)
            for t in self.qkv(x).chunk(3, dim=-1)
        )
        if rotary is not None:
            q, k = rotary(q), rotary(k)
        return q, k, v

    def forward(self, x: torch.Tensor, rotary: Rotary | None) -> torch.Tensor:
        """Attend over the whole sequence (no causal mask)."""
        q, k, v = self.project(x, rotary)
        weights = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]), dim=-1)
        weights = F.dropout(weights, self.dropout, self.training)
        return self.out((weights @ v).transpose(1, 2).reshape(x.shape))


class Rotary(nn.Module):
    """RoPE tables for ``length`` positions, with HIPE gains when ``gains`` is given."""

    cos: torch.Tensor
    sin: torch.Tensor

    def __init__(
        self, length: int, head_dim: int, theta: float, gains: torch.Tensor | None
    ) -> None:
        super().__init__()
        cos, sin = hipe.rotary_tables(torch.arange(length), hipe.rope_frequencies(head_dim, theta))
        self.register_buffer("cos", cos.float(), persistent=False)
        self.register_buffer("sin", sin.float(), persistent=False)
        self.gains: torch.Tensor | None
        if gains is None:
            self.gains = None
        else:
            self.register_buffer("gains", gains.float(), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Rotate ``x`` of shape ``(B, heads, L, head_dim)``."""
        n = x.shape[-2]
        cos, sin = self.cos[:n], self.sin[:n]
        return hipe.apply_rotary(x, cos, sin, self.gains)


class Block(nn.Module):
    """Pre-norm transformer block: attention then a GELU feed-forward, both residual."""

    def __init__(self, p: TransformerParams) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(p.d_model), nn.LayerNorm(p.d_model)
        self.attn = Attention(p.d_model, p.n_heads, p.dropout)
        self.ff = nn.Sequential(
            nn.Linear(p.d_model, p.ff_mult * p.d_model),
            nn.GELU(),
            nn.Linear(p.ff_mult * p.d_model, p.d_model),
            nn.Dropout(p.dropout),
        )

    def forward(self, x: torch.Tensor, rotary: Rotary | None) -> torch.Tensor:
        """One residual attention + feed-forward step."""
        x = x + self.attn(self.norm1(x), rotary)
        return x + self.ff(self.norm2(x))


class SequenceTransformer(nn.Module):
    """Token embedding, positional embedding, blocks, final norm, linear head at the last token.

    Input: float or integer tensor ``(B, L)`` of token ids in ``[0, vocab_size)``
    with ``L <= max_len``; output: logits ``(B, out_features)``.
    """

    def __init__(self, p: TransformerParams, max_len: int, out_features: int) -> None:
        super().__init__()
        self.p, self.max_len = p, max_len
        self.embed = nn.Embedding(p.vocab_size, p.d_model)
        self.blocks = nn.ModuleList(Block(p) for _ in range(p.n_layers))
        self.norm = nn.LayerNorm(p.d_model)
        self.head = nn.Linear(p.d_model, out_features)
        self.rotary: Rotary | None = None
        head_dim = p.d_model // p.n_heads
        if p.pos_emb in ("rope", "hipe"):
            gains = (
                hipe.hipe_gains(head_dim, p.sigmas(), p.rope_theta, p.hipe_decay)
                if p.pos_emb == "hipe"
                else None
            )
            self.rotary = Rotary(max_len, head_dim, p.rope_theta, gains)
        if p.pos_emb == "learned":
            self.pos = nn.Parameter(0.02 * torch.randn(max_len, p.d_model))
        elif p.pos_emb == "sinusoidal":
            table = hipe.sinusoidal_table(max_len, p.d_model, p.rope_theta)
            self.register_buffer("pos", table.float(), persistent=False)

    def tokens(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` as ``long`` token ids, with a clear error for ids the model cannot embed."""
        if x.dim() != 2 or x.shape[1] > self.max_len:
            raise ValueError(
                f"transformer expects (batch, length <= {self.max_len}) token ids, "
                f"got shape {tuple(x.shape)}"
            )
        ids = x.long()
        if len(ids) and (int(ids.min()) < 0 or int(ids.max()) >= self.p.vocab_size):
            raise ValueError(
                f"token id {int(ids.max()) if int(ids.min()) >= 0 else int(ids.min())} is outside"
                f" [0, model.vocab_size={self.p.vocab_size}); raise model.vocab_size"
            )
        return ids

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits of the sequences' classes, read out at the last position."""
        h = self.embed(self.tokens(x))
        if self.p.pos_emb in ("learned", "sinusoidal"):
            h = h + self.pos[: h.shape[1]]
        for block in self.blocks:
            h = block(h, self.rotary)
        return self.head(self.norm(h[:, -1]))

"""Small transformer sequence classifiers with a choice of positional embedding.

``model: {name: transformer, pos_emb: hipe, hipe_sigmas: [1, 4, 16, 48]}`` in a
scenario gives an encoder over integer token sequences (stored as float rows of
width ``seq_len``, cast to ``long`` here) that reads the class out at the last
position. Positional options: ``none``, absolute ``sinusoidal`` or ``learned``
(added to the token embeddings), relative ``rope`` or ``hipe`` (applied to
queries and keys in every attention layer; see :mod:`flowerbed.algorithms.hipe`).
Fixed tables and HIPE gains are non-persistent buffers, so the weights FedAvg
averages are the same for ``rope`` and ``hipe``.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field, model_validator
from torch import nn

from flowerbed.algorithms import hipe
from flowerbed.core.registry import Params, register

PosEmb = Literal["none", "sinusoidal", "learned", "rope", "hipe"]


class TransformerParams(Params):
    """Size, positional embedding and HIPE place-field scales of the transformer."""

    vocab_size: int = Field(16, ge=2, description="token ids must lie in [0, vocab_size)")
    d_model: int = Field(32, ge=2)
    n_heads: int = Field(2, ge=1)
    n_layers: int = Field(2, ge=1)
    ff_mult: int = Field(2, ge=1, description="feed-forward width = ff_mult * d_model")
    dropout: float = Field(0.0, ge=0, lt=1)
    pos_emb: PosEmb = "rope"
    rope_theta: float = Field(
        10_000.0, gt=1, description="frequency base of rope, hipe and sinusoidal tables"
    )
    hipe_sigmas: tuple[float, ...] | float = Field(
        (2.0, 8.0), description="place-field size per head in tokens (one value: all heads)"
    )
    hipe_decay: hipe.Decay = "gaussian"

    @model_validator(mode="after")
    def _shapes(self) -> TransformerParams:
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        if self.pos_emb in ("rope", "hipe") and (self.d_model // self.n_heads) % 2:
            raise ValueError(
                f"pos_emb={self.pos_emb} needs an even head dimension; "
                f"d_model/n_heads = {self.d_model // self.n_heads}"
            )
        per_head = isinstance(self.hipe_sigmas, tuple)
        if self.pos_emb == "hipe" and per_head and len(self.sigmas()) != self.n_heads:
            raise ValueError(
                f"hipe_sigmas has {len(self.sigmas())} values, n_heads={self.n_heads}"
            )
        sigmas = self.sigmas()
        if min(sigmas) < 0:
            raise ValueError(f"hipe_sigmas must be >= 0, got {sigmas}")
        return self

    def sigmas(self) -> tuple[float, ...]:
        """One place-field size per head."""
        s = self.hipe_sigmas
        return s if isinstance(s, tuple) else (float(s),) * self.n_heads


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


@register("model", "transformer", params=TransformerParams)
def transformer(
    params: TransformerParams, *, in_features: int, out_features: int
) -> nn.Module:
    """Small transformer over token sequences (pos_emb: none/sinusoidal/learned/rope/hipe)."""
    return SequenceTransformer(params, max_len=in_features, out_features=out_features)

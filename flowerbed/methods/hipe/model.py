"""Small transformer sequence classifiers with a choice of positional embedding.

``model: {name: transformer, pos_emb: hipe, hipe_sigmas: [1, 4, 16, 48]}`` in a
scenario gives an encoder over integer token sequences (stored as float rows of
width ``seq_len``, cast to ``long`` here) that reads the class out at the last
position. Positional options: ``none``, absolute ``sinusoidal`` or ``learned``
(added to the token embeddings), relative ``rope`` or ``hipe`` (applied to
queries and keys in every attention layer; see :mod:`flowerbed.methods.hipe.algorithm`).
Fixed tables and HIPE gains are non-persistent buffers, so the weights FedAvg
averages are the same for ``rope`` and ``hipe``. The torch modules are in
:mod:`flowerbed.methods.hipe.model_nets`, imported only when a model is built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field, model_validator

from flowerbed.core.registry import TOKENS, Params, register
from flowerbed.methods.hipe import algorithm as hipe

if TYPE_CHECKING:
    from torch import nn

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
        if not sigmas:
            raise ValueError("hipe_sigmas is empty; give one place-field size per head")
        if min(sigmas) < 0:
            raise ValueError(f"hipe_sigmas must be >= 0, got {sigmas}")
        return self

    def sigmas(self) -> tuple[float, ...]:
        """One place-field size per head."""
        s = self.hipe_sigmas
        return s if isinstance(s, tuple) else (float(s),) * self.n_heads


# Token ids go through an embedding: rows of standardised features are no tokens.
@register("model", "transformer", params=TransformerParams, requires=(TOKENS,))
def transformer(
    params: TransformerParams, *, in_features: int, out_features: int
) -> nn.Module:
    """Small transformer over token sequences (pos_emb: none/sinusoidal/learned/rope/hipe)."""
    # The network lives apart so that validating a scenario never imports torch.
    from flowerbed.methods.hipe.model_nets import SequenceTransformer

    return SequenceTransformer(params, max_len=in_features, out_features=out_features)

"""``tiny``: randomly initialised small causal LMs with a byte-level tokenizer.

Llama-style (RoPE, RMSNorm, SwiGLU, grouped-query attention), Qwen3-style (the
same with per-head q/k norms) or GPT-2-style (learned absolute positions,
LayerNorm, GELU) models built from transformers' own config classes, so the
hooks and the KV cache are exercised on the real architectures. Weights are
drawn from the ``seed`` (the scenario's, when a learner builds the model), with
torch's global generator left as it was. The tokenizer is
:class:`~flowerbed.models.lm.ByteTokenizer` (256 byte ids + bos/eos/pad).

A ``trained_tiny`` backend (a tiny model trained on the offline text corpora)
is meant to sit on top of this module: a ``PRETRAIN_TARGET`` that trains
:func:`build_tiny`'s model (e.g. with the ``lm_sgd`` learner's ``fit``) and
writes it with ``TransformersLM.save(folder)``; the ``hf`` backend then loads
that folder (the byte tokenizer is recorded in it). It is not written yet.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, model_validator

from flowerbed.core.registry import register, register_hint
from flowerbed.core.seeds import derive_seed
from flowerbed.models.lm import LM_EXTRA_HINT, ByteTokenizer, LmParams, lm_extra_installed

if TYPE_CHECKING:
    from flowerbed.models.lm_transformers import TransformersLM


class TinyLmParams(LmParams):
    """Architecture and size of a random-init model (vocabulary: bytes + 3 specials)."""

    arch: Literal["llama", "qwen3", "gpt2"] = "llama"
    hidden: int = Field(64, ge=4, description="model width")
    layers: int = Field(2, ge=1)
    heads: int = Field(4, ge=1)
    kv_heads: int | None = Field(
        None, ge=1, description="key/value heads (grouped-query attention; default: heads)"
    )
    intermediate: int | None = Field(None, ge=1, description="MLP width (default: 4 x hidden)")
    vocab: int = Field(
        ByteTokenizer.vocab_size, ge=ByteTokenizer.vocab_size,
        description="output size (at least the byte tokenizer's 259 ids)",
    )
    max_positions: int = Field(512, ge=2, description="longest sequence (GPT-2's position table)")
    tie_embeddings: bool = Field(True, description="share input and output embeddings")
    dropout: float = Field(0.0, ge=0, lt=1, description="GPT-2 dropouts (Llama/Qwen3: attention)")
    seed: int = Field(0, ge=0, description="weight initialisation (a learner passes its own)")

    @model_validator(mode="after")
    def _shapes(self) -> TinyLmParams:
        if self.hidden % self.heads:
            raise ValueError(f"hidden ({self.hidden}) must be a multiple of heads ({self.heads})")
        if self.heads % (self.kv_heads or self.heads):
            raise ValueError(f"heads ({self.heads}) must be a multiple of kv_heads")
        return self


def tiny_config(p: TinyLmParams) -> Any:
    """The transformers config of ``p`` (ids of the byte tokenizer's specials set)."""
    import transformers

    tok = ByteTokenizer()
    ids: dict[str, Any] = {
        "bos_token_id": tok.bos_id, "eos_token_id": tok.eos_id, "pad_token_id": tok.pad_id,
    }
    inner = p.intermediate or 4 * p.hidden
    if p.arch == "gpt2":
        return transformers.GPT2Config(
            vocab_size=p.vocab, n_embd=p.hidden, n_layer=p.layers, n_head=p.heads,
            n_inner=inner, n_positions=p.max_positions, tie_word_embeddings=p.tie_embeddings,
            resid_pdrop=p.dropout, embd_pdrop=p.dropout, attn_pdrop=p.dropout, **ids,
        )
    cls = transformers.LlamaConfig if p.arch == "llama" else transformers.Qwen3Config
    return cls(
        vocab_size=p.vocab, hidden_size=p.hidden, num_hidden_layers=p.layers,
        num_attention_heads=p.heads, num_key_value_heads=p.kv_heads or p.heads,
        head_dim=p.hidden // p.heads, intermediate_size=inner,
        max_position_embeddings=p.max_positions, tie_word_embeddings=p.tie_embeddings,
        attention_dropout=p.dropout, **ids,
    )


def build_tiny(params: TinyLmParams, seed: int | None = None) -> TransformersLM:
    """Random-init Llama/Qwen3/GPT-2-style model, byte tokenizer (tests, toy tasks).

    Initialised from ``seed`` (default ``params.seed``).
    """
    from flowerbed.models.lm import require_lm_extra

    require_lm_extra("tiny")
    from flowerbed.models.lm_transformers import from_config

    root = params.seed if seed is None else seed
    return from_config(
        tiny_config(params), ByteTokenizer(), params.dtype, derive_seed(root, "lm.tiny")
    )


if lm_extra_installed():
    register("lm", "tiny", params=TinyLmParams)(build_tiny)
else:
    register_hint("lm", "tiny", LM_EXTRA_HINT)

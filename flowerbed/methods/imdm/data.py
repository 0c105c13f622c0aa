"""``synthetic_align``: IMDM's synthetic task, one uniformly random token repeated L times.

Method: "Infinite Mask Diffusion for Few-Step Distillation" (arXiv 2605.10518; official code
Ugness/IMDM ``dataloader.py::SyntheticAlign``, there with V = 50,000 and L = 10). Every row
is ``(a, a, …, a)`` with ``a ~ U{0..V-1}``: the data entropy is ``log V`` while the total
correlation is ``(L-1) log V``, so a one-step product-of-marginals sampler is aligned with
probability ``V^{-(L-1)}``. ``y`` holds ``a`` (the mode), so partitions by label give
clients disjoint modes.
"""

from __future__ import annotations

import numpy as np
from pydantic import Field

from flowerbed.core.registry import TOKENS, Params, register
from flowerbed.core.seeds import rng
from flowerbed.data.base import Dataset, DatasetMeta


class SyntheticAlignParams(Params):
    """Vocabulary, length and sizes."""

    vocab_size: int = Field(8, ge=2, le=100_000, description="V: number of tokens (modes)")
    length: int = Field(6, ge=2, le=512, description="L: positions per sequence")
    n_train: int = Field(4000, ge=1)
    n_test: int = Field(1000, ge=0)


@register("dataset", "synthetic_align", params=SyntheticAlignParams, provides=(TOKENS,))
def synthetic_align(params: SyntheticAlignParams, *, seed: int) -> Dataset:
    """One random token repeated over L positions (IMDM's synthetic-align task)."""
    gen = rng(seed, "synthetic_align")
    v, length = params.vocab_size, params.length
    a_tr = gen.integers(0, v, params.n_train)
    a_te = gen.integers(0, v, params.n_test)
    meta = DatasetMeta(
        name="synthetic_align", task="language_modeling", num_features=length,
        num_classes=v, input_shape=(length,),
        source=f"synthetic: one token of {v} repeated over {length} positions (IMDM)",
        license="generated",
    )
    rep = np.ones((1, length), dtype=np.int64)
    return Dataset(
        a_tr[:, None].astype(np.int64) * rep, a_tr.astype(np.int64),
        a_te[:, None].astype(np.int64) * rep, a_te.astype(np.int64), meta,
    )

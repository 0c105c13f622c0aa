"""``sparsessm_text``: byte windows of the offline corpora, held-out block fixed for all seeds.

SparseSSM (arXiv 2506.09613) needs a pre-trained Mamba and a held-out split
it has never seen; ``text_corpus`` redraws its train/test rows with every
seed, so a model pre-trained with one seed would be scored on its own
training windows under another. Here each source's stream (WordNet glosses,
fortunes, stdlib code; :func:`flowerbed.data.text_data_corpus.corpus_streams`)
is cut into non-overlapping ``window + 1``-byte windows and its **last**
``heldout`` fraction of windows is the held-out block, the same for every
seed; the seed only picks which windows of each block are sampled. ``x`` is
int64 byte ids (inputs ``x[:, :-1]``, targets ``x[:, 1:]``), ``groups_train``
the source (natural clients), ``meta.task`` ``language_modeling``.
"""

from __future__ import annotations

import numpy as np
from pydantic import Field

from flowerbed.core.registry import TOKEN_WINDOWS, register
from flowerbed.core.seeds import rng
from flowerbed.data.base import Dataset, DatasetMeta, DataSourceError
from flowerbed.data.text_data_corpus import CorpusParams, corpus_streams


class SparseSsmTextParams(CorpusParams):
    """``text_corpus``'s sources with 128-byte windows and a fixed held-out block."""

    window: int = Field(128, ge=1, le=4096, description="tokens (bytes) per input window")
    heldout: float = Field(0.1, gt=0, lt=1, description="last fraction of each source held out")


def source_blocks(params: SparseSsmTextParams) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per source: (training windows, held-out windows), each ``(n, window + 1)`` uint8."""
    width = params.window + 1
    out = {}
    for source, text in corpus_streams(params.model_copy(update={"group_by": "source"})).items():
        raw = np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
        count = len(raw) // width
        if count < 2:
            continue
        windows = raw[: count * width].reshape(count, width)
        cut = count - max(1, round(params.heldout * count))
        out[source] = (windows[:cut], windows[cut:])
    if not out:
        raise DataSourceError(f"sparsessm_text: no source holds two {width}-byte windows")
    return out


def _sample(blocks: list[np.ndarray], total: int, seed: int, label: str) -> np.ndarray:
    """``total`` rows drawn without replacement, each block's share proportional to its size."""
    sizes = np.array([len(b) for b in blocks])
    total = min(total, int(sizes.sum()))
    share = np.floor(sizes * total / sizes.sum()).astype(int)
    share[np.argsort(-sizes)[: total - share.sum()]] += 1
    gen = rng(seed, "sparsessm_text", label)
    return np.concatenate([b[gen.choice(len(b), k, replace=False)] for b, k in zip(
        blocks, share, strict=True)]).astype(np.int64) if total else np.zeros((0, 1), np.int64)


@register("dataset", "sparsessm_text", params=SparseSsmTextParams, provides=(TOKEN_WINDOWS,))
def sparsessm_text(params: SparseSsmTextParams, *, seed: int) -> Dataset:
    """Byte LM windows of glosses / fortunes / stdlib code; held-out block fixed across seeds."""
    blocks = source_blocks(params)
    names = list(blocks)
    train_parts, groups = [], []
    gen = rng(seed, "sparsessm_text", "order")
    for name in names:
        part = _sample([blocks[name][0]], round(params.n_train * len(blocks[name][0])
                                                / sum(len(b[0]) for b in blocks.values())),
                       seed, f"train/{name}")
        train_parts.append(part)
        groups += [name] * len(part)
    x_train = np.concatenate(train_parts)
    order = gen.permutation(len(x_train))
    x_test = _sample([blocks[n][1] for n in names], params.n_test, seed, "test")
    meta = DatasetMeta(
        name="sparsessm_text", task="language_modeling", num_features=params.window + 1,
        num_classes=256, input_shape=(params.window + 1,),
        source=f"byte windows of {', '.join(params.sources)}; last {params.heldout:g} of each "
        "source held out (WordNet 3.0 glosses, Debian fortunes, this Python's stdlib)",
        license="WordNet 3.0 license; fortune-mod BSD-style; Python PSF-2.0",
    )
    return Dataset(
        x_train[order], np.zeros(len(order), dtype=np.int64), x_test,
        np.zeros(len(x_test), dtype=np.int64), meta, groups_train=np.asarray(groups)[order],
    )

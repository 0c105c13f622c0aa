"""``text_corpus``: byte-level language-model windows of WordNet glosses, fortunes and stdlib code.

The convention a language-model learner consumes: ``meta.task`` is
``language_modeling``, ``x`` is int64 ``(n, window + 1)`` token ids (here bytes,
``meta.num_classes = 256``), inputs ``x[:, :-1]`` and next-token targets
``x[:, 1:]`` from the same row, ``y`` unused zeros. ``groups_train`` is the
window's domain (its source, or the source's part), so natural-id clients
differ in domain.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field, field_validator

from flowerbed.core.registry import TOKEN_WINDOWS, register
from flowerbed.data import text_data_readers as rd
from flowerbed.data.base import Dataset, DatasetMeta, DataSourceError
from flowerbed.data.text_data import TextSizeParams, pick_rows

# --- text_corpus ----------------------------------------------------------------------------

Source = Literal["glosses", "fortunes", "code"]
#: What separates two documents of a source in its byte stream.
JOINERS = {"glosses": "\n", "fortunes": "\n%\n", "code": "\n\n"}


class CorpusParams(TextSizeParams):
    """Which sources, the window length, and whether clients are sources or their parts."""

    wordnet_dir: str = Field(rd.WORDNET_DIR, description="WordNet folder (glosses)")
    fortunes_dir: str = Field(rd.FORTUNES_DIR, description="fortunes folder")
    sources: tuple[Source, ...] = Field(("glosses", "fortunes", "code"), min_length=1)
    group_by: Literal["source", "category"] = Field(
        "source", description="client key: the source, or its part (glosses/<lexicographer "
        "file>, fortunes/<category>, code/<stdlib path>)")
    window: int = Field(64, ge=1, le=4096, description="tokens (bytes) per input window")
    code_files: int = Field(40, ge=1, le=2000, description="stdlib .py files in the code source")

    @field_validator("sources")
    @classmethod
    def _distinct(cls, sources: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(sources)) != len(sources):
            raise ValueError("sources must not repeat")
        return sources


def corpus_documents(params: CorpusParams) -> dict[str, list[str]]:
    """Documents per category key (``glosses/noun.animal``...), sources in ``params`` order."""
    docs: dict[str, list[str]] = {}
    for source in params.sources:
        if source == "glosses":
            wn = rd.load_wordnet(params.wordnet_dir, "text_corpus")
            for key in sorted(wn.synsets):
                synset = wn.synsets[key]
                docs.setdefault(f"glosses/{rd.LEXNAMES[synset.lexfile]}", []).append(synset.gloss)
        elif source == "fortunes":
            for cat, quotes in rd.read_fortunes(params.fortunes_dir, "text_corpus").items():
                docs[f"fortunes/{cat}"] = list(quotes)
        else:
            for path, text in rd.stdlib_sources(params.code_files).items():
                docs[f"code/{path}"] = [text]
    return docs


def corpus_streams(params: CorpusParams) -> dict[str, str]:
    """Each client key's text: its documents joined by the source's separator."""
    streams: dict[str, list[str]] = {}
    for key, docs in corpus_documents(params).items():
        source = key.split("/", 1)[0]
        group = source if params.group_by == "source" else key
        streams.setdefault(group, []).extend(docs)
    return {g: JOINERS[g.split("/", 1)[0]].join(d) for g, d in streams.items()}


@register("dataset", "text_corpus", params=CorpusParams, provides=(TOKEN_WINDOWS,))
def text_corpus(params: CorpusParams, *, seed: int) -> Dataset:
    """Byte-level LM windows of WordNet glosses, fortunes and stdlib code; clients = domains.

    ``x`` is int64 ``(n, window + 1)``: byte ids 0..255 of a contiguous slice
    of one client key's stream (inputs ``x[:, :-1]``, next-byte targets
    ``x[:, 1:]``); ``y`` is zeros; ``meta.task`` is ``language_modeling``.
    Windows do not overlap; the code source depends on the Python installation.
    """
    width = params.window + 1
    blocks, keys = {}, []
    for group, text in corpus_streams(params).items():
        raw = np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
        count = len(raw) // width
        if count:
            blocks[group] = raw[: count * width].reshape(count, width)
            keys += [group] * count
    if not keys:
        raise DataSourceError(f"text_corpus: no source holds a {width}-byte window")
    starts = dict(zip(blocks, np.cumsum([0, *[len(b) for b in blocks.values()]]), strict=False))

    def rows(picked: np.ndarray) -> np.ndarray:
        out = np.empty((len(picked), width), dtype=np.int64)
        for j, i in enumerate(picked):
            group = keys[i]
            out[j] = blocks[group][i - starts[group]]
        return out

    tr, te = pick_rows(keys, params.n_train, params.n_test, seed, "text_corpus")
    meta = DatasetMeta(
        name="text_corpus", task="language_modeling", num_features=width, num_classes=256,
        input_shape=(width,),
        source=f"byte windows of {', '.join(params.sources)} (WordNet 3.0 glosses, Debian "
        f"fortunes, this Python's stdlib: {params.code_files} files)",
        license="WordNet 3.0 license; fortune-mod BSD-style; Python PSF-2.0",
    )
    return Dataset(
        rows(tr), np.zeros(len(tr), dtype=np.int64), rows(te), np.zeros(len(te), dtype=np.int64),
        meta, groups_train=np.asarray([keys[i] for i in tr]),
    )

"""Offline text datasets from Debian packages: WordNet supersenses and pairs, FreeDict, fortunes.

Text lives in a side table beside the numeric arrays: ``Dataset.text_*[i]`` is
row ``i``'s input text and ``Dataset.refs_*[i]`` (word-pair tasks) every
acceptable output. ``x`` of a text dataset is a numeric stand-in, one
``float32`` column holding the row's position in ``text_*`` (rows are shuffled,
so it carries no label information), which keeps numeric code paths working.
The byte-level ``text_corpus`` for language models, whose ``x`` holds byte ids,
is in :mod:`flowerbed.data.text_data_corpus`.

Each dataset draws a bounded, seeded sample (``n_train``/``n_test``)
stratified by its natural client key (``groups_train``), so every key keeps at
least one training row and ``partition: {name: natural_id}`` sees the same set
of clients for every seed. The readers are in
:mod:`flowerbed.data.text_data_readers`.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Annotated, Literal

import numpy as np
from pydantic import AfterValidator, Field, field_validator

from flowerbed.core.registry import Params, register
from flowerbed.core.seeds import rng
from flowerbed.data import text_data_readers as rd
from flowerbed.data.base import Dataset, DatasetMeta, DataSourceError

WORDNET_SOURCE = "Princeton WordNet 3.0 via Debian wordnet-base"
WORDNET_LICENSE = "WordNet 3.0 license (BSD-like, permissive)"


class TextSizeParams(Params):
    """Bounded sample sizes shared by the text datasets."""

    n_train: int = Field(4000, ge=1, description="training rows (fewer if fewer exist)")
    n_test: int = Field(1000, ge=0, description="global test rows")


def _check_edges(edges: tuple[int, ...]) -> tuple[int, ...]:
    if not edges or edges[0] < 1 or any(b <= a for a, b in itertools.pairwise(edges)):
        raise ValueError("bands must be increasing integers >= 1")
    return edges


#: Tag-count band edges of a frequency key.
Bands = Annotated[tuple[int, ...], AfterValidator(_check_edges)]
BANDS_HELP = "tag-count band edges of frequency keys: (1, 3, 10) gives 0, 1-2, 3-9, 10+"


# --- seeded, key-stratified sampling --------------------------------------------------------


def apportion(weights: np.ndarray, total: int, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Integers ``lo <= a <= hi`` summing to ``total`` (or ``hi.sum()``), about ``weights``-shaped.

    Examples
    --------
    >>> apportion(np.array([6, 3, 1]), 5, np.ones(3, int), np.array([6, 3, 1])).tolist()
    [3, 1, 1]
    """
    a = lo.astype(np.int64).copy()
    left = min(int(total), int(hi.sum())) - int(a.sum())
    while left > 0:
        room = hi - a
        w = np.where(room > 0, weights, 0).astype(np.float64)
        if w.sum() == 0:
            w = (room > 0).astype(np.float64)
        share = w / w.sum() * left
        add = np.minimum(np.floor(share).astype(np.int64), room)
        if add.sum() == 0:  # hand the rest out by largest remainder, one each
            order = np.argsort(-(share - np.floor(share)), kind="stable")
            add[[i for i in order if room[i] > 0][:left]] = 1
        a += add
        left -= int(add.sum())
    return a


def pick_rows(
    keys: Sequence[str], n_train: int, n_test: int, seed: int, label: str
) -> tuple[np.ndarray, np.ndarray]:
    """Seeded train/test rows, each key's share proportional to its size.

    Every key keeps at least one training row (when there are at most
    ``n_train`` keys), so the natural ids do not depend on the seed. When
    fewer than ``n_train + n_test`` items exist, both sizes shrink in
    proportion. Rows come back shuffled.
    """
    names, inverse = np.unique(np.asarray(keys, dtype=object).astype(str), return_inverse=True)
    sizes = np.bincount(inverse, minlength=len(names))
    total = min(len(inverse), n_train + n_test)
    want_test = round(total * n_test / (n_train + n_test))
    floor = np.ones_like(sizes) if len(names) <= total - want_test else np.zeros_like(sizes)
    take = apportion(sizes, total, floor, sizes)
    test = apportion(take, want_test, np.zeros_like(take), np.maximum(take - floor, 0))
    gen = rng(seed, "text-split", label)
    order = gen.permutation(len(inverse))
    order = order[np.argsort(inverse[order], kind="stable")]  # grouped, random within
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    tr, te = [], []
    for g in range(len(names)):
        rows = order[starts[g] : starts[g] + take[g]]
        te.append(rows[: test[g]])
        tr.append(rows[test[g] :])
    return gen.permutation(np.concatenate(tr)), gen.permutation(np.concatenate(te))


def band_names(edges: Sequence[int]) -> list[str]:
    """Names of the tag-count bands cut at ``edges`` (``(1, 3)`` -> tags 0, 1-2, 3+)."""
    bounds = [0, *edges]
    names = [f"tags {lo}" if hi == lo + 1 else f"tags {lo}-{hi - 1}"
             for lo, hi in itertools.pairwise(bounds)]
    return [*names, f"tags {bounds[-1]}+"]


def band_of(count: int, edges: Sequence[int]) -> str:
    """The :func:`band_names` entry ``count`` falls in."""
    return band_names(edges)[int(np.searchsorted(np.asarray(edges), count, side="right"))]


def _text_dataset(
    items: Sequence[tuple[str, str, tuple[str, ...] | None]],
    classes: Sequence[str],
    label_of: Sequence[int],
    params: TextSizeParams,
    seed: int,
    meta: dict[str, str],
) -> Dataset:
    """Sample ``(key, text, refs)`` items into a text-classification :class:`Dataset`.

    ``label_of[i]`` is item ``i``'s class index into ``classes``; ``meta`` holds
    the ``name``, ``source`` and ``license`` of the :class:`DatasetMeta`.
    """
    if not items:
        raise DataSourceError(f"{meta['name']}: no examples left after filtering")
    keys = [key for key, _, _ in items]
    tr, te = pick_rows(keys, params.n_train, params.n_test, seed, meta["name"])
    labels = np.asarray(label_of, dtype=np.int64)
    with_refs = items[0][2] is not None

    def refs(rows: np.ndarray) -> tuple[tuple[str, ...], ...] | None:
        return tuple(items[i][2] or () for i in rows) if with_refs else None

    info = DatasetMeta(
        name=meta["name"], task="classification", num_features=1, num_classes=len(classes),
        feature_names=("row",), class_names=tuple(classes),
        source=meta["source"], license=meta["license"],
    )
    return Dataset(
        np.arange(len(tr), dtype=np.float32)[:, None], labels[tr],
        np.arange(len(te), dtype=np.float32)[:, None], labels[te], info,
        groups_train=np.asarray([keys[i] for i in tr]),
        text_train=tuple(items[i][1] for i in tr), text_test=tuple(items[i][1] for i in te),
        refs_train=refs(tr), refs_test=refs(te),
    )


# --- wordnet_supersense ---------------------------------------------------------------------


class SupersenseParams(TextSizeParams):
    """Which lexicographer files, whether glosses keep their examples, the frequency bands."""

    wordnet_dir: str = Field(rd.WORDNET_DIR, description="folder of data.*, index.sense")
    lexnames: tuple[str, ...] = Field(
        (), description="lexicographer files to keep (e.g. [noun.animal, noun.plant]); all 45")
    examples: bool = Field(False, description="keep the quoted usage examples of each gloss")
    bands: Bands = Field((1, 3, 10), description=BANDS_HELP)

    @field_validator("lexnames")
    @classmethod
    def _known(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        return rd.known_lexnames(names)


@register("dataset", "wordnet_supersense", params=SupersenseParams)
def wordnet_supersense(params: SupersenseParams, *, seed: int) -> Dataset:
    """WordNet gloss -> lexicographer file (45 classes), clients by frequency (Debian wordnet-*).

    ``groups_train`` is the synset's tag-count band (index.sense counts summed
    over its words): frequent synsets are verb- and adjective-heavy with short
    glosses, rare ones mostly nouns, so clients differ in label mix and style
    without any client's task being trivial. Needs wordnet-base and
    wordnet-sense-index.
    """
    name = "wordnet_supersense"
    wn = rd.load_wordnet(params.wordnet_dir, name)
    tags = rd.synset_tag_counts(params.wordnet_dir, name)
    keep = params.lexnames or rd.LEXNAMES
    class_of = {lex: i for i, lex in enumerate(keep)}
    items, labels = [], []
    for key in sorted(wn.synsets):
        synset = wn.synsets[key]
        lex = rd.LEXNAMES[synset.lexfile]
        if lex in class_of:
            text = synset.gloss if params.examples else rd.definition(synset.gloss)
            items.append((band_of(tags.get(key, 0), params.bands), text, None))
            labels.append(class_of[lex])
    return _text_dataset(items, keep, labels, params, seed, {
        "name": name, "source": f"{WORDNET_SOURCE} + wordnet-sense-index (glosses)",
        "license": WORDNET_LICENSE,
    })


# --- wordnet_pairs --------------------------------------------------------------------------

Relation = Literal["antonym", "hypernym", "plural", "past_tense"]
#: Part of speech of each relation's input word.
RELATION_POS = {"antonym": "a", "hypernym": "n", "plural": "n", "past_tense": "v"}


class PairParams(TextSizeParams):
    """Which relation, the frequency filter, and how inputs become clients."""

    wordnet_dir: str = Field(rd.WORDNET_DIR, description="folder of data.*, index.*, *.exc")
    relation: Relation = Field(
        "antonym", description="antonym (adjectives, '!' pointers), hypernym (nouns), "
        "plural (noun.exc), past_tense (verb.exc: simple past and participles)")
    min_tag_count: int = Field(
        1, ge=0, description="keep inputs whose index.* tagsense_cnt is at least this "
        "(1: seen at least once in the tagged corpora; 0: every WordNet lemma)")
    single_words: bool = Field(True, description="only [a-z]+ inputs and references")
    group_by: Literal["auto", "lexfile", "frequency"] = Field(
        "auto", description="client key of an input: lexicographer file of its most frequent "
        "sense, or tag-count band; auto: frequency for antonym, lexfile otherwise")
    bands: Bands = Field((1, 3, 10), description=BANDS_HELP)


def relation_table(wordnet_dir: str, relation: Relation, dataset: str) -> dict[str, list[str]]:
    """Input lemma -> every acceptable output for ``relation`` (WordNet index forms)."""
    if relation == "antonym":
        return rd.antonyms(rd.load_wordnet(wordnet_dir, dataset))
    if relation == "hypernym":
        return rd.hypernyms(rd.load_wordnet(wordnet_dir, dataset))
    if relation == "plural":
        return rd.plurals(wordnet_dir, dataset)
    return rd.past_tenses(wordnet_dir, dataset)


@register("dataset", "wordnet_pairs", params=PairParams)
def wordnet_pairs(params: PairParams, *, seed: int) -> Dataset:
    """WordNet antonym/hypernym/plural/past-tense pairs: word -> all outputs (Debian wordnet-base).

    ``text_*`` holds the input words and ``refs_*`` all their outputs (score
    against all: WordNet ties antonyms to one sense, big -> little). ``y`` is
    the input's client key as a class index (``meta.class_names``), so label
    partitioners work too; it is not the task. Needs wordnet-base.
    """
    name = "wordnet_pairs"
    wn = rd.load_wordnet(params.wordnet_dir, name)
    pos = RELATION_POS[params.relation]
    by = params.group_by
    if by == "auto":
        by = "frequency" if params.relation == "antonym" else "lexfile"
    items = []
    for word, outputs in sorted(relation_table(params.wordnet_dir, params.relation, name).items()):
        if (pos, word) not in wn.index or wn.tag_count(pos, word) < params.min_tag_count:
            continue
        refs = [r for r in outputs if r != word]
        if params.single_words:
            refs = [r for r in refs if rd.SINGLE_WORD.fullmatch(r)]
            if not rd.SINGLE_WORD.fullmatch(word):
                refs = []
        if refs:
            key = (band_of(wn.tag_count(pos, word), params.bands) if by == "frequency"
                   else wn.lexfile(pos, word))
            items.append((key, word.replace("_", " "),
                          tuple(r.replace("_", " ") for r in refs)))
    order = band_names(params.bands) if by == "frequency" else list(rd.LEXNAMES)
    classes = [c for c in order if c in {key for key, _, _ in items}]
    label = {c: i for i, c in enumerate(classes)}
    return _text_dataset(items, classes, [label[k] for k, _, _ in items], params, seed, {
        "name": name, "source": f"{WORDNET_SOURCE} ({params.relation} pairs)",
        "license": WORDNET_LICENSE,
    })


# --- freedict -------------------------------------------------------------------------------

WORDNET_POS = (("n", "noun"), ("v", "verb"), ("a", "adj"), ("r", "adv"))
INITIALS = ("a-e", "f-j", "k-o", "p-t", "u-z")


class FreedictParams(TextSizeParams):
    """Which dictionary, which headwords, and how they become clients."""

    dictd_dir: str = Field(rd.DICTD_DIR, description="folder of freedict-<pair>.index/.dict.dz")
    wordnet_dir: str = Field(rd.WORDNET_DIR, description="WordNet, for group_by: pos and "
                             "min_tag_count")
    pair: str = Field("eng-fra", pattern=r"^[a-z]{3}-[a-z]{3}$",
                      description="dictionary pair (Debian package dict-freedict-<pair>)")
    single_words: bool = Field(True, description="only headwords written as [a-z]+")
    min_tag_count: int = Field(0, ge=0, description="keep headwords whose largest WordNet "
                               "tagsense_cnt over parts of speech is at least this")
    group_by: Literal["pos", "initial"] = Field(
        "pos", description="client key: the headword's most-tagged WordNet part of speech "
        "(other: not in WordNet), or its initial letter bucket (a-e, f-j...)")


def wordnet_pos(wn: rd.WordNet, word: str) -> tuple[str, int]:
    """The headword's most-tagged part of speech (ties: noun, verb, adj, adv) and tag count."""
    lemma = word.lower().replace(" ", "_")
    found = [(wn.tag_count(p, lemma), -i, name)
             for i, (p, name) in enumerate(WORDNET_POS) if (p, lemma) in wn.index]
    if not found:
        return "other", 0
    tags, _, name = max(found)
    return name, tags


def initial_bucket(word: str) -> str:
    """``a-e``... by the headword's first letter, ``other`` for anything else."""
    first = word[:1].lower()
    for bucket in INITIALS:
        if bucket[0] <= first <= bucket[2]:
            return bucket
    return "other"


@register("dataset", "freedict", params=FreedictParams)
def freedict(params: FreedictParams, *, seed: int) -> Dataset:
    """FreeDict headword -> all listed translations, clients by POS (Debian dict-freedict-<pair>).

    The first-listed translation is often a poor gold label (abandon ->
    abdiquer), so ``refs_*`` keeps them all. ``y`` is the client key as a class
    index, not the task. Needs dict-freedict-<pair> (and wordnet-base for
    ``group_by: pos`` or ``min_tag_count``).
    """
    name = "freedict"
    entries = rd.read_freedict(params.dictd_dir, params.pair, name)
    wn = None
    if params.group_by == "pos" or params.min_tag_count:
        if not params.pair.startswith("eng-"):
            raise DataSourceError(
                f"freedict: group_by=pos and min_tag_count look words up in the English "
                f"WordNet; pair {params.pair!r} is not eng-*: use group_by: initial"
            )
        wn = rd.load_wordnet(params.wordnet_dir, name)
    items = []
    for word in sorted(entries):
        if params.single_words and not rd.SINGLE_WORD.fullmatch(word):
            continue
        pos, tags = wordnet_pos(wn, word) if wn is not None else ("other", 0)
        if tags < params.min_tag_count:
            continue
        key = pos if params.group_by == "pos" else initial_bucket(word)
        items.append((key, word, tuple(entries[word])))
    order = [n for _, n in WORDNET_POS] + ["other"] if params.group_by == "pos" else [
        *INITIALS, "other"]
    classes = [c for c in order if c in {key for key, _, _ in items}]
    label = {c: i for i, c in enumerate(classes)}
    return _text_dataset(items, classes, [label[k] for k, _, _ in items], params, seed, {
        "name": name, "source": f"FreeDict {params.pair} via Debian dict-freedict-{params.pair}",
        "license": "GPL-2.0-or-later (FreeDict)",
    })


# --- fortunes -------------------------------------------------------------------------------


class FortuneParams(TextSizeParams):
    """Which categories (default all installed)."""

    fortunes_dir: str = Field(rd.FORTUNES_DIR, description="folder of fortune category files")
    categories: tuple[str, ...] = Field((), description="category files to keep; () = all")


@register("dataset", "fortunes", params=FortuneParams)
def fortunes(params: FortuneParams, *, seed: int) -> Dataset:
    """Fortune quote -> its category (43), clients = categories (Debian fortunes).

    With ``partition: natural_id`` every client holds one category, the
    one-class-per-client extreme; ``dirichlet`` over the same labels grades
    the skew. Needs the Debian package fortunes (fortunes-min has 3 categories).
    """
    name = "fortunes"
    table = rd.read_fortunes(params.fortunes_dir, name)
    unknown = sorted(set(params.categories) - set(table))
    if unknown:
        raise DataSourceError(
            f"fortunes: no category {unknown} in {params.fortunes_dir}; "
            f"installed: {', '.join(table)}"
        )
    classes = list(params.categories) or list(table)
    items = [(cat, quote, None) for cat in classes for quote in table[cat]]
    labels = [i for i, cat in enumerate(classes) for _ in table[cat]]
    return _text_dataset(items, classes, labels, params, seed, {
        "name": name, "source": "fortune-mod quotes via Debian fortunes/fortunes-min",
        "license": "BSD-style (fortune-mod); see /usr/share/doc/fortunes/copyright",
    })

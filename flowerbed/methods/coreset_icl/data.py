"""Three offline text-classification tasks for coreset ICL, built from WordNet (Debian wordnet-*).

- ``negation_sentiment``: an SST-2-like templated corpus:
  ``the soup was not very pleasant overall`` -> positive/negative. The
  polarity lexicon is two short seed lists of common adjectives, each extended
  by the WordNet antonyms of its words' senses (``pleasant -> unpleasant``),
  words on both sides dropped. Subjects are WordNet nouns from four domains
  (food, artifact, person, communication: the natural client key), a negation
  (``not``, ``never``, ``did not seem``) flips the label, intensifiers and
  fillers are neutral.
- ``antonym_synonym``: a word pair (``hot, cold``) -> antonym or synonym. Antonyms
  are WordNet's lexical ``!`` pointers of every part of speech; synonyms are two
  single-word lemmas of one synset. Both classes are balanced per part of
  speech, the natural client key.
- ``wordnet_word_category``: a bare word -> its semantic category (``tiger`` ->
  animal): WordNet lemmas all of whose senses lie in one of the chosen
  lexicographer files (six noun files by default), clients by tag-count band.
  SmolLM2 gains much from demonstrations here (the sentiment and relation tasks
  above showed no few-shot gain over zero-shot on it).

Each builds a fixed universe of items (independent of the seed) and draws the
seeded, key-stratified ``n_train``/``n_test`` rows of
:mod:`flowerbed.data.text_data`.
"""

from __future__ import annotations

import itertools
from typing import Literal

import numpy as np
from pydantic import Field, field_validator

from flowerbed.core.registry import register
from flowerbed.core.seeds import rng
from flowerbed.data import text_data_readers as rd
from flowerbed.data.base import Dataset, DataSourceError
from flowerbed.data.text_data import (
    WORDNET_LICENSE,
    WORDNET_SOURCE,
    TextSizeParams,
    _text_dataset,
    band_of,
)

#: Seed adjectives of each polarity (extended by their WordNet antonyms).
POSITIVE_SEEDS = (
    "good", "happy", "pleasant", "excellent", "beautiful", "nice", "wonderful", "delightful",
    "enjoyable", "interesting", "comfortable", "friendly", "fresh", "clean", "tasty", "lovely",
    "brilliant", "superb", "charming", "perfect", "honest", "helpful", "pleasing", "satisfying",
    "generous", "polite", "cheerful", "safe", "reliable", "attractive",
)  # fmt: skip
NEGATIVE_SEEDS = (
    "bad", "sad", "unpleasant", "terrible", "ugly", "awful", "horrible", "poor", "dreadful",
    "boring", "uncomfortable", "unfriendly", "stale", "dirty", "disgusting", "nasty", "rude",
    "dull", "annoying", "disappointing", "mediocre", "lousy", "miserable", "painful",
    "unreliable", "unsafe", "shabby", "gloomy", "unhelpful",
)  # fmt: skip
#: Subject domains (lexicographer files) of negation_sentiment: its client keys.
DOMAINS = ("noun.food", "noun.artifact", "noun.person", "noun.communication")
#: (affirmative, negated) sentence frames.
FRAMES = (
    ("the {n} was {a}", "the {n} was not {a}"),
    ("the {n} is {a}", "the {n} is not {a}"),
    ("the {n} seemed {a}", "the {n} did not seem {a}"),
    ("the {n} looked {a}", "the {n} never looked {a}"),
    ("i found the {n} {a}", "i never found the {n} {a}"),
)
INTENSIFIERS = ("", "very ", "quite ", "really ", "rather ")
FILLERS = ("", " overall", " to me", " this time", " in the end")
SENTIMENT_CLASSES = ("negative", "positive")


def polarity_lexicon(wn: rd.WordNet) -> dict[str, int]:
    """Adjective -> 1 (positive) or 0 (negative): the seeds plus their WordNet antonyms."""
    table = rd.antonyms(wn)
    sides: tuple[set[str], set[str]] = (set(NEGATIVE_SEEDS), set(POSITIVE_SEEDS))
    for label, seeds in ((1, POSITIVE_SEEDS), (0, NEGATIVE_SEEDS)):
        for word in seeds:
            sides[1 - label].update(w for w in table.get(word, [])[:1]
                                    if rd.SINGLE_WORD.fullmatch(w))
    both = sides[0] & sides[1]
    return {w: label for label, side in enumerate(sides) for w in sorted(side - both)}


def domain_nouns(wn: rd.WordNet, tags: dict[tuple[str, int], int], lexfile: str,
                 count: int) -> list[str]:
    """The ``count`` most tagged single-word nouns heading their first sense in ``lexfile``."""
    found = []
    for (pos, lemma), entry in wn.index.items():
        if pos != "n" or not rd.SINGLE_WORD.fullmatch(lemma):
            continue
        synset = wn.synsets[("n", entry.offsets[0])]
        if rd.LEXNAMES[synset.lexfile] == lexfile and synset.lemmas[0] == lemma:
            found.append((-tags.get(("n", entry.offsets[0]), 0), lemma))
    return [lemma for _, lemma in sorted(found)[:count]]


def sentence(noun: str, adj: str, frame: int, negated: bool, intensifier: str,
             filler: str) -> str:
    """One templated sentence."""
    return FRAMES[frame][int(negated)].format(n=noun, a=intensifier + adj) + filler


def sentiment_label(polarity: int, negated: bool) -> int:
    """1 (positive) when exactly one of "positive adjective" and "negated" does not hold.

    Examples
    --------
    >>> [sentiment_label(p, neg) for p, neg in [(1, False), (1, True), (0, False), (0, True)]]
    [1, 0, 0, 1]
    """
    return polarity ^ int(negated)


class SentimentParams(TextSizeParams):
    """The lexicon source, subjects per domain and how many sentences exist."""

    wordnet_dir: str = Field(rd.WORDNET_DIR, description="folder of data.*, index.*, index.sense")
    nouns_per_domain: int = Field(40, ge=1, description="subject nouns per domain")
    n_sentences: int = Field(6000, ge=2, description="distinct sentences in the universe")


@register("dataset", "negation_sentiment", params=SentimentParams)
def negation_sentiment(params: SentimentParams, *, seed: int) -> Dataset:
    """Templated sentences with negation -> negative/positive; clients by subject domain.

    Needs wordnet-base and wordnet-sense-index (to rank subject nouns).
    """
    name = "negation_sentiment"
    wn = rd.load_wordnet(params.wordnet_dir, name)
    tags = rd.synset_tag_counts(params.wordnet_dir, name)
    lexicon = polarity_lexicon(wn)
    adjs = sorted(lexicon)
    nouns = {d: domain_nouns(wn, tags, d, params.nouns_per_domain) for d in DOMAINS}
    gen = rng(0, name, "universe")  # the universe is fixed; the seed picks rows from it
    seen: dict[str, tuple[str, int]] = {}
    tries = 0
    while len(seen) < params.n_sentences and tries < 20 * params.n_sentences:
        tries += 1
        domain = DOMAINS[int(gen.integers(len(DOMAINS)))]
        noun = nouns[domain][int(gen.integers(len(nouns[domain])))]
        adj = adjs[int(gen.integers(len(adjs)))]
        negated = bool(gen.integers(2))
        text = sentence(noun, adj, int(gen.integers(len(FRAMES))), negated,
                        INTENSIFIERS[int(gen.integers(len(INTENSIFIERS)))],
                        FILLERS[int(gen.integers(len(FILLERS)))])
        seen.setdefault(text, (domain, sentiment_label(lexicon[adj], negated)))
    items = [(domain, text, None) for text, (domain, _) in seen.items()]
    labels = [label for _, label in seen.values()]
    return _text_dataset(items, SENTIMENT_CLASSES, labels, params, seed, {
        "name": name, "source": f"{WORDNET_SOURCE} (seed adjectives + antonyms, templates)",
        "license": WORDNET_LICENSE,
    })


# --- antonym_synonym -------------------------------------------------------------------------

POS_NAMES = (("n", "noun"), ("v", "verb"), ("a", "adj"), ("r", "adv"))
RELATION_CLASSES = ("antonym", "synonym")


def lexical_antonyms(wn: rd.WordNet, pos: str) -> set[tuple[str, str]]:
    """Unordered pairs of lemmas joined by a lexical ``!`` pointer, for one part of speech."""
    out = set()
    for (p, _), synset in wn.synsets.items():
        if p != pos:
            continue
        for ptr in synset.pointers:
            if ptr.symbol == "!" and ptr.source and ptr.target:
                a = synset.lemmas[ptr.source - 1]
                b = wn.synsets[(ptr.pos, ptr.offset)].lemmas[ptr.target - 1]
                if a != b:
                    out.add((min(a, b), max(a, b)))
    return out


def synonyms(wn: rd.WordNet, pos: str, max_rank: int = 2) -> set[tuple[str, str]]:
    """Unordered pairs of distinct lemmas sharing a synset, for one part of speech.

    The synset must be the most frequent sense of one word and among the first
    ``max_rank + 1`` senses of the other (rare senses make odd pairs: liberal,
    handsome).
    """
    out = set()
    for (p, offset), synset in wn.synsets.items():
        if p != pos:
            continue
        for a, b in itertools.combinations(sorted(set(synset.lemmas)), 2):
            ea, eb = wn.index.get((pos, a)), wn.index.get((pos, b))
            if ea is None or eb is None or offset not in ea.offsets or offset not in eb.offsets:
                continue
            ranks = sorted((ea.offsets.index(offset), eb.offsets.index(offset)))
            if ranks[0] == 0 and ranks[1] <= max_rank:
                out.add((a, b))
    return out


class RelationParams(TextSizeParams):
    """Frequency filter and which parts of speech."""

    wordnet_dir: str = Field(rd.WORDNET_DIR, description="folder of data.*, index.*")
    min_tag_count: int = Field(1, ge=0, description="both words' index.* tagsense_cnt at least")
    pos: tuple[Literal["noun", "verb", "adj", "adv"], ...] = Field(
        ("noun", "verb", "adj", "adv"), min_length=1, description="parts of speech kept")


@register("dataset", "antonym_synonym", params=RelationParams)
def antonym_synonym(params: RelationParams, *, seed: int) -> Dataset:
    """WordNet word pair -> antonym or synonym, balanced; clients by part of speech.

    Needs wordnet-base.
    """
    name = "antonym_synonym"
    wn = rd.load_wordnet(params.wordnet_dir, name)
    gen = rng(0, name, "universe")
    items, labels = [], []
    for letter, pos_name in POS_NAMES:
        if pos_name not in params.pos:
            continue

        def keep(pair: tuple[str, str], letter: str = letter) -> bool:
            return all(rd.SINGLE_WORD.fullmatch(w) and wn.tag_count(letter, w)
                       >= params.min_tag_count for w in pair)

        ants = sorted(p for p in lexical_antonyms(wn, letter) if keep(p))
        syns = sorted(p for p in synonyms(wn, letter) - set(ants) if keep(p))
        m = min(len(ants), len(syns))
        chosen = [(ants[i], 0) for i in gen.permutation(len(ants))[:m]]
        chosen += [(syns[i], 1) for i in gen.permutation(len(syns))[:m]]
        for (a, b), label in chosen:
            first, second = (a, b) if gen.integers(2) else (b, a)
            items.append((pos_name, f"{first}, {second}", None))
            labels.append(label)
    if not items:
        raise DataSourceError(f"{name}: no pairs left with min_tag_count={params.min_tag_count}")
    order = np.argsort([t for _, t, _ in items], kind="stable")
    return _text_dataset([items[i] for i in order], RELATION_CLASSES,
                         [labels[i] for i in order], params, seed, {
        "name": name, "source": f"{WORDNET_SOURCE} (antonym pointers, synset co-lemmas)",
        "license": WORDNET_LICENSE,
    })


# --- wordnet_word_category --------------------------------------------------------------------


class WordCategoryParams(TextSizeParams):
    """Which lexicographer files are the classes, and how frequent a word must be."""

    wordnet_dir: str = Field(rd.WORDNET_DIR, description="folder of data.*, index.*")
    lexnames: tuple[str, ...] = Field(
        ("noun.animal", "noun.plant", "noun.food", "noun.person", "noun.location",
         "noun.artifact"),
        min_length=2,
        description="lexicographer files kept, one class each",
    )  # fmt: skip
    min_tag_count: int = Field(1, ge=0, description="the word's index.* tagsense_cnt at least")

    @field_validator("lexnames")
    @classmethod
    def _known(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        return rd.known_lexnames(names)


def word_lexfiles(wn: rd.WordNet) -> dict[str, set[str]]:
    """Single-word lemma -> lexicographer files of all its senses, every part of speech."""
    out: dict[str, set[str]] = {}
    for (pos, lemma), entry in wn.index.items():
        if rd.SINGLE_WORD.fullmatch(lemma):
            lex = {rd.LEXNAMES[wn.synsets[(pos, o)].lexfile] for o in entry.offsets}
            out.setdefault(lemma, set()).update(lex)
    return out


@register("dataset", "wordnet_word_category", params=WordCategoryParams)
def wordnet_word_category(params: WordCategoryParams, *, seed: int) -> Dataset:
    """A single word -> its semantic category (``tiger`` -> animal); clients by frequency.

    The words are WordNet lemmas every sense of which (in every part of speech)
    lies in one of ``lexnames``, tagged at least ``min_tag_count`` times (summed
    over parts of speech): unambiguous, known words. Unlike ``wordnet_supersense``
    (a gloss) the input is the bare word, so the LM must know it. Client key: the
    tag-count band. Needs wordnet-base.
    """
    name = "wordnet_word_category"
    wn = rd.load_wordnet(params.wordnet_dir, name)
    class_of = {lex: i for i, lex in enumerate(params.lexnames)}
    items, labels = [], []
    for word, lex in sorted(word_lexfiles(wn).items()):
        tags = sum(wn.tag_count(p, word) for p in "nvar" if (p, word) in wn.index)
        if len(lex) == 1 and (only := next(iter(lex))) in class_of and tags >= params.min_tag_count:
            items.append((band_of(tags, (1, 3, 10)), word, None))
            labels.append(class_of[only])
    return _text_dataset(items, params.lexnames, labels, params, seed, {
        "name": name, "source": f"{WORDNET_SOURCE} (unambiguous lemmas by lexicographer file)",
        "license": WORDNET_LICENSE,
    })  # fmt: skip

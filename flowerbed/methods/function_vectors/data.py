"""Tasks for the function-vector analysis: synthetic permutations and word pairs.

Two kinds of in-context task, both as ``(input, acceptable outputs)`` pairs:

- **permutation tasks** (the spec's trained-tiny-transformer probe): ``num_symbols``
  symbols (letters ``a``...), ``2 * num_pairs`` tasks, each a permutation of the
  symbols. The two tasks of a pair agree on ``shared`` inputs and differ on the
  rest, so a demonstration on a shared input fits both: it is *ambiguous*.
  Chance coincidences with other tasks make more inputs ambiguous (an input is
  ambiguous for task ``t`` when any other task maps it to the same output).
- **word-pair tasks** read from Debian WordNet / FreeDict (as in
  :mod:`flowerbed.data.text_data`): ``antonym`` (adjectives), ``eng_fra``
  (headword -> every listed translation), ``plural_singular`` (noun.exc) and
  ``past_lemma`` (verb.exc past forms -> lemma). A demonstration whose shown
  answer equals its input (a French cognate, an invariant plural) also fits the
  copy task: those are the ambiguous ones.

The registered dataset ``fv_tasks`` turns one task into a federation whose
clients differ in how ambiguous their demonstrations are
(``client_ambiguity``: the share of a client's rows drawn from ambiguous
inputs). Its ``y`` is 1 on ambiguous rows (classes ``unambiguous``,
``ambiguous``), ``groups_train`` names the client (``natural_id``), and the
test split is drawn from the task's inputs uniformly.

Examples
--------
>>> tasks = permutation_tasks(seed=0)
>>> tasks.table.shape
(6, 16)
>>> bool((tasks.table[0] == tasks.table[tasks.partner[0]]).sum() >= 8)
True
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import Field, field_validator

from flowerbed.core.registry import Params, register
from flowerbed.core.seeds import rng
from flowerbed.data import text_data_readers as rd
from flowerbed.data.base import Dataset, DatasetMeta, DataSourceError

#: Seed of the permutation tasks shared by the dataset and the trained toy model.
TASK_SEED = 0
#: Symbols of the permutation tasks (one byte each, so one token for a byte tokenizer).
SYMBOLS = "abcdefghijklmnopqrstuvwxyz"
#: Arrow and separator of the permutation tasks: ``a>b;`` per demonstration, the query ``c>``.
ARROW, SEP = ">", ";"
PERMUTATION_TEMPLATE = "{x}" + ARROW + "{y}" + SEP
WordTask = Literal["antonym", "eng_fra", "plural_singular", "past_lemma"]
WORD_TASKS: tuple[str, ...] = ("antonym", "eng_fra", "plural_singular", "past_lemma")
AMBIGUITY_CLASSES = ("unambiguous", "ambiguous")

Pair = tuple[str, tuple[str, ...]]


@dataclass(frozen=True)
class PermutationTasks:
    """``table[t, x]``: the output symbol index of input ``x`` under task ``t``.

    ``partner[t]`` is the task paired with ``t`` (they agree on ``shared`` inputs).
    """

    table: np.ndarray
    partner: tuple[int, ...]
    shared: int

    @property
    def num_tasks(self) -> int:
        """Number of tasks."""
        return int(self.table.shape[0])

    @property
    def num_symbols(self) -> int:
        """Number of symbols (inputs and outputs)."""
        return int(self.table.shape[1])

    def symbol(self, i: int) -> str:
        """The letter of symbol ``i``."""
        return SYMBOLS[i]

    def consistent(self, x: int, y: int) -> np.ndarray:
        """``(num_tasks,)`` bool: which tasks map ``x`` to ``y``."""
        return np.asarray(self.table[:, x] == y)

    def ambiguous(self, t: int) -> np.ndarray:
        """``(num_symbols,)`` bool: inputs where another task gives task ``t``'s output."""
        same = self.table == self.table[t][None, :]
        return np.asarray(same.sum(axis=0) >= 2)

    def pairs(self, t: int) -> list[Pair]:
        """Task ``t`` as ``(input, (output,))`` letter pairs, input order."""
        return [(SYMBOLS[x], (SYMBOLS[int(self.table[t, x])],)) for x in range(self.num_symbols)]


def permutation_tasks(
    seed: int = TASK_SEED, num_symbols: int = 16, num_pairs: int = 3, shared: int = 8
) -> PermutationTasks:
    """``2 * num_pairs`` permutations of ``num_symbols`` symbols, paired on ``shared`` inputs.

    Task ``2p`` is a random permutation; task ``2p + 1`` equals it on ``shared``
    random inputs and, on the other ``num_symbols - shared``, takes the outputs
    of task ``2p`` cyclically shifted among those inputs (so it is again a
    permutation and differs there everywhere).
    """
    if not 2 <= num_symbols <= len(SYMBOLS):
        raise ValueError(f"num_symbols must lie in 2..{len(SYMBOLS)}, got {num_symbols}")
    if not 0 <= shared <= num_symbols - 2:
        raise ValueError(f"shared must lie in 0..num_symbols-2, got {shared}")
    if num_pairs < 1:
        raise ValueError(f"num_pairs must be >= 1, got {num_pairs}")
    gen = rng(seed, "fv.permutation_tasks", num_symbols, num_pairs, shared)
    rows, partner = [], []
    for p in range(num_pairs):
        first = gen.permutation(num_symbols)
        differ = gen.permutation(num_symbols)[: num_symbols - shared]
        second = first.copy()
        second[differ] = first[np.roll(differ, 1)]
        rows += [first, second]
        partner += [2 * p + 1, 2 * p]
    return PermutationTasks(np.stack(rows).astype(np.int64), tuple(partner), shared)


def sample_sequences(
    tasks: PermutationTasks, n: int, n_pairs: int, seed: int | np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``n`` training sequences: task ids ``(n,)``, distinct inputs and outputs ``(n, n_pairs)``."""
    if n_pairs > tasks.num_symbols:
        raise ValueError(f"n_pairs ({n_pairs}) exceeds the {tasks.num_symbols} symbols")
    gen = seed if isinstance(seed, np.random.Generator) else rng(seed, "fv.sequences")
    task = gen.integers(0, tasks.num_tasks, size=n)
    inputs = np.argsort(gen.random((n, tasks.num_symbols)), axis=1)[:, :n_pairs]
    outputs = tasks.table[task[:, None], inputs]
    return task, inputs, outputs


# --- word-pair tasks ------------------------------------------------------------------------


def _tag(wn: rd.WordNet, pos: str, word: str) -> int:
    return wn.tag_count(pos, word) if (pos, word) in wn.index else 0


def _single(words: Sequence[str]) -> list[str]:
    return [w for w in words if rd.SINGLE_WORD.fullmatch(w)]


def _french(word: str) -> bool:
    """One lower-case word, accents allowed (no spaces, apostrophes or hyphens)."""
    return word.isalpha() and word == word.lower()


def word_pairs(
    task: WordTask,
    min_tag_count: int = 1,
    wordnet_dir: str = rd.WORDNET_DIR,
    dictd_dir: str = rd.DICTD_DIR,
) -> list[Pair]:
    """``(input, acceptable outputs)`` of a word task, sorted by input.

    Inputs and outputs are single words; ``min_tag_count`` keeps inputs (for
    ``plural_singular`` / ``past_lemma``: their lemma) seen at least that often
    in WordNet's tagged corpora. When the input is among its own outputs (a
    cognate, an invariant plural) it is listed first, so a demonstration shows
    it: such a demonstration is ambiguous with copying (:func:`is_identity`).
    """
    name = f"fv_tasks ({task})"
    wn = rd.load_wordnet(wordnet_dir, name)
    table: dict[str, list[str]] = {}
    if task == "antonym":
        for word, outs in rd.antonyms(wn).items():
            if _tag(wn, "a", word) >= min_tag_count:
                table[word] = [o for o in outs if o != word]
    elif task in ("plural_singular", "past_lemma"):
        pos = "n" if task == "plural_singular" else "v"
        for form, bases in rd.read_exceptions(wordnet_dir, pos, name).items():
            if pos == "v" and not rd.is_past_form(form):
                continue
            keep = [b for b in bases if _tag(wn, pos, b) >= min_tag_count]
            if keep:
                table[form] = keep
    elif task == "eng_fra":
        for word, outs in rd.read_freedict(dictd_dir, "eng-fra", name).items():
            tags = max(_tag(wn, p, word) for p in "nvar")
            if tags >= min_tag_count:
                table[word] = [o for o in outs if _french(o)]
    else:
        raise ValueError(f"unknown word task {task!r}; known: {', '.join(WORD_TASKS)}")
    out: list[Pair] = []
    for word in sorted(table):
        refs = _single(table[word]) if task != "eng_fra" else table[word]
        if not rd.SINGLE_WORD.fullmatch(word) or not refs:
            continue
        refs = sorted(dict.fromkeys(refs), key=lambda r: r != word)  # identity first, else kept
        out.append((word, tuple(refs)))
    if not out:
        raise DataSourceError(f"fv_tasks: no {task} pairs left (min_tag_count={min_tag_count})")
    return out


def is_identity(pair: Pair) -> bool:
    """Whether the shown answer equals the input (the demonstration also fits copying)."""
    return pair[1][0] == pair[0]


# --- the registered dataset -----------------------------------------------------------------


class FvTasksParams(Params):
    """Which task, and how ambiguous each client's demonstrations are."""

    task: Literal["permutation", "antonym", "eng_fra", "plural_singular", "past_lemma"] = Field(
        "permutation", description="a synthetic permutation task or a word task"
    )
    permutation: int = Field(0, ge=0, description="which permutation task (0..5 by default)")
    task_seed: int = Field(TASK_SEED, ge=0, description="seed of the permutation tasks "
                           "(must match the model's, e.g. lm fv_toy)")
    num_symbols: int = Field(16, ge=2, le=len(SYMBOLS))
    num_pairs: int = Field(3, ge=1)
    shared: int = Field(8, ge=0, description="inputs on which paired tasks agree")
    client_ambiguity: tuple[float, ...] = Field(
        (0.1, 0.3, 0.5, 0.7, 0.9), min_length=1,
        description="one client per entry: the share of its rows drawn from ambiguous inputs",
    )
    rows_per_client: int = Field(200, ge=1)
    n_test: int = Field(200, ge=1, description="test rows, inputs drawn uniformly")
    min_tag_count: int = Field(1, ge=0, description="word tasks: frequency filter (WordNet tags)")
    wordnet_dir: str = Field(rd.WORDNET_DIR)
    dictd_dir: str = Field(rd.DICTD_DIR)

    @field_validator("client_ambiguity")
    @classmethod
    def _shares(cls, value: tuple[float, ...]) -> tuple[float, ...]:
        if any(not 0 <= v <= 1 for v in value):
            raise ValueError(f"every client_ambiguity share must lie in [0, 1], got {list(value)}")
        return value


def task_pairs(p: FvTasksParams) -> tuple[list[Pair], np.ndarray]:
    """The task's pairs and their ambiguity flags."""
    if p.task == "permutation":
        tasks = permutation_tasks(p.task_seed, p.num_symbols, p.num_pairs, p.shared)
        if p.permutation >= tasks.num_tasks:
            raise ValueError(
                f"fv_tasks: permutation {p.permutation} out of range (0..{tasks.num_tasks - 1})"
            )
        return tasks.pairs(p.permutation), tasks.ambiguous(p.permutation)
    pairs = word_pairs(p.task, p.min_tag_count, p.wordnet_dir, p.dictd_dir)
    return pairs, np.array([is_identity(q) for q in pairs])


@register("dataset", "fv_tasks", params=FvTasksParams)
def fv_tasks(params: FvTasksParams, *, seed: int) -> Dataset:
    """One ICL task (permutation or word pairs); clients differ in the share of ambiguous rows.

    Client ``k`` (natural id ``client 0k``) draws ``rows_per_client`` rows: each is
    an ambiguous input with probability ``client_ambiguity[k]``, else an
    unambiguous one, uniformly within the group. ``y`` is 1 on ambiguous rows.
    """
    pairs, amb = task_pairs(params)
    groups = [np.flatnonzero(~amb), np.flatnonzero(amb)]
    for flag in (0, 1):
        if len(groups[flag]) == 0 and any(
            (s > 0) if flag else (s < 1) for s in params.client_ambiguity
        ):
            raise DataSourceError(
                f"fv_tasks: task {params.task} has no {AMBIGUITY_CLASSES[flag]} inputs; "
                f"set client_ambiguity to {[float(flag)]} shares only"
            )
    gen = rng(seed, "fv_tasks", params.task)
    rows, keys = [], []
    for k, share in enumerate(params.client_ambiguity):
        flags = gen.random(params.rows_per_client) < share
        for f in flags:
            rows.append(int(gen.choice(groups[int(f)])))
        keys += [f"client {k:02d}"] * params.rows_per_client
    test = gen.integers(0, len(pairs), size=params.n_test)
    tr = np.asarray(rows, dtype=np.int64)
    info = DatasetMeta(
        name="fv_tasks", task="classification", num_features=1, num_classes=2,
        feature_names=("row",), class_names=AMBIGUITY_CLASSES,
        source=f"function-vector task {params.task}", license="synthetic / WordNet / FreeDict",
    )
    return Dataset(
        np.arange(len(tr), dtype=np.float32)[:, None], amb[tr].astype(np.int64),
        np.arange(len(test), dtype=np.float32)[:, None], amb[test].astype(np.int64), info,
        groups_train=np.asarray(keys),
        text_train=tuple(pairs[i][0] for i in tr), text_test=tuple(pairs[i][0] for i in test),
        refs_train=tuple(pairs[i][1] for i in tr), refs_test=tuple(pairs[i][1] for i in test),
    )

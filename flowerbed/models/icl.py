r"""In-context learning: few-shot prompts from (input, output) pairs, scored two ways.

A prompt is ``k`` demonstrations written with a template (default
``"Q: {x}\nA: {y}\n\n"``, as in Todd et al., 2024, arXiv 2310.15213), then the
query written with the template cut before ``{y}``, trailing whitespace
dropped (``"Q: happy\nA:"``): the separating space then starts the answer's
first token (`` sad``), as BPE tokenizers split running text.

Scoring (Brown et al., 2020, arXiv 2005.14165, §2):

- **generation**: greedy decoding; the first generated word (whitespace split,
  surrounding punctuation stripped, case folded) must equal the first word of
  one of the acceptable references;
- **ranking**: each candidate answer (the separator plus the text) is scored by
  its summed log-prob after the prompt; the prediction is the best one.

Demonstrations are drawn without replacement from one ``random.Random`` seeded
with :func:`~flowerbed.core.seeds.derive_seed`, never containing the query.
Queries sharing one demonstration set share the prefix's KV cache: it is
prefilled once (:meth:`~flowerbed.models.lm.CausalLM.start`), repeated per batch
(:meth:`~flowerbed.models.lm.CausalLM.expand`), and only the queries (and
candidates) are run. Prefix, query and candidate are tokenized apart, and the
uncached path (``cache_prefix=False``) feeds the same ids in one piece, so both
give the same answers.

Examples
--------
>>> t = Template()
>>> t.prompt([Example("hot", ("cold",))], "happy")
'Q: hot\nA: cold\n\nQ: happy\nA:'
>>> t.separator
' '
>>> first_word(" Sad, really")
'sad'
"""

from __future__ import annotations

import random
import string
from collections.abc import Sequence
from dataclasses import dataclass, field

from flowerbed.core.seeds import derive_seed
from flowerbed.models.lm import CausalLM, DecodeState, LmError

DEFAULT_TEMPLATE = "Q: {x}\nA: {y}\n\n"


@dataclass(frozen=True)
class Example:
    """An input and its acceptable outputs (the first is written in demonstrations)."""

    x: str
    y: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.y:
            raise ValueError(f"example {self.x!r} has no reference output")


@dataclass(frozen=True)
class Template:
    """How a demonstration and a query are written; ``{x}`` comes before ``{y}``, once each."""

    text: str = DEFAULT_TEMPLATE

    def __post_init__(self) -> None:
        if self.text.count("{x}") != 1 or self.text.count("{y}") != 1:
            raise ValueError(f"template needs one {{x}} and one {{y}}: {self.text!r}")
        if self.text.index("{x}") > self.text.index("{y}"):
            raise ValueError(f"template must place {{x}} before {{y}}: {self.text!r}")

    def demo(self, example: Example) -> str:
        """One demonstration with the first reference as its answer."""
        return self.text.replace("{x}", example.x).replace("{y}", example.y[0])

    @property
    def _head(self) -> str:
        return self.text.split("{y}")[0]

    @property
    def separator(self) -> str:
        """Whitespace between the query and its answer (written before each candidate)."""
        head = self._head
        return head[len(head.rstrip()) :]

    def query(self, x: str) -> str:
        """The query: the template up to ``{y}``, trailing whitespace dropped."""
        return self._head.rstrip().replace("{x}", x)

    def prefix(self, demos: Sequence[Example]) -> str:
        """All demonstrations, concatenated."""
        return "".join(self.demo(d) for d in demos)

    def prompt(self, demos: Sequence[Example], x: str) -> str:
        """Demonstrations, then the query."""
        return self.prefix(demos) + self.query(x)


def sample_demos(
    pool: Sequence[Example], k: int, seed: int, exclude: Sequence[str] = ()
) -> list[Example]:
    """``k`` demonstrations from ``pool`` without replacement, none with an input in ``exclude``."""
    skip = set(exclude)
    candidates = [e for e in pool if e.x not in skip]
    if k > len(candidates):
        raise ValueError(f"{k} demonstrations asked, {len(candidates)} available")
    return random.Random(derive_seed(seed, "icl.demos")).sample(candidates, k)


def first_word(text: str) -> str:
    """First whitespace-separated word, surrounding punctuation stripped, lower case."""
    words = text.split()
    return words[0].strip(string.punctuation).lower() if words else ""


def exact_match(generated: str, references: Sequence[str]) -> bool:
    """Whether the first generated word equals the first word of any reference."""
    word = first_word(generated)
    return bool(word) and any(word == first_word(r) for r in references)


@dataclass(frozen=True)
class IclResult:
    """Per-query outcomes of :func:`evaluate`.

    ``generated`` holds the decoded continuations (``None`` when generation
    was not asked); ``scores[i][j]`` is candidate ``j``'s summed log-prob for
    query ``i`` (empty without candidates); ``ranked`` the best candidate.
    """

    generated: list[str] | None = None
    correct_generated: list[bool] = field(default_factory=list)
    scores: list[list[float]] = field(default_factory=list)
    ranked: list[str] = field(default_factory=list)
    correct_ranked: list[bool] = field(default_factory=list)

    @property
    def accuracy_generated(self) -> float:
        """Share of queries whose first generated word matches a reference."""
        return sum(self.correct_generated) / max(len(self.correct_generated), 1)

    @property
    def accuracy_ranked(self) -> float:
        """Share of queries whose best-scored candidate is a reference."""
        return sum(self.correct_ranked) / max(len(self.correct_ranked), 1)


class _Prefix:
    """The demonstrations' ids and, when cached, their prefilled state."""

    def __init__(self, lm: CausalLM, text: str, cache: bool) -> None:
        self.lm = lm
        self.ids = lm.encode(text)
        self.state: DecodeState | None = lm.start([self.ids]) if cache and self.ids else None

    def state_after(self, rows: Sequence[Sequence[int]]) -> DecodeState:
        """Decoding state after prefix + each row."""
        if self.state is None:
            return self.lm.start([self.ids + list(r) for r in rows])
        return self.lm.extend(self.lm.expand(self.state, len(rows)), rows)[1]

    def scores(
        self, queries: Sequence[Sequence[int]], conts: Sequence[Sequence[int]]
    ) -> list[float]:
        """``log p(cont | prefix + query)`` summed, per pair."""
        if self.state is None:
            prompts = [self.ids + list(q) for q in queries]
            return [s.total for s in self.lm.score_ids(prompts, conts)]
        rows = [list(q) + list(c) for q, c in zip(queries, conts, strict=True)]
        fed, _ = self.lm.extend(self.lm.expand(self.state, len(rows)), rows)
        return [
            float(fed[b, len(q) : len(q) + len(c)].sum())
            for b, (q, c) in enumerate(zip(queries, conts, strict=True))
        ]


def _greedy(lm: CausalLM, state: DecodeState, max_new_tokens: int) -> list[list[int]]:
    """Greedy ids from ``state`` until eos or a newline after some text (per row)."""
    rows: list[list[int]] = [[] for _ in range(state.batch_size)]
    done = [False] * state.batch_size
    logprobs = state.logprobs
    for i in range(max_new_tokens):
        tokens = [int(t) for t in logprobs.argmax(dim=-1)]
        for b, tok in enumerate(tokens):
            if done[b]:
                continue
            if tok == lm.eos_id:
                done[b] = True
                continue
            rows[b].append(tok)
            text = lm.decode(rows[b])
            done[b] = "\n" in text.lstrip()
        if all(done) or i == max_new_tokens - 1:
            break
        logprobs, state = lm.step(state, tokens)
    return rows


def evaluate(
    lm: CausalLM,
    demos: Sequence[Example],
    queries: Sequence[Example],
    template: Template | None = None,
    candidates: Sequence[str] | None = None,
    generate: bool = True,
    max_new_tokens: int = 5,
    batch_size: int = 16,
    cache_prefix: bool = True,
) -> IclResult:
    """Score ``queries`` with one shared demonstration prefix.

    Parameters
    ----------
    lm
        Any :class:`~flowerbed.models.lm.CausalLM`.
    demos
        The demonstrations (e.g. from :func:`sample_demos`); may be empty (zero-shot).
    queries
        Inputs with their acceptable references.
    template
        How examples are written (default :data:`DEFAULT_TEMPLATE`).
    candidates
        Answers to rank for every query (e.g. the task's label set); none: no ranking.
    generate
        Whether to decode greedily and score the first word.
    max_new_tokens
        Decoding budget per query.
    batch_size
        Queries per forward pass (times the number of candidates when ranking).
    cache_prefix
        Prefill the demonstrations once and reuse their KV cache.
    """
    t = template or Template()
    prefix = _Prefix(lm, t.prefix(demos), cache_prefix)
    qids = [lm.encode(t.query(q.x)) for q in queries]
    if not prefix.ids and any(not q for q in qids):
        raise LmError("empty prompt: a query and no demonstrations tokenized to nothing")
    generated: list[str] | None = None
    if generate:
        generated = []
        for i in range(0, len(queries), batch_size):
            state = prefix.state_after(qids[i : i + batch_size])
            generated += [lm.decode(r) for r in _greedy(lm, state, max_new_tokens)]
    scores: list[list[float]] = []
    ranked: list[str] = []
    if candidates:
        cids = [lm.encode(t.separator + c) for c in candidates]
        per = max(1, batch_size // len(cids))
        for i in range(0, len(queries), per):
            chunk = qids[i : i + per]
            flat = prefix.scores([q for q in chunk for _ in cids], [c for _ in chunk for c in cids])
            scores += [flat[j : j + len(cids)] for j in range(0, len(flat), len(cids))]
        ranked = [candidates[max(range(len(s)), key=s.__getitem__)] for s in scores]
    return IclResult(
        generated=generated,
        correct_generated=[
            exact_match(g, q.y) for g, q in zip(generated or [], queries, strict=False)
        ],
        scores=scores,
        ranked=ranked,
        correct_ranked=[exact_match(r, q.y) for r, q in zip(ranked, queries, strict=False)],
    )

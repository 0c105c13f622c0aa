"""Split inference for token intervention: the client decodes with its base, the server hosts R.

The spec's "flowerbed mapping": a client keeps its small base model and
decodes locally; the server keeps the reasoning model. A client contacts the
server only when its trigger needs the reasoner (:meth:`Trigger.gate` open
and budget left):

- base-side triggers (``entropy``, ``random``, ``first_k``): the client sends
  the tokens the server has not seen yet (the prompt too on first contact) and
  gets back one token, ``argmax p_R``: ~4 bytes down per call, and the server's
  compute scales with the interventions (one chunked prefill per call);
- ``js`` needs ``p_R`` at every step (until the budget is spent), so it streams
  every token up and a full distribution (``V`` float32) down per step;
  ``js_and_entropy`` only at uncertain steps.

The client decides with exactly the rule of the centralized decoder
(:func:`~flowerbed.methods.token_intervention.algorithm_decode.choose`, same per-row
random draws), so a split run returns the same responses as
:func:`~flowerbed.methods.token_intervention.algorithm_decode.intervene`. State
between messages is plain JSON (:class:`Session`): the client re-prefills its
base cache on each message, the server keeps one reasoner cache per row.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from flowerbed.methods.token_intervention.algorithm import entropy
from flowerbed.methods.token_intervention.algorithm_decode import (
    Decoded,
    StepModel,
    Trigger,
    budget_left,
    choose,
    uniforms,
)

if TYPE_CHECKING:
    import torch

#: Bytes of one token id and of one probability on the wire (int32, float32).
TOKEN_BYTES = 4
FLOAT_BYTES = 4
Answer = Any  # a (V,) log-distribution tensor (JS triggers) or one token id (the others)


@dataclass
class RowSession:
    """One prompt being decoded on the client, and its traffic with the server."""

    prompt: list[int]
    tokens: list[int] = field(default_factory=list)
    source: list[int] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    base_entropy: list[float] = field(default_factory=list)
    queried: list[int] = field(default_factory=list)
    synced: int = -1  # tokens of ``tokens`` the server has; -1: not even the prompt
    pending: bool = False
    ended: bool = False
    calls: int = 0
    bytes_up: int = 0
    bytes_down: int = 0

    @property
    def steps(self) -> int:
        """Steps taken (the end token included)."""
        return len(self.source)


@dataclass
class Session:
    """A client's decoding of all its prompts (plain JSON via :meth:`to_json`)."""

    rows: list[RowSession]
    seed: int
    max_new_tokens: int

    def to_json(self) -> dict[str, Any]:
        """Plain values."""
        return {"rows": [asdict(r) for r in self.rows], "seed": self.seed,
                "max_new_tokens": self.max_new_tokens}

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> Session:
        """The inverse of :meth:`to_json`."""
        return cls([RowSession(**r) for r in value["rows"]], int(value["seed"]),
                   int(value["max_new_tokens"]))

    @property
    def done(self) -> bool:
        """Every row has ended."""
        return all(r.ended for r in self.rows)

    def decoded(self) -> list[Decoded]:
        """The responses, as the centralized decoder reports them."""
        return [Decoded(r.tokens, r.source, r.scores, r.base_entropy, r.queried, r.ended)
                for r in self.rows]


@dataclass(frozen=True)
class Request:
    """One row's call: the tokens the server lacks and whether it wants ``p_R`` or a token."""

    row: int
    prompt: list[int] | None
    chunk: list[int]
    want_distribution: bool


def new_session(prompts: Sequence[Sequence[int]], seed: int, max_new_tokens: int) -> Session:
    """A fresh session for ``prompts``."""
    return Session([RowSession(list(p)) for p in prompts], seed, max_new_tokens)


def _request(i: int, row: RowSession, trigger: Trigger) -> Request:
    first = row.synced < 0
    chunk = list(row.tokens if first else row.tokens[row.synced:])
    row.synced = len(row.tokens)
    row.calls += 1
    row.bytes_up += TOKEN_BYTES * (len(chunk) + (len(row.prompt) if first else 0))
    return Request(i, list(row.prompt) if first else None, chunk, trigger.needs_reasoner)


def _record(row: RowSession, tok: int, src: int, d: float, h: float, q: int,
            eos: int | None, max_new: int) -> None:
    row.source.append(src)
    row.scores.append(d)
    row.base_entropy.append(h)
    row.queried.append(q)
    if tok == eos:
        row.ended = True
    else:
        row.tokens.append(tok)
    if row.steps >= max_new:
        row.ended = True


def _one(trigger: Trigger, row: RowSession, lp_b: torch.Tensor, answer: Answer, u: float,
         eos: int | None, max_new: int) -> Request | None:
    """Advance one row by one step (or turn it into a request)."""
    t, used = row.steps, sum(row.source)
    if answer is None:
        if budget_left(trigger, used) and trigger.gate(float(entropy(lp_b)), t, u):
            row.pending = True
            return None
        tok, src, d, h, q = choose(trigger, lp_b, None, t, u, used)
    elif isinstance(answer, int):  # a base-side trigger fired: the reasoner's token
        row.bytes_down += TOKEN_BYTES
        tok, src, d, h, q = answer, 1, math.nan, float(entropy(lp_b)), 1
        if row.synced == len(row.tokens) and tok != eos:
            row.synced += 1  # the server wrote this token: it appends it itself
    else:
        row.bytes_down += FLOAT_BYTES * int(answer.shape[-1])
        tok, src, d, h, q = choose(trigger, lp_b, answer, t, u, used)
    _record(row, tok, src, d, h, q, eos, max_new)
    return None


def client_advance(
    base: StepModel, session: Session, trigger: Trigger,
    answers: dict[int, Answer] | None = None,
) -> list[Request]:
    """Apply the server's answers, then decode with the base until every row ends or waits.

    ``answers[row]`` is ``p_R`` (``(V,)`` log-probs) for the JS triggers or the
    reasoner's token for the others. Returns the requests of the rows that now
    wait for the server (empty when the session is done).
    """
    answers = dict(answers or {})
    rows, eos = session.rows, base.eos_id
    live = [i for i, r in enumerate(rows) if not r.ended]
    if not live:
        return []
    draws = uniforms(len(rows), session.max_new_tokens, session.seed)
    state = base.start([rows[i].prompt + rows[i].tokens for i in live])
    lp_b = state.logprobs
    requests: list[Request] = []
    while True:
        feed, moved = [], False
        for j, i in enumerate(live):
            row = rows[i]
            if row.ended or (row.pending and i not in answers):
                feed.append(int(eos or 0))
                continue
            row.pending = False
            _one(trigger, row, lp_b[j], answers.pop(i, None), float(draws[i, row.steps]), eos,
                 session.max_new_tokens)
            if row.pending:
                requests.append(_request(i, row, trigger))
                feed.append(int(eos or 0))
                continue
            feed.append(row.tokens[-1] if not row.ended else int(eos or 0))
            moved = moved or not row.ended
        if not moved:
            return requests
        lp_b, state = base.step(state, feed)


class ReasonerServer:
    """The server side: one reasoner cache per (client, row), fed in chunks.

    :meth:`answer` extends a row's cache with the tokens the client sent (a
    chunked prefill; the prompt on first contact) and answers ``p_R`` or
    ``argmax p_R``. A token the server wrote is appended to its own cache on
    the row's next call, so the client never sends it back.
    """

    def __init__(self, reasoner: StepModel) -> None:
        self.reasoner = reasoner
        self.states: dict[tuple[int, int], Any] = {}
        self.own: dict[tuple[int, int], int] = {}
        self.prefilled_tokens = 0

    def answer(self, client: int, requests: Sequence[Request]) -> dict[int, Answer]:
        """One answer per request, keyed by row."""
        out: dict[int, Answer] = {}
        for req in requests:
            key = (client, req.row)
            chunk = ([self.own.pop(key)] if key in self.own else []) + list(req.chunk)
            if key not in self.states:
                if req.prompt is None:
                    raise ValueError(f"client {client} row {req.row}: first call without prompt")
                state = self.reasoner.start([req.prompt + chunk])
                self.prefilled_tokens += len(req.prompt) + len(chunk)
            else:
                _, state = self.reasoner.extend(self.states[key], [chunk])
                self.prefilled_tokens += len(chunk)
            self.states[key] = state
            lp = state.logprobs[0]
            if req.want_distribution:
                out[req.row] = lp
            else:
                tok = int(lp.argmax())
                self.own[key] = tok
                out[req.row] = tok
        return out


def run_split(base: StepModel, reasoner: StepModel, prompts: Sequence[Sequence[int]],
              trigger: Trigger, max_new_tokens: int, seed: int = 0,
              max_rounds: int | None = None) -> tuple[Session, int]:
    """Client and server in one process (tests, the benchmark): the session and the rounds."""
    session = new_session(prompts, seed, max_new_tokens)
    server = ReasonerServer(reasoner)
    answers: dict[int, Answer] = {}
    rounds, cap = 0, max_rounds or 4 * max_new_tokens + 4
    while rounds < cap:
        requests = client_advance(base, session, trigger, answers)
        rounds += 1
        if not requests:
            break
        answers = server.answer(0, requests)
    return session, rounds

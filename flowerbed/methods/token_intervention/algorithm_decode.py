"""Disagreement-guided one-token intervention: lock-step decoding, triggers, calibration.

The decoder (:func:`intervene`) runs a base and a reasoning model in
lock-step, each with its own KV cache, on shared continuation tokens (each
model may have its own prompt). At step ``t`` both give a next-token
distribution; if the trigger fires and fewer than ``budget`` tokens came from
the reasoner, the token is ``argmax p_R`` (a one-token takeover) and control
returns at once to the base, otherwise ``argmax p_B``. The token is appended
to both caches; a row stops at the end token or after ``max_new_tokens``.

Triggers (:class:`Trigger`), all reconstructed:

- ``js``: ``d(p_B, p_R) > tau`` (``score``: ``js``, ``kl``, ``llr``);
- ``entropy``: ``H(p_B) > h``: the base alone decides (Nudging-like), so in
  split inference the reasoner is consulted only when it fires;
- ``js_and_entropy``: ``H(p_B) > h`` **and** ``d > tau``;
- baselines ``random`` (fires with probability ``rate`` at every step) and
  ``first_k`` (the reasoner writes the first ``k`` tokens). Base alone is
  ``budget = 0``; reasoner alone is ``js`` with ``tau = -inf`` and no budget.

Budgets are a count per response (``budget``) or a fraction ``rho`` of the
generated tokens, reached by calibrating the trigger's threshold on held-out
prompts (:func:`calibrate`) so the realised reasoner share matches ``rho``.

Random draws: row ``i`` uses uniform ``t`` of ``default_rng([seed, i])`` at
step ``t`` (:func:`uniforms`), so the split protocol reproduces them exactly.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal, Protocol

import numpy as np

from flowerbed.methods.token_intervention.algorithm import Score, disagreement, entropy

if TYPE_CHECKING:
    import torch

TriggerKind = Literal["js", "entropy", "js_and_entropy", "random", "first_k"]
TRIGGERS: tuple[str, ...] = ("js", "entropy", "js_and_entropy", "random", "first_k")


class StepModel(Protocol):
    """What the decoder needs of a causal LM (:class:`flowerbed.models.lm.CausalLM` has it)."""

    @property
    def eos_id(self) -> int | None: ...  # noqa: D102

    def start(self, prompts: Sequence[Sequence[int]], padding: Any = ...) -> Any: ...  # noqa: D102

    def step(self, state: Any, tokens: Sequence[int]) -> tuple[torch.Tensor, Any]: ...  # noqa: D102

    def extend(self, state: Any, rows: Sequence[Sequence[int]]) -> tuple[torch.Tensor, Any]: ...  # noqa: D102

    def logprobs(self, batch: Sequence[Sequence[int]], padding: Any = ...) -> torch.Tensor: ...  # noqa: D102


@dataclass(frozen=True)
class Trigger:
    """When the reasoner takes over one token.

    ``tau`` is the disagreement threshold (``js``, ``js_and_entropy``), ``h``
    the base-entropy threshold (``entropy``, ``js_and_entropy``), ``rate`` the
    firing probability (``random``), ``k`` the prefix length (``first_k``);
    ``budget`` caps the reasoner's tokens per response (``None``: no cap).
    """

    kind: TriggerKind = "js"
    score: Score = "js"
    tau: float = math.inf
    h: float = math.inf
    rate: float = 0.0
    k: int = 0
    budget: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in TRIGGERS:
            raise ValueError(f"unknown trigger {self.kind!r}; known: {', '.join(TRIGGERS)}")
        if self.budget is not None and self.budget < 0:
            raise ValueError(f"budget must be >= 0 or None, got {self.budget}")

    @property
    def needs_reasoner(self) -> bool:
        """Whether deciding needs ``p_R`` (else the base decides alone and R only writes)."""
        return self.kind in ("js", "js_and_entropy")

    def gate(self, h_b: float, t: int, u: float) -> bool:
        """The base-side condition: ``True`` when the trigger may fire without ``p_R``.

        For ``js`` it is always true (``p_R`` is needed at every step).
        """
        if self.kind == "js":
            return True
        if self.kind in ("entropy", "js_and_entropy"):
            return h_b > self.h
        if self.kind == "random":
            return u < self.rate
        return t < self.k

    def fires(self, d: float, h_b: float, t: int, u: float) -> bool:
        """Whether the trigger fires at step ``t`` (budget aside)."""
        if not self.gate(h_b, t, u):
            return False
        return d > self.tau if self.needs_reasoner else True


@dataclass
class Decoded:
    """One response: its tokens (end token excluded) and per-step records.

    ``source[t]`` is 1 where the reasoner wrote token ``t``; ``scores[t]`` is
    ``d_t`` and ``base_entropy[t]`` is ``H(p_B)`` at every step (the end-token
    step included); ``queried[t]`` is 1 where the trigger needed the reasoner
    (``p_R`` for the JS triggers, one token for the others).
    """

    tokens: list[int]
    source: list[int]
    scores: list[float]
    base_entropy: list[float]
    queried: list[int]
    ended: bool = False

    @property
    def steps(self) -> int:
        """Generated tokens, the end token included."""
        return len(self.source)

    @property
    def reasoner_tokens(self) -> int:
        """Tokens the reasoner wrote."""
        return int(sum(self.source))


def uniforms(n: int, steps: int, seed: int) -> np.ndarray:
    """``(n, steps)``: row ``i``'s uniform for step ``t`` (the split protocol draws the same)."""
    return np.stack([np.random.default_rng([seed, i]).random(steps) for i in range(n)]) if n \
        else np.zeros((0, steps))


def budget_left(trigger: Trigger, used: int) -> bool:
    """Whether the reasoner may write one more token."""
    return trigger.budget is None or used < trigger.budget


def choose(trigger: Trigger, lp_b: torch.Tensor, lp_r: torch.Tensor | None, t: int, u: float,
           used: int) -> tuple[int, int, float, float, int]:
    """One step of one row: ``(token, source, d, H_B, queried)``.

    ``lp_r`` may be ``None`` when the trigger's base-side gate is closed (the
    reasoner is not consulted then; ``d`` is ``nan``).
    """
    h_b = float(entropy(lp_b))
    left = budget_left(trigger, used)
    gate = left and trigger.gate(h_b, t, u)
    queried = int(gate) if trigger.kind != "js" else int(left)
    d = math.nan if lp_r is None else float(disagreement(lp_b, lp_r, trigger.score))
    take = gate and (not trigger.needs_reasoner or d > trigger.tau)
    if take:
        if lp_r is None:
            raise ValueError("the trigger fired but the reasoner's distribution is missing")
        return int(lp_r.argmax()), 1, d, h_b, queried
    return int(lp_b.argmax()), 0, d, h_b, queried


def intervene(
    base: StepModel, reasoner: StepModel, prompts_b: Sequence[Sequence[int]],
    trigger: Trigger, max_new_tokens: int, prompts_r: Sequence[Sequence[int]] | None = None,
    seed: int = 0,
) -> list[Decoded]:
    """Greedy lock-step decoding with one-token takeovers (batched, both KV-cached).

    The reasoner's cache absorbs every token, so ``d_t`` is recorded at every
    step even when the trigger does not need it (analysis); ``queried`` says
    where the trigger itself consulted it.
    """
    eos = base.eos_id
    n = len(prompts_b)
    st_b = base.start(prompts_b)
    st_r = reasoner.start(prompts_r if prompts_r is not None else prompts_b)
    lp_b, lp_r = st_b.logprobs, st_r.logprobs
    draws = uniforms(n, max_new_tokens, seed)
    out = [Decoded([], [], [], [], []) for _ in range(n)]
    for t in range(max_new_tokens):
        toks = []
        for i, row in enumerate(out):
            u = float(draws[i, t])
            if row.ended:
                toks.append(int(eos or 0))
                continue
            tok, src, d, h, q = choose(trigger, lp_b[i], lp_r[i], t, u, row.reasoner_tokens)
            row.source.append(src)
            row.scores.append(d)
            row.base_entropy.append(h)
            row.queried.append(q)
            if tok == eos:
                row.ended = True
            else:
                row.tokens.append(tok)
            toks.append(tok)
        if all(r.ended for r in out) or t == max_new_tokens - 1:
            break
        lp_b, st_b = base.step(st_b, toks)
        lp_r, st_r = reasoner.step(st_r, toks)
    return out


def teacher_forced(
    base: StepModel, reasoner: StepModel, prompts: Sequence[Sequence[int]],
    responses: Sequence[Sequence[int]], score: Score = "js",
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """``d_t`` and ``H(p_B,t)`` at every token of finished responses (one forward each).

    Position ``t`` is the distribution that predicts response token ``t``
    (the end token, when included in ``responses``, counts as a token).
    """
    rows = [list(p) + list(r) for p, r in zip(prompts, responses, strict=True)]
    lp_b = base.logprobs(rows, padding="right")
    lp_r = reasoner.logprobs(rows, padding="right")
    scores, ents = [], []
    for i, (p, r) in enumerate(zip(prompts, responses, strict=True)):
        cols = slice(len(p) - 1, len(p) - 1 + len(r))
        scores.append(disagreement(lp_b[i, cols], lp_r[i, cols], score).numpy().astype(float))
        ents.append(entropy(lp_b[i, cols]).numpy().astype(float))
    return scores, ents


def realised_rate(decoded: Sequence[Decoded]) -> float:
    """Reasoner-written share of all generated tokens (end tokens included)."""
    steps = sum(d.steps for d in decoded)
    return sum(d.reasoner_tokens for d in decoded) / steps if steps else 0.0


def threshold_field(kind: TriggerKind) -> str:
    """The :class:`Trigger` field calibration moves for ``kind``."""
    return {"js": "tau", "js_and_entropy": "tau", "entropy": "h", "random": "rate",
            "first_k": "k"}[kind]


@dataclass(frozen=True)
class Calibration:
    """The calibrated trigger, its realised rate on the held-out prompts, and the tries."""

    trigger: Trigger
    rate: float
    tried: tuple[tuple[float, float], ...]


def calibrate(
    trigger: Trigger, target: float, rate_of: Callable[[Trigger], float],
    candidates: Sequence[float] | np.ndarray, iterations: int = 8,
) -> Calibration:
    """The candidate threshold whose realised rate on held-out prompts is closest to ``target``.

    ``rate_of(trigger)`` decodes the held-out prompts and returns the realised
    reasoner share. The rate falls as ``tau``/``h``/``rate``... move the
    trigger's way: it is non-increasing in ``tau`` and ``h`` and non-decreasing
    in ``rate`` and ``k`` (up to trajectory effects), so a bisection over the
    sorted candidates (``iterations`` decodes at most) finds the closest one.
    """
    name = threshold_field(trigger.kind)
    cands = sorted({float(c) for c in candidates})
    if not cands:
        raise ValueError("calibrate needs at least one candidate threshold")
    rising = name in ("rate", "k")  # the rate grows with the value
    tried: dict[float, float] = {}

    def rate_at(v: float) -> float:
        if v not in tried:
            value: Any = int(v) if name == "k" else v
            tried[v] = rate_of(replace(trigger, **{name: value}))
        return tried[v]

    lo, hi = 0, len(cands) - 1
    for _ in range(iterations):
        if lo > hi:
            break
        mid = (lo + hi) // 2
        r = rate_at(cands[mid])
        if r == target:
            break
        too_many = r > target
        if too_many != rising:  # rate too high and falling in v (or too low and rising)
            lo = mid + 1
        else:
            hi = mid - 1
    best = min(tried, key=lambda v: (abs(tried[v] - target), v))
    value: Any = int(best) if name == "k" else best
    return Calibration(replace(trigger, **{name: value}), tried[best],
                       tuple(sorted(tried.items())))


def candidate_thresholds(values: np.ndarray, n: int = 64) -> np.ndarray:
    """Midpoints between distinct quantiles of observed scores (calibration candidates)."""
    v = np.unique(np.asarray(values, float)[np.isfinite(values)])
    if v.size == 0:
        return np.array([0.0])
    q = np.unique(np.quantile(v, np.linspace(0, 1, min(n, v.size))))
    mids = (q[:-1] + q[1:]) / 2 if q.size > 1 else q
    return np.concatenate([[q[0] - 1e-6], mids, [q[-1] + 1e-6]])

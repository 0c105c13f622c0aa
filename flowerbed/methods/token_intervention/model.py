"""Token intervention on a task: prompts as ids, scoring, calibration and analysis.

The glue between :mod:`flowerbed.methods.token_intervention.algorithm_decode` (the
decoder, model-agnostic) and a pair of :class:`~flowerbed.models.lm.CausalLM`
sharing a tokenizer on a task of :mod:`flowerbed.methods.token_intervention.data`:
prompts are ``BOS + bytes``, responses are scored by the task's rule, a
trigger's threshold is calibrated on held-out prompts to a target reasoner
share, and finished responses are analysed with teacher forcing (planning
tokens: the toy's two plan positions, the arithmetic traces' plan words).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from flowerbed.methods.token_intervention import algorithm as ti
from flowerbed.methods.token_intervention import algorithm_decode as dec
from flowerbed.methods.token_intervention import data as td
from flowerbed.models.lm import CausalLM

#: Longest response decoded per task (toy: 11 tokens + end; arith: CoT ~50 + end).
MAX_NEW_TOKENS = {"toy": 14, "arith": 64}


def encode_prompts(lm: CausalLM, prompts: Sequence[str]) -> list[list[int]]:
    """``BOS + ids`` of each prompt (the layout the pair was trained on)."""
    bos = [] if lm.bos_id is None else [int(lm.bos_id)]
    return [bos + lm.encode(p) for p in prompts]


@dataclass(frozen=True)
class Outcome:
    """A trigger's responses on a prompt set, scored."""

    trigger: dec.Trigger
    decoded: list[dec.Decoded]
    texts: list[str]
    correct: list[bool]

    @property
    def accuracy(self) -> float:
        """Share of correct responses."""
        return float(np.mean(self.correct)) if self.correct else math.nan

    @property
    def rate(self) -> float:
        """Reasoner-written share of the generated tokens."""
        return dec.realised_rate(self.decoded)

    def metrics(self, prefix: str = "") -> dict[str, float]:
        """Accuracy, realised rate, reasoner tokens and calls per response, mean length."""
        n = max(len(self.decoded), 1)
        return {
            f"{prefix}accuracy": self.accuracy, f"{prefix}rate": self.rate,
            f"{prefix}reasoner_tokens": sum(d.reasoner_tokens for d in self.decoded) / n,
            f"{prefix}reasoner_queries": sum(sum(d.queried) for d in self.decoded) / n,
            f"{prefix}length": sum(d.steps for d in self.decoded) / n,
        }


def run(base: CausalLM, reasoner: CausalLM, task: td.Task, prompts: Sequence[str],
        refs: Sequence[str], trigger: dec.Trigger, seed: int = 0,
        max_new_tokens: int | None = None, batch: int = 100) -> Outcome:
    """Decode ``prompts`` with ``trigger`` (in batches) and score against ``refs``."""
    ids = encode_prompts(base, prompts)
    limit = max_new_tokens or MAX_NEW_TOKENS[task]
    decoded: list[dec.Decoded] = []
    for s in range(0, len(ids), batch):
        decoded += dec.intervene(base, reasoner, ids[s:s + batch], trigger, limit,
                                 seed=seed + s)
    texts = [base.decode(d.tokens) for d in decoded]
    return Outcome(trigger, decoded, texts,
                   [td.is_correct(task, t, r) for t, r in zip(texts, refs, strict=True)])


def reasoner_alone() -> dec.Trigger:
    """The reasoner writes every token (``js`` with ``tau = -inf``, no budget)."""
    return dec.Trigger("js", tau=-math.inf, budget=None)


def base_alone() -> dec.Trigger:
    """The base writes every token (budget 0)."""
    return dec.Trigger("js", budget=0)


def candidates(kind: dec.TriggerKind, reference: Outcome, h_gate: float) -> np.ndarray:
    """Thresholds to calibrate over, from a base-only run's per-step records."""
    if kind == "random":
        return np.linspace(0.0, 1.0, 201)
    if kind == "first_k":
        return np.arange(0, max(d.steps for d in reference.decoded) + 1, dtype=float)
    d = np.concatenate([np.asarray(r.scores) for r in reference.decoded])
    h = np.concatenate([np.asarray(r.base_entropy) for r in reference.decoded])
    if kind == "entropy":
        return dec.candidate_thresholds(h)
    if kind == "js_and_entropy":
        d = d[h > h_gate] if (h > h_gate).any() else d
    return dec.candidate_thresholds(d)


def calibrate(base: CausalLM, reasoner: CausalLM, task: td.Task, prompts: Sequence[str],
              refs: Sequence[str], trigger: dec.Trigger, target: float, h_gate: float = 0.5,
              seed: int = 0) -> dec.Calibration:
    """``trigger`` with its threshold set so its reasoner share on ``prompts`` is ``target``.

    Candidates come from a base-only decode of the held-out prompts
    (:func:`candidates`); ``js_and_entropy`` keeps ``h = h_gate`` and moves ``tau``.
    """
    if trigger.kind == "js_and_entropy":
        trigger = replace(trigger, h=h_gate)
    reference = run(base, reasoner, task, prompts, refs, base_alone(), seed)
    cands = candidates(trigger.kind, reference, h_gate)

    def rate_of(t: dec.Trigger) -> float:
        return run(base, reasoner, task, prompts, refs, t, seed).rate

    return dec.calibrate(trigger, target, rate_of, cands)


@dataclass(frozen=True)
class TaskAnalysis:
    """Teacher-forced disagreement over finished responses, with the planning flags."""

    analysis: ti.Analysis
    scores: list[np.ndarray]
    base_entropy: list[np.ndarray]
    plan: list[np.ndarray]

    def by_position(self, width: int) -> np.ndarray:
        """Mean ``d_t`` at absolute positions ``0..width-1`` (``nan`` where no response is)."""
        out = np.full(width, np.nan)
        for t in range(width):
            vals = [s[t] for s in self.scores if len(s) > t]
            if vals:
                out[t] = float(np.mean(vals))
        return out


def plan_flags(task: td.Task, response: str, length: int) -> np.ndarray:
    """Planning flags of a response's tokens (plus ``False`` for the end token)."""
    flags = td.toy_plan_mask(len(response)) if task == "toy" else td.plan_mask(response)
    out = np.zeros(length, dtype=bool)
    out[:min(length, len(flags))] = flags[:length]
    return out


def analyse_responses(base: CausalLM, reasoner: CausalLM, task: td.Task,
                      prompts: Sequence[str], responses: Sequence[str],
                      score: ti.Score = "js", mass: float = 0.5) -> TaskAnalysis:
    """Analysis mode: ``d_t`` and ``H(p_B,t)`` over each response and its end token."""
    ids = encode_prompts(base, prompts)
    eos = [] if base.eos_id is None else [int(base.eos_id)]
    resp = [base.encode(r) + eos for r in responses]
    scores, ents = dec.teacher_forced(base, reasoner, ids, resp, score)
    plan = [plan_flags(task, r, len(x)) for r, x in zip(responses, resp, strict=True)]
    return TaskAnalysis(ti.analyse(scores, ents, plan, mass=mass), scores, ents, plan)

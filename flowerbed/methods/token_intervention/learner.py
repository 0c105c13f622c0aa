"""Learner ``token_intervention``: one-token takeovers by a reasoner over a client's base.

Shen et al., "Reasoning Can Be Restored by Correcting a Few Decision Tokens"
(ICML 2026, arXiv 2605.16874); the maths is in
:mod:`flowerbed.methods.token_intervention.algorithm` (scores, analysis),
:mod:`~flowerbed.methods.token_intervention.algorithm_decode` (lock-step decoding,
triggers, calibration) and :mod:`~flowerbed.methods.token_intervention.algorithm_split`
(the client/server protocol). The client's rows are prompts with their correct
response (dataset ``ti_prompts``): it answers its held-out rows (``text_test``)
and calibrates thresholds on its training rows.

Handlers:

- ``run_local`` (a local task): both models in one process; per trigger, the
  threshold calibrated to the target reasoner share ``rho`` (or the given
  thresholds), accuracy, realised share and reasoner queries per response,
  beside base alone and reasoner alone;
- ``query_ti_step`` (strategy ``token_intervention_split``): one step of split
  inference. The client applies the server's answers (``p_R`` rows or one
  token each), decodes with its base until every prompt ends or needs the
  server, and returns the new requests (tokens the server lacks; the prompt on
  first contact). Its session lives in ``ctx.client_state``; when every prompt
  has ended it reports accuracy and traffic per response.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import Field, field_validator

from flowerbed.clients.learner import Learner, TaskContext
from flowerbed.core.messages import Arrays, Payload
from flowerbed.core.registry import Params, register
from flowerbed.core.scenario import Scenario
from flowerbed.data.base import ClientData
from flowerbed.methods.token_intervention.algorithm import Score
from flowerbed.methods.token_intervention.algorithm_decode import Trigger, TriggerKind
from flowerbed.methods.token_intervention.data import Task
from flowerbed.models.lm import build_lm, lm_spec_type

if TYPE_CHECKING:
    from flowerbed.methods.token_intervention.algorithm_split import Request, Session
    from flowerbed.models.lm import CausalLM

LmSpec = lm_spec_type()
STEP_MESSAGE = "query.ti_step"
#: Payload keys of the split protocol (arrays, then config).
ANS_ROWS, ANS_TOKENS, ANS_DIST = "ans_rows", "ans_tokens", "ans_dist"
REQ_ROWS, REQ_WANT, REQ_PROMPT_LEN, REQ_TOKENS, REQ_OFFSETS = (
    "req_rows", "req_want", "req_prompt_len", "req_tokens", "req_offsets")
PHASE, TRIGGER = "phase", "trigger"
DONE = "done"


class TokenInterventionParams(Params):
    """The pair, the triggers, the budget and the thresholds (the spec's defaults where given)."""

    base: LmSpec = Field(description="the client's base model, e.g. ti_pair role base")  # type: ignore[valid-type]
    reasoner: LmSpec = Field(description="the reasoning model (server-side in split inference)")  # type: ignore[valid-type]
    task: Task = Field("toy", description="how responses are scored (toy: exact; arith: answer)")
    triggers: tuple[TriggerKind, ...] = Field(
        ("js", "entropy", "js_and_entropy"), min_length=1,
        description="triggers run one after the other (js, entropy, js_and_entropy, random, "
        "first_k)")
    score: Score = Field("js", description="disagreement score: js, kl (KL(p_R||p_B)) or llr")
    rho: float | None = Field(
        0.1, gt=0, le=1, description="target reasoner share of tokens: thresholds calibrated on "
        "held-out prompts to reach it (null: use tau, h, rate, k as given)")
    tau: float = Field(0.2, description="disagreement threshold (spec toy: 0.2)")
    h: float = Field(0.5, description="base-entropy threshold in nats; the js_and_entropy gate")
    rate: float = Field(0.1, ge=0, le=1, description="random trigger's firing probability")
    k: int = Field(1, ge=0, description="first_k: tokens the reasoner writes first")
    budget: int | None = Field(None, ge=0, description="cap on reasoner tokens per response")
    max_new_tokens: int | None = Field(None, ge=1, description="default: the task's")
    n_calibration: int = Field(60, ge=1, description="held-out prompts for calibration")

    @field_validator("base", "reasoner", mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        return {"name": value} if isinstance(value, str) else value


@functools.lru_cache(maxsize=4)
def _model(spec_json: str, spec: Params) -> CausalLM:
    """One model per spec and process."""
    del spec_json  # the cache key
    return build_lm(spec, seed=0)


def prompts_of(texts: Sequence[str] | None, refs: Sequence[Sequence[str]] | None,
               what: str) -> tuple[list[str], list[str]]:
    """Prompts and their correct responses (one line naming the problem otherwise)."""
    if texts is None or refs is None:
        raise ValueError(f"learner token_intervention needs prompts with a reference response "
                         f"(dataset ti_prompts); the {what} rows have none")
    return list(texts), [r[0] if r else "" for r in refs]


@register("learner", "token_intervention")
class TokenInterventionLearner(Learner):
    """A base decoding with one-token reasoner takeovers where its trigger fires."""

    Params = TokenInterventionParams

    def __init__(self, params: TokenInterventionParams, *, scenario: Scenario) -> None:
        super().__init__(params, scenario=scenario)
        self.p: TokenInterventionParams = params

    # -- pieces shared with the strategy -----------------------------------------------------

    def base(self) -> CausalLM:
        """The base model (built once per process)."""
        spec: Params = self.p.base
        return _model(spec.model_dump_json(), spec)

    def reasoner(self) -> CausalLM:
        """The reasoning model (built once per process)."""
        spec: Params = self.p.reasoner
        return _model(spec.model_dump_json(), spec)

    def given(self, kind: TriggerKind) -> Trigger:
        """The trigger with the thresholds as written in the parameters."""
        return Trigger(kind, self.p.score, self.p.tau, self.p.h, self.p.rate, self.p.k,
                       self.p.budget)

    def trigger(self, kind: TriggerKind, prompts: Sequence[str], refs: Sequence[str],
                seed: int) -> tuple[Trigger, float]:
        """The trigger, calibrated on ``prompts`` to ``rho`` when set; its held-out rate."""
        from flowerbed.methods.token_intervention import model as tt

        trig = self.given(kind)
        if self.p.rho is None:
            return trig, math.nan
        n = self.p.n_calibration
        cal = tt.calibrate(self.base(), self.reasoner(), self.p.task, prompts[:n], refs[:n],
                           trig, self.p.rho, h_gate=self.p.h, seed=seed)
        return cal.trigger, cal.rate

    # -- local task --------------------------------------------------------------------------

    def run_local(self, data: ClientData, ctx: TaskContext) -> Payload:
        """Every trigger (calibrated on the training prompts) on the held-out prompts."""
        from flowerbed.methods.token_intervention import model as tt

        prompts, refs = prompts_of(data.text_test, data.refs_test, "held-out")
        cal_p, cal_r = prompts_of(data.text_train, data.refs_train, "training")
        b, r, limit = self.base(), self.reasoner(), self.p.max_new_tokens
        out: dict[str, float] = {}
        for name, trig in (("base", tt.base_alone()), ("reasoner", tt.reasoner_alone())):
            out.update(tt.run(b, r, self.p.task, prompts, refs, trig, ctx.seed,
                              limit).metrics(f"{name}/"))
        for kind in self.p.triggers:
            trig, cal_rate = self.trigger(kind, cal_p, cal_r, ctx.seed)
            res = tt.run(b, r, self.p.task, prompts, refs, trig, ctx.seed, limit)
            out.update(res.metrics(f"{kind}/"))
            out[f"{kind}/calibration_rate"] = cal_rate
        return Payload(metrics={k: float(v) for k, v in out.items() if math.isfinite(v)},
                       num_examples=len(prompts))

    # -- split inference ---------------------------------------------------------------------

    def query_ti_step(self, data: ClientData, payload: Payload, ctx: TaskContext) -> Payload:
        """One step of split inference (see the module docstring)."""
        from flowerbed.methods.token_intervention import algorithm_split as sp
        from flowerbed.methods.token_intervention import model as tt

        phase = str(payload.config[PHASE])
        trig = Trigger(**payload.config[TRIGGER])
        store = ctx.client_state("token_intervention")
        prompts, refs = prompts_of(data.text_test, data.refs_test, "held-out")
        saved = store.get(f"session_{phase}")
        base = self.base()
        limit = self.p.max_new_tokens or tt.MAX_NEW_TOKENS[self.p.task]
        session = (sp.Session.from_json(saved) if saved is not None else
                   sp.new_session(tt.encode_prompts(base, prompts), ctx.seed, limit))
        requests = sp.client_advance(base, session, trig, unpack_answers(payload.arrays))
        store.put(f"session_{phase}", session.to_json())
        if requests:
            return Payload(arrays=pack_requests(requests), num_examples=len(prompts))
        return Payload(metrics={DONE: 1.0, **split_metrics(session, base, self.p.task, refs)},
                       num_examples=len(prompts))


def split_metrics(session: Session, base: CausalLM, task: Task,
                  refs: Sequence[str]) -> dict[str, float]:
    """Accuracy, reasoner share, server calls and bytes per response of a finished session."""
    from flowerbed.methods.token_intervention.data import is_correct

    rows, n = session.rows, max(len(session.rows), 1)
    correct = [is_correct(task, base.decode(r.tokens), ref)
               for r, ref in zip(rows, refs, strict=True)]
    steps = sum(r.steps for r in rows)
    return {
        "accuracy": float(np.mean(correct)) if correct else math.nan,
        "rate": sum(sum(r.source) for r in rows) / max(steps, 1),
        "calls_per_response": sum(r.calls for r in rows) / n,
        "bytes_up_per_response": sum(r.bytes_up for r in rows) / n,
        "bytes_down_per_response": sum(r.bytes_down for r in rows) / n,
        "tokens_per_response": steps / n,
    }


def pack_requests(requests: Sequence[Request]) -> Arrays:
    """Requests as flat int arrays (prompt, then chunk, per request)."""
    data, offsets = [], [0]
    for q in requests:
        data += (q.prompt or []) + q.chunk
        offsets.append(len(data))
    return {
        REQ_ROWS: np.array([q.row for q in requests], dtype=np.int32),
        REQ_WANT: np.array([q.want_distribution for q in requests], dtype=np.int8),
        REQ_PROMPT_LEN: np.array([len(q.prompt) if q.prompt is not None else -1
                                  for q in requests], dtype=np.int32),
        REQ_TOKENS: np.array(data, dtype=np.int32),
        REQ_OFFSETS: np.array(offsets, dtype=np.int32),
    }


def unpack_requests(arrays: Arrays) -> list[Request]:
    """The inverse of :func:`pack_requests`."""
    from flowerbed.methods.token_intervention.algorithm_split import Request

    if REQ_ROWS not in arrays:
        return []
    out, tokens, offs = [], arrays[REQ_TOKENS].tolist(), arrays[REQ_OFFSETS].tolist()
    for i, row in enumerate(arrays[REQ_ROWS].tolist()):
        seg, plen = tokens[offs[i]:offs[i + 1]], int(arrays[REQ_PROMPT_LEN][i])
        prompt = seg[:plen] if plen >= 0 else None
        out.append(Request(int(row), prompt, seg[max(plen, 0):], bool(arrays[REQ_WANT][i])))
    return out


def pack_answers(answers: dict[int, Any], vocab: int) -> Arrays:
    """Server answers: tokens (``-1`` where a distribution is sent) and ``p_R`` rows."""
    rows = sorted(answers)
    dist = [answers[r].numpy().astype(np.float32) for r in rows if not isinstance(answers[r], int)]
    return {
        ANS_ROWS: np.array(rows, dtype=np.int32),
        ANS_TOKENS: np.array([answers[r] if isinstance(answers[r], int) else -1 for r in rows],
                             dtype=np.int32),
        ANS_DIST: np.stack(dist) if dist else np.zeros((0, vocab), dtype=np.float32),
    }


def unpack_answers(arrays: Arrays) -> dict[int, Any]:
    """The inverse of :func:`pack_answers` (distributions as torch tensors)."""
    import torch

    if ANS_ROWS not in arrays:
        return {}
    out: dict[int, Any] = {}
    dists = iter(arrays[ANS_DIST])
    for row, tok in zip(arrays[ANS_ROWS].tolist(), arrays[ANS_TOKENS].tolist(), strict=True):
        out[int(row)] = int(tok) if tok >= 0 else torch.from_numpy(np.array(next(dists)))
    return out


def trigger_config(trigger: Trigger) -> dict[str, Any]:
    """A trigger as JSON config (the codec writes infinities as ``Infinity``)."""
    return asdict(trigger)

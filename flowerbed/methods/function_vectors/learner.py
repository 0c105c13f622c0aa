"""Learner ``function_vectors``: one ICL task's function vectors on a client's pairs.

Todd et al. (ICLR 2024, arXiv 2310.15213) and Wang et al. (ICML 2026, arXiv
2605.16591); the maths is in :mod:`flowerbed.methods.function_vectors.algorithm` and
:mod:`flowerbed.methods.function_vectors.algorithm_decomp`, the model side in
:mod:`flowerbed.methods.function_vectors.model_task`.

The client's rows are ``(input, acceptable outputs)`` pairs (``text_*`` /
``refs_*`` of a pair dataset: ``fv_tasks``, ``wordnet_pairs``, ``freedict``).
Demonstrations come from its training rows, evaluation queries from its
held-out rows. Handlers:

- ``run_local`` (a local task): the whole analysis: the head scan and FV, zero-
  shot accuracy with and without the FV, variant-A additivity against the
  equal-weight and per-slot controls, attention masses on ambiguous
  demonstrations, the QK/V hybrid qualities; arrays ``fv``, ``aie``, ``heads``;
- ``query_fv_aie``: the head scan only (``aie`` ``(L, H)``), for a federation
  choosing one head set;
- ``query_fv``: the client's FV for the head set in the payload (``heads``
  ``(A, 2)``): ``d`` floats, all the client sends (strategy ``fv_decomposition``).

Rows of ``fv_tasks`` carry their ambiguity in ``y`` (classes ``unambiguous``,
``ambiguous``); for other datasets no demonstration counts as ambiguous.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import Field, field_validator

from flowerbed.clients.learner import Learner, TaskContext
from flowerbed.core.messages import Payload
from flowerbed.core.registry import Params, register
from flowerbed.core.scenario import Scenario
from flowerbed.core.seeds import derive_seed
from flowerbed.data.base import ClientData
from flowerbed.methods.function_vectors.data import AMBIGUITY_CLASSES
from flowerbed.models.icl import DEFAULT_TEMPLATE
from flowerbed.models.lm import build_lm, lm_spec_type

if TYPE_CHECKING:
    from flowerbed.methods.function_vectors.model import Prompter
    from flowerbed.models.icl import Example
    from flowerbed.models.lm import CausalLM

LmSpec = lm_spec_type()
#: Array names in payloads.
FV, AIE, HEADS = "fv", "aie", "heads"


class FunctionVectorsParams(Params):
    """The model, the prompts and the sizes of each step (Todd et al.'s defaults where stated)."""

    lm: LmSpec = Field(description="the model, e.g. smollm2 or fv_toy")  # type: ignore[valid-type]
    template: str = Field(DEFAULT_TEMPLATE, description="demonstration template with {x} and {y}")
    bos: bool = Field(False, description="start every prompt with the tokenizer's bos token")
    shots: int = Field(10, ge=1, description="demonstrations per prompt (Todd: 10)")
    n_clean: int = Field(100, ge=1, description="clean prompts of the mean activations "
                         "(Todd: 100)")
    n_corrupt: int = Field(25, ge=1, description="shuffled-label prompts of the head scan "
                           "(Todd: 25)")
    draws: int = Field(
        0, ge=0, description="Todd's filter: mean activations, head scan and accuracies use only "
        "prompts the model answers correctly in context, found among up to draws x n drawn; "
        "0: every prompt (a model that does not do the task has none to keep)")
    n_top_heads: int = Field(10, ge=1, description="heads of the FV (Todd: 10 for GPT-J)")
    layers: tuple[int, ...] | None = Field(
        None, min_length=1, description="injection layers tried (FV added to block L's output at "
        "the last token; -1: the embeddings); default: the block nearest L/3")
    heads: tuple[tuple[int, int], ...] | None = Field(
        None, min_length=1, description="a fixed FV head set [[layer, head], ...]: skips the scan")
    n_eval: int = Field(50, ge=2, description="held-out queries for the accuracies")
    n_analysis: int = Field(20, ge=2, description="n-shot prompts for sub-FVs, masses, hybrids")
    n_quality: int = Field(16, ge=1, description="zero-shot queries scoring each hybrid FV")
    batch_size: int = Field(16, ge=1, description="prompts per forward pass")
    chunk: int = Field(96, ge=1, description="heads patched in one batched step of the scan")
    max_rows: int = Field(32, ge=2, description="rows per forward pass of the value readout")

    @field_validator("lm", mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        return {"name": value} if isinstance(value, str) else value

    @field_validator("template")
    @classmethod
    def _template(cls, value: str) -> str:
        from flowerbed.models.icl import Template

        Template(value)  # one {x} before one {y}
        return value


@functools.lru_cache(maxsize=2)
def _model(spec_json: str, spec: Params) -> CausalLM:
    """One model per spec and process (pretrained or seeded: always the same weights)."""
    del spec_json  # the cache key (pydantic models hash by identity)
    return build_lm(spec, seed=0)


def pairs_of(texts: Sequence[str] | None, refs: Sequence[Sequence[str]] | None,
             what: str) -> list[Example]:
    """Rows of a pair dataset as ICL examples (one line naming the problem otherwise)."""
    from flowerbed.models.icl import Example

    if texts is None or refs is None:
        raise ValueError(f"learner function_vectors needs a pair dataset (text and references "
                         f"per row, e.g. fv_tasks or wordnet_pairs); the {what} rows have none")
    return [Example(x, tuple(r)) for x, r in zip(texts, refs, strict=True) if r]


def ambiguous_inputs(data: ClientData) -> frozenset[str]:
    """Inputs of the client's rows flagged ambiguous (``fv_tasks``' ``y``), else none."""
    if data.meta.class_names != AMBIGUITY_CLASSES or data.text_train is None:
        return frozenset()
    texts = list(data.text_train) + list(data.text_test or ())
    flags = np.concatenate([data.y_train, data.y_test])
    return frozenset(x for x, f in zip(texts, flags, strict=True) if f == 1)


@register("learner", "function_vectors")
class FunctionVectorsLearner(Learner):
    """Todd's function vector of the client's task, its sub-FV decomposition and QK/V hybrids."""

    Params = FunctionVectorsParams

    def __init__(self, params: FunctionVectorsParams, *, scenario: Scenario) -> None:
        super().__init__(params, scenario=scenario)
        self.p: FunctionVectorsParams = params

    # -- pieces shared with the strategy -----------------------------------------------------

    def model(self) -> CausalLM:
        """The scenario's language model (built once per process)."""
        spec: Params = self.p.lm
        return _model(spec.model_dump_json(), spec)

    def prompter(self) -> Prompter:
        """Prompts with the learner's template."""
        from flowerbed.methods.function_vectors.model import Prompter
        from flowerbed.models.icl import Template

        return Prompter(self.model(), Template(self.p.template), self.p.bos)

    def layers(self) -> list[int]:
        """Injection layers (default: the block nearest a third of the depth)."""
        return list(self.p.layers) if self.p.layers else [round(self.model().num_layers / 3)]

    def queries(self, examples: Sequence[Example]) -> list[Example]:
        """The first ``n_eval`` distinct inputs among ``examples``."""
        seen: dict[str, Example] = {}
        for e in examples:
            seen.setdefault(e.x, e)
        return list(seen.values())[: self.p.n_eval]

    def client_fv(self, pool: Sequence[Example], heads: Sequence[tuple[int, int]],
                  seed: int) -> np.ndarray:
        """The FV of ``heads`` from ``n_clean`` prompts drawn from ``pool``: ``(d,)``."""
        from flowerbed.methods.function_vectors import model as fl
        from flowerbed.methods.function_vectors import model_task as ft

        lm, prompter = self.model(), self.prompter()
        clean = ft.clean_prompts(lm, prompter, pool, n=self.p.n_clean, shots=self.p.shots,
                                 seed=derive_seed(seed, "fv.clean"), batch_size=self.p.batch_size,
                                 draws=self.p.draws, read_heads=True)
        assert clean.heads is not None
        return fl.function_vector(fl.output_matrices(lm, heads), clean.heads.mean(axis=0), heads)

    def zero_shot_accuracy(self, queries: Sequence[Example], fv: np.ndarray | None,
                           layer: int) -> float:
        """First-token accuracy of zero-shot ``queries`` with ``fv`` injected at ``layer``."""
        from flowerbed.methods.function_vectors import model_task as ft

        prompter = self.prompter()
        zero = [prompter.build([], q) for q in queries]
        return ft.accuracy(self.model(), zero, self.p.batch_size, fv, layer)[0]

    # -- handlers ----------------------------------------------------------------------------

    def run_local(self, data: ClientData, ctx: TaskContext) -> Payload:
        """The full analysis on the client's pairs; metrics on its held-out queries."""
        from flowerbed.methods.function_vectors import model_task as ft

        pool = pairs_of(data.text_train, data.refs_train, "training")
        queries = self.queries(pairs_of(data.text_test, data.refs_test, "held-out"))
        if len(queries) < 2:
            raise ValueError(f"learner function_vectors: client {data.partition_id} has "
                             f"{len(queries)} distinct held-out inputs; it needs >= 2")
        res = ft.analyse_task(
            self.model(), self.prompter(), pool, queries, shots=self.p.shots,
            n_clean=self.p.n_clean, n_corrupt=self.p.n_corrupt, n_top_heads=self.p.n_top_heads,
            layers=self.layers(), n_analysis=self.p.n_analysis, n_quality=self.p.n_quality,
            seed=ctx.seed, batch_size=self.p.batch_size, chunk=self.p.chunk,
            max_rows=self.p.max_rows, heads=self.p.heads, ambiguous_inputs=ambiguous_inputs(data),
            draws=self.p.draws,
        )
        return Payload(
            metrics=res.metrics(),
            arrays={FV: res.fv, AIE: res.aie, HEADS: np.asarray(res.heads, dtype=np.int64)},
            num_examples=len(queries),
        )

    def query_fv_aie(self, data: ClientData, payload: Payload, ctx: TaskContext) -> Payload:
        """The average indirect effect ``(L, H)`` of every head on the client's pairs."""
        from flowerbed.methods.function_vectors import model_task as ft

        del payload
        scan = ft.find_heads(
            self.model(), self.prompter(), pairs_of(data.text_train, data.refs_train, "training"),
            shots=self.p.shots, n_clean=self.p.n_clean, n_corrupt=self.p.n_corrupt,
            seed=ctx.seed, batch_size=self.p.batch_size, chunk=self.p.chunk, draws=self.p.draws,
        )
        return Payload(arrays={AIE: scan.aie}, num_examples=data.num_train)

    def query_fv(self, data: ClientData, payload: Payload, ctx: TaskContext) -> Payload:
        """The client's FV for the payload's ``heads``; metric: its share of ambiguous rows."""
        heads = [(int(a), int(b)) for a, b in np.asarray(payload.arrays[HEADS]).reshape(-1, 2)]
        pool = pairs_of(data.text_train, data.refs_train, "training")
        amb = ambiguous_inputs(data)
        share = float(np.mean([e.x in amb for e in pool])) if pool else 0.0
        return Payload(arrays={FV: self.client_fv(pool, heads, ctx.seed)},
                       metrics={"ambiguous_share": share}, num_examples=data.num_train)

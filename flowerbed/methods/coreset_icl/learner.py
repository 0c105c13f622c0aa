"""Learner ``coreset_icl``: choose which pool texts to annotate, then few-shot ICL with them.

Method: PACS, progress-aware coreset selection for in-context learning (ICML 2026
poster 64776, reconstructed; :mod:`flowerbed.methods.coreset_icl.algorithm`) against the
baselines of :mod:`flowerbed.methods.coreset_icl.algorithm_baselines`. A client's
training rows are its unlabelled pool (``text_train``; labels are read only for
the selected rows: the annotation), its held-out rows the queries.

For every selector and budget ``B``: embed the pool (MiniLM or the LM's mean
hidden state), select ``B_i`` rows (a client's equal share of ``B``; the pooled
client of ``centralized`` selects ``B``), and answer every query with ``k``
demonstrations from that bank, retrieved by cosine similarity (most similar
next to the query) and drawn at random (both reported), by ranking the label
words with the LM. Metrics per ``<selector>@<B>``: ``acc_retrieved``,
``acc_random``, ``peripheral`` (share of the bank in the pool's 10% lowest local
densities), ``redundancy`` (mean max cosine inside the bank) and ``select_s``.

``strategy: local`` with ``baselines: [centralized, local_only]`` gives local
banks vs selection on the pooled data; ``strategy: coreset_icl``
(:mod:`flowerbed.methods.coreset_icl.strategy`) adds the merged federated bank, in
the same run, through the ``query.coreset``, ``query.annotate`` and
``evaluate.bank`` handlers here.
"""

from __future__ import annotations

import functools
import math
import time
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import Field, field_validator

from flowerbed.clients.learner import Learner, TaskContext
from flowerbed.core.messages import Arrays, Payload
from flowerbed.core.registry import Params, register
from flowerbed.core.scenario import Scenario
from flowerbed.core.seeds import derive_seed
from flowerbed.data.base import ClientData
from flowerbed.methods.coreset_icl import algorithm as cs
from flowerbed.methods.coreset_icl import algorithm_baselines as cb
from flowerbed.methods.coreset_icl import algorithm_demos as cd
from flowerbed.methods.coreset_icl import learner_prompts as pr
from flowerbed.models.icl import Template
from flowerbed.models.lm import build_lm, lm_spec_type

if TYPE_CHECKING:
    from flowerbed.models.lm import CausalLM

LmSpec = lm_spec_type()
DemoMode = Literal["retrieved", "random"]
DemoProtocol = Literal["k", "fill"]

#: Message types of the federated protocol (strategy ``coreset_icl``).
SELECT_MESSAGE = "query.coreset"
ANNOTATE_MESSAGE = "query.annotate"
EVAL_MESSAGE = "evaluate.bank"
#: Config keys of those messages.
OVERSAMPLE, PICKED = "oversample", "picked"


class CoresetIclParams(Params):
    """Selectors, budgets, embedding, LM and prompt format."""

    lm: LmSpec = Field(  # type: ignore[valid-type]
        {"name": "smollm2"},
        validate_default=True,
        description="the language model, e.g. {name: smollm2} or {name: hf, path: /models/x}",
    )
    selectors: tuple[str, ...] = Field(
        ("pacs",), min_length=1, description=f"any of {', '.join(cb.SELECTORS)}"
    )
    budgets: tuple[int, ...] = Field((18,), min_length=1, description="annotation budgets B")
    embedding: pr.Embedding = Field(
        "minilm", description="minilm, or lm_mean (the LM's own mean hidden state)"
    )
    lm_layer: int = Field(-1, description="lm_mean: block whose output is averaged (-1: last)")
    protocol: DemoProtocol = Field(
        "k",
        description="retrieved demonstrations per query: k (the k_demos most similar) or "
        "fill (the most similar until context_tokens are used: vote-k's protocol)",
    )
    k_demos: int = Field(4, ge=1, description="protocol k: demonstrations per query")
    context_tokens: int = Field(
        1000, ge=1, description="protocol fill: prompt length limit in LM tokens"
    )
    demo_modes: tuple[DemoMode, ...] = Field(("retrieved", "random"), min_length=1)
    density_k: int = Field(cs.DENSITY_K, ge=1, description="PACS: neighbours of the density")
    lam: float = Field(cs.LAMBDA, ge=0, description="PACS: weight of the redundancy penalty")
    fixed_a: float = Field(cs.FIXED_A, ge=0, le=1, description="pacs_fixed: the constant a")
    template: str = Field("Input: {x}\nLabel: {y}\n\n", description="one demonstration")
    instruction: str = Field("", description="text before the demonstrations")
    label_words: tuple[str, ...] = Field(
        (), description="how each class is written (default: class name after its last '.')"
    )
    max_words: int = Field(40, ge=0, description="texts cut to this many words (0: whole)")
    random_share: int = Field(
        1,
        ge=1,
        description="random demos: consecutive queries "
        "sharing one draw (its prefix is computed once)",
    )
    batch_size: int = Field(16, ge=1, description="prompts per forward pass")
    scoring: pr.Scoring = Field(
        "shared",
        description="shared: each shared token prefix of "
        "the prompts fed once (KV cache), reference: the plain scorer "
        "(same predictions, slower)",
    )

    @field_validator("lm", mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        return {"name": value} if isinstance(value, str) else value

    @field_validator("selectors")
    @classmethod
    def _known(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        unknown = [s for s in value if s not in cb.SELECTORS]
        if unknown:
            raise ValueError(f"unknown selectors {unknown}; known: {', '.join(cb.SELECTORS)}")
        return value

    @field_validator("budgets")
    @classmethod
    def _positive(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        if any(b < 1 for b in value):
            raise ValueError(f"every budget must be >= 1, got {list(value)}")
        return value

    @field_validator("template")
    @classmethod
    def _template(cls, value: str) -> str:
        Template(value)  # one {x} before one {y}
        return value


def client_budget(budget: int, num_clients: int, partition_id: int) -> int:
    """Client ``partition_id``'s equal share of ``budget`` (the pooled client, -1, gets it all).

    Examples
    --------
    >>> [client_budget(18, 4, p) for p in range(4)], client_budget(18, 4, -1)
    ([5, 5, 4, 4], 18)
    """
    if partition_id < 0:
        return budget
    return budget // num_clients + int(partition_id < budget % num_clients)


def tag(selector: str, budget: int) -> str:
    """Metric and array suffix of one (selector, budget): ``pacs@18``."""
    return f"{selector}@{budget}"


@functools.lru_cache(maxsize=2)
def _lm(spec_json: str, spec: Params) -> CausalLM:
    """The language model (built once per spec and process)."""
    del spec_json  # the cache key (pydantic models hash by identity)
    import torch

    torch.set_num_threads(1)  # one thread per worker (see the architecture notes)
    return build_lm(spec, seed=0)


class Pool:
    """A client's pool and queries: cleaned texts, labels, embeddings, kNN graph."""

    def __init__(self, learner: CoresetIclLearner, data: ClientData) -> None:
        p = learner.p
        if data.text_train is None or data.text_test is None:
            raise ValueError(
                f"learner coreset_icl needs a text dataset; {data.meta.name!r} "
                "has no text (try wordnet_supersense, fortunes, negation_sentiment)"
            )
        self.x = [pr.clean(t, p.max_words) for t in data.text_train]
        self.y = np.asarray(data.y_train, dtype=np.int64)
        self.qx = [pr.clean(t, p.max_words) for t in data.text_test]
        self.qy = np.asarray(data.y_test, dtype=np.int64)
        self.emb = learner.embed(self.x)
        self.qemb = learner.embed(self.qx)
        need = max([p.density_k] + [cb.GRAPH_K.get(s, 0) for s in p.selectors])
        self.graph = cs.knn_graph(self.emb, need) if len(self.x) >= 2 else None
        self.density = self.graph.density(min(p.density_k, self.graph.k)) if self.graph else None


@register("learner", "coreset_icl")
class CoresetIclLearner(Learner):
    """Coreset selection (PACS and baselines) for few-shot ICL with a causal LM."""

    Params = CoresetIclParams

    def __init__(self, params: CoresetIclParams, *, scenario: Scenario) -> None:
        super().__init__(params, scenario=scenario)
        self.p: CoresetIclParams = params

    # -- pieces ------------------------------------------------------------------------------

    @property
    def lm(self) -> CausalLM:
        """The frozen LM."""
        spec = self.p.lm
        return _lm(spec.model_dump_json(), spec)  # type: ignore[attr-defined]

    def embed(self, texts: list[str]) -> np.ndarray:
        """Unit-norm embeddings of ``texts`` with the configured encoder."""
        lm = self.lm if self.p.embedding == "lm_mean" else None
        key = self.p.lm.model_dump_json() if lm is not None else ""  # type: ignore[attr-defined]
        return pr.embed(texts, self.p.embedding, lm, self.p.lm_layer, key)

    def words(self, data: ClientData) -> list[str]:
        """The label word of every class."""
        return pr.label_words(data.meta.class_names or (), self.p.label_words)

    def answer(
        self,
        bank_x: list[str],
        bank_y: np.ndarray,
        bank_emb: np.ndarray,
        qx: list[str],
        qemb: np.ndarray,
        words: list[str],
        mode: DemoMode,
        seed: int,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Predicted classes and confidences of the queries, demonstrations from the bank.

        Retrieved ones follow ``protocol`` (``k``: the ``k_demos`` most similar; ``fill``:
        the most similar until ``context_tokens``), random ones are ``k_demos`` drawn.
        """
        k = self.p.k_demos
        if len(qx) == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        shown = [words[int(c)] for c in bank_y]
        template = Template(self.p.template)
        demos: Any
        if len(bank_x) == 0:
            demos = np.zeros((len(qx), 0), dtype=np.int64)
        elif mode == "random":
            demos = cd.random_demos(len(bank_x), len(qx), k, seed, self.p.random_share)
        elif self.p.protocol == "fill":
            demos = pr.fill_demos(
                self.lm,
                template,
                self.p.instruction,
                bank_x,
                shown,
                bank_emb,
                qx,
                qemb,
                self.p.context_tokens,
            )
        else:
            demos = cd.retrieve(bank_emb, qemb, k)
        pairs = pr.prompts(template, self.p.instruction, bank_x, shown, demos, qx)
        return pr.predict(
            self.lm,
            pairs,
            [template.separator + w for w in words],
            self.p.batch_size,
            self.p.scoring,
        )

    def confidence(self, pool: Pool, words: list[str], seed: int) -> cb.Confidence:
        """Vote-k's callback: the LM's confidence on pool points, prompted with the first stage."""

        def conf(first: np.ndarray) -> np.ndarray:
            rows = np.setdiff1d(np.arange(len(pool.x)), first)  # the whole pool, as vote-k
            out = np.full(len(pool.x), np.nan)
            _, p = self.answer(
                [pool.x[i] for i in first],
                pool.y[first],
                pool.emb[first],
                [pool.x[i] for i in rows],
                pool.emb[rows],
                words,
                "retrieved",
                seed,
            )
            out[rows] = p
            return out

        return conf

    def choose(
        self, pool: Pool, selector: str, budget: int, ctx: TaskContext, words: list[str]
    ) -> tuple[np.ndarray, float]:
        """Selected pool rows (selection order) and the selection's wall time.

        Seeded by the root seed and the client alone, so a client's
        federated upload is its local-only bank (with ``oversample = 1``).
        """
        if budget <= 0 or len(pool.x) == 0:
            return np.zeros(0, dtype=np.int64), 0.0
        budget = min(budget, len(pool.x))
        s = derive_seed(ctx.scenario.seed, "coreset", ctx.partition_id, selector, budget)
        start = time.perf_counter()
        if len(pool.x) < 2 or budget == len(pool.x):
            idx = np.arange(len(pool.x))
        else:
            extra: dict[str, Any] = {}
            if selector in cb.PACS_VARIANTS:
                extra = {"k": self.p.density_k, "lam": self.p.lam, "a": self.p.fixed_a}
            conf = self.confidence(pool, words, s) if selector == "votek" else None
            idx = cb.select(
                selector, pool.emb, budget, seed=s, graph=pool.graph, confidence=conf, **extra
            )
        return np.asarray(idx, dtype=np.int64), time.perf_counter() - start

    def score_bank(
        self,
        pool: Pool,
        bank_x: list[str],
        bank_y: np.ndarray,
        bank_emb: np.ndarray,
        words: list[str],
        seed: int,
        name: str,
    ) -> dict[str, float]:
        """Accuracy on the client's queries for each demonstration mode."""
        out = {}
        for mode in self.p.demo_modes:
            pred, _ = self.answer(
                bank_x,
                bank_y,
                bank_emb,
                pool.qx,
                pool.qemb,
                words,
                mode,
                derive_seed(seed, "demos", name),
            )
            out[f"acc_{mode}.{name}"] = float(np.mean(pred == pool.qy)) if len(pred) else 0.0
        return out

    def diagnostics(self, pool: Pool, idx: np.ndarray, name: str) -> dict[str, float]:
        """Peripheral share and redundancy of a selected set."""
        if pool.density is None or len(idx) == 0:
            return {}
        out = {f"peripheral.{name}": cd.peripheral_fraction(pool.density, idx)}
        if len(idx) >= 2:
            out[f"redundancy.{name}"] = cd.redundancy(pool.emb, idx)
        return out

    # -- the local task ----------------------------------------------------------------------

    def run_local(self, data: ClientData, ctx: TaskContext) -> Payload:
        """Every selector and budget on this client's pool, scored on its queries."""
        pool = Pool(self, data)
        words = self.words(data)
        metrics: dict[str, float] = {"pool_size": float(len(pool.x))}
        arrays: Arrays = {}
        for selector in self.p.selectors:
            for budget in self.p.budgets:
                name = tag(selector, budget)
                share = client_budget(budget, ctx.scenario.num_clients, ctx.partition_id)
                idx, seconds = self.choose(pool, selector, share, ctx, words)
                arrays[f"selected.{name}"] = idx
                metrics[f"select_s.{name}"] = seconds
                metrics.update(self.diagnostics(pool, idx, name))
                metrics.update(
                    self.score_bank(
                        pool,
                        [pool.x[i] for i in idx],
                        pool.y[idx],
                        pool.emb[idx],
                        words,
                        ctx.seed,
                        name,
                    )
                )
        return Payload(metrics=metrics, arrays=arrays, num_examples=len(pool.qx))

    # -- the federated protocol --------------------------------------------------------------

    def query_coreset(self, data: ClientData, payload: Payload, ctx: TaskContext) -> Payload:
        """Select locally; upload each bank's embeddings and texts (and labels unless oversampled).

        With ``oversample > 1`` the client uploads ``ceil(oversample B_i)``
        unlabelled candidates; the server re-selects on the union and asks
        for the labels of the chosen ones (``query.annotate``).
        """
        pool = Pool(self, data)
        words = self.words(data)
        over = float(payload.config.get(OVERSAMPLE, 1.0))
        arrays: Arrays = {}
        metrics: dict[str, float] = {}
        for selector in self.p.selectors:
            for budget in self.p.budgets:
                name = tag(selector, budget)
                share = client_budget(budget, ctx.scenario.num_clients, ctx.partition_id)
                idx, seconds = self.choose(pool, selector, math.ceil(over * share), ctx, words)
                text, offsets = pr.pack_texts([pool.x[i] for i in idx])
                arrays.update(
                    {
                        f"{name}.emb": pool.emb[idx],
                        f"{name}.text": text,
                        f"{name}.offsets": offsets,
                        f"{name}.row": idx,
                    }
                )
                if over <= 1.0:
                    arrays[f"{name}.label"] = pool.y[idx]
                metrics[f"select_s.{name}"] = seconds
                metrics.update(self.diagnostics(pool, idx, name))
        return Payload(arrays=arrays, metrics=metrics, num_examples=len(pool.x))

    def query_annotate(self, data: ClientData, payload: Payload, ctx: TaskContext) -> Payload:
        """Labels of the pool rows the server picked (``config[picked][name]`` lists them)."""
        del ctx
        y = np.asarray(data.y_train, dtype=np.int64)
        picked: dict[str, list[int]] = payload.config.get(PICKED, {})
        return Payload(
            arrays={
                f"{name}.label": y[np.asarray(rows, dtype=np.int64)]
                for name, rows in picked.items()
            }
        )

    def evaluate_bank(self, data: ClientData, payload: Payload, ctx: TaskContext) -> Payload:
        """Accuracy on this client's queries with each received bank (``<name>.emb/label/text``)."""
        pool = Pool(self, data)
        words = self.words(data)
        metrics: dict[str, float] = {}
        for name in sorted({k.rsplit(".", 1)[0] for k in payload.arrays}):
            a = payload.arrays
            texts = pr.unpack_texts(a[f"{name}.text"], a[f"{name}.offsets"])
            metrics.update(
                self.score_bank(
                    pool,
                    texts,
                    np.asarray(a[f"{name}.label"]),
                    np.asarray(a[f"{name}.emb"]),
                    words,
                    ctx.seed,
                    name,
                )
            )
        return Payload(metrics=metrics, num_examples=len(pool.qx))

"""Strategy ``fv_decomposition``: the global function vector as a mix of client FVs.

The client-level analogue of Wang et al.'s claim (ICML 2026, arXiv 2605.16591;
the spec's "flowerbed mapping"): clients play the demonstrations. Protocol:

1. ``query.fv_aie`` (skipped when the learner fixes ``heads``): every client
   scans the heads on its own pairs; the server averages the indirect effects
   (weighted by rows, Todd et al.'s "universal" head set over clients) and keeps
   the learner's ``n_top_heads``;
2. ``query.fv`` with the head set: each client returns its FV, ``d`` floats
   (mean last-token head outputs of prompts built from its own pairs, through
   the output projection);
3. the server computes the global FV the same way on prompts drawn from the
   union of the clients' pairs (in simulation the server holds the scenario's
   data; this is the centralized reference the analysis compares with) and fits
   ``FV_global ~ sum_c w_c FV_c + b`` by least squares.

Reported (split ``test``): the fit's R² and cosine, the R² of the data-share
average (what FedAvg of the FVs gives), each client's weight and ambiguous
share, their rank correlation, and zero-shot first-token accuracy on the
global test queries with no FV, the global FV, the fitted combination and the
data-share average, injected at the learner's first layer.
"""

from __future__ import annotations

import numpy as np
from pydantic import Field

from flowerbed.core.messages import Payload
from flowerbed.core.registry import Params, register
from flowerbed.core.seeds import derive_seed
from flowerbed.methods.function_vectors.learner import (
    AIE,
    FV,
    HEADS,
    FunctionVectorsLearner,
    pairs_of,
)
from flowerbed.strategies.base import ServerContext, Strategy
from flowerbed.strategies.federation import Federation


class FvDecompositionParams(Params):
    """Whether the fit has a bias."""

    bias: bool = Field(True, description="fit FV_global ~ sum_c w_c FV_c + b (b one scalar)")


@register("strategy", "fv_decomposition", requires=("query.fv",))
class FvDecomposition(Strategy):
    """Client FVs (d floats each) against the global FV; weights vs client ambiguity."""

    Params = FvDecompositionParams

    def run(self, fed: Federation, ctx: ServerContext) -> dict[str, float]:
        """Two (or three) asks and one least-squares fit; metrics on the global test queries."""
        from flowerbed.methods.function_vectors import algorithm as fva

        p: FvDecompositionParams = self.params  # type: ignore[assignment]
        learner = ctx.learner
        if not isinstance(learner, FunctionVectorsLearner):
            raise TypeError(f"fv_decomposition needs learner function_vectors, got "
                            f"{type(learner).__name__}")
        heads = self._heads(fed, ctx, learner)
        replies = fed.ask("query.fv", Payload(arrays={HEADS: np.asarray(heads)}), server_round=2)
        pids = sorted(replies.ok)
        if len(pids) < 2:
            raise RuntimeError(f"fv_decomposition: {len(pids)} client FVs came back; need >= 2")
        client_fvs = np.stack([replies.ok[c].arrays[FV] for c in pids])
        sizes = [replies.ok[c].num_examples for c in pids]
        pool = []
        for pid in fed.partition_ids:
            data = ctx.data.client(pid)
            pool += pairs_of(data.text_train, data.refs_train, "training")
        global_fv = learner.client_fv(pool, heads, derive_seed(self.scenario.seed, "fv.global"))
        fit = fva.fit_weights(global_fv, client_fvs, bias=p.bias)
        share = fva.client_weights_share(sizes)
        fedavg = share @ client_fvs
        amb = [replies.ok[c].metrics.get("ambiguous_share", float("nan")) for c in pids]
        out = {
            "test/decomp_r2": fit.r2, "test/decomp_cos": fit.cosine,
            "test/fedavg_r2": fva.r2_score(global_fv, fedavg),
            "test/fedavg_cos": fva.cosine(global_fv, fedavg),
            "test/equal_r2": fva.fit_equal_weights(global_fv, client_fvs, bias=p.bias).r2,
            "test/weight_ambiguity_spearman": fva.rank_correlation(fit.weights, amb),
            "test/chance_r2": fva.chance_r2(len(pids), len(global_fv)),
        }
        for c, w, a in zip(pids, fit.weights, amb, strict=True):
            out[f"test/weight_client_{c}"] = float(w)
            out[f"test/ambiguous_share_client_{c}"] = float(a)
        out.update(self._accuracies(ctx, learner, {
            "none": None, "global": global_fv, "combination": fit.fitted, "fedavg": fedavg}))
        ctx.recorder.metrics(2, "server_eval", out)
        return out

    def _heads(self, fed: Federation, ctx: ServerContext,
               learner: FunctionVectorsLearner) -> list[tuple[int, int]]:
        from flowerbed.methods.function_vectors import algorithm as fva

        if learner.p.heads is not None:
            return [(int(a), int(b)) for a, b in learner.p.heads]
        replies = fed.ask("query.fv_aie", Payload(), server_round=1)
        if not replies.ok:
            raise RuntimeError("fv_decomposition: no client returned its head scan")
        weights = np.array([r.num_examples for r in replies.ok.values()], dtype=float)
        aies = np.stack([r.arrays[AIE] for r in replies.ok.values()])
        mean = np.tensordot(weights / weights.sum(), aies, axes=1)
        top = fva.top_heads(mean, learner.p.n_top_heads)
        ctx.recorder.metrics(1, "query", {f"query/aie_top{i}": float(mean[h])
                                          for i, h in enumerate(top)})
        return top

    def _accuracies(self, ctx: ServerContext, learner: FunctionVectorsLearner,
                    vectors: dict[str, np.ndarray | None]) -> dict[str, float]:
        ds = ctx.data.dataset
        queries = learner.queries(pairs_of(ds.text_test, ds.refs_test, "global test"))
        layer = learner.layers()[0]
        return {f"test/accuracy_fv_{name}": learner.zero_shot_accuracy(queries, fv, layer)
                for name, fv in vectors.items()}

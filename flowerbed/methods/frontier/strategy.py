"""Frontier selection: pick and hedge models for a newly joining client from benchmark risks.

Method: "Hedging on the Frontier: Learning New Tasks with Few Samples" (arXiv
2605.30997), reconstructed in ``docs/methods/frontier.md`` section 1; maths in
``flowerbed/methods/frontier/algorithm.py`` and ``algorithm_hedging.py``. The server trains a
candidate zoo on rows no client holds, the benchmark clients report each model's
Brier risk on their (corrupted) data, and the server computes the Pareto frontier
and a delta-cover of the resulting evaluation matrix. The new client (the last
partition id) receives only the frontier models and hedges on them; a second ask
ships all models for the baselines and the fallback prior (both need every model).
"""

from __future__ import annotations

import logging
from typing import Any, Literal

import numpy as np
from pydantic import Field

from flowerbed.core.messages import Payload
from flowerbed.core.registry import Params, register
from flowerbed.core.seeds import derive_seed
from flowerbed.data.federated import FederatedData
from flowerbed.methods.frontier import algorithm as fr
from flowerbed.methods.frontier import algorithm_hedging as hedging
from flowerbed.methods.frontier import learner as K
from flowerbed.strategies.base import ServerContext, Strategy
from flowerbed.strategies.federation import Federation

log = logging.getLogger("flowerbed")

FRONTIER_VARIANTS = ("erm_frontier", "erm_cover", "gibbs_frontier", "qagg_frontier")
ALL_VARIANTS = ("erm_all", "bench_avg", "gibbs_all", "qagg_all", "gibbs_fallback", "qagg_fallback")
Variant = Literal[
    "erm_frontier", "erm_cover", "gibbs_frontier", "qagg_frontier",
    "erm_all", "bench_avg", "gibbs_all", "qagg_all", "gibbs_fallback", "qagg_fallback",
]


class FrontierParams(Params):
    """Zoo, frontier/cover, priors, and the new client's few-shot evaluation."""

    zoo: Literal["standard", "small"] = Field("standard", description="candidate set")
    n_labelled: int = Field(10, ge=1, description="labelled rows of the new client")
    repeats: int = Field(100, ge=1, description="seeded draws of the labelled rows")
    frontier_eps: float = Field(0.0, ge=0, description="relaxed frontier (Brier units)")
    cover_delta: float = Field(0.01, ge=0, description="delta of the Pareto cover")
    frontier_prior: Literal["cells", "uniform"] = Field(
        "cells", description="cells: mass per cover cell, split inside; uniform: on frontier"
    )
    fallback_weight: float = Field(0.5, gt=0, lt=1, description="frontier share of the prior")
    nu: float = Field(0.5, ge=0, le=1, description="Q-aggregation mixing parameter")
    steps: int = Field(300, ge=1, description="exponentiated-gradient steps")
    deploy: Variant = Field("qagg_frontier", description="variant reported as federated")


def server_rows(data: FederatedData) -> np.ndarray:
    """Training rows that no client holds (the server's pre-training split)."""
    held = (
        np.concatenate(data.partition.indices)
        if data.partition.indices
        else np.array([], dtype=np.int64)
    )
    free = np.setdiff1d(np.arange(len(data.dataset.y_train)), held)
    if len(free) == 0:
        raise ValueError(
            "frontier_selection needs training rows no client holds to train its zoo; "
            "use partition: frontier_benchmarks (pretrain_fraction)"
        )
    return free


def restricted(prior: np.ndarray, ids: list[int]) -> list[float]:
    """A global prior on the shipped ``ids`` (its support must lie inside them)."""
    local = prior[ids]
    if abs(local.sum() - 1.0) > 1e-9:
        raise ValueError("prior mass outside the shipped models")
    return (local / local.sum()).tolist()


def priors(e: np.ndarray, p: FrontierParams) -> tuple[np.ndarray, fr.Cover, dict[str, np.ndarray]]:
    """Frontier, cover and the global prior (length M) of every variant."""
    m = len(e)
    front = fr.pareto_frontier(e, eps=p.frontier_eps)
    cover = fr.pareto_cover(e, p.cover_delta)
    pi_front = fr.cell_prior(cover, m) if p.frontier_prior == "cells" else fr.uniform_on(front, m)
    uniform = np.full(m, 1.0 / m)
    pick = np.zeros(m)
    pick[fr.benchmark_average_pick(e)] = 1.0
    mixed = hedging.mixture_prior(pi_front, p.fallback_weight)
    table = {
        "erm_frontier": fr.uniform_on(front, m), "erm_cover": fr.uniform_on(cover.centers, m),
        "gibbs_frontier": pi_front, "qagg_frontier": pi_front,
        "erm_all": uniform, "bench_avg": pick, "gibbs_all": uniform, "qagg_all": uniform,
        "gibbs_fallback": mixed, "qagg_fallback": mixed,
    }
    return front, cover, table


def variant_metrics(
    raw: dict[str, float], name: str, shipped: int, nbytes: int
) -> dict[str, float]:
    """``test/...`` metrics of one variant from the new client's flat reply."""
    out = {f"test/{k}": raw[f"{name}/{k}"] for k in K.METRICS}
    out["test/accuracy"] = 1.0 - out["test/error"]
    out["comm/models_shipped"] = float(shipped)
    out["comm/bytes_to_new_client"] = float(nbytes)
    return out


@register(
    "strategy", "frontier_selection", requires=((K.RISKS_MESSAGE, K.HEDGE_MESSAGE),)
)
class FrontierSelection(Strategy):
    """Model selection for a new client: prune to the benchmark frontier, then hedge."""

    Params = FrontierParams

    def run(self, fed: Federation, ctx: ServerContext) -> dict[str, float]:
        """Zoo, benchmark risks, frontier, two hedge asks to the new client; return metrics."""
        # The zoo module imports scikit-learn: only once the strategy runs, so that
        # validating a scenario stays light.
        from flowerbed.methods.frontier.learner_zoo import to_array

        p: FrontierParams = self.params  # type: ignore[assignment]
        pids = fed.partition_ids
        new, benches = pids[-1], pids[:-1]
        names, blobs = self._zoo(ctx)
        arrays = {K.model_key(j): to_array(b) for j, b in enumerate(blobs)}
        all_ids = list(range(len(blobs)))
        replies = fed.ask(
            K.RISKS_MESSAGE, Payload(arrays=arrays, config={K.MODEL_IDS: all_ids}), benches,
            server_round=1,
        )
        e = np.column_stack([r.arrays[K.RISKS] for r in replies.ok.values()])
        front, cover, table = priors(e, p)
        results: dict[str, dict[str, float]] = {}
        for rnd, (ids, variants) in enumerate(
            ((front.tolist(), FRONTIER_VARIANTS), (all_ids, ALL_VARIANTS)), start=2
        ):
            raw, pool = self._hedge(fed, new, arrays, ids, variants, table, rnd)
            nbytes = sum(arrays[K.model_key(j)].nbytes for j in ids)
            results.update({v: variant_metrics(raw, v, len(ids), nbytes) for v in variants})
        oracle = {f"test/{k}": raw[f"oracle/{k}"] for k in K.METRICS}
        oracle["test/accuracy"] = 1.0 - oracle["test/error"]
        for metrics in results.values():  # excess against the best of ALL models
            metrics["test/excess_brier"] = metrics["test/brier"] - oracle["test/brier"]
            metrics["test/excess_error"] = metrics["test/error"] - oracle["test/error"]
        results["oracle"] = oracle
        self._diagnostics(ctx, names, e, front, cover, pool)
        for name, metrics in results.items():
            ctx.recorder.metrics(1, name, metrics)
            if name != p.deploy:
                ctx.extra_results[name] = metrics
        return results[p.deploy]

    def _zoo(self, ctx: ServerContext) -> tuple[list[str], list[bytes]]:
        from flowerbed.methods.frontier.learner_zoo import cached_zoo

        p: FrontierParams = self.params  # type: ignore[assignment]
        ds = ctx.data.dataset
        rows = server_rows(ctx.data)
        x = np.ascontiguousarray(ds.x_train[rows], dtype=np.float32)
        y = np.ascontiguousarray(ds.y_train[rows], dtype=np.int64)
        seed = derive_seed(self.scenario.seed, "frontier-zoo") % 2**31
        names, blobs = cached_zoo(
            p.zoo, x.tobytes(), y.tobytes(), x.shape[1], tuple(ds.meta.input_shape), seed
        )
        ctx.recorder.event("frontier_zoo", models=len(names), server_rows=len(rows))
        return names, blobs

    def _hedge(
        self, fed: Federation, new: int, arrays: dict[str, np.ndarray], ids: list[int],
        variants: tuple[str, ...], table: dict[str, np.ndarray], rnd: int,
    ) -> tuple[dict[str, float], np.ndarray]:
        """One ``query.frontier_hedge`` ask shipping the models ``ids``.

        Both asks use the same draw seed and the same rows, so their draws are
        identical and every variant is compared with the all-model oracle.
        """
        p: FrontierParams = self.params  # type: ignore[assignment]
        specs: list[dict[str, Any]] = [
            {"name": v, "rule": v.split("_")[0].replace("bench", "fixed"),
             "prior": restricted(table[v], ids)}
            for v in variants
        ]
        config = {
            K.MODEL_IDS: ids, K.VARIANTS: specs, K.N_LABELLED: p.n_labelled,
            K.REPEATS: p.repeats, K.NU: p.nu, K.STEPS: p.steps,
            K.DRAW_SEED: derive_seed(self.scenario.seed, "frontier-draws") % 2**63,
        }
        body = Payload(arrays={K.model_key(j): arrays[K.model_key(j)] for j in ids}, config=config)
        reply = fed.ask(K.HEDGE_MESSAGE, body, [new], server_round=rnd).ok[new]
        return reply.metrics, reply.arrays[K.POOL_RISKS]

    def _diagnostics(
        self, ctx: ServerContext, names: list[str], e: np.ndarray, front: np.ndarray,
        cover: fr.Cover, pool: np.ndarray,
    ) -> None:
        """How well weak monotonicity held (evaluation only: uses the new client's risks)."""
        best = int(np.argmin(pool))
        stats = {
            "frontier/models": float(len(e)), "frontier/size": float(len(front)),
            "frontier/cover_size": float(len(cover.centers)),
            "frontier/wm_agreement": fr.monotonicity_agreement(e, pool),
            "frontier/target_best_on_frontier": float(best in set(front.tolist())),
            "frontier/frontier_gap": float(pool[front].min() - pool.min()),
        }
        ctx.recorder.metrics(1, "diagnostics", stats)
        ctx.extra_results["diagnostics"] = stats
        ctx.recorder.write_json("frontier.json", {
            "models": names, "benchmark_risks": e, "frontier": front,
            "cover": cover.centers, "new_client_risks": pool,
        })

"""SLOT-Align server (arXiv 2606.16655, github.com/daniebera/SLOT-Align): one-shot OT alignment.

One statistics exchange (optionally preceded by a pooled-PCA exchange), the
Bures-Wasserstein barycenter and each client's Monge map on the server, then one
round of a one-shot FL pipeline on the transported features: O-FedAvg of a
linear head, the ensemble of client heads, and a prototype classifier. The same
pipelines run without alignment (``no_align``) and at fixed taus in the same
run, reported through ``ctx.extra_results``.
"""

from __future__ import annotations

import time
from typing import Literal

import numpy as np
from pydantic import Field

from flowerbed.core.messages import Arrays, Payload
from flowerbed.core.registry import Params, register
from flowerbed.core.seeds import derive_seed
from flowerbed.methods.slot_align import algorithm as sa
from flowerbed.methods.slot_align import algorithm_heads as heads
from flowerbed.methods.slot_align import learner as keys
from flowerbed.strategies.base import ServerContext, Strategy
from flowerbed.strategies.federation import Federation

Pipeline = Literal["fedavg", "ensemble", "prototype"]


class SlotAlignParams(Params):
    """Transport schedule, barycenter solver, pipelines and comparison rows."""

    pipelines: tuple[Pipeline, ...] = Field(keys.PIPELINES, min_length=1)  # type: ignore[arg-type]
    tau_mode: Literal["cosine", "fixed"] = "cosine"
    tau_min: float = Field(0.0, ge=0, le=1)
    tau_max: float = Field(0.4, ge=0, le=1)
    tau_eval: float | None = Field(None, ge=0, le=1, description="default: tau_max")
    local_epochs: int = Field(10, ge=1)
    barycenter_weighting: Literal["sample_count", "equal"] = "sample_count"
    head_weighting: Literal["equal", "sample_count"] = "equal"
    tol: float = Field(1e-8, gt=0, description="relative Frobenius change to stop at")
    max_iter: int = Field(1000, ge=1)
    pca_dim: int | None = Field(None, ge=1, description="pooled PCA before the statistics")
    pca_variance: float = Field(0.99, gt=0, le=1)
    compare_unaligned: bool = Field(True, description="also run the pipelines with tau = 0")
    compare_taus: tuple[float, ...] = Field((), description="extra rows at a fixed tau")


@register("strategy", "slot_align", requires=(
    (keys.SCATTER_MESSAGE, keys.STATS_MESSAGE, keys.TRAIN_MESSAGE, keys.EVAL_MESSAGE),
))
class SlotAlignStrategy(Strategy):
    """SLOT-Align: BW barycenter of client feature Gaussians, Monge maps, one-shot heads."""

    Params = SlotAlignParams

    def run(self, fed: Federation, ctx: ServerContext) -> dict[str, float]:
        """Statistics, barycenter and maps, then each pipeline with and without alignment."""
        p: SlotAlignParams = self.params  # type: ignore[assignment]
        pids = list(fed.partition_ids)
        pca = self._pca(fed, pids) if p.pca_dim else {}
        stats, info = self._align_stats(fed, pids, pca, ctx)
        maps, align = self._maps(stats)
        self.feature_dim = int(info["feature_dim"])
        ctx.recorder.metrics(1, "align", {**info, **align})
        ready = sorted(stats)
        tau_eval = p.tau_max if p.tau_eval is None else p.tau_eval
        ctx.legend.update({
            "federated": f"SLOT-Align: aligned features, tau schedule {p.tau_mode} "
            f"({p.tau_min:g} to {p.tau_max:g}), evaluated at tau={tau_eval:g}",
            "no_align": "the same pipelines without alignment (tau = 0)",
            **{f"tau={t:g}": f"aligned, tau fixed at {t:g}" for t in p.compare_taus},
        })
        final = self._variant(fed, ctx, ready, pca, maps,
                              sa.tau_schedule(p.tau_mode, p.tau_min, p.tau_max, p.local_epochs),
                              tau_eval, "aligned")
        if p.compare_unaligned:
            ctx.extra_results["no_align"] = self._variant(
                fed, ctx, ready, pca, None, [0.0] * p.local_epochs, 0.0, "no_align")
        for tau in p.compare_taus:
            ctx.extra_results[f"tau={tau:g}"] = self._variant(
                fed, ctx, ready, pca, maps, [tau] * p.local_epochs, tau, f"tau={tau:g}")
        return {**final, **{f"align/{k}": v for k, v in {**info, **align}.items()}}

    def _pca(self, fed: Federation, pids: list[int]) -> Arrays:
        """Pooled PCA basis from the clients' scatter matrices (one extra exchange)."""
        p: SlotAlignParams = self.params  # type: ignore[assignment]
        ok = fed.ask(keys.SCATTER_MESSAGE, Payload(), pids, server_round=1).ok
        mean, basis = sa.pooled_pca(
            [r.num_examples for r in ok.values()], [r.arrays[keys.MEAN] for r in ok.values()],
            [r.arrays[keys.SCATTER] for r in ok.values()], p.pca_variance, p.pca_dim)
        return {keys.PCA_MEAN: mean, keys.PCA_BASIS: basis}

    def _align_stats(
        self, fed: Federation, pids: list[int], pca: Arrays, ctx: ServerContext
    ) -> tuple[dict[int, sa.Gaussian], dict[str, float]]:
        """Ask every client for (n, mean, covariance); reject unusable ones by name."""
        replies = fed.ask(keys.STATS_MESSAGE, Payload(arrays=pca), pids, server_round=1)
        stats = {pid: sa.Gaussian(r.num_examples, r.arrays[keys.MEAN],
                                  keys.untriu(r.arrays[keys.COV_TRIU]))
                 for pid, r in replies.ok.items()}
        sa.check_stats(stats)
        sizes = [sum(a.nbytes for a in r.arrays.values()) for r in replies.ok.values()]
        info = {"feature_dim": float(len(next(iter(stats.values())).mean)),
                "bytes_up_per_client": float(np.mean(sizes)),
                "stats_failed": float(len(replies.failed) + len(replies.missing))}
        return stats, info

    def _maps(
        self, stats: dict[int, sa.Gaussian]
    ) -> tuple[dict[int, tuple[np.ndarray, np.ndarray]], dict[str, float]]:
        """Barycenter of the client Gaussians and each client's Monge map to it."""
        p: SlotAlignParams = self.params  # type: ignore[assignment]
        gs = list(stats.values())
        weights = ([g.n for g in gs] if p.barycenter_weighting == "sample_count"
                   else [1.0] * len(gs))
        start = time.perf_counter()
        bary = sa.bw_barycenter([g.mean for g in gs], [g.cov for g in gs], np.asarray(weights),
                                tol=p.tol, max_iter=p.max_iter)
        seconds = time.perf_counter() - start
        maps = {pid: sa.monge_map(g.mean, g.cov, bary.mean, bary.cov) for pid, g in stats.items()}
        w2 = [sa.w2_gaussian(g.mean, g.cov, bary.mean, bary.cov) for g in gs]
        return maps, {"barycenter_iterations": float(bary.iterations),
                      "barycenter_residual": bary.residual, "barycenter_seconds": seconds,
                      "mean_w2_to_barycenter": float(np.mean(w2))}

    def _variant(
        self, fed: Federation, ctx: ServerContext, pids: list[int], pca: Arrays,
        maps: dict[int, tuple[np.ndarray, np.ndarray]] | None, taus: list[float],
        tau_eval: float, label: str,
    ) -> dict[str, float]:
        """One-shot training round and evaluation of every pipeline for one transport setting."""
        p: SlotAlignParams = self.params  # type: ignore[assignment]
        dim = self.feature_dim
        w0, c0 = heads.init_linear_head(dim, ctx.data.dataset.meta.num_classes,
                                        derive_seed(self.scenario.seed, "init"))
        config = {keys.TAUS: taus, keys.TAU_EVAL: tau_eval,
                  keys.PIPELINES_KEY: list(p.pipelines)}

        def body(pid: int, arrays: Arrays) -> Payload:
            mapping = {} if maps is None else {keys.MAP_A: maps[pid][0], keys.MAP_B: maps[pid][1]}
            return Payload(arrays={**pca, **mapping, **arrays}, config=config)

        ok = fed.ask(keys.TRAIN_MESSAGE, {q: body(q, keys.head_arrays(w0, c0)) for q in pids},
                     pids, server_round=1).ok
        evaluation = {keys.ALL_W: np.stack([r.arrays[keys.HEAD_W] for r in ok.values()]),
                      keys.ALL_C: np.stack([r.arrays[keys.HEAD_C] for r in ok.values()]),
                      **self._merge(ok)}
        scored = fed.ask(keys.EVAL_MESSAGE, {q: body(q, evaluation) for q in sorted(ok)},
                         sorted(ok), server_round=1).ok
        metrics = macro(scored)
        ctx.recorder.metrics(1, label, metrics)
        return metrics

    def _merge(self, ok: dict[int, Payload]) -> Arrays:
        """O-FedAvg head (equal or sample-count weights) and pooled class sums."""
        p: SlotAlignParams = self.params  # type: ignore[assignment]
        w = np.array([1.0 if p.head_weighting == "equal" else r.num_examples
                      for r in ok.values()])
        w = w / w.sum()
        replies = list(ok.values())
        return {keys.HEAD_W: np.einsum("k,kcd->cd", w, [r.arrays[keys.HEAD_W] for r in replies]),
                keys.HEAD_C: np.einsum("k,kc->c", w, [r.arrays[keys.HEAD_C] for r in replies]),
                keys.PROTO_SUM: sum(r.arrays[keys.PROTO_SUM] for r in ok.values()),
                keys.PROTO_COUNT: sum(r.arrays[keys.PROTO_COUNT] for r in ok.values())}


def macro(replies: dict[int, Payload]) -> dict[str, float]:
    """Mean and std over clients (each client one domain) of every reported accuracy."""
    names = sorted({k for r in replies.values() for k in r.metrics})
    out: dict[str, float] = {}
    for name in names:
        values = [r.metrics[name] for r in replies.values() if name in r.metrics]
        out[f"local_test/{name}"] = float(np.mean(values))
        out[f"local_test/{name}_std"] = float(np.std(values))
    return out

"""SparseSSM server (arXiv 2506.09613): federated calibration, one-shot A_log pruning, broadcast.

Clients send only per-layer calibration sums of their private text (``Σ Ā_t``,
``Σ h_{t-1}²``, the state Gram, the window count; with ``upload: window`` only
the first ``⌈k_frac T⌉`` steps, all the ``window`` weighting reads); the
server adds them up, which equals calibrating on the pooled windows exactly,
prunes, and scores the pruned model on the held-out split. ``calibration:
sequential`` is the paper's layer-sequential form, one exchange per layer
(layer ``i`` calibrated under the masks of layers ``< i``); ``one_round``
calibrates every layer on the dense model in one exchange (an approximation);
``both`` runs the two and reports the difference.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from pydantic import Field

from flowerbed.core.messages import Payload
from flowerbed.core.registry import Params, register
from flowerbed.methods.sparsessm import learner as keys
from flowerbed.strategies.base import ServerContext, Strategy
from flowerbed.strategies.federation import Federation


class SparseSsmStrategyParams(Params):
    """Which calibration schedule(s), and what clients upload."""

    calibration: Literal["sequential", "one_round", "both"] = "both"
    upload: Literal["full", "window"] = Field(
        "full", description="window: only the first ceil(k_frac T) steps (window weighting only)")
    k_frac: float = Field(0.25, gt=0, le=1)


@register("strategy", "sparsessm", requires=((keys.STATS_MESSAGE,),))
class SparseSsmStrategy(Strategy):
    """Server-side SparseSSM: sum the clients' calibration statistics, prune, score."""

    Params = SparseSsmStrategyParams

    def run(self, fed: Federation, ctx: ServerContext) -> dict[str, float]:
        """Each method under each schedule; the first schedule's figures are the result."""
        from flowerbed.methods.sparsessm.algorithm_scan import perplexity

        p: SparseSsmStrategyParams = self.params  # type: ignore[assignment]
        lp: keys.SparseSsmLearnerParams = ctx.learner.params  # type: ignore[assignment]
        if p.upload == "window" and (lp.time_mode or "power") != "window":
            raise ValueError("strategy.upload: window needs learner.time_mode: window")
        if lp.pattern == "structured":
            raise ValueError("strategy sparsessm: learner.pattern structured changes layer "
                             "shapes; run it as a local task (strategy: local)")
        dense = keys.cached_model(lp.model)
        test = ctx.learner.heldout()  # type: ignore[attr-defined]
        t_len = lp.calib_window or ctx.data.dataset.x_train.shape[1] - 1
        schedules = ["sequential", "one_round"] if p.calibration == "both" else [p.calibration]
        results: dict[str, dict[str, float]] = {}
        for schedule in schedules:
            out = {"ppl_dense": perplexity(dense, test)}
            for method in lp.methods:
                model = copy.deepcopy(dense)
                spec = keys.spec_of(lp, method, self.scenario.seed)
                spec = dataclasses.replace(spec, sequential=schedule == "sequential")
                res, info = self._prune(fed, model, spec, p, t_len)
                out[f"ppl_{method}"] = perplexity(model, test, res.keeps)
                out[f"rounds_{method}"] = float(res.rounds)
                out.update({f"{k}_{method}": v for k, v in info.items()})
            ctx.recorder.metrics(1, schedule, out)
            results[schedule] = out
        final = results[schedules[0]]
        for schedule in schedules[1:]:
            ctx.extra_results[schedule] = results[schedule]
        return final

    def _prune(self, fed: Federation, model: Any, spec: Any, p: SparseSsmStrategyParams,
               t_len: int) -> tuple[Any, dict[str, float]]:
        """Prune ``model`` with statistics summed over the clients' replies."""
        from flowerbed.methods.sparsessm import algorithm as ss
        from flowerbed.methods.sparsessm.algorithm_scan import LayerStats, merge_stats

        sent: list[float] = []

        def stats_for(layers: Sequence[int], keeps: Sequence[Any]) -> dict[int, LayerStats]:
            arrays = keys.keeps_to_arrays(list(keeps))
            for i, block in enumerate(model.backbone.layers[: min(layers)]):
                arrays[f"{keys.ALOG}{i}"] = block.mixer.A_log.detach().numpy().copy()
            steps = ss.window_steps(t_len, p.k_frac) if p.upload == "window" else 0
            config = {keys.LAYERS: list(layers), keys.STEPS: steps}
            ok = fed.ask(keys.STATS_MESSAGE, Payload(arrays=arrays, config=config),
                         fed.partition_ids, server_round=1 + min(layers)).ok
            if not ok:
                raise RuntimeError("sparsessm: no client returned calibration statistics")
            sent.append(float(np.mean([sum(a.nbytes for a in r.arrays.values())
                                       for r in ok.values()])))
            return {i: merge_stats([LayerStats(r.arrays[f"{keys.ABAR}{i}"],
                                               r.arrays[f"{keys.H2}{i}"],
                                               r.arrays[f"{keys.GRAM}{i}"], r.num_examples)
                                    for r in ok.values()]) for i in layers}

        if p.upload == "window":
            spec = dataclasses.replace(spec, k_frac=p.k_frac)
        res = ss.prune_model(model, spec, stats_for if spec.needs_stats else None)
        return res, {"bytes_up_per_client": float(sum(sent))}

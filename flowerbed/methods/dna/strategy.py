"""Strategy ``dna``: one statistics round selects the FDUs, then FedAvg of the FDU probe.

DNA (arXiv 2601.22515) on a federation of clients that each hold a few labelled real
and generated images (:mod:`flowerbed.methods.dna.learner`):

1. ``query.dna_stats``: each client sends per-unit sufficient statistics of every
   backbone layer (:class:`flowerbed.methods.dna.algorithm.LayerStats`); the server adds them,
   which gives exactly the pooled statistics, and runs layer localisation, triadic
   scoring and Kneedle truncation on the sums: the federated FDU set is the pooled one
   (checked in the run against a selection on the pooled rows, ``dna_fdus_match_pooled``).
2. ``train.dna_probe``: for each probe arm (the FDUs, and the baselines: all units of
   the chosen layer, as many random units, top-k by discriminability, the final layer),
   ``rounds`` rounds of FedAvg of the logistic probe, standardised with the pooled
   statistics; ``train.dna_finetune``: FedAvg of the fine-tuned last blocks.

Every arm is scored on the dataset's test split (seen and unseen generators) by the
server with the learner's code. Bytes per client are reported for the statistics and
for the client's images as they are (uint8), the alternative of sending the images.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
from pydantic import Field

from flowerbed.core.messages import Arrays, Payload
from flowerbed.core.registry import Params, register
from flowerbed.core.seeds import derive_seed
from flowerbed.methods.dna import algorithm as dna
from flowerbed.methods.dna import learner as K
from flowerbed.strategies.base import ServerContext, Strategy
from flowerbed.strategies.federation import Federation

log = logging.getLogger("flowerbed")


class DnaStrategyParams(Params):
    """In-run check of the federated selection against the pooled one."""

    pooled_check: bool = Field(True, description="also select on the pooled rows and compare")


def weighted_mean(arrays: list[Arrays], weights: list[float]) -> Arrays:
    """Example-weighted mean of float arrays; other dtypes (counters) from the first reply."""
    total = float(sum(weights))
    if total <= 0:
        raise ValueError("dna: no client reported training examples")
    out: Arrays = {}
    for key, first in arrays[0].items():
        if np.issubdtype(first.dtype, np.floating):
            out[key] = np.sum([w * a[key] for a, w in zip(arrays, weights, strict=True)],
                              axis=0) / total
        else:
            out[key] = first
    return out


@register("strategy", "dna", requires=((K.STATS_MESSAGE, K.PROBE_MESSAGE, K.FINETUNE_MESSAGE),))
class DnaStrategy(Strategy):
    """DNA: federated unit statistics, FDU selection on the server, FedAvg of the probes."""

    Params = DnaStrategyParams

    def run(self, fed: Federation, ctx: ServerContext) -> dict[str, float]:
        """Statistics round, selection, then each arm's FedAvg; test metrics of every arm."""
        learner = ctx.learner
        if not isinstance(learner, K.DnaLearner):
            raise TypeError(f"strategy dna needs learner dna, got {type(learner).__name__}")
        self.check_learner(learner)
        replies = fed.ask(K.STATS_MESSAGE, Payload(), server_round=0)
        for pid, reason in replies.failed.items():
            log.warning("dna: client %d failed its statistics: %s", pid, reason)
        ok = [r for r in replies.ok.values() if r.num_examples > 0]
        if not ok:
            raise RuntimeError("dna: no client sent statistics")
        names = tuple(ok[0].config[K.LAYERS])
        merged = dna.merge([[dna.LayerStats.from_arrays(r.arrays, str(i))
                             for i in range(len(names))] for r in ok])
        plan = learner.plan(names, merged)
        meta = ctx.data.dataset.meta
        out: dict[str, float] = plan.summary()
        out["comm/stats_bytes_per_client"] = float(np.mean(
            [sum(a.nbytes for a in r.arrays.values()) for r in ok]))
        out["comm/image_bytes_per_client"] = float(np.mean(
            [r.num_examples * meta.num_features for r in ok]))  # uint8 pixels
        out["comm/clients"] = float(len(ok))
        if self.params.pooled_check:  # type: ignore[attr-defined]
            out |= self._pooled_check(ctx, learner, plan)
        self._record(ctx, plan)
        p: K.DnaParams = learner.p
        for arm in p.arms:
            if arm == "finetune":
                if learner.cut_layer() is not None:
                    out |= self._finetune(fed, learner, meta)
                continue
            out |= self._probe(fed, ctx, learner, plan, arm, meta)
        ctx.recorder.metrics(self.scenario.rounds, "dna", out)
        return {f"test/{k}": v for k, v in out.items() if "/" not in k} | {
            k: v for k, v in out.items() if "/" in k}

    @staticmethod
    def check_learner(learner: K.DnaLearner) -> None:
        """Refuse, in one line, learner options that need the images on the server."""
        if learner.p.localisation != "statistics" or learner.p.triad != "statistics":
            raise ValueError("strategy dna: learner.localisation and learner.triad must be "
                             "'statistics' (the server sees statistics only, not images)")

    def _pooled_check(self, ctx: ServerContext, learner: K.DnaLearner, plan: K.Plan
                      ) -> dict[str, float]:
        x, y = ctx.data.pooled_train()
        pooled = learner.plan(*learner.stats(x, y, ctx.data.dataset.meta))
        a, b = plan.selection, pooled.selection
        same = a.layer == b.layer and np.array_equal(a.fdus, b.fdus)
        diff = float(np.max(np.abs(a.scores.triadic - b.scores.triadic))) \
            if a.layer == b.layer else float("inf")
        return {"dna_fdus_match_pooled": float(same), "dna_triadic_max_abs_diff": diff}

    def _record(self, ctx: ServerContext, plan: K.Plan) -> None:
        sel, prof = plan.selection, plan.selection.profile
        ctx.recorder.write_json("dna_selection.json", {
            "layers": list(plan.names), "chosen": plan.names[sel.layer], "knee": sel.knee,
            "fdus": sel.fdus, "triadic": sel.scores.triadic,
            "discriminability": sel.scores.discriminability, "stability": sel.scores.stability,
            "independence": sel.scores.independence,
            "profile": {k: getattr(prof, k) for k in (
                "shift", "semantic", "decoupling", "map_shift", "entropy", "score")},
            "transition": prof.transition,
        })

    def _probe(self, fed: Federation, ctx: ServerContext, learner: K.DnaLearner,
               plan: K.Plan, arm: str, meta: Any) -> dict[str, float]:
        """FedAvg of one arm's logistic probe, then its test metrics."""
        layer, units = plan.sets[arm]
        mean, std = plan.standardisation(arm)
        w, b = np.zeros(len(units)), 0.0
        up = 0.0
        for r in range(1, self.scenario.rounds + 1):
            arrays = {K.UNITS: units, K.MEAN: mean, K.STD: std, K.W: w, K.B: np.array([b])}
            config = {K.LAYERS: int(layer), K.ITERS: learner.p.local_iters, K.ARM: arm}
            ok = [x for x in fed.ask(K.PROBE_MESSAGE, Payload(arrays, config),
                                     server_round=r).ok.values() if x.num_examples > 0]
            avg = weighted_mean([x.arrays for x in ok], [x.num_examples for x in ok])
            w, b = avg[K.W], float(avg[K.B][0])
            up = float(np.mean([sum(a.nbytes for a in x.arrays.values()) for x in ok]))
            if arm == "fdu":
                score = learner.score_arm(plan, arm, learner.detector(plan, arm, w, b), meta)
                ctx.recorder.metrics(r, "dna_fdu", {
                    "test/acc_seen": score.get("fdu_acc_seen", float("nan")),
                    "test/acc_unseen": score.get("fdu_acc_unseen", float("nan"))})
        metrics = learner.score_arm(plan, arm, learner.detector(plan, arm, w, b), meta)
        return metrics | {f"comm/{arm}_probe_bytes_up_per_client_round": up}

    def _finetune(self, fed: Federation, learner: K.DnaLearner, meta: Any) -> dict[str, float]:
        """FedAvg of the fine-tuned tail, then its test metrics."""
        import torch

        tail = learner.tail(derive_seed(self.scenario.seed, "dna", "finetune"))
        state = {k: v.detach().numpy().copy() for k, v in tail.state_dict().items()}
        for r in range(1, self.scenario.rounds + 1):
            config = {K.ITERS: learner.p.finetune_round_epochs}
            ok = [x for x in fed.ask(K.FINETUNE_MESSAGE, Payload(state, config),
                                     server_round=r).ok.values() if x.num_examples > 0]
            state = weighted_mean([x.arrays for x in ok], [x.num_examples for x in ok])
        tail.load_state_dict({k: torch.as_tensor(np.asarray(v)) for k, v in state.items()})
        bytes_up = float(sum(v.nbytes for v in state.values()))
        return learner.score_tail(tail, meta) | {
            "comm/finetune_bytes_up_per_client_round": bytes_up}

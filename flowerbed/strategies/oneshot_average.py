"""One-shot model averaging: one ``train`` round, then a sample-size-weighted mean of weights.

The federated use of closed-form local estimators (e.g. the self-distilled ridge
students of Dang, Patil, Rinaldo, arXiv 2602.17565): each client fits once, the
server averages the returned arrays (FedAvg's rule, McMahan et al. 2017, applied a
single time) and scores the average on the global test split. Optionally each
client also scores its own, personalised, weights and the average on its held-out
split, so "average" and "keep local" are compared on identical data.
"""

from __future__ import annotations

import numpy as np
from pydantic import Field

from flowerbed.clients.learner import SupervisedLearner
from flowerbed.core.messages import Arrays, Payload, Replies
from flowerbed.core.registry import SUPERVISED, Params, register
from flowerbed.core.seeds import derive_seed
from flowerbed.strategies.base import ServerContext, Strategy
from flowerbed.strategies.federation import Federation


class OneShotAverageParams(Params):
    """Which clients train, and whether personalised weights are evaluated too."""

    fraction_train: float = Field(1.0, gt=0, le=1)
    personalized_eval: bool = Field(
        True, description="also score each client's own weights and the average on its local split"
    )


def weighted_average(arrays: list[Arrays], weights: list[float]) -> Arrays:
    """Weighted mean of same-shaped array dicts (weights need not sum to one).

    Examples
    --------
    >>> weighted_average([{"w": np.array([0.0])}, {"w": np.array([3.0])}], [2, 1])["w"]
    array([1.])
    """
    total = float(np.sum(weights))
    if not arrays or total <= 0:
        raise ValueError("need at least one reply with a positive weight")
    return {
        name: np.asarray(
            sum(w * np.asarray(a[name], dtype=float) for a, w in zip(arrays, weights, strict=True))
        )
        / total
        for name in arrays[0]
    }


def mean_metrics(replies: Replies) -> dict[str, float]:
    """Example-weighted mean of every metric the ok replies report."""
    sums: dict[str, float] = {}
    counts: dict[str, float] = {}
    for reply in replies.ok.values():
        for name, value in reply.metrics.items():
            sums[name] = sums.get(name, 0.0) + reply.num_examples * value
            counts[name] = counts.get(name, 0.0) + reply.num_examples
    return {k: sums[k] / counts[k] for k in sums if counts[k] > 0}


@register("strategy", "oneshot_average", requires=(SUPERVISED,))
class OneShotAverage(Strategy):
    """One-shot averaging of locally fitted weights (one train ask, no further rounds)."""

    Params = OneShotAverageParams

    def run(self, fed: Federation, ctx: ServerContext) -> dict[str, float]:
        """Collect local fits once, average them, evaluate; return server test metrics."""
        p: OneShotAverageParams = self.params  # type: ignore[assignment]
        learner = ctx.learner
        if not isinstance(learner, SupervisedLearner):
            raise TypeError(
                f"oneshot_average needs a learner with weights; got {type(learner).__name__}"
            )
        meta = ctx.data.dataset.meta
        init = learner.init_arrays(meta, derive_seed(self.scenario.seed, "init"))
        cohort = fed.sample(p.fraction_train, 1)
        replies = fed.ask(
            "train", Payload(arrays=init), cohort, server_round=1, expected_arrays=init
        )
        ctx.recorder.metrics(
            1, "train", {f"train/{k}": v for k, v in mean_metrics(replies).items()}
        )
        local = {pid: r.arrays for pid, r in replies.ok.items()}
        merged = weighted_average(
            list(local.values()), [r.num_examples for r in replies.ok.values()]
        )
        scores = learner.score(merged, ctx.data.dataset.x_test, ctx.data.dataset.y_test, meta)
        final = {f"test/{k}": v for k, v in scores.items()}
        ctx.recorder.metrics(1, "server_eval", final)
        if p.personalized_eval:
            final.update(self._local_eval(fed, ctx, merged, local))
        return final

    def _local_eval(
        self, fed: Federation, ctx: ServerContext, merged: Arrays, local: dict[int, Arrays]
    ) -> dict[str, float]:
        """Score the average and each client's own weights on the clients' held-out splits."""
        pids = sorted(local)
        shared = mean_metrics(fed.ask("evaluate", Payload(arrays=merged), pids, server_round=1))
        own = mean_metrics(
            fed.ask(
                "evaluate", {pid: Payload(arrays=local[pid]) for pid in pids}, pids, server_round=1
            )
        )
        ctx.recorder.metrics(1, "evaluate", {f"local_test/{k}": v for k, v in shared.items()})
        ctx.recorder.metrics(1, "personalized_eval", {f"local_test/{k}": v for k, v in own.items()})
        ctx.extra_results["personalized"] = {f"local_test/{k}": v for k, v in own.items()}
        ctx.legend["personalized"] = (
            "each client's own model on its held-out rows (local_test/ metrics), mean over "
            "clients"
        )
        return {f"local_test/{k}": v for k, v in shared.items()}

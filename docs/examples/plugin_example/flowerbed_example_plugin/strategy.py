"""Strategy ``pooled_centroids``: one round of class sums, the pooled centroids, evaluation."""

from __future__ import annotations

from pydantic import Field

from flowerbed.core.messages import Payload, Replies
from flowerbed.core.registry import Params, register
from flowerbed.strategies.base import ServerContext, Strategy
from flowerbed.strategies.federation import Federation
from flowerbed_example_plugin import algorithm


class PooledCentroidsParams(Params):
    """Which share of the clients sends its class sums."""

    fraction: float = Field(1.0, gt=0, le=1, description="share of clients asked (seeded)")


def weighted_mean(replies: Replies, metric: str) -> float:
    """Example-weighted mean of one metric over the usable replies."""
    total = sum(r.num_examples for r in replies.ok.values())
    weighted = sum(r.num_examples * r.metrics[metric] for r in replies.ok.values())
    return weighted / total if total else 0.0


@register("strategy", "pooled_centroids", params=PooledCentroidsParams,
          requires=(("query.class_sums", "evaluate.centroids"),))
class PooledCentroids(Strategy):
    """Nearest-centroid classifier from the clients' summed class statistics (example plugin)."""

    def run(self, fed: Federation, ctx: ServerContext) -> dict[str, float]:
        """Ask for sums, add them, score the centroids on the server and on every client."""
        p: PooledCentroidsParams = self.params  # type: ignore[assignment]
        cohort = fed.sample(p.fraction, server_round=1)
        replies = fed.ask("query.class_sums", Payload(), cohort, server_round=1)
        sums = sum(r.arrays["sums"] for r in replies.ok.values())
        counts = sum(r.arrays["counts"] for r in replies.ok.values())
        shrinkage = self.scenario.learner.shrinkage  # type: ignore[attr-defined]
        centres = algorithm.centroids(sums, counts, shrinkage)
        test = ctx.data.dataset
        final = {"test/accuracy": algorithm.accuracy(centres, test.x_test, test.y_test)}
        ctx.recorder.metrics(1, "server_eval", final)
        evaluated = fed.ask("evaluate.centroids", Payload(arrays={"centroids": centres}),
                            server_round=1)
        local = {"local_test/accuracy": weighted_mean(evaluated, "accuracy")}
        ctx.recorder.metrics(1, "evaluate", local)
        return {**final, **local}

"""Learner ``centroids``: each client's class sums, and scores of centroids it is sent."""

from __future__ import annotations

from pydantic import Field

from flowerbed.clients.learner import Learner, TaskContext
from flowerbed.core.messages import Payload
from flowerbed.core.registry import Params, register
from flowerbed.data.base import ClientData
from flowerbed_example_plugin import algorithm


class CentroidsParams(Params):
    """How far the centroids are pulled towards the overall mean."""

    shrinkage: float = Field(0.0, ge=0, le=1, description="0: class means; 1: the overall mean")


@register("learner", "centroids", params=CentroidsParams)
class CentroidsLearner(Learner):
    """Nearest-centroid classifier: class sums up, centroids down (example plugin).

    Handlers answer the messages the ``pooled_centroids`` strategy sends:
    ``query.class_sums`` and ``evaluate.centroids``. ``run_local`` makes it a
    local task too, so the ``centralized`` and ``local_only`` baselines run it
    on pooled data and on each client alone.
    """

    def query_class_sums(self, data: ClientData, payload: Payload, ctx: TaskContext) -> Payload:
        """The client's per-class sums and counts (nothing else leaves the client)."""
        del payload, ctx
        sums, counts = algorithm.class_sums(data.x_train, data.y_train, data.meta.num_classes)
        return Payload(arrays={"sums": sums, "counts": counts}, num_examples=data.num_train)

    def evaluate_centroids(self, data: ClientData, payload: Payload, ctx: TaskContext) -> Payload:
        """Accuracy of the received centroids on the client's held-out rows."""
        del ctx
        acc = algorithm.accuracy(payload.arrays["centroids"], data.x_test, data.y_test)
        return Payload(metrics={"accuracy": acc}, num_examples=len(data.y_test))

    def run_local(self, data: ClientData, ctx: TaskContext) -> Payload:
        """Centroids of this data's training rows, scored on its held-out rows."""
        del ctx
        shrinkage = self.params.shrinkage  # type: ignore[attr-defined]
        sums, counts = algorithm.class_sums(data.x_train, data.y_train, data.meta.num_classes)
        centres = algorithm.centroids(sums, counts, shrinkage)
        acc = algorithm.accuracy(centres, data.x_test, data.y_test)
        return Payload(metrics={"local_test/accuracy": acc}, num_examples=len(data.y_test))

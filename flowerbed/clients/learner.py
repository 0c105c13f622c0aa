"""The learner contract: what runs on a client, routed by message type."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from flowerbed.core.messages import Arrays, Payload
from flowerbed.core.registry import Params as BaseParams
from flowerbed.core.scenario import Scenario
from flowerbed.data.base import ClientData, DatasetMeta

Handler = Callable[[ClientData, Payload, "TaskContext"], Payload]


@dataclass(frozen=True)
class TaskContext:
    """What a learner may know about the message it is handling.

    ``seed`` is derived from the root seed, the partition id, the message type
    and the server round, so a learner that seeds everything from it is
    reproducible no matter which worker process runs it.
    """

    scenario: Scenario
    partition_id: int
    server_round: int
    seed: int


class Learner:
    """Client-side logic of a method, independent of Flower.

    A learner exposes message handlers: a method ``train`` answers
    ``train`` / ``train.default`` messages, ``evaluate`` answers ``evaluate``,
    and ``query_<action>``, ``train_<action>``, ``evaluate_<action>`` answer
    ``<category>.<action>``. Each takes ``(data, payload, ctx)`` and returns a
    :class:`Payload`; it must not keep per-client state in ``self`` (the same
    instance serves many clients in one worker process).
    """

    Params: ClassVar[type[BaseParams]] = BaseParams

    def __init__(self, params: BaseParams, *, scenario: Scenario) -> None:
        self.params = params
        self.scenario = scenario

    @classmethod
    def actions(cls) -> list[str]:
        """Message types this learner answers, e.g. ``["evaluate.default", "train.default"]``."""
        found = []
        for attr in dir(cls):
            if attr in ("train", "evaluate") and callable(getattr(cls, attr)):
                found.append(f"{attr}.default")
            for category in ("query", "train", "evaluate"):
                prefix = category + "_"
                if attr.startswith(prefix) and callable(getattr(cls, attr)):
                    found.append(f"{category}.{attr[len(prefix) :]}")
        return sorted(found)

    def handler(self, message_type: str) -> Handler:
        """The bound method answering ``message_type`` (``category[.action]``)."""
        category, _, action = message_type.partition(".")
        action = action or "default"
        name = category if action == "default" else f"{category}_{action}"
        fn = getattr(self, name, None)
        if fn is None or not callable(fn):
            raise ValueError(
                f"learner {type(self).__name__} has no handler for {message_type!r}; "
                f"it answers: {', '.join(self.actions())}"
            )
        result: Handler = fn
        return result


class SupervisedLearner(Learner):
    """A learner with trainable weights: enough for FedAvg-style strategies and baselines.

    Subclasses implement :meth:`init_arrays`, :meth:`fit` and :meth:`score`;
    the ``train`` and ``evaluate`` handlers are built from them, and the
    ``centralized`` and ``local_only`` baselines call them directly.
    """

    def init_arrays(self, meta: DatasetMeta, seed: int) -> Arrays:
        """Initial global weights for a dataset with this metadata."""
        raise NotImplementedError

    def fit(
        self,
        arrays: Arrays,
        x: Any,
        y: Any,
        meta: DatasetMeta,
        seed: int,
        epochs: int | None = None,
    ) -> tuple[Arrays, dict[str, float]]:
        """Train from ``arrays`` on ``(x, y)``; return new weights and training metrics."""
        raise NotImplementedError

    def score(self, arrays: Arrays, x: Any, y: Any, meta: DatasetMeta) -> dict[str, float]:
        """Metrics of the weights on ``(x, y)`` (e.g. ``loss``, ``accuracy``)."""
        raise NotImplementedError

    def epochs_per_round(self) -> int:
        """Local epochs one ``train`` message runs (baselines scale by rounds)."""
        return 1

    def train(self, data: ClientData, payload: Payload, ctx: TaskContext) -> Payload:
        """Local training from the received global weights."""
        arrays, metrics = self.fit(payload.arrays, data.x_train, data.y_train, data.meta, ctx.seed)
        return Payload(arrays=arrays, metrics=metrics, num_examples=data.num_train)

    def evaluate(self, data: ClientData, payload: Payload, ctx: TaskContext) -> Payload:
        """Metrics of the received weights on the client's held-out split."""
        del ctx
        if len(data.y_test) == 0:
            return Payload(num_examples=0)
        metrics = self.score(payload.arrays, data.x_test, data.y_test, data.meta)
        return Payload(metrics=metrics, num_examples=len(data.y_test))

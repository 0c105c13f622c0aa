"""The Flower subclasses behind strategy ``fedavg`` (:mod:`flowerbed.strategies.fedavg`).

Kept apart from the registered strategy and its params, which a scenario's
validation imports, so that only running the strategy imports Flower.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg

from flowerbed.core import keys
from flowerbed.core.messages import Payload
from flowerbed.core.seeds import derive_seed
from flowerbed.strategies.base import ServerContext
from flowerbed.strategies.fedavg import seeded_random
from flowerbed.strategies.federation import (
    Federation,
    _note_availability,
    _sender,
    ensure_enough,
)
from flowerbed.strategies.grids import DelegatingGrid


class FlowerGridView(DelegatingGrid):
    """A ``Grid`` for Flower's own strategies that keeps flowerbed's guarantees.

    Node ids are listed in partition-id order (so Flower's sampling, seeded by
    the caller, picks the same partitions every run), replies come back in
    partition-id order (so aggregation sums in a fixed order), replies with
    non-finite values are dropped as failed, and every phase is recorded.
    """

    def __init__(self, federation: Federation) -> None:
        super().__init__(federation.grid)
        self.fed = federation
        self.server_round = 0

    def get_node_ids(self) -> list[int]:
        """Node ids of the connected partitions, in partition-id order."""
        return [self.fed.node_of[p] for p in self.fed.partition_ids]

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        """Send, then return valid replies (and error replies) in partition-id order."""
        messages = list(messages)
        if not messages:
            return []
        message_type = messages[0].metadata.message_type
        asked = sorted(self.fed.pid_of[m.metadata.dst_node_id] for m in messages)
        # A train reply must carry arrays shaped like the model it was sent.
        expected = None
        if message_type.startswith("train"):
            expected = Payload.from_record(messages[0].content).arrays or None
        available = self.fed.available(asked, self.server_round)
        on_time = set(available.on_time)
        messages = [m for m in messages if self.fed.pid_of[m.metadata.dst_node_id] in on_time]
        raw = list(self.fed.grid.send_and_receive(messages, timeout=timeout))
        replies = self.fed.sort_replies(raw, asked, expected, sent=messages)
        _note_availability(replies, available)
        self.fed.recorder.replies(message_type, self.server_round, replies)
        ensure_enough(
            message_type,
            self.server_round,
            replies,
            len(asked),
            self.fed.scenario.federation.min_replies,
        )
        by_pid = {
            self.fed.pid_of[n]: m for m in raw if (n := _sender(m, messages)) in self.fed.pid_of
        }
        keep = [p for p in sorted(by_pid) if p in replies.ok or by_pid[p].has_error()]
        return [by_pid[p] for p in keep]


class SeededFedAvg(FedAvg):
    """Flower's FedAvg with cohorts drawn from the scenario seed and metrics recorded."""

    def __init__(
        self, root_seed: int, view: FlowerGridView, ctx: ServerContext, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.root_seed = root_seed
        self.view = view
        self.ctx = ctx

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Flower's train messages, its cohort drawn from the scenario seed."""
        self.view.server_round = server_round
        with seeded_random(derive_seed(self.root_seed, "sample", "train", server_round)):
            return super().configure_train(server_round, arrays, config, grid)

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Flower's evaluate messages, its cohort drawn from the scenario seed."""
        self.view.server_round = server_round
        with seeded_random(derive_seed(self.root_seed, "sample", "evaluate", server_round)):
            return super().configure_evaluate(server_round, arrays, config, grid)

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Flower's aggregate; its train metrics are recorded."""
        arrays, metrics = super().aggregate_train(server_round, replies)
        if metrics:
            self.ctx.recorder.metrics(server_round, "train", _train_split(metrics))
        return arrays, metrics

    def aggregate_evaluate(
        self, server_round: int, replies: Iterable[Message]
    ) -> MetricRecord | None:
        """Flower's aggregate; its metrics are recorded as ``local_test/...``."""
        metrics = super().aggregate_evaluate(server_round, replies)
        if metrics:
            named = {
                f"local_test/{k}": float(v)  # type: ignore[arg-type]
                for k, v in metrics.items()
                if k != keys.NUM_EXAMPLES
            }
            self.ctx.recorder.metrics(server_round, "evaluate", named)
        return metrics


def _train_split(metrics: MetricRecord) -> dict[str, float]:
    return {f"train/{k}": float(v) for k, v in metrics.items() if k != keys.NUM_EXAMPLES}  # type: ignore[arg-type,misc]

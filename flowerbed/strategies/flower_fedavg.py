"""The Flower subclasses behind ``fedavg`` and every Flower strategy run by name.

See :mod:`flowerbed.strategies.fedavg` and :mod:`flowerbed.strategies.flower_strategies`.

Kept apart from the registered strategy and its params, which a scenario's
validation imports, so that only running the strategy imports Flower.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import flwr.serverapp.strategy as flower
import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.app.message import arrayrecord
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
    An ``evaluate`` reply that evaluated nothing (a client without local test
    rows: no metrics, ``num_examples`` 0) is left out of what Flower
    aggregates, and recorded as ``empty_clients``: Flower refuses to average
    metric records whose keys differ, and such a reply would weigh 0 anyway.
    """

    def __init__(self, federation: Federation) -> None:
        super().__init__(federation.grid)
        self.fed = federation
        self.server_round = 0
        self._node_ids: list[int] | None = None
        #: Reply message id -> partition id, for the last :meth:`send_and_receive`.
        self.replied: dict[str, int] = {}

    def get_node_ids(self) -> list[int]:
        """Node ids of the connected partitions, in partition-id order.

        With virtual clients these are virtual ids (one per client, built once);
        Flower's strategy copies the list each time it samples, its one cost
        that grows with the population (milliseconds at a million clients).
        """
        if self._node_ids is None or len(self._node_ids) != len(self.fed.node_of):
            self._node_ids = [self.fed.node_of[p] for p in self.fed.partition_ids]
        return self._node_ids

    def client_of(self, reply: Message) -> int:
        """The partition id a reply of the last :meth:`send_and_receive` answers for."""
        return self.replied[reply.metadata.message_id]

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
        if self.fed.virtual:
            messages = [self._through_worker(m) for m in messages]
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
        if self.fed.virtual:
            sent_to = self.fed.client_of(messages)
            by_pid = {
                sent_to[m.metadata.reply_to_message_id]: m
                for m in raw
                if m.metadata.reply_to_message_id in sent_to
            }
        else:
            by_pid = {
                self.fed.pid_of[n]: m
                for m in raw
                if (n := _sender(m, messages)) in self.fed.pid_of
            }
        empty = set(replies.empty()) if message_type.startswith("evaluate") else set()
        keep = [
            p for p in sorted(by_pid)
            if (p in replies.ok and p not in empty) or by_pid[p].has_error()
        ]
        self.replied = {by_pid[p].metadata.message_id: p for p in keep}
        return [by_pid[p] for p in keep]

    def _through_worker(self, message: Message) -> Message:
        """A Flower strategy's message to a virtual node, sent through a worker node."""
        meta = message.metadata
        pid = self.fed.pid_of[meta.dst_node_id]
        return self.fed.address(message.content, pid, meta.message_type, meta.group_id)


#: Attributes of the seeded strategies that are wiring, not state.
_NOT_STATE = frozenset({"root_seed", "view", "ctx", "sent_dtypes"})


class SeededFedAvg(FedAvg):
    """Flower's FedAvg with cohorts drawn from the scenario seed and metrics recorded."""

    def __init__(
        self, root_seed: int, view: FlowerGridView, ctx: ServerContext, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.root_seed = root_seed
        self.view = view
        self.ctx = ctx

    def state_dict(self) -> dict[str, Any]:
        """Everything Flower's strategy keeps between rounds, as checkpointable data.

        Taken from the instance itself, not a list per class: FedOpt's
        ``current_arrays``, ``m_t`` and ``v_t``, FedAvgM's momentum, a DP
        wrapper's clipping norm, and any attribute a later Flower adds, are
        all included (an attribute of a type that cannot be saved is an error
        at the first checkpoint, never dropped). Callables (metric
        aggregation functions) are configuration, rebuilt with the strategy.
        """
        return instance_state(self, _NOT_STATE)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Put back what :meth:`state_dict` returned."""
        for k, v in state.items():
            setattr(self, k, from_state(v))

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


class KeepDtypes(SeededFedAvg):
    """Casts the aggregate back to the dtypes of the arrays the round sent.

    Flower's server optimisers (FedOpt's bias corrections, QFedAvg's step)
    promote float32 weights to float64; a torch client would cast them back
    on loading anyway, and flowerbed refuses replies whose dtypes differ from
    what was sent, so the global model keeps the model's own dtypes.
    """

    sent_dtypes: dict[str, np.dtype[Any]] | None = None

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Remember the dtypes sent, then configure as the strategy does."""
        self.sent_dtypes = {k: np.dtype(a.dtype) for k, a in arrays.items()}
        return super().configure_train(server_round, arrays, config, grid)

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """The strategy's aggregate, each array in the dtype it was sent in."""
        with _no_forced_gc():
            arrays, metrics = super().aggregate_train(server_round, replies)
        dtypes = self.sent_dtypes or {}
        if arrays is not None and any(
            np.dtype(a.dtype) != dtypes.get(k, np.dtype(a.dtype)) for k, a in arrays.items()
        ):
            cast = {
                k: a.numpy().astype(dtypes.get(k, a.dtype), copy=False) for k, a in arrays.items()
            }
            arrays = Payload(arrays=cast).to_array_record()
        return arrays, metrics


class _SkipCollect:
    """Stands in for the ``gc`` module in Flower's ``arrayrecord``: no forced collections."""

    @staticmethod
    def collect(generation: int = 2) -> int:
        del generation
        return 0


@contextmanager
def _no_forced_gc() -> Iterator[None]:
    """Skip the full ``gc.collect()`` Flower forces per reply in ``to_numpy_ndarrays``.

    Bulyan and QFedAvg decode every reply with ``keep_input=False``, and each
    call forces a full collection, about 1 s in a process holding torch (10 s
    of a 2-round, 4-client run). Python's automatic collection still runs.
    """
    saved = arrayrecord.gc
    arrayrecord.gc = _SkipCollect  # type: ignore[assignment]
    try:
        yield
    finally:
        arrayrecord.gc = saved


@functools.cache
def seeded_strategy(flower_class: str) -> type[SeededFedAvg]:
    """``SeededFedAvg``'s seeding and recording on top of Flower's ``flower_class``.

    Every Flower strategy but the DP wrappers derives from ``FedAvg``, so the
    class ``(KeepDtypes, flower_class)`` runs the strategy's own configure
    and aggregate steps inside the seeded, recorded ones (Python's MRO puts
    ``SeededFedAvg``'s overrides first and Flower's subclass next). FedAvg
    itself is :class:`KeepDtypes`: its average turns a BatchNorm's integer
    ``num_batches_tracked`` into a float, which the next round's replies
    (integers again) would not match.

    Examples
    --------
    >>> [c.__name__ for c in seeded_strategy("FedAdam").__mro__[:5]]
    ['SeededFedAdam', 'KeepDtypes', 'SeededFedAvg', 'FedAdam', 'FedOpt']
    """
    base = getattr(flower, flower_class)
    if base is FedAvg:
        return KeepDtypes
    if not issubclass(base, FedAvg):
        raise TypeError(f"{flower_class} does not derive from Flower's FedAvg")
    return type(f"Seeded{flower_class}", (KeepDtypes, base), {"__module__": __name__})


_RECORD = "__arrayrecord__"
_BYTES = "__bytes__"
_ITEMS = "__items__"


def instance_state(obj: object, skip: frozenset[str]) -> dict[str, Any]:
    """Every attribute of ``obj`` but ``skip`` and callables, as checkpointable data."""
    return {k: to_state(v) for k, v in vars(obj).items() if k not in skip and not callable(v)}


def to_state(value: Any) -> Any:
    """``value`` with Flower's ``ArrayRecord``s as ``{"__arrayrecord__": {name: array}}``.

    Bytes (a serialised XGBoost booster) become ``{"__bytes__": uint8 array}``,
    a dict with keys other than strings ``{"__items__": [[key, value], ...]}``.
    """
    if isinstance(value, ArrayRecord):
        return {_RECORD: Payload.from_record_arrays(value)}
    if isinstance(value, (bytes, bytearray)):
        return {_BYTES: np.frombuffer(bytes(value), dtype=np.uint8).copy()}
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value):
            return {k: to_state(v) for k, v in value.items()}
        # Keys such as FedXgbCyclic's node ids: kept as (key, value) pairs.
        return {_ITEMS: [[k, to_state(v)] for k, v in value.items()]}
    if isinstance(value, (list, tuple)):
        return [to_state(v) for v in value]
    return value


def from_state(value: Any) -> Any:
    """The inverse of :func:`to_state`."""
    if isinstance(value, dict):
        if set(value) == {_RECORD}:
            return Payload(arrays=dict(value[_RECORD])).to_array_record()
        if set(value) == {_BYTES}:
            return np.asarray(value[_BYTES], dtype=np.uint8).tobytes()
        if set(value) == {_ITEMS}:
            return {k: from_state(v) for k, v in value[_ITEMS]}
        return {k: from_state(v) for k, v in value.items()}
    if isinstance(value, list):
        return [from_state(v) for v in value]
    return value


def _train_split(metrics: MetricRecord) -> dict[str, float]:
    return {f"train/{k}": float(v) for k, v in metrics.items() if k != keys.NUM_EXAMPLES}  # type: ignore[arg-type,misc]

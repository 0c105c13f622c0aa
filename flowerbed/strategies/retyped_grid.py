"""A grid that sends a Flower strategy's train messages as another message type.

Lets a method whose server is one of Flower's strategies (MOON's is FedAvg)
reach its own client handler: every ``train`` message goes out as
``message_type`` with ``config`` added to its config record. Imported only
when a strategy runs (it imports Flower).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

from flwr.app import ConfigRecord, Message
from flwr.serverapp import Grid

from flowerbed.core import keys
from flowerbed.strategies.federation import Federation
from flowerbed.strategies.grids import DelegatingGrid


class RetypedTrainGrid(DelegatingGrid):
    """Forwards everything; ``train`` messages leave as ``message_type`` with ``config``."""

    def __init__(self, inner: Grid, message_type: str, config: Mapping[str, Any]) -> None:
        super().__init__(inner)
        self.message_type = message_type
        self.config = dict(config)

    def _retype(self, message: Message) -> Message:
        if message.metadata.message_type != "train":
            return message
        content = copy.copy(message.content)
        record = content.get(keys.CONFIG)
        content[keys.CONFIG] = ConfigRecord({**(record or {}), **self.config})  # type: ignore[dict-item]
        return Message(
            content,
            dst_node_id=message.metadata.dst_node_id,
            message_type=self.message_type,
            group_id=message.metadata.group_id,
        )

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        """Send (train messages retyped) and return the replies."""
        return self.inner.send_and_receive([self._retype(m) for m in messages], timeout=timeout)


def retyped_federation(fed: Federation, message_type: str, config: Mapping[str, Any]) -> Federation:
    """A view of ``fed`` whose train messages leave as ``message_type`` with ``config``."""
    view = copy.copy(fed)
    view.grid = RetypedTrainGrid(fed.grid, message_type, config)
    return view

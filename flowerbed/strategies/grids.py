"""A ``Grid`` that forwards everything to another: the base of every grid wrapper."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from flwr.app import Message
from flwr.serverapp import Grid


class DelegatingGrid(Grid):
    """Forwards every ``Grid`` call to ``inner``; subclasses override what they change.

    Examples
    --------
    >>> class CountingGrid(DelegatingGrid):
    ...     calls = 0
    ...     def get_node_ids(self):
    ...         self.calls += 1
    ...         return super().get_node_ids()
    """

    def __init__(self, inner: Grid) -> None:
        self.inner = inner

    def set_run(self, run: Any) -> None:
        """Forwarded."""
        self.inner.set_run(run)

    @property
    def run(self) -> Any:
        """Forwarded."""
        return self.inner.run

    def create_message(self, *args: Any, **kwargs: Any) -> Message:
        """Forwarded (deprecated in Flower; kept for the ABC)."""
        return self.inner.create_message(*args, **kwargs)

    def get_node_ids(self) -> Iterable[int]:
        """Forwarded."""
        return self.inner.get_node_ids()

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        """Forwarded."""
        return self.inner.push_messages(messages)

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        """Forwarded."""
        return self.inner.pull_messages(message_ids)

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        """Forwarded."""
        return self.inner.send_and_receive(messages, timeout=timeout)

"""An in-memory Flower LinkState whose undelivered messages are indexed by node.

Flower's simulation engine delivers messages with one loop that asks the
LinkState, every 0.1 s and for every node in turn, for that node's next
undelivered message (``get_message_ins(node_id, limit=1)``). The stock
``InMemoryLinkState`` answers each call by walking the whole message store and
re-validating every stored message, so one sweep costs O(nodes x messages)
under the state lock: at 1,000 clients the loop took most of a core and made
the time per client update grow with the number of clients. Here each node's
undelivered message ids are kept in insertion order, so a call looks only at
that node's own messages and the sweep is O(nodes).

What a call returns is unchanged: the same messages, in the same order, each
checked (expiry, federation membership) before it is handed out and marked
delivered. One difference: the stock store also drops *other* nodes' expired
messages while it walks; here they are dropped when their own node is polled,
which the delivery loop does every 0.1 s anyway.

:func:`indexed_link_state` installs it for the ``run_simulation`` calls made
inside the ``with`` block.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import secrets
import threading
from collections.abc import Iterator
from queue import Queue
from typing import Any

from flwr.app import Message
from flwr.server.superlink.linkstate import InMemoryLinkState, LinkStateFactory
from flwr.supercore.constant import FLWR_IN_MEMORY_DB_NAME
from flwr.supercore.date import now
from flwr.superlink.grid.inmemory_grid import InMemoryGrid

log = logging.getLogger(__name__)


class IndexedLinkState(InMemoryLinkState):
    """``InMemoryLinkState`` with a per-destination index of undelivered messages.

    ``deliver_all`` hands out every undelivered message of a node at once,
    whatever ``limit`` the caller gives. Flower's delivery loop asks each node
    for one message per 0.1 s sweep, which is right for one node per client;
    the worker nodes of virtual clients (:mod:`flowerbed.core.population`)
    each carry many clients' messages per round, all runnable at once.
    """

    #: Ignore ``limit``: a node's every undelivered message per call.
    deliver_all = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # node id -> undelivered message ids, insertion-ordered (a dict used as a set)
        self._pending: dict[int, dict[str, None]] = {}
        #: Set when a message is stored for delivery / a reply is stored: the
        #: delivery loop (:func:`prompt_delivery`) and the grid's reply polling
        #: wake on them instead of sleeping out their interval.
        self.ins_stored = threading.Event()
        self.res_stored = threading.Event()

    def store_message_ins(self, message: Message) -> str | None:
        """Store one message, as Flower does, and index it under its destination."""
        with self.lock:
            message_id = super().store_message_ins(message)
            if message_id is not None and message_id in self.message_ins_store:
                dst = message.metadata.dst_node_id
                self._pending.setdefault(dst, {})[message_id] = None
        self.ins_stored.set()
        return message_id

    def store_message_res(self, message: Message) -> str | None:
        """Store one reply, as Flower does, and wake whoever waits for replies."""
        message_id = super().store_message_res(message)
        self.res_stored.set()
        return message_id

    def get_message_ins(
        self,
        node_id: int,
        limit: int | None,
        *,
        run_id: int | None = None,
    ) -> list[Message]:
        """Undelivered messages for ``node_id`` (at most ``limit``), marked delivered."""
        if limit is not None and limit < 1:
            raise AssertionError("`limit` must be >= 1")
        if self.deliver_all:
            limit = None
        found: list[Message] = []
        with self.lock:
            pending = self._pending.get(node_id)
            if not pending:
                return found
            for msg_id in list(pending):
                # Expired messages, or messages whose nodes left the federation, go here.
                self._check_stored_messages({msg_id})
                msg = self.message_ins_store.get(msg_id)
                if msg is None or msg.metadata.delivered_at != "":
                    del pending[msg_id]
                    continue
                if run_id is not None and msg.metadata.run_id != run_id:
                    continue
                found.append(msg)
                del pending[msg_id]
                if limit and len(found) == limit:
                    break
            if not pending:
                del self._pending[node_id]
        delivered_at = now().isoformat()
        for msg in found:
            msg.metadata.delivered_at = delivered_at
        return found

    def num_pending(self) -> int:
        """How many message ids the index holds (stale ones included until polled)."""
        with self.lock:
            return sum(len(ids) for ids in self._pending.values())


class IndexedLinkStateFactory(LinkStateFactory):
    """A ``LinkStateFactory`` whose in-memory state is an :class:`IndexedLinkState`."""

    #: The state's :attr:`IndexedLinkState.deliver_all`.
    deliver_all = False

    def state(self) -> Any:
        """The one state instance (created on first use), as Flower's factory does."""
        if self.state_instance is not None or self.database != FLWR_IN_MEMORY_DB_NAME:
            return super().state()
        with self._state_lock:
            if self.state_instance is None:
                state = IndexedLinkState(
                    self.federation_manager, self.objectstore_factory.store()
                )
                state.deliver_all = self.deliver_all
                self.state_instance = state
            return self.state_instance


def simulation_state(
    factory_cls: type[LinkStateFactory], num_nodes: int, run_id: int, task_id: int
) -> tuple[InMemoryGrid, list[int]]:
    """A fresh state and grid set up as ``run_simulation`` sets them up (for tests and benchmarks).

    One run in Flower's no-op federation and ``num_nodes`` online nodes. The
    caller sets ``TaskIdentity`` (messages read their run id from it).
    """
    from flwr.proto.task_pb2 import Task  # pylint: disable=no-name-in-module
    from flwr.server.superlink.linkstate.in_memory_linkstate import RunRecord
    from flwr.supercore.constant import NOOP_FEDERATION_ID
    from flwr.supercore.object_store import ObjectStoreFactory
    from flwr.supercore.run import Run
    from flwr.superlink.federation import NoOpFederationManager

    factory = factory_cls(FLWR_IN_MEMORY_DB_NAME, NoOpFederationManager(), ObjectStoreFactory())
    state = factory.state()
    if not isinstance(state, InMemoryLinkState):
        raise TypeError(f"{factory_cls.__name__} did not build an in-memory state")
    run = Run.create_empty(run_id=run_id)
    run.primary_task_id = task_id
    run.federation_id = NOOP_FEDERATION_ID
    state.run_ids[run_id] = RunRecord(run=run)
    state.task_store[task_id] = Task(task_id=task_id, run_id=run_id)
    nodes = []
    for _ in range(num_nodes):
        node_id = state.create_node("sim", "sim", secrets.token_bytes(32), heartbeat_interval=1e9)
        state.acknowledge_node_heartbeat(node_id=node_id, heartbeat_interval=1e9)
        nodes.append(node_id)
    grid = InMemoryGrid(state_factory=factory)
    grid.set_run(run)
    return grid, nodes


class DeliverAllLinkStateFactory(IndexedLinkStateFactory):
    """:class:`IndexedLinkStateFactory` whose state hands out a node's every message at once."""

    deliver_all = True


@contextlib.contextmanager
def indexed_link_state(deliver_all: bool = False) -> Iterator[None]:
    """Make ``flwr.simulation.run_simulation`` use :class:`IndexedLinkState` inside the block.

    Flower builds its LinkState factory inside ``run_simulation`` from a name
    in that module, which is the one hook it offers. If a Flower release moves
    it, the stock state is used and a warning says so (with ``deliver_all``,
    virtual clients then run one message per worker node and 0.1 s).
    """
    # ``flwr.simulation.run_simulation`` is also the name of the function it defines.
    module = importlib.import_module("flwr.simulation.run_simulation")

    if getattr(module, "LinkStateFactory", None) is not LinkStateFactory:
        log.warning(
            "this Flower release builds its LinkState differently; "
            "using Flower's unindexed in-memory state (slower with many clients)"
        )
        yield
        return
    factory: type[IndexedLinkStateFactory] = IndexedLinkStateFactory
    if deliver_all:
        factory = DeliverAllLinkStateFactory
    module.LinkStateFactory = factory  # type: ignore[attr-defined]
    try:
        yield
    finally:
        module.LinkStateFactory = LinkStateFactory  # type: ignore[attr-defined]


def add_messages_promptly(
    state: Any, queue: Queue[Message], nodes_mapping: dict[int, int], f_stop: threading.Event
) -> None:
    """Flower's delivery loop (``vce_api.add_messages_to_queue``), woken by new messages.

    The same sweep over the nodes, handing each node's undelivered messages
    to the workers' queue; between sweeps it waits up to 0.1 s as Flower's
    does, but a message stored meanwhile (:attr:`IndexedLinkState.ins_stored`)
    starts the next sweep at once. Flower's loop left every phase waiting
    50 ms on average for its first sweep: 5 s of a 100-round cross-device
    run whose clients train in milliseconds.
    """
    wake: threading.Event | None = getattr(state, "ins_stored", None)
    while not f_stop.is_set():
        if wake is not None:
            wake.clear()
        for node_id in nodes_mapping:
            for msg in state.get_message_ins(node_id=node_id, limit=1):
                queue.put(msg)
        if wake is None:
            f_stop.wait(0.1)
        else:
            wake.wait(0.1)


@contextlib.contextmanager
def prompt_delivery() -> Iterator[None]:
    """Run Flower's simulation engine with :func:`add_messages_promptly` inside the block.

    ``vce_api.run_api`` starts its delivery thread from a name in its module
    (the hook, as for the LinkState); if a Flower release moves it, Flower's
    own loop runs and a warning says so.
    """
    module = importlib.import_module("flwr.server.superlink.fleet.vce.vce_api")
    original = getattr(module, "add_messages_to_queue", None)
    if original is None:
        log.warning("this Flower release delivers messages differently; rounds poll every 0.1 s")
        yield
        return
    module.add_messages_to_queue = add_messages_promptly  # type: ignore[attr-defined]
    try:
        yield
    finally:
        module.add_messages_to_queue = original  # type: ignore[attr-defined]


__all__ = [
    "IndexedLinkState",
    "IndexedLinkStateFactory",
    "add_messages_promptly",
    "indexed_link_state",
    "prompt_delivery",
    "simulation_state",
]

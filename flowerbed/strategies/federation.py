"""The ``Federation`` facade: how strategies talk to clients, by partition id."""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from flowerbed.core import keys
from flowerbed.core.availability import RoundAvailability, round_availability
from flowerbed.core.messages import Arrays, Payload, Replies, check_reply
from flowerbed.core.population import VIRTUAL_NODE_BASE, flower_nodes, virtual_clients
from flowerbed.core.seeds import derive_seed

if TYPE_CHECKING:
    from flwr.app import Message, RecordDict
    from flwr.serverapp import Grid

    from flowerbed.core.records import Recorder
    from flowerbed.core.scenario import Scenario


class RoundFailedError(RuntimeError):
    """Too few clients answered a phase; finished rounds are already saved."""


def required_replies(min_replies: float, asked: int) -> int:
    """Absolute number of replies needed: ``min_replies`` < 1 is a fraction of ``asked``."""
    if min_replies < 1:
        return max(1, math.ceil(min_replies * asked))
    return min(int(min_replies), asked)


def ensure_enough(
    message_type: str, server_round: int, replies: Replies, asked: int, min_replies: float
) -> None:
    """Raise :class:`RoundFailedError` when fewer usable replies came than required."""
    need = required_replies(min_replies, asked)
    if len(replies.ok) < need:
        failed = replies.failed or "none"
        missing = replies.missing or "none"
        raise RoundFailedError(
            f"{message_type} round {server_round}: {len(replies.ok)} usable replies, "
            f"need {need} (failed: {failed}, missing: {missing})"
        )


class ShiftedIds(Mapping[int, int]):
    """``start .. start + count - 1`` mapped to themselves plus ``shift``, stored as three ints.

    The partition id <-> virtual node id maps of a virtual-client federation:
    a million clients cost nothing to map.

    Examples
    --------
    >>> ids = ShiftedIds(3, start=0, shift=100)
    >>> ids[2], ids.get(3), list(ids), len(ids)
    (102, None, [0, 1, 2], 3)
    """

    def __init__(self, count: int, start: int, shift: int) -> None:
        self.count, self.start, self.shift = count, start, shift

    def __getitem__(self, key: int) -> int:
        if not isinstance(key, (int, np.integer)) or not 0 <= key - self.start < self.count:
            raise KeyError(key)
        return int(key) + self.shift

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.start, self.start + self.count))

    def __len__(self) -> int:
        return self.count


class Federation:
    """Partition-id view of a Flower ``Grid``.

    Strategies never see node ids: :meth:`connect` maps each node to the
    partition id it serves (one ``query.setup`` message, which also ships the
    resolved scenario), and :meth:`ask` sends one message type to a set of
    partitions and sorts the answers into ok / failed / missing.

    With virtual clients (:mod:`flowerbed.core.population`) the grid's nodes
    are worker nodes: :meth:`connect` sets each of them up once, every message
    names the partition it is for (:meth:`address`), and replies are matched
    to partitions by the message they answer, not by the node that sent them.
    ``node_of`` then maps a partition id to a *virtual* node id (what Flower's
    own strategies sample from; :meth:`address` swaps in a worker node).
    """

    def __init__(self, grid: Grid, scenario: Scenario, recorder: Recorder) -> None:
        self.grid = grid
        self.scenario = scenario
        self.recorder = recorder
        self.virtual = virtual_clients(scenario)
        self.node_of: Mapping[int, int] = {}
        self.pid_of: Mapping[int, int] = {}
        #: Virtual clients: the worker nodes that serve them, in the order used.
        self.workers: list[int] = []

    @property
    def partition_ids(self) -> Sequence[int]:
        """Connected partition ids, sorted (every client's, with virtual clients)."""
        if self.virtual:
            return range(len(self.node_of))
        return sorted(self.node_of)

    def wait_for_nodes(self, timeout: float) -> list[int]:
        """Block until the engine's nodes are registered (Flower's round-1 race).

        One node per client, or the worker nodes of virtual clients.
        """
        expected = flower_nodes(self.scenario)
        deadline = time.monotonic() + timeout
        while len(nodes := list(self.grid.get_node_ids())) < expected:
            if time.monotonic() > deadline:
                raise RoundFailedError(
                    f"only {len(nodes)} of {expected} client nodes connected within {timeout:.0f} s"
                )
            time.sleep(0.05)
        return sorted(nodes)

    def connect(self, extra: Mapping[str, str] | None = None) -> None:
        """Wait for the nodes, learn their partition ids and ship the scenario.

        ``extra`` adds config entries to the setup message (where the clients
        keep their state).
        """
        # Flower only once a federation talks: validating a scenario must stay light.
        from flwr.app import Message

        timeout = self.scenario.federation.timeout
        nodes = self.wait_for_nodes(timeout)
        setup = Payload(
            config={
                keys.SCENARIO_YAML: self.scenario.to_yaml(),
                keys.SCENARIO_DIGEST: self.scenario.digest(),
                **(extra or {}),
            }
        )
        messages = [
            Message(setup.to_record(), dst_node_id=n, message_type=keys.SETUP) for n in nodes
        ]
        if self.virtual:
            self._connect_workers(messages, timeout)
            return
        failures: dict[int, str] = {}
        node_of: dict[int, int] = {}
        pid_of: dict[int, int] = {}
        for reply in self.grid.send_and_receive(messages, timeout=timeout):
            node = _sender(reply, messages)
            if reply.has_error():
                failures[node] = _short_reason(reply.error.reason or "")
                continue
            pid = int(Payload.from_record(reply.content).config[keys.PARTITION_ID])
            node_of[pid], pid_of[node] = node, pid
        self.node_of, self.pid_of = node_of, pid_of
        if failures:
            raise RoundFailedError(setup_failure(failures, len(messages)))
        missing = set(range(self.scenario.num_clients)) - set(self.node_of)
        if missing:
            raise RoundFailedError(
                f"clients with partition ids {sorted(missing)} did not answer setup"
            )
        self.recorder.event("connected", clients=len(self.node_of))

    def _connect_workers(self, messages: list[Message], timeout: float) -> None:
        """Virtual clients: every worker node set up once; every client reachable through them."""
        failures: dict[int, str] = {}
        workers: list[int] = []
        for reply in self.grid.send_and_receive(messages, timeout=timeout):
            node = _sender(reply, messages)
            if reply.has_error():
                failures[node] = _short_reason(reply.error.reason or "")
            else:
                workers.append(node)
        if failures:
            raise RoundFailedError(setup_failure(failures, len(messages)))
        if not workers:
            raise RoundFailedError("no worker node answered setup")
        n = self.scenario.num_clients
        self.workers = sorted(workers)
        self.node_of = ShiftedIds(n, start=0, shift=VIRTUAL_NODE_BASE)
        self.pid_of = ShiftedIds(n, start=VIRTUAL_NODE_BASE, shift=-VIRTUAL_NODE_BASE)
        self.recorder.event("connected", clients=n, worker_nodes=len(self.workers))

    def address(
        self, content: RecordDict, pid: int, message_type: str, group_id: str = ""
    ) -> Message:
        """A message of ``content`` for partition ``pid``: to its node, or through a worker.

        With virtual clients the content gains a :data:`keys.VIRTUAL_CLIENT`
        record naming ``pid`` (the caller's ``content`` is left as it was).
        """
        from flwr.app import ConfigRecord, Message, RecordDict

        if not self.virtual:
            return Message(
                content, dst_node_id=self.node_of[pid], message_type=message_type,
                group_id=group_id,
            )
        record = ConfigRecord({keys.PARTITION_ID: int(pid), keys.NUM_PARTITIONS: len(self.node_of)})
        routed = RecordDict({**dict(content.items()), keys.VIRTUAL_CLIENT: record})
        worker = self.workers[int(pid) % len(self.workers)]
        return Message(routed, dst_node_id=worker, message_type=message_type, group_id=group_id)

    def client_of(self, sent: Iterable[Message]) -> dict[str, int]:
        """Message id -> partition id of each sent message (after the grid gave them ids)."""
        out = {}
        for msg in sent:
            if self.virtual:
                record = msg.content[keys.VIRTUAL_CLIENT]
                pid = record[keys.PARTITION_ID]  # type: ignore[index]
                out[msg.metadata.message_id] = int(pid)  # type: ignore[arg-type]
            elif msg.metadata.dst_node_id in self.pid_of:
                out[msg.metadata.message_id] = self.pid_of[msg.metadata.dst_node_id]
        return out

    def sample(self, fraction: float, server_round: int, phase: str = "train") -> list[int]:
        """Seeded client cohort: depends only on (root seed, phase, round).

        The draw picks positions among the sorted partition ids, so it costs
        O(cohort) at any population (numpy's draw without replacement keeps a
        set of the picks once the population exceeds 10,000 and the cohort is
        under a fiftieth of it) and gives the same cohort as drawing from the
        list of ids itself, as earlier releases did.
        """
        pids = self.partition_ids
        k = max(1, round(fraction * len(pids)))
        gen = np.random.default_rng(derive_seed(self.scenario.seed, "sample", phase, server_round))
        return sorted(int(pids[int(i)]) for i in gen.choice(len(pids), size=k, replace=False))

    def ask(
        self,
        message_type: str,
        payload: Payload | Mapping[int, Payload],
        clients: Iterable[int] | None = None,
        *,
        server_round: int = 0,
        timeout: float | None = None,
        expected_arrays: Arrays | None = None,
        min_replies: float | None = None,
    ) -> Replies:
        """Send ``message_type`` to ``clients`` (default: all) and collect replies.

        Parameters
        ----------
        message_type
            ``query.<action>``, ``train.<action>`` or ``evaluate.<action>``.
        payload
            One payload for everyone, or one per partition id.
        clients
            Partition ids to ask.
        server_round
            Written into the config so learners derive round-specific seeds.
        timeout
            Seconds to wait (default: the scenario's ``federation.timeout``).
        expected_arrays
            When given, replies whose arrays differ in names/shapes/dtypes fail.
        min_replies
            Overrides ``federation.min_replies`` for this ask.

        Raises
        ------
        RoundFailedError
            Fewer usable replies than ``min_replies`` require.
        """
        pids = list(self.partition_ids) if clients is None else sorted(clients)
        available = self.available(pids, server_round)
        messages = []
        # One payload for everyone: serialise its arrays once, not once per client.
        shared = None
        if not isinstance(payload, Mapping) and payload.arrays:
            shared = payload.to_array_record()
        for pid in available.on_time:
            body = payload[pid] if isinstance(payload, Mapping) else payload
            config = {**body.config, keys.SERVER_ROUND: server_round}
            record = Payload(body.arrays, config, body.metrics, body.num_examples).to_record(
                shared
            )
            messages.append(self.address(record, pid, message_type, str(server_round)))
        raw = self.grid.send_and_receive(
            messages, timeout=timeout or self.scenario.federation.timeout
        )
        replies = self.sort_replies(raw, pids, expected_arrays, sent=messages)
        _note_availability(replies, available)
        self.recorder.replies(message_type, server_round, replies)
        ensure_enough(
            message_type,
            server_round,
            replies,
            len(pids),
            self.scenario.federation.min_replies if min_replies is None else min_replies,
        )
        return replies

    def available(self, pids: list[int], server_round: int) -> RoundAvailability:
        """Who answers in time this round, by the scenario's availability profile.

        Clients that drop or are late are never sent the message: in virtual
        time their reply would not arrive, and real waiting would block
        Flower's worker pool for everyone else.
        """
        params = self.scenario.clients.availability
        return round_availability(params, self.scenario.seed, server_round, pids)

    def sort_replies(
        self,
        raw: Iterable[Message],
        asked: list[int],
        expected: Arrays | None = None,
        sent: Iterable[Message] = (),
    ) -> Replies:
        """Classify raw Flower replies by partition id, in partition-id order.

        ``sent`` (the messages asked) attributes the SuperLink's own error
        replies, such as "node unavailable" for a dead SuperNode, to the
        partition they were meant for.
        """
        out = Replies()
        sent = list(sent)
        by_message = self.client_of(sent) if self.virtual else {}
        for msg in raw:
            if self.virtual:
                pid = by_message.get(msg.metadata.reply_to_message_id)
            else:
                pid = self.pid_of.get(_sender(msg, sent))
            if pid is None:
                continue
            if msg.has_error():
                out.failed[pid] = _short_reason(msg.error.reason or "")
                continue
            body = Payload.from_record(msg.content)
            reason = check_reply(body, expected)
            if reason:
                out.failed[pid] = reason
            else:
                out.ok[pid] = body
        out.ok = dict(sorted(out.ok.items()))
        out.failed = dict(sorted(out.failed.items()))
        out.missing = [p for p in asked if p not in out.ok and p not in out.failed]
        return out


def _sender(reply: Message, sent: Iterable[Message]) -> int:
    """Node a reply stands for: its source node, or the node its question went to.

    The SuperLink's own error replies (source node 1, e.g. "node unavailable"
    once a dead SuperNode's heartbeat lapsed) are matched to the message they answer.
    """
    from flwr.common.constant import SUPERLINK_NODE_ID

    if reply.metadata.src_node_id != SUPERLINK_NODE_ID:
        return int(reply.metadata.src_node_id)
    to = reply.metadata.reply_to_message_id
    for msg in sent:
        if msg.metadata.message_id == to:
            return int(msg.metadata.dst_node_id)
    return int(reply.metadata.src_node_id)


def setup_failure(failures: Mapping[int, str], asked: int) -> str:
    """One line for the nodes whose client could not be set up: each reason once, with its nodes.

    Examples
    --------
    >>> setup_failure({1: "ValueError: no model", 2: "ValueError: no model"}, 2)
    'client setup failed on 2 of 2 nodes: ValueError: no model'
    >>> setup_failure({1: "A", 3: "B", 4: "A"}, 4)
    'client setup failed on 3 of 4 nodes: A (nodes 1, 4); B (node 3)'
    """
    by_reason: dict[str, list[int]] = {}
    for node, reason in sorted(failures.items()):
        by_reason.setdefault(reason, []).append(node)
    head = f"client setup failed on {len(failures)} of {asked} nodes: "
    if len(by_reason) == 1 and len(failures) == asked:
        return head + next(iter(by_reason))
    parts = [
        f"{reason} (node{'s' if len(nodes) > 1 else ''} {', '.join(map(str, nodes))})"
        for reason, nodes in by_reason.items()
    ]
    return head + "; ".join(parts)


_FLOWER_REASON = re.compile(r"<class '([^']*)'>:<'(.*)'>?", re.DOTALL)


def _short_reason(reason: str) -> str:
    """``RuntimeError: message`` from Flower's ``<class '...'>:<'...'>`` error reasons.

    On Ray the class reads ``ray.exceptions.RayTaskError(ClientAppException)``
    and the message is Ray's traceback dump; the innermost class name and the
    last non-blank line (the learner's own message) are what a user needs.

    Examples
    --------
    >>> _short_reason("<class 'builtins.RuntimeError'>:<'boom'>")
    'RuntimeError: boom'
    >>> _short_reason("<class 'ray.exceptions.RayTaskError(ClientAppException)'>:<'boom'>")
    'ClientAppException: boom'
    """
    text = str(reason).strip()
    match = _FLOWER_REASON.search(text)
    if match:
        cls, message = match.groups()
        inner = cls[cls.rfind("(") + 1 :].rstrip(")") if "(" in cls else cls
        name = inner.rsplit(".", 1)[-1]
        message = message.removesuffix("'>").replace("\\n", "\n")
        lines = [ln.strip() for ln in message.splitlines() if ln.strip()]
        # Flower prefixes a ClientAppException banner; the learner's message is last.
        return f"{name}: {lines[-1] if lines else ''}"
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1].removesuffix("'>") if lines else "unknown error"


def _note_availability(replies: Replies, available: RoundAvailability) -> None:
    replies.dropped = list(available.dropped)
    replies.late = list(available.late)
    replies.virtual_time = float(available.round_time)

"""An in-process ``Grid``: the same ServerApp and ClientApp, no Ray, no threads."""

from __future__ import annotations

import logging
import traceback
from collections.abc import Iterable
from typing import Any
from uuid import uuid4

from flwr.app import Context, Error, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.common.constant import SUPERLINK_NODE_ID
from flwr.serverapp import Grid
from flwr.supercore.task_identity import TaskIdentity

from flowerbed.core import keys
from flowerbed.platform.progress import activity, waiting_text

log = logging.getLogger("flowerbed")

#: Flower's error code for an exception raised inside a ClientApp.
CLIENT_APP_RAISED_EXCEPTION = 2


class InlineGrid(Grid):
    """Delivers each message to its node's ClientApp synchronously.

    Node ids are ``1..N`` for partitions ``0..N-1``; each node keeps its own
    ``Context`` (``node_config`` and ``state``) across messages exactly as a
    SuperNode does. A ClientApp exception becomes an error reply, as in
    Flower's simulation engine.
    """

    def __init__(self, client_app: ClientApp, num_nodes: int, run_id: int = 1) -> None:
        self.client_app = client_app
        self.run_id = run_id
        # Flower stamps outgoing messages with the identity of the running task;
        # in-process there is no SuperLink to set it, so we do.
        TaskIdentity.task_id = 1
        TaskIdentity.run_id = run_id
        TaskIdentity.node_id = SUPERLINK_NODE_ID
        self.contexts = {
            pid + 1: Context(
                run_id=run_id,
                node_id=pid + 1,
                node_config={keys.PARTITION_ID: pid, keys.NUM_PARTITIONS: num_nodes},
                state=RecordDict(),
                run_config={},
            )
            for pid in range(num_nodes)
        }
        self._replies: dict[str, Message] = {}

    def set_run(self, run: Any) -> None:  # noqa: D102 - nothing to set in-process
        del run

    @property
    def run(self) -> Any:  # noqa: D102
        return None

    def create_message(  # noqa: D102 - deprecated in Flower; kept for the ABC
        self,
        content: RecordDict,
        message_type: str,
        dst_node_id: int,
        group_id: str,
        ttl: float | None = None,
    ) -> Message:
        return Message(content, dst_node_id, message_type, ttl=ttl, group_id=group_id)

    def get_node_ids(self) -> list[int]:
        """All node ids (``1..N``)."""
        return list(self.contexts)

    def _deliver(self, msg: Message) -> Message:
        context = self.contexts[msg.metadata.dst_node_id]
        try:
            reply = self.client_app(message=msg, context=context)
        except Exception as exc:  # noqa: BLE001 - becomes an error reply, as in Flower
            log.debug("client app raised:\n%s", traceback.format_exc())
            reason = f"{type(exc)}:<'{exc}'>"
            reply = Message(Error(code=CLIENT_APP_RAISED_EXCEPTION, reason=reason), reply_to=msg)
        reply.metadata.__dict__["_message_id"] = str(uuid4())
        return reply

    def push_messages(self, messages: Iterable[Message]) -> list[str]:
        """Run every message now; replies wait for :meth:`pull_messages`."""
        ids = []
        messages = list(messages)
        for i, msg in enumerate(messages):
            # Clients run right here, one after the other: say which one the run waits for.
            meta = msg.metadata
            activity(waiting_text(len(messages), i, meta.message_type, meta.group_id))
            msg.metadata.__dict__["_message_id"] = str(uuid4())
            msg.metadata.__dict__["_run_id"] = self.run_id
            ids.append(msg.metadata.message_id)
            self._replies[msg.metadata.message_id] = self._deliver(msg)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> list[Message]:
        """Replies to the given message ids (each returned once)."""
        return [self._replies.pop(i) for i in message_ids if i in self._replies]

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> list[Message]:
        """Deliver and collect; ``timeout`` is moot since delivery is synchronous."""
        del timeout
        return self.pull_messages(self.push_messages(messages))

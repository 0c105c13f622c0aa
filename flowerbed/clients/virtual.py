"""Client side of virtual clients: a worker node answering for the client a message names.

With virtual clients (:mod:`flowerbed.core.population`) a Flower node is a
worker that serves any client. The server names the client in each message
(a :data:`~flowerbed.core.keys.VIRTUAL_CLIENT` record); :func:`as_client`
turns the message and the worker's context into what a node of that client
would have received: the message without the record, and a context whose
``node_config`` holds the client's partition id. The rest of the ClientApp
(the learner, its data, its state folder, the DP mods) reads the partition
id from there, as it does for one node per client, so both modes compute the
same. The worker's ``context.state`` (the scenario the node was set up with)
is shared, not copied; per-client state lives in the client-state folders
(:mod:`flowerbed.clients.state`), keyed by partition id.
"""

from __future__ import annotations

import copy

from flwr.app import Context, Message, RecordDict

from flowerbed.core import keys


def as_client(message: Message, context: Context) -> tuple[Message, Context]:
    """The message and context of the client ``message`` is for (unchanged without a record).

    The caller's message keeps its content: the one returned is a shallow
    copy with the record left out (same metadata, so a reply to it answers
    the original).
    """
    content = message.content if message.has_content() else None
    if content is None or keys.VIRTUAL_CLIENT not in content:
        return message, context
    record = content[keys.VIRTUAL_CLIENT]
    node_config = {
        **context.node_config,
        keys.PARTITION_ID: int(record[keys.PARTITION_ID]),  # type: ignore[index,arg-type]
        keys.NUM_PARTITIONS: int(record[keys.NUM_PARTITIONS]),  # type: ignore[index,arg-type]
    }
    client = copy.copy(message)
    client.content = RecordDict({k: v for k, v in content.items() if k != keys.VIRTUAL_CLIENT})
    as_node = Context(
        run_id=context.run_id,
        node_id=context.node_id,
        node_config=node_config,
        state=context.state,
        run_config=context.run_config,
        series_id=context.series_id,
    )
    return client, as_node

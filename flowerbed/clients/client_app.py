"""The generic ClientApp: routes every message type to the scenario's learner.

A client process imports only what its scenario names: the ClientApp answers
every message type through :func:`handle` (no per-learner routes to collect),
and the scenario is validated against the named components alone, whose
modules the registry imports on first use. Importing every plugin instead
cost each Ray worker seconds and well over a hundred MiB (optional dataset
libraries it never used).
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

from flwr.app import ConfigRecord, Context, Message
from flwr.app.metadata import validate_message_type
from flwr.clientapp import ClientApp

from flowerbed.clients import attacks
from flowerbed.clients.dp_mods import with_dp_mods
from flowerbed.clients.learner import Learner, TaskContext, client_seed
from flowerbed.clients.state import remove_client
from flowerbed.clients.virtual import as_client
from flowerbed.core import keys, registry
from flowerbed.core.messages import Payload
from flowerbed.core.registry import Params
from flowerbed.core.scenario import (
    COMPONENT_FIELDS,
    LIST_COMPONENT_FIELDS,
    Scenario,
    ScenarioBase,
    validate_scenario,
)
from flowerbed.data.federated import FederatedData, federated_data

_STATE_KEY = "flowerbed"


@functools.lru_cache(maxsize=8)
def _scenario(yaml_text: str) -> Scenario:
    import yaml

    data = yaml.safe_load(yaml_text)
    scenario = _validate_named(data)
    if scenario is None:
        # Anything the narrow model cannot reproduce exactly: the full schema decides.
        scenario = validate_scenario(data, "scenario from server")
    return scenario


def _validate_named(data: Any) -> Scenario | None:
    """Validate a resolved scenario against only the components it names.

    Returns ``None`` (the caller then uses the full schema) unless the result
    round-trips to exactly ``data``, which the server's resolved scenario does.
    """
    if not isinstance(data, dict):
        return None
    try:
        wanted: list[tuple[str, str, tuple[str, ...]]] = []
        for field, kind in COMPONENT_FIELDS.items():
            block = data.get(field)
            names = () if block is None else (str(block["name"]),)
            wanted.append((field, kind, names))
        for field, kind in LIST_COMPONENT_FIELDS.items():
            blocks = data.get(field) or []
            wanted.append((field, kind, tuple(sorted({str(b["name"]) for b in blocks}))))
        model = _named_model(tuple(wanted))
        scenario = model.model_validate(data)
    except Exception:  # noqa: BLE001 - the full schema gives the proper error
        return None
    return scenario if scenario.to_dict() == data else None


@functools.lru_cache(maxsize=16)
def _named_model(wanted: tuple[tuple[str, str, tuple[str, ...]], ...]) -> type[ScenarioBase]:
    from typing import Annotated, Union

    from pydantic import Field, create_model

    fields: dict[str, Any] = {}
    for field, kind, names in wanted:
        models = [registry.get(kind, n).params for n in names]  # imports their modules
        one: Any = (
            Params if not models
            else models[0] if len(models) == 1
            else Annotated[Union[tuple(models)], Field(discriminator="name")]  # noqa: UP007
        )
        if field in LIST_COMPONENT_FIELDS:
            fields[field] = (list[one], [])
        elif not models:
            fields[field] = (None, None)
        else:
            fields[field] = (one, ...)
    model: type[ScenarioBase] = create_model(  # type: ignore[call-overload]
        "Scenario", __base__=ScenarioBase, **fields
    )
    return model


@functools.lru_cache(maxsize=8)
def _learner(yaml_text: str) -> Learner:
    scenario = _scenario(yaml_text)
    learner: Learner = registry.build("learner", scenario.component("learner"), scenario=scenario)
    return learner


@functools.lru_cache(maxsize=2)
def _data(yaml_text: str) -> FederatedData:
    """The scenario's federated data, found once per scenario text, not per message."""
    return federated_data(_scenario(yaml_text))


@functools.cache
def _limit_threads(num_cpus: float) -> None:
    """One torch/BLAS thread per client unless the scenario grants more CPUs.

    Oversubscribed threads (every worker using every core) made tiny models
    several times slower on small machines.
    """
    threads = max(1, int(num_cpus))
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    try:
        import torch

        torch.set_num_threads(threads)
    except ImportError:  # pragma: no cover - torch is a core dependency
        pass


def state_root(config: dict[str, Any], node_config: Any, engine: str) -> str:
    """The folder holding this node's client state for the run (see :mod:`.state`).

    A SuperNode's own ``state-dir`` wins; a deployed node without one uses
    the artefact cache on its own disk; simulated clients share the server's
    run folder.
    """
    run_name = str(config.get(keys.RUN_NAME, "")) or "run"
    own = str(node_config.get(keys.NODE_STATE_DIR, "") or "")
    if own:
        return str(Path(own) / run_name)
    if engine == "deployment":
        from flowerbed.core.cache import cache_dir

        return str(cache_dir() / "client_state" / run_name)
    return str(config.get(keys.STATE_DIR, ""))


def _setup(msg: Message, context: Context) -> Message:
    """Keep the resolved scenario and the state folder in the node state; answer the pid."""
    payload = Payload.from_record(msg.content)
    yaml_text = str(payload.config[keys.SCENARIO_YAML])
    engine = _scenario(yaml_text).engine.name
    context.state[_STATE_KEY] = ConfigRecord(
        {
            keys.SCENARIO_YAML: yaml_text,
            keys.STATE_DIR: state_root(dict(payload.config), context.node_config, engine),
        }
    )
    pid = int(context.node_config[keys.PARTITION_ID])
    _warm(yaml_text, pid)
    return Message(Payload(config={keys.PARTITION_ID: pid}).to_record(), reply_to=msg)


def _warm(yaml_text: str, pid: int) -> None:
    """Import the learner's modules and build the data now, while the server waits for setup.

    Otherwise the first training round pays for them in every worker, and
    round 1 took many times as long as round 2.
    """
    scenario = _scenario(yaml_text)
    _limit_threads(scenario.engine.client_resources.num_cpus)
    _warmed(yaml_text)
    _data(yaml_text).client(pid)


@functools.lru_cache(maxsize=8)
def _warmed(yaml_text: str) -> None:
    """The learner built and its one-time costs paid, once per worker and scenario."""
    _learner(yaml_text).warm()


def _cleanup_state(msg: Message, root: str, pid: int) -> Message:
    """Delete this client's state folder (``clients.keep_state: false``)."""
    if root:
        remove_client(Path(root), pid)
    return Message(Payload().to_record(), reply_to=msg)


def handle(msg: Message, context: Context) -> Message:
    """Answer one message with the learner's handler for its type."""
    message_type = msg.metadata.message_type
    if message_type == keys.SETUP:
        return _setup(msg, context)
    if _STATE_KEY not in context.state:
        raise RuntimeError("message before setup: the server must send query.setup first")
    # ``state[key]`` returns the record itself; ``state.config_records[key]`` copies the map.
    record = context.state[_STATE_KEY]
    yaml_text = str(record[keys.SCENARIO_YAML])  # type: ignore[index]
    root = str(record.get(keys.STATE_DIR, "") or "")  # type: ignore[union-attr]
    pid = int(context.node_config[keys.PARTITION_ID])
    if message_type == keys.STATE_CLEANUP:
        return _cleanup_state(msg, root, pid)
    scenario = _scenario(yaml_text)
    _limit_threads(scenario.engine.client_resources.num_cpus)
    data = _data(yaml_text).client(pid)
    payload = Payload.from_record(msg.content)
    server_round = int(payload.config.get(keys.SERVER_ROUND, 0))
    seed = client_seed(scenario, pid, message_type, server_round)
    task = TaskContext(scenario, pid, server_round, seed, Path(root) if root else None)
    handler = _learner(yaml_text).handler(message_type)
    # Malicious clients (``clients.attack``): the plain handler unless an attack is named.
    reply = attacks.answer(handler, message_type, data, payload, task, _data(yaml_text).client)
    if not isinstance(reply, Payload):
        raise TypeError(
            f"learner handler for {message_type!r} returned "
            f"{type(reply).__name__}, expected Payload"
        )
    return Message(reply.to_record(), reply_to=msg)


class GenericClientApp(ClientApp):
    """A ClientApp that answers every valid message type with :func:`handle`.

    The learner decides what it answers (an unknown action is an error reply
    naming the actions it has), so no plugin is imported to list routes.
    """

    def __call__(self, message: Message, context: Context) -> Message:
        """Answer ``message`` (``query.setup`` or any learner action)."""
        message_type = message.metadata.message_type
        if not validate_message_type(message_type):
            raise ValueError(f"Invalid message type: {message_type}")
        # Virtual clients: this node answers for the client the message names.
        message, context = as_client(message, context)
        with self._lifespan(context):
            # Client-side DP strategies: Flower's clipping mod around train messages.
            return with_dp_mods(message, context, handle)


def build_client_app() -> ClientApp:
    """The generic ClientApp (``query.setup`` and every action any learner declares)."""
    return GenericClientApp()


app = build_client_app()

__all__ = ["GenericClientApp", "app", "build_client_app", "handle"]

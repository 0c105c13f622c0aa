"""The generic ClientApp: routes every message type to the scenario's learner."""

from __future__ import annotations

import functools
import os

from flwr.app import ConfigRecord, Context, Message
from flwr.clientapp import ClientApp

from flowerbed.clients.learner import Learner, TaskContext
from flowerbed.data.federated import federated_data
from flowerbed.platform import keys, registry
from flowerbed.platform.messages import Payload
from flowerbed.platform.plugins import load_plugins
from flowerbed.platform.scenario import Scenario, validate_scenario
from flowerbed.platform.seeds import derive_seed

_STATE_KEY = "flowerbed"


@functools.lru_cache(maxsize=8)
def _scenario(yaml_text: str) -> Scenario:
    import yaml

    return validate_scenario(yaml.safe_load(yaml_text), "scenario from server")


@functools.lru_cache(maxsize=8)
def _learner(yaml_text: str) -> Learner:
    scenario = _scenario(yaml_text)
    learner: Learner = registry.build("learner", scenario.component("learner"), scenario=scenario)
    return learner


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


def _setup(msg: Message, context: Context) -> Message:
    """Keep the resolved scenario in the node state; answer with the partition id."""
    payload = Payload.from_record(msg.content)
    context.state[_STATE_KEY] = ConfigRecord(
        {keys.SCENARIO_YAML: payload.config[keys.SCENARIO_YAML]}
    )
    pid = int(context.node_config[keys.PARTITION_ID])
    return Message(Payload(config={keys.PARTITION_ID: pid}).to_record(), reply_to=msg)


def handle(msg: Message, context: Context) -> Message:
    """Answer one message with the learner's handler for its type."""
    message_type = msg.metadata.message_type
    if message_type == keys.SETUP:
        return _setup(msg, context)
    if _STATE_KEY not in context.state:
        raise RuntimeError("message before setup: the server must send query.setup first")
    yaml_text = str(context.state.config_records[_STATE_KEY][keys.SCENARIO_YAML])
    scenario = _scenario(yaml_text)
    _limit_threads(scenario.engine.client_resources.num_cpus)
    pid = int(context.node_config[keys.PARTITION_ID])
    data = federated_data(scenario).client(pid)
    payload = Payload.from_record(msg.content)
    server_round = int(payload.config.get(keys.SERVER_ROUND, 0))
    seed = derive_seed(scenario.seed, "client", pid, message_type, server_round)
    task = TaskContext(scenario, pid, server_round, seed)
    reply = _learner(yaml_text).handler(message_type)(data, payload, task)
    if not isinstance(reply, Payload):
        raise TypeError(
            f"learner handler for {message_type!r} returned "
            f"{type(reply).__name__}, expected Payload"
        )
    return Message(reply.to_record(), reply_to=msg)


def build_client_app() -> ClientApp:
    """A ClientApp answering ``query.setup`` and every action any learner declares."""
    load_plugins()
    client_app = ClientApp()
    client_app.query("setup")(handle)
    routes = {a for e in registry.entries("learner") for a in e.target.actions()}
    for route in sorted(routes):
        category, action = route.split(".")
        getattr(client_app, category)(action)(handle)
    return client_app


app = build_client_app()

__all__ = ["app", "handle"]

"""Client processes import only the plugins their scenario names, with the same results."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml
from conftest import tiny_scenario
from flwr.app import Context, Message, RecordDict

from flowerbed.clients import client_app
from flowerbed.core import keys, registry
from flowerbed.core.messages import Payload
from flowerbed.core.plugins import component_index, load_plugins, plugin_modules
from flowerbed.core.scenario import from_dict, load_scenario

ROOT = Path(__file__).resolve().parents[1]


def test_index_names_the_module_of_every_statically_registered_component():
    load_plugins()
    index = component_index()
    modules = set(plugin_modules())
    covered = 0
    for kind in registry.KINDS:
        for entry in registry.entries(kind):
            module = getattr(entry.target, "__module__", "")
            if module in modules and (kind, entry.name) in index:
                assert index[(kind, entry.name)] == module, (kind, entry.name)
                covered += 1
    # Every component whose own module is a plugin module is found by reading source.
    expected = sum(
        1
        for kind in registry.KINDS
        for e in registry.entries(kind)
        if getattr(e.target, "__module__", "") in modules
    )
    assert covered == expected > 20


def test_narrow_validation_matches_the_full_schema_for_every_scenario():
    paths = sorted((ROOT / "scenarios").glob("**/*.yaml"))
    checked = 0
    for path in paths:
        if "sweeps" in path.parts:
            continue
        full = load_scenario(path)
        narrow = client_app._validate_named(yaml.safe_load(full.to_yaml()))
        assert narrow is not None, path
        assert narrow.to_dict() == full.to_dict() and narrow.digest() == full.digest()
        checked += 1
    assert checked >= 5


def test_narrow_validation_defers_to_the_full_schema_on_unexpected_input():
    data = from_dict(tiny_scenario()).to_dict()
    data["learner"]["lr"] = "fast"  # invalid: the full schema must report it
    assert client_app._validate_named(data) is None
    assert client_app._validate_named(["not", "a", "mapping"]) is None


def _ask(app, context, message_type, payload):
    from flwr.common.constant import SUPERLINK_NODE_ID
    from flwr.supercore.task_identity import TaskIdentity

    # Messages are built as the ServerApp would (Flower needs the task identity).
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, SUPERLINK_NODE_ID
    msg = Message(payload.to_record(), dst_node_id=1, message_type=message_type)
    return Payload.from_record(app(msg, context).content)


_CHILD = r"""
import json, sys
from flowerbed.clients import client_app
text = sys.argv[1]
scenario = client_app._scenario(text)
data = client_app._data(text).client(1)
learner = client_app._learner(text)
print(json.dumps({
    "digest": scenario.digest(),
    "x_sum": float(data.x_train.sum()),
    "learner": type(learner).__name__,
    "modules": sorted(m for m in sys.modules if m.startswith("flowerbed.")),
}))
"""


def test_fresh_client_process_imports_only_the_plugins_its_scenario_names():
    scenario = load_scenario(ROOT / "scenarios" / "fqr" / "synthetic.yaml", ["num_clients=3"])
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, scenario.to_yaml()], capture_output=True, text=True,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    child = json.loads(out.stdout.strip().splitlines()[-1])
    modules = set(child["modules"])
    assert {
        "flowerbed.methods.fqr.learner",
        "flowerbed.methods.fqr.data",
        "flowerbed.data.feature_partitions",
        "flowerbed.methods.fqr.strategy",
    } <= modules
    # Plugins the scenario does not name stay unimported.
    assert not modules & {
        "flowerbed.data.statsmodels_data",
        "flowerbed.data.image_data",
        "flowerbed.data.sklearn_data",
        "flowerbed.clients.torch_learner",
        "flowerbed.methods.slot_align.learner",
        "flowerbed.methods.slot_align.strategy",
        "flowerbed.platform.baselines",
    }
    # The same scenario, data and learner as in this process, where every plugin is loaded.
    text = scenario.to_yaml()
    assert child["digest"] == client_app._scenario(text).digest() == scenario.digest()
    assert child["x_sum"] == float(client_app._data(text).client(1).x_train.sum())
    assert child["learner"] == type(client_app._learner(text)).__name__


def test_unknown_action_is_an_error_naming_the_learner_actions():
    scenario = from_dict(tiny_scenario(baselines=[]))
    ctx = Context(run_id=1, node_id=1, node_config={keys.PARTITION_ID: 0}, state=RecordDict(),
                  run_config={})
    _ask(client_app.app, ctx, keys.SETUP, Payload(config={keys.SCENARIO_YAML: scenario.to_yaml()}))
    msg = Message(Payload().to_record(), dst_node_id=1, message_type="query.nothing_here")
    try:
        client_app.app(msg, ctx)
    except ValueError as exc:
        assert "has no handler for 'query.nothing_here'" in str(exc)
        assert "train.default" in str(exc)
    else:  # pragma: no cover - the assertion below explains
        raise AssertionError("an unknown action must raise")


def test_broadcast_arrays_are_serialised_once_and_arrive_intact(monkeypatch):
    from flowerbed.core.records import Recorder
    from flowerbed.platform.inline import InlineGrid
    from flowerbed.strategies.federation import Federation

    scenario = from_dict(tiny_scenario(baselines=[]))
    fed = Federation(InlineGrid(client_app.app, scenario.num_clients), scenario,
                     Recorder(scenario, None))
    fed.connect()
    calls = []
    original = Payload.to_array_record
    monkeypatch.setattr(
        Payload, "to_array_record", lambda self: calls.append(1) or original(self)
    )
    learner = registry.build("learner", scenario.component("learner"), scenario=scenario)
    from flowerbed.data.federated import federated_data

    init = learner.init_arrays(federated_data(scenario).dataset.meta, seed=0)
    replies = fed.ask("train", Payload(arrays=init), server_round=1, expected_arrays=init)
    broadcast = len(calls)
    assert len(replies.ok) == scenario.num_clients
    # One packing for the broadcast; each client packs only its own reply.
    assert broadcast == 1 + scenario.num_clients
    # A per-client mapping still packs one record per client (no sharing across payloads).
    calls.clear()
    fed.ask("train", {p: Payload(arrays=init) for p in range(4)}, server_round=1)
    assert len(calls) == 2 * scenario.num_clients

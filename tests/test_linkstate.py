"""The indexed LinkState hands out exactly what Flower's stock in-memory state does."""

from __future__ import annotations

import importlib
import random
import time

import pytest
from flwr.app import ConfigRecord, Message, RecordDict
from flwr.server.superlink.linkstate import LinkStateFactory
from flwr.superlink.grid.inmemory_grid import InMemoryGrid

from flowerbed.platform.linkstate import (
    IndexedLinkState,
    IndexedLinkStateFactory,
    indexed_link_state,
    simulation_state,
)

RUN_ID = 7
TASK_ID = 11


@pytest.fixture(autouse=True)
def _server_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    """``Message(...)`` reads the run id from the process's task identity, as on a ServerApp."""
    from flwr.common.constant import SUPERLINK_NODE_ID
    from flwr.supercore.task_identity import TaskIdentity

    monkeypatch.setattr(TaskIdentity, "_run_id", RUN_ID)
    monkeypatch.setattr(TaskIdentity, "_task_id", TASK_ID)
    monkeypatch.setattr(TaskIdentity, "_node_id", SUPERLINK_NODE_ID)


def _setup(factory_cls: type[LinkStateFactory], num_nodes: int) -> tuple[InMemoryGrid, list[int]]:
    return simulation_state(factory_cls, num_nodes, RUN_ID, TASK_ID)


def _message(dst: int, tag: int, ttl: float | None = None) -> Message:
    return Message(RecordDict({"c": ConfigRecord({"tag": tag})}), dst, "query", ttl=ttl)


def _tags(messages: list[Message]) -> list[int]:
    return [int(m.content["c"]["tag"]) for m in messages]  # type: ignore[index, arg-type]


def _script(seed: int, num_nodes: int, steps: int) -> list[tuple[str, int, int | None]]:
    """A random interleaving of pushes, polls (limit 1, 2 or all) and deletions."""
    rng = random.Random(seed)
    ops: list[tuple[str, int, int | None]] = []
    for tag in range(steps):
        kind = rng.choice(["push", "push", "poll", "delete"])
        node = rng.randrange(num_nodes)
        ops.append((kind, node, tag if kind == "push" else rng.choice([1, 2, None])))
    return ops


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_same_deliveries_as_flowers_state(seed: int) -> None:
    """Flower's own ``InMemoryLinkState`` is the reference for every poll's answer."""
    num_nodes = 6
    arms = {cls: _setup(cls, num_nodes) for cls in (LinkStateFactory, IndexedLinkStateFactory)}
    assert isinstance(arms[IndexedLinkStateFactory][0].state, IndexedLinkState)
    assert not isinstance(arms[LinkStateFactory][0].state, IndexedLinkState)
    pushed: dict[type[LinkStateFactory], list[str]] = {cls: [] for cls in arms}
    answers: dict[type[LinkStateFactory], list[list[int]]] = {cls: [] for cls in arms}
    for kind, node, arg in _script(seed, num_nodes, 300):
        for cls, (grid, nodes) in arms.items():
            if kind == "push":
                pushed[cls] += list(grid.push_messages([_message(nodes[node], int(arg or 0))]))
            elif kind == "poll":
                got = grid.state.get_message_ins(node_id=nodes[node], limit=arg)
                answers[cls].append(_tags(got))
            elif pushed[cls]:
                # Delete the oldest stored message, delivered or not.
                grid.state.delete_messages({pushed[cls].pop(0)})
    stock, indexed = answers[LinkStateFactory], answers[IndexedLinkStateFactory]
    assert indexed == stock
    assert sum(len(a) for a in stock) > 20, "the script must deliver messages"


def test_expired_message_is_dropped_not_delivered() -> None:
    grid, nodes = _setup(IndexedLinkStateFactory, 2)
    grid.push_messages([_message(nodes[0], 1, ttl=0.05), _message(nodes[0], 2)])
    time.sleep(0.1)
    assert _tags(grid.state.get_message_ins(node_id=nodes[0], limit=None)) == [2]
    assert grid.state.num_message_ins() == 1
    assert grid.state.get_message_ins(node_id=nodes[0], limit=None) == []
    assert isinstance(grid.state, IndexedLinkState)
    assert grid.state.num_pending() == 0


def test_other_run_is_skipped_and_kept() -> None:
    grid, nodes = _setup(IndexedLinkStateFactory, 1)
    grid.push_messages([_message(nodes[0], 1)])
    assert grid.state.get_message_ins(node_id=nodes[0], limit=1, run_id=RUN_ID + 1) == []
    assert _tags(grid.state.get_message_ins(node_id=nodes[0], limit=1, run_id=RUN_ID)) == [1]


def test_context_manager_installs_and_restores() -> None:
    module = importlib.import_module("flwr.simulation.run_simulation")
    with indexed_link_state():
        assert module.LinkStateFactory is IndexedLinkStateFactory
    assert module.LinkStateFactory is LinkStateFactory


def test_unknown_flower_layout_falls_back_with_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    module = importlib.import_module("flwr.simulation.run_simulation")
    monkeypatch.delattr(module, "LinkStateFactory")
    with caplog.at_level("WARNING"), indexed_link_state():
        assert not hasattr(module, "LinkStateFactory")
    assert "unindexed" in caplog.text


def test_simulation_engine_runs_flower_on_the_indexed_state(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``run_ray`` calls ``run_simulation`` with the indexed factory installed, then restores it."""
    import flwr.simulation
    from conftest import tiny_scenario

    from flowerbed.core.records import Recorder
    from flowerbed.core.scenario import from_dict
    from flowerbed.platform.runner import run_ray

    module = importlib.import_module("flwr.simulation.run_simulation")
    seen: list[type] = []

    def fake_run_simulation(**kwargs: object) -> None:
        seen.append(module.LinkStateFactory)

    monkeypatch.setattr(flwr.simulation, "run_simulation", fake_run_simulation)
    scenario = from_dict(tiny_scenario(engine={"name": "simulation"}))
    with pytest.raises(RuntimeError, match="without running the ServerApp"):
        run_ray(scenario, Recorder(scenario, None))
    assert seen == [IndexedLinkStateFactory]
    assert module.LinkStateFactory is LinkStateFactory

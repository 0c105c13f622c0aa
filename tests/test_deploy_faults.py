"""Deployment faults: a SuperNode killed mid-run on loopback (slow, real processes).

Three SuperNodes run a two-round scenario; once round 1 is recorded, one
SuperNode and its SuperExec are killed (SIGKILL to their process groups). The
dead node's round-2 message never gets a reply (or gets Flower's "node
unavailable" error once its heartbeat lapses), so ``federation.timeout`` bounds
the round and ``federation.min_replies`` decides whether the run goes on.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import tiny_scenario
from test_deploy import _alive_groups

import flowerbed
from flowerbed.platform.deploy.local import LocalDeployment, port_open
from flowerbed.platform.runner import RunError

NODES = 3
KILLED = 2  # partition id of the SuperNode killed after round 1
TIMEOUT = 60.0  # federation.timeout: bounds every phase, the round with the dead node included
MARGIN = 90.0  # server evaluation, Flower's 3 s polls, `flwr run` teardown on 2 shared cores


def _scenario(min_replies: int) -> dict[str, Any]:
    strategy = {"name": "fedavg", "fraction_evaluate": 0.0}  # one deployed phase per round
    return tiny_scenario(
        name=f"killed-node-{min_replies}",
        num_clients=NODES,
        rounds=2,
        baselines=[],
        strategy=strategy,
        federation={"timeout": TIMEOUT, "min_replies": min_replies},
    )


def _rows(runs: Path) -> list[dict[str, Any]]:
    rows = []
    for path in runs.glob("*/*/metrics.jsonl"):
        rows += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return rows


def _train_replies(rows: list[dict[str, Any]], server_round: int) -> dict[str, Any] | None:
    for row in rows:
        if row.get("event") == "replies" and row.get("phase") == "train":
            if row.get("round") == server_round:
                return row
    return None


class _Background:
    """``flowerbed.run`` in a thread; ``result`` or ``error`` once it is done."""

    def __init__(self, scenario: dict[str, Any], overrides: list[str], runs: Path) -> None:
        self.result: Any = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(scenario, overrides, runs))
        self.thread.daemon = True
        self.thread.start()

    def _run(self, scenario: dict[str, Any], overrides: list[str], runs: Path) -> None:
        try:
            self.result = flowerbed.run(scenario, overrides, output_dir=runs)
        except Exception as exc:  # noqa: BLE001 - handed to the test thread
            self.error = exc


@contextlib.contextmanager
def _deployment(tmp_path: Path):
    dep = LocalDeployment(NODES, flwr_home=tmp_path / "home", state_dir=tmp_path / "state")
    pgids: list[int] = []
    try:
        with dep:
            pgids = dep.process_groups
            assert len(pgids) == 2 + 2 * NODES  # SuperLink, SuperExec, nodes and their SuperExecs
            yield dep
    finally:
        assert not _alive_groups(pgids), f"processes left: {_alive_groups(pgids)}"
        assert dep.link_port is None or not port_open(dep.link_port)


def _kill_node(dep: LocalDeployment, index: int) -> None:
    """SIGKILL a SuperNode and its SuperExec (and any ClientApp they started)."""
    for service in dep.services:
        if service.name in (f"supernode-{index}", f"superexec-clientapp-{index}"):
            os.killpg(service.proc.pid, signal.SIGKILL)
            service.proc.wait(timeout=10)


def _run_and_kill_after_round_1(dep: LocalDeployment, runs: Path, min_replies: int):
    """Start the run, kill node ``KILLED`` once round 1 is recorded; return (job, seconds after)."""
    overrides = ["engine.name=deployment", f"engine.flwr_home={dep.flwr_home}"]
    job = _Background(_scenario(min_replies), overrides, runs)
    deadline = time.monotonic() + 600
    while _train_replies(_rows(runs), 1) is None:
        assert job.thread.is_alive(), f"run ended before round 1: {job.error!r}"
        assert time.monotonic() < deadline, "round 1 not recorded within 600 s"
        time.sleep(0.5)
    assert _train_replies(_rows(runs), 1)["ok"] == NODES
    _kill_node(dep, KILLED)
    killed_at = time.monotonic()
    job.thread.join(timeout=TIMEOUT + MARGIN + 60)
    assert not job.thread.is_alive(), "run still going long after federation.timeout"
    return job, time.monotonic() - killed_at


def _dead_node_not_answering(row: dict[str, Any]) -> bool:
    missing = row.get("missing_clients", [])
    failed = row.get("failed_clients", {})
    return KILLED in missing or str(KILLED) in failed


@pytest.mark.slow
def test_killed_supernode_is_missing_and_the_run_completes(tmp_path):
    runs = tmp_path / "runs"
    with _deployment(tmp_path) as dep:
        job, after_kill = _run_and_kill_after_round_1(dep, runs, min_replies=2)
    assert job.error is None, f"run failed: {job.error}"
    assert after_kill < TIMEOUT + MARGIN, f"{after_kill:.0f} s after the kill"
    row = _train_replies(job.result.rows, 2)
    assert row is not None and row["ok"] == NODES - 1
    assert _dead_node_not_answering(row), row
    assert (job.result.run_dir / "summary.json").is_file()
    assert "test/accuracy" in job.result.final()


@pytest.mark.slow
def test_killed_supernode_below_min_replies_fails_naming_it(tmp_path):
    runs = tmp_path / "runs"
    with _deployment(tmp_path) as dep:
        job, after_kill = _run_and_kill_after_round_1(dep, runs, min_replies=NODES)
    assert isinstance(job.error, RunError), repr(job.error)
    assert after_kill < TIMEOUT + MARGIN, f"{after_kill:.0f} s after the kill"
    message = str(job.error)
    assert "round 2" in message and f"need {NODES}" in message, message
    assert f"[{KILLED}]" in message or f"{{{KILLED}:" in message, message
    rows = _rows(runs)
    assert _train_replies(rows, 1)["ok"] == NODES  # the finished round stays saved
    assert _dead_node_not_answering(_train_replies(rows, 2))
    assert not list(runs.glob("*/*/summary.json"))


# --- the SuperLink's own error replies (fast) --------------------------------


def test_node_unavailable_reply_is_attributed_to_the_dead_nodes_partition(monkeypatch):
    """Flower's "node unavailable" reply comes from the SuperLink (node 1), not the dead node."""
    from flwr.app import Message, RecordDict
    from flwr.common.constant import SUPERLINK_NODE_ID
    from flwr.server.superlink.linkstate.utils import create_message_error_unavailable_res_message
    from flwr.supercore.task_identity import TaskIdentity

    from flowerbed.strategies.federation import Federation

    for name, value in (("_task_id", 1), ("_run_id", 1), ("_node_id", SUPERLINK_NODE_ID)):
        monkeypatch.setattr(TaskIdentity, name, value, raising=False)
    fed = Federation.__new__(Federation)
    fed.virtual = False  # one node per client, as a deployment always is
    fed.node_of = {0: 11, 1: 12, 2: 13}
    fed.pid_of = {11: 0, 12: 1, 13: 2}
    sent = []
    for node in (11, 13):
        msg = Message(RecordDict(), dst_node_id=node, message_type="train")
        msg.metadata.__dict__["_message_id"] = f"m{node}"
        sent.append(msg)
    reply = create_message_error_unavailable_res_message(sent[1].metadata, "node_unavail")
    assert reply.metadata.src_node_id == SUPERLINK_NODE_ID
    replies = fed.sort_replies([reply], [0, 2], sent=sent)
    assert list(replies.failed) == [2] and "Node Unavailable" in replies.failed[2]
    assert replies.missing == [0]


def test_server_app_exception_is_lifted_from_the_streamed_log():
    from flowerbed.platform.deploy.flwr_run import server_error

    lines = [
        "Traceback (most recent call last):",
        "flowerbed.strategies.federation.RoundFailedError: train round 2: 2 usable replies, "
        "need 3 (failed: {2: 'Node Unavailable'}, missing: none)",
        "ERROR :     Exit Code: 201",
    ]
    assert server_error(lines) == (
        "RoundFailedError: train round 2: 2 usable replies, need 3 "
        "(failed: {2: 'Node Unavailable'}, missing: none)"
    )
    assert server_error(["all fine"]) is None

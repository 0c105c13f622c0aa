"""Flower's simulation engine on Ray: one start-up for the module, against inline and processes."""

from __future__ import annotations

import json

import pytest
from conftest import tiny_scenario

import flowerbed

pytestmark = [pytest.mark.ray, pytest.mark.slow]

FAULTY = {
    "name": "faulty_sgd",
    "lr": 0.1,
    "fail_clients": [1],
    "fault": "raise",
    "fail_rounds": [2],
}


#: One Ray worker: Flower sizes its actor pool as Ray's CPUs / each client's CPUs.
ONE_WORKER = {
    "name": "simulation",
    "backend": "ray",
    "ray_num_cpus": 1,
    "client_resources": {"num_cpus": 1},
}
#: Four workers sharing two CPUs, so clients run concurrently and out of order.
FOUR_WORKERS = {
    "name": "simulation",
    "backend": "ray",
    "ray_num_cpus": 2,
    "client_resources": {"num_cpus": 0.5},
}


@pytest.fixture(scope="module")
def ray_result(tmp_path_factory):
    data = tiny_scenario(engine=ONE_WORKER, learner=FAULTY)
    return flowerbed.run(data, output_dir=tmp_path_factory.mktemp("runs"))


def test_simulation_writes_every_result_file(ray_result):
    names = {p.name for p in ray_result.run_dir.iterdir()}
    assert {
        "scenario.resolved.yaml",
        "metrics.jsonl",
        "summary.json",
        "clients.json",
        "run.log",
    } <= names
    summary = json.loads((ray_result.run_dir / "summary.json").read_text())
    assert summary["engine"] == "simulation" and summary["rounds"] == 2


def test_simulation_names_the_failing_client(ray_result):
    rows = [r for r in ray_result.rows if r.get("event") == "replies" and r["phase"] == "train"]
    assert [r["failed"] for r in rows] == [0, 1]
    assert "injected fault on client 1" in rows[1]["failed_clients"]["1"]


def test_simulation_and_inline_agree_exactly(ray_result):
    inline = flowerbed.run(tiny_scenario(learner=FAULTY), save=False)
    assert inline.summary["results"] == ray_result.summary["results"]


def test_process_backend_and_ray_backend_agree_exactly(ray_result):
    """The same clients on four worker processes give the one-actor Ray run's numbers."""
    engine = {**FOUR_WORKERS, "backend": "process"}
    processes = flowerbed.run(tiny_scenario(engine=engine, learner=FAULTY), save=False)
    assert processes.summary["results"] == ray_result.summary["results"]


def test_number_of_ray_workers_does_not_change_results(ray_result):
    """A second Ray start-up (slow): 4 workers give the 1-worker run's metrics exactly.

    Each client seeds itself from (root seed, partition id, message type, round)
    and the server aggregates in partition-id order, so which worker runs which
    client, and in what order replies arrive, cannot change a number.
    """
    four = flowerbed.run(tiny_scenario(engine=FOUR_WORKERS, learner=FAULTY), save=False)
    assert four.summary["results"] == ray_result.summary["results"]
    failed = [
        r["failed"] for r in four.rows if r.get("event") == "replies" and r["phase"] == "train"
    ]
    assert failed == [0, 1]

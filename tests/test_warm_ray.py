"""`flowerbed up` / `flowerbed down`: a warm Ray head that simulation runs connect to."""

from __future__ import annotations

import json
import os
import socket

import pytest
from conftest import tiny_scenario

from flowerbed.platform import warm_ray


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FLOWERBED_CACHE", str(tmp_path))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    return tmp_path


def _listening() -> tuple[socket.socket, int]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    return server, server.getsockname()[1]


def test_a_stale_record_is_removed_and_runs_start_their_own_ray(cache):
    server, port = _listening()
    server.close()  # nothing answers on this port any more
    warm_ray.head_file().write_text(json.dumps({"address": f"127.0.0.1:{port}"}))
    with warm_ray.warm_head("simulation") as address:
        assert address is None and "RAY_ADDRESS" not in os.environ
    assert not warm_ray.head_file().exists()


def test_a_live_head_is_used_for_the_run_only_and_ray_address_wins(cache, monkeypatch):
    server, port = _listening()
    try:
        warm_ray.head_file().write_text(json.dumps({"address": f"127.0.0.1:{port}"}))
        with warm_ray.warm_head("inline") as address:
            assert address is None  # only the simulation engine uses Ray
        with warm_ray.warm_head("simulation") as address:
            assert address == os.environ["RAY_ADDRESS"] == f"127.0.0.1:{port}"
        assert "RAY_ADDRESS" not in os.environ
        monkeypatch.setenv("RAY_ADDRESS", "10.0.0.9:6379")
        with warm_ray.warm_head("simulation") as address:
            assert address is None and os.environ["RAY_ADDRESS"] == "10.0.0.9:6379"
    finally:
        server.close()


def test_up_refuses_a_port_another_program_holds(cache):
    server, port = _listening()
    try:
        with pytest.raises(SystemExit, match=f"port {port} is taken.*--port"):
            warm_ray.up(1, port)
    finally:
        server.close()
    assert warm_ray.down() is False  # nothing recorded: nothing stopped


@pytest.mark.slow
@pytest.mark.ray
def test_runs_on_a_warm_head_equal_cold_ones_and_down_stops_it(cache):
    import flowerbed

    server, port = _listening()
    server.close()
    scenario = tiny_scenario(rounds=2)
    address = warm_ray.up(2, port)
    try:
        assert warm_ray.recorded_head() is not None
        warm = flowerbed.run(scenario, ["engine=simulation"], save=False, progress=False)
        assert "RAY_ADDRESS" not in os.environ
        assert warm_ray.recorded_head() is not None  # the run left the head running
    finally:
        assert warm_ray.down() is True
    host, _, p = address.rpartition(":")
    with pytest.raises(OSError):
        socket.create_connection((host, int(p)), timeout=1).close()
    # A cold run after the head is gone starts its own Ray instead of waiting on the dead one.
    cold = flowerbed.run(scenario, ["engine=simulation"], save=False, progress=False)
    inline = flowerbed.run(scenario, ["engine=inline"], save=False, progress=False)
    assert warm.summary["results"] == cold.summary["results"] == inline.summary["results"]


def test_a_run_joins_a_cluster_only_when_one_is_named(cache, monkeypatch):
    """Ray alone would join the last `ray start` cluster noted on the machine, even a dead one."""
    import ray

    from flowerbed.core.scenario import from_dict
    from flowerbed.platform import runner

    seen: list[dict] = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kwargs: seen.append(kwargs))
    scenario = from_dict(tiny_scenario(engine={"name": "simulation"}))
    runner.start_ray(scenario)
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.9:6379")
    runner.start_ray(scenario)
    assert seen[0]["address"] == "local" and "address" not in seen[1]
    assert seen[0]["runtime_env"]["env_vars"]["OMP_NUM_THREADS"] == "1"

"""The simulation engine's process backend: same numbers as inline, crashes named, no leftovers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from multiprocessing import forkserver
from pathlib import Path

import pytest
from conftest import tiny_scenario
from flwr.clientapp.client_app import ClientAppException

import flowerbed
from flowerbed.core.scenario import ScenarioError, from_dict
from flowerbed.platform.process_backend import ProcessBackend, pool_size

ROOT = Path(__file__).resolve().parents[1]

#: Four worker processes on two CPUs, so clients run side by side and reply out of order.
FOUR_WORKERS = {
    "name": "simulation",
    "backend": "process",
    "ray_num_cpus": 2,
    "client_resources": {"num_cpus": 0.5},
}


def faulty(fault: str, rounds: list[int]) -> dict:
    return {"name": "faulty_sgd", "lr": 0.1, "fail_clients": [1], "fault": fault,
            "fail_rounds": rounds}


def replies(result, phase: str = "train") -> list[dict]:
    return [r for r in result.rows if r.get("event") == "replies" and r["phase"] == phase]


def test_process_backend_gives_the_inline_numbers_exactly():
    learner = faulty("raise", [2])
    processes = flowerbed.run(tiny_scenario(engine=FOUR_WORKERS, learner=learner), save=False)
    inline = flowerbed.run(tiny_scenario(learner=learner), save=False)
    assert processes.summary["results"] == inline.summary["results"]
    assert [r["failed"] for r in replies(processes)] == [0, 1]
    assert "injected fault on client 1" in replies(processes)[1]["failed_clients"]["1"]


def test_a_killed_worker_is_named_and_replaced():
    """A client whose process is killed (as by the OOM killer) fails its round only."""
    result = flowerbed.run(
        tiny_scenario(engine=FOUR_WORKERS, learner=faulty("crash", [1]), rounds=2), save=False
    )
    train = replies(result)
    assert [r["failed"] for r in train] == [1, 0]
    assert "killed by SIGKILL" in train[0]["failed_clients"]["1"]
    assert result.summary["results"]["federated"]["test/accuracy"] > 0.3


def _probe_app():
    """A ClientApp stand-in: answers with what the worker sees (built in the worker)."""

    def app(message, context):
        if message == "env":
            return os.environ.get("FLOWERBED_PROBE"), os.getpid()
        if message == "raise":
            raise ValueError("probe failed")
        if message == "threads":
            import torch

            return (os.environ["OMP_NUM_THREADS"], torch.get_num_threads()), os.getpid()
        if message == "crash":
            os.kill(os.getpid(), signal.SIGKILL)
        return message, os.getpid()

    return app


def test_backend_workers_see_the_current_environment_and_survive_crashes(monkeypatch):
    backend = ProcessBackend({"client_resources": {"num_cpus": 1}, "init_args": {"num_cpus": 1}})
    forkserver.ensure_running()  # the fork server keeps the environment it started with
    monkeypatch.setenv("FLOWERBED_PROBE", "set after the fork server started")
    backend.build(_probe_app)
    try:
        assert backend.num_workers == 1 and backend.is_worker_idle()
        (seen, pid), context = backend.process_message("env", "ctx")
        assert seen == "set after the fork server started" and context == "ctx"
        assert pid != os.getpid()
        with pytest.raises(ClientAppException, match="probe failed"):
            backend.process_message("raise", "ctx")
        with pytest.raises(ClientAppException, match="killed by SIGKILL"):
            backend.process_message("crash", "ctx")
        (echo, new_pid), _ = backend.process_message("again", "ctx")
        assert echo == "again" and new_pid != pid
        processes = [w.process for w in backend._workers]
    finally:
        backend.terminate()
    assert not any(p.is_alive() for p in processes)


def test_a_worker_runs_torch_with_its_clients_cpus():
    backend = ProcessBackend({"client_resources": {"num_cpus": 2}, "init_args": {"num_cpus": 2}})
    backend.build(_probe_app)
    try:
        (threads, _), _ = backend.process_message("threads", "ctx")
    finally:
        backend.terminate()
    assert threads == ("2", 2)


@pytest.mark.parametrize(
    ("num_cpus", "total", "expected"), [(1.0, 2, 2), (0.5, 2, 4), (0.3, 1, 3), (2.0, 2, 1)]
)
def test_pool_size_is_what_fits_as_in_rays_actor_pool(num_cpus, total, expected):
    assert pool_size(num_cpus, total) == expected


def test_auto_backend_is_ray_for_a_cluster_or_gpus_else_processes(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    engine = from_dict(tiny_scenario(engine="simulation")).engine
    assert engine.backend == "auto" and engine.simulation_backend() == "process"
    gpu = from_dict(
        tiny_scenario(engine={"name": "simulation", "client_resources": {"num_gpus": 0.5}})
    ).engine
    assert gpu.simulation_backend() == "ray"
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6379")
    assert engine.simulation_backend() == "ray"
    forced = from_dict(tiny_scenario(engine={"name": "simulation", "backend": "process"})).engine
    assert forced.simulation_backend() == "process"


def test_process_backend_refuses_gpu_clients_in_one_line():
    engine = {"name": "simulation", "backend": "process", "client_resources": {"num_gpus": 1}}
    with pytest.raises(ScenarioError, match=r"engine\.backend=process does not place clients"):
        from_dict(tiny_scenario(engine=engine))


def test_a_script_without_a_main_guard_runs_once(tmp_path):
    """multiprocessing would import the driver's script again in every worker."""
    marks = tmp_path / "marks.txt"
    script = tmp_path / "user_script.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT / "tests")!r})
        with open({str(marks)!r}, "a") as fh:
            fh.write("top level ran\\n")
        import flowerbed
        from conftest import tiny_scenario
        engine = {{"name": "simulation", "backend": "process", "ray_num_cpus": 2}}
        result = flowerbed.run(tiny_scenario(engine=engine, rounds=1), save=False)
        print(result.summary["results"]["federated"]["test/accuracy"])
    """))
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert marks.read_text().splitlines() == ["top level ran"]

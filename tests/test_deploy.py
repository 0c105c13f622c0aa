"""Deployment: compose files (fast), SuperLink + SuperNodes on loopback, a Ray cluster (slow).

The slow tests start real processes; every fixture stops what it started in a
``finally`` and checks with ``pgrep`` that nothing is left.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml
from conftest import tiny_scenario

import flowerbed
from flowerbed.core.scenario import from_dict
from flowerbed.platform.deploy.compose import (
    LINK_PORT,
    NODE_PORT,
    compose_yaml,
    runs_overlay_yaml,
    tls_overlay_yaml,
)
from flowerbed.platform.deploy.connections import (
    MissingConnectionError,
    remove_connection,
    require_connection,
    write_connection,
)
from flowerbed.platform.deploy.flwr_run import run_config
from flowerbed.platform.deploy.local import LocalDeployment, free_port, port_open
from flowerbed.platform.runner import RunError
from flowerbed.platform.server import run_dir_from_run_config, scenario_from_run_config

ROOT = Path(__file__).parents[1]
BIN = Path(sys.executable).parent


def _arg(command: list[str], flag: str) -> str:
    return command[command.index(flag) + 1]


# --- compose files (fast) ----------------------------------------------------


@pytest.mark.parametrize("nodes", [2, 3])
def test_compose_has_superlink_nodes_and_superexecs(nodes):
    services = yaml.safe_load(compose_yaml(nodes))["services"]
    names = {"superlink", "superexec-serverapp"}
    names |= {f"supernode-{i}" for i in range(nodes)}
    names |= {f"superexec-clientapp-{i}" for i in range(nodes)}
    assert set(services) == names
    link = services["superlink"]
    assert link["image"].startswith("${SUPERLINK_IMAGE:-flwr/superlink:")
    assert link["ports"][0].endswith(f":{LINK_PORT}")
    assert _arg(link["command"], "--port") == str(LINK_PORT)
    assert _arg(link["command"], "--isolation") == "process"
    assert "--disable-runtime-dependency-installation" in link["command"]
    serverapp = services["superexec-serverapp"]
    assert _arg(serverapp["command"], "--runtime-api-address") == f"superlink:{LINK_PORT}"
    ports = set()
    for i in range(nodes):
        node = services[f"supernode-{i}"]["command"]
        assert _arg(node, "--superlink") == f"superlink:{LINK_PORT}"
        assert _arg(node, "--node-config") == f"partition-id={i} num-partitions={nodes}"
        ports.add(int(_arg(node, "--port")))
        executor = services[f"superexec-clientapp-{i}"]
        address = _arg(executor["command"], "--runtime-api-address")
        assert address == f"supernode-{i}:{NODE_PORT + i}"
        assert executor["depends_on"] == [f"supernode-{i}"]
    assert len(ports) == nodes  # distinct runtime ports
    for name in ("superexec-serverapp", *(f"superexec-clientapp-{i}" for i in range(nodes))):
        # the YAML anchor merged the shared image/build into every SuperExec
        assert services[name]["image"] == "${SUPEREXEC_IMAGE:-flowerbed-superexec:latest}"
        assert services[name]["build"]["dockerfile"] == "docker/Dockerfile"
        assert "--insecure" in services[name]["command"]


@pytest.mark.parametrize("nodes", [2, 3])
def test_tls_overlay_secures_the_superlink_port(nodes):
    overlay = yaml.safe_load(tls_overlay_yaml(nodes))
    services = overlay["services"]
    link = services["superlink"]["command"]
    assert "--insecure" not in link
    assert {"--ssl-certfile", "--ssl-keyfile", "--ssl-ca-certfile"} <= set(link)
    assert {s["file"] for s in overlay["secrets"].values()} == {
        "./certs/ca.crt",
        "./certs/server.pem",
        "./certs/server.key",
    }
    for i in range(nodes):
        node = services[f"supernode-{i}"]["command"]
        assert "--insecure" not in node
        assert _arg(node, "--root-certificates") == "/app/certificates/ca.crt"
        assert _arg(node, "--node-config") == f"partition-id={i} num-partitions={nodes}"
    assert "--root-certificates" in services["superexec-serverapp"]["command"]


def test_committed_compose_files_are_the_generated_ones():
    assert (ROOT / "docker/compose.yml").read_text() == compose_yaml(2)
    assert (ROOT / "docker/with-tls.yml").read_text() == tls_overlay_yaml(2)
    assert (ROOT / "docker/with-runs.yml").read_text() == runs_overlay_yaml(2)


# --- engine plumbing (fast) -------------------------------------------------


def test_missing_connection_names_the_file_and_the_connection(tmp_path):
    with pytest.raises(RunError) as info:
        flowerbed.run(
            tiny_scenario(),
            ["engine.name=deployment", "engine.connection=nowhere", f"engine.flwr_home={tmp_path}"],
            save=False,
        )
    assert "'nowhere'" in str(info.value)
    assert str(tmp_path / "config.toml") in str(info.value)


def test_connections_are_added_and_removed_keeping_others(tmp_path):
    write_connection("a", "127.0.0.1:1", home=tmp_path)
    write_connection("b", "127.0.0.1:2", root_certificates=tmp_path / "ca.crt", home=tmp_path)
    assert require_connection("a", tmp_path) == {"address": "127.0.0.1:1", "insecure": True}
    assert require_connection("b", tmp_path)["root-certificates"] == str(tmp_path / "ca.crt")
    remove_connection("a", tmp_path)
    with pytest.raises(MissingConnectionError):
        require_connection("a", tmp_path)
    assert require_connection("local", tmp_path)["address"] == ":local:"  # Flower's default kept


def test_run_config_round_trips_the_resolved_scenario(tmp_path):
    scenario = from_dict(tiny_scenario(), ["engine=deployment"])
    config = run_config(scenario, tmp_path / "run")
    decoded = scenario_from_run_config(config)
    assert decoded.digest() == scenario.digest()
    assert run_dir_from_run_config(config, decoded) == (tmp_path / "run").resolve()


# --- real processes (slow) --------------------------------------------------


def _alive_groups(pgids: list[int]) -> list[int]:
    return [g for g in pgids if subprocess.run(["pgrep", "-g", str(g)]).returncode == 0]


@pytest.fixture(scope="module")
def inline_reference():
    """Final metrics of the tiny 2-client scenario on the inline engine."""
    return flowerbed.run(_two_clients(), ["engine=inline"], save=False).final()


def _two_clients() -> dict:
    """2 clients, 1 round, no client-side evaluation: each deployed phase costs tens of s."""
    strategy = {"name": "fedavg", "fraction_evaluate": 0.0}
    return tiny_scenario(num_clients=2, rounds=1, baselines=[], strategy=strategy)


@contextlib.contextmanager
def _deployment(tmp_path, tls=None):
    dep = LocalDeployment(2, tls=tls, flwr_home=tmp_path / "home", state_dir=tmp_path / "state")
    pgids: list[int] = []
    try:
        with dep:
            pgids = dep.process_groups
            assert len(pgids) == 6  # SuperLink, 2 SuperNodes, 3 SuperExecs
            yield dep
    finally:
        assert not _alive_groups(pgids), f"processes left: {_alive_groups(pgids)}"
        assert dep.link_port is None or not port_open(dep.link_port)


def _assert_same_metrics(result, reference):
    final = result.final()
    assert final.keys() == reference.keys()
    for key, value in reference.items():
        assert final[key] == pytest.approx(value, abs=1e-6), key


def _local_task() -> dict:
    """A local task (per-client logistic regression) with both baselines, 2 clients."""
    scenario = tiny_scenario(
        num_clients=2, rounds=1, learner={"name": "sklearn"}, strategy={"name": "local"},
        baselines=["centralized", "local_only"],
    )
    scenario.pop("model")
    return scenario


@pytest.mark.slow
def test_superlink_and_two_supernodes_match_inline(tmp_path, inline_reference):
    local_inline = flowerbed.run(_local_task(), ["engine=inline"], save=False).summary["results"]
    deployed = ["engine.name=deployment"]
    with _deployment(tmp_path) as dep:
        deployed.append(f"engine.flwr_home={dep.flwr_home}")
        result = flowerbed.run(_two_clients(), deployed, output_dir=tmp_path / "runs")
        local = flowerbed.run(_local_task(), deployed, save=False)
    assert result.summary["engine"] == "deployment"
    assert (result.run_dir / "summary.json").is_file()
    assert any(r.get("phase") == "train" for r in result.rows)
    _assert_same_metrics(result, inline_reference)
    assert local.summary["results"] == local_inline


@pytest.mark.slow
def test_tls_deployment_with_script_certificates_matches_inline(tmp_path, inline_reference):
    certs = tmp_path / "certs"
    subprocess.run(["bash", str(ROOT / "docker/make-certs.sh"), str(certs)], check=True)
    with _deployment(tmp_path, tls=certs) as dep:
        config = (dep.config_file).read_text()
        assert "root-certificates" in config and "insecure" not in config
        result = flowerbed.run(
            _two_clients(),
            ["engine.name=deployment", f"engine.flwr_home={dep.flwr_home}"],
            save=False,
        )
    _assert_same_metrics(result, inline_reference)


# --- Ray cluster on loopback (slow) -----------------------------------------


def _ray_start(args: list[str], log: Path) -> subprocess.Popen:
    """``ray start --block`` in its own process group (so only its processes are stopped)."""
    cmd = [str(BIN / "ray"), "start", "--block", "--num-cpus", "1", *args]
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    with open(log, "wb") as out:
        return subprocess.Popen(
            cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def _stop_groups(procs: list[subprocess.Popen]) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p in reversed(procs):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, sig)
        for p in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=20)


def _wait_for_nodes(address: str, count: int, timeout: float = 180) -> None:
    code = (
        "import ray, sys; ray.init(address=sys.argv[1], logging_level='ERROR');"
        "print(sum(n['Alive'] for n in ray.nodes()))"
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = subprocess.run(
            [sys.executable, "-c", code, address], capture_output=True, text=True, timeout=120
        )
        if out.stdout.strip().isdigit() and int(out.stdout.strip()) >= count:
            return
        time.sleep(2)
    raise TimeoutError(f"Ray cluster at {address} did not reach {count} nodes")


@pytest.fixture
def ray_cluster(tmp_path):
    """A Ray head and one worker node on loopback, one CPU each, in a temp dir of our own."""
    temp_dir = tempfile.mkdtemp(prefix="fbray", dir="/tmp")  # short: Ray's socket paths
    port = free_port()
    address = f"127.0.0.1:{port}"
    procs: list[subprocess.Popen] = []
    try:
        head = ["--head", "--port", str(port), "--node-ip-address", "127.0.0.1"]
        head += ["--temp-dir", temp_dir, "--include-dashboard", "false", "--disable-usage-stats"]
        head += ["--dashboard-port", str(free_port())]  # never clash with another Ray's 8265
        procs.append(_ray_start(head, tmp_path / "head.log"))
        _wait_for_nodes(address, 1)
        worker = ["--address", address, "--node-ip-address", "127.0.0.1"]
        procs.append(_ray_start(worker, tmp_path / "worker.log"))
        _wait_for_nodes(address, 2)
        yield address, Path(temp_dir)
    finally:
        _stop_groups(procs)
        left = subprocess.run(["pgrep", "-f", temp_dir], capture_output=True, text=True)
        shutil.rmtree(temp_dir, ignore_errors=True)
        assert not left.stdout.strip(), f"Ray processes left: {left.stdout}"


@pytest.mark.slow
@pytest.mark.ray
def test_simulation_on_a_ray_cluster_head_and_worker(ray_cluster, monkeypatch, inline_reference):
    address, temp_dir = ray_cluster
    drivers = "session_latest/logs/python-core-driver-*"
    before = len(list(temp_dir.glob(drivers)))
    monkeypatch.setenv("RAY_ADDRESS", address)
    result = flowerbed.run(_two_clients(), ["engine=simulation"], save=False)
    assert len(list(temp_dir.glob(drivers))) > before  # Flower's ray.init joined our cluster
    _assert_same_metrics(result, inline_reference)

"""The project is a Flower app: ``flwr run .`` runs a scenario through Flower's own CLI."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.slow]

ROOT = Path(__file__).parents[1]
BIN = Path(sys.executable).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for_port(port: int, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "flower-superlink exited early"
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.5)
    raise TimeoutError(f"SuperLink did not open port {port} in {timeout} s")


@pytest.fixture
def superlink(tmp_path):
    """A simulation SuperLink of our own on loopback (Flower's auto-start gives up after 15 s)."""
    home = tmp_path / "flwr"
    home.mkdir()
    port = _free_port()
    (home / "config.toml").write_text(
        f'[superlink]\ndefault = "test"\n\n[superlink.test]\n'
        f'address = "127.0.0.1:{port}"\ninsecure = true\n'
    )
    env = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
        "FLWR_HOME": str(home),
        "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
    }
    cmd = [
        str(BIN / "flower-superlink"), "--insecure", "--simulation",
        "--isolation", "subprocess", "--host", "127.0.0.1", "--port", str(port),
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for_port(port, proc)
        yield env
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_flwr_run_executes_the_quickstart_app(superlink, tmp_path):
    out = tmp_path / "runs"
    overrides = "num_clients=3;rounds=1;baselines=[];partition=iid"
    cmd = [
        str(BIN / "flwr"), "run", ".", "test", "--stream",
        "--federation-config", "num-supernodes=3",
        "-c", f"overrides='{overrides}' output-dir='{out}'",
    ]  # fmt: skip
    proc = subprocess.run(
        cmd, cwd=ROOT, env=superlink, capture_output=True, text=True, timeout=400
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    found = list(out.glob("quickstart/*/summary.json"))
    assert len(found) == 1, proc.stdout[-4000:]
    (summary_path,) = found
    summary = json.loads(summary_path.read_text())
    assert summary["num_clients"] == 3 and summary["rounds"] == 1
    assert summary["results"]["federated"]["test/accuracy"] > 0.3

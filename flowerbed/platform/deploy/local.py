"""A Flower deployment on this machine: SuperLink, SuperNodes and SuperExecs as processes.

The topology is the official Docker compose one (process isolation: one
``flower-superexec`` beside the SuperLink runs ServerApps, one beside each
SuperNode runs ClientApps), on loopback ports chosen free.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from flowerbed.platform.deploy.connections import remove_connection, write_connection
from flowerbed.platform.deploy.topology import (
    TlsFiles,
    superexec_args,
    superlink_args,
    supernode_args,
)

log = logging.getLogger("flowerbed")

HOST = "127.0.0.1"
DEFAULT_CONNECTION = "flowerbed-local"


def free_port() -> int:
    """A TCP port free on loopback right now."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def flower_bin(name: str) -> str:
    """Path of a Flower console script: beside this Python first, else on ``PATH``."""
    local = Path(sys.executable).parent / name
    return str(local) if local.exists() else (shutil.which(name) or name)


def port_open(port: int) -> bool:
    """Whether something accepts TCP connections on loopback ``port``."""
    with socket.socket() as s:
        s.settimeout(1.0)
        return s.connect_ex((HOST, port)) == 0


@dataclass
class Service:
    """One started process (its own process group) and where its output goes."""

    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    port: int | None = None

    def tail(self, chars: int = 2000) -> str:
        """The end of the process's log (for error messages)."""
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


class LocalDeployment:
    """SuperLink + SuperExec and ``nodes`` SuperNodes + SuperExecs on loopback.

    Use as a context manager: on entry every process is started, the connection
    is written to ``<flwr_home>/config.toml`` and the ports are open; on exit
    (also after an exception, Ctrl-C or SIGTERM delivered as an exception) every
    process group it started is terminated, then killed, and the connection is
    removed. Each SuperNode gets ``partition-id=i num-partitions=nodes``.

    Parameters
    ----------
    nodes
        Number of SuperNodes.
    tls
        Folder with ``ca.crt``, ``server.pem``, ``server.key``; ``None`` runs insecure.
    flwr_home
        Where the Flower CLI's ``config.toml`` lives (default ``$FLWR_HOME`` or ``~/.flwr``).
    connection
        Name of the connection written there.
    state_dir
        Folder for process logs and each service's own ``FLWR_HOME`` (default: a temp dir).
    startup_timeout
        Seconds each service may take to open its port.

    Examples
    --------
    >>> with LocalDeployment(nodes=2) as dep:  # doctest: +SKIP
    ...     flowerbed.run("scenarios/quickstart.yaml", ["engine=deployment", "num_clients=2"])
    """

    def __init__(
        self,
        nodes: int,
        tls: str | Path | None = None,
        flwr_home: str | Path | None = None,
        connection: str = DEFAULT_CONNECTION,
        state_dir: str | Path | None = None,
        startup_timeout: float = 120.0,
    ) -> None:
        if nodes < 1:
            raise ValueError(f"nodes must be >= 1, got {nodes}")
        self.nodes = nodes
        self.tls = TlsFiles.from_dir(tls) if tls is not None else None
        self.flwr_home = flwr_home
        self.connection = connection
        self.startup_timeout = startup_timeout
        self._own_state = state_dir is None
        self.state_dir = Path(state_dir or tempfile.mkdtemp(prefix="flowerbed-deploy-"))
        self.services: list[Service] = []
        self.link_port: int | None = None
        self.config_file: Path | None = None

    # -- lifecycle -----------------------------------------------------------
    def __enter__(self) -> LocalDeployment:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def address(self) -> str:
        """``host:port`` of the SuperLink (after :meth:`start`)."""
        return f"{HOST}:{self.link_port}"

    @property
    def process_groups(self) -> list[int]:
        """Process-group ids of every started service (each service leads its own group)."""
        return [s.proc.pid for s in self.services]

    def start(self) -> None:
        """Start every service and write the connection; raise if one fails to come up."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.link_port = free_port()
        link = self._spawn("superlink", self._superlink_cmd(self.link_port), self.link_port)
        self._wait_ready([link])
        self._spawn("superexec-serverapp", self._superexec_cmd(self.link_port))
        node_services = []
        for i in range(self.nodes):
            port = free_port()
            node_services.append(self._spawn(f"supernode-{i}", self._supernode_cmd(i, port), port))
            self._spawn(f"superexec-clientapp-{i}", self._superexec_cmd(port))
        self._wait_ready(node_services)
        self.config_file = write_connection(
            self.connection,
            self.address,
            root_certificates=self.tls.ca if self.tls else None,
            home=self.flwr_home,
        )
        log.info("deployment up: %s (%d nodes) as %r", self.address, self.nodes, self.connection)

    def stop(self, grace: float = 15.0) -> None:
        """Terminate every process group started, newest first; kill what is left."""
        for service in reversed(self.services):
            _signal_group(service.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for service in reversed(self.services):
            with contextlib.suppress(subprocess.TimeoutExpired):
                service.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            _signal_group(service.proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                service.proc.wait(timeout=5)
        for service in self.services:
            _wait_group_gone(service.proc.pid, timeout=30.0)
        self.services.clear()
        if self.config_file is not None:
            remove_connection(self.connection, self.flwr_home)
            self.config_file = None
        if self._own_state:
            shutil.rmtree(self.state_dir, ignore_errors=True)

    # -- commands ------------------------------------------------------------
    def _superlink_cmd(self, port: int) -> list[str]:
        return [flower_bin("flower-superlink"), *superlink_args(HOST, port, self.tls)]

    def _supernode_cmd(self, index: int, port: int) -> list[str]:
        args = supernode_args(
            self.address,
            HOST,
            port,
            (index, self.nodes),
            link_ca=self.tls.ca if self.tls else None,
            runtime_tls=self.tls,
            state_dir=self.state_dir / f"supernode-{index}" / "client_state",
        )
        return [flower_bin("flower-supernode"), *args]

    def _superexec_cmd(self, port: int) -> list[str]:
        ca = self.tls.ca if self.tls else None
        return [flower_bin("flower-superexec"), *superexec_args(f"{HOST}:{port}", ca)]

    # -- processes -----------------------------------------------------------
    def _env(self, name: str) -> dict[str, str]:
        home = self.state_dir / name
        home.mkdir(parents=True, exist_ok=True)
        bindir = str(Path(sys.executable).parent)
        return {
            **os.environ,
            "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}",
            "FLWR_HOME": str(home),
            "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
            "PYTHONUNBUFFERED": "1",
        }

    def _spawn(self, name: str, cmd: list[str], port: int | None = None) -> Service:
        log_path = self.state_dir / f"{name}.log"
        out: IO[Any] = open(log_path, "wb")  # handed to the child, closed here after
        try:
            proc = subprocess.Popen(
                cmd,
                env=self._env(name),
                cwd=self.state_dir,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # own process group: stop() kills its children too
            )
        finally:
            out.close()
        service = Service(name, proc, log_path, port)
        self.services.append(service)
        return service

    def _wait_ready(self, services: list[Service]) -> None:
        deadline = time.monotonic() + self.startup_timeout
        pending = [s for s in services if s.port is not None]
        while pending:
            for s in pending:
                if s.proc.poll() is not None:
                    raise RuntimeError(
                        f"{s.name} exited with code {s.proc.returncode}:\n{s.tail()}"
                    )
            pending = [s for s in pending if not port_open(int(s.port or 0))]
            if pending and time.monotonic() > deadline:
                names = ", ".join(f"{s.name} (port {s.port})" for s in pending)
                raise TimeoutError(f"not ready after {self.startup_timeout:.0f} s: {names}")
            if pending:
                time.sleep(0.5)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    """Send ``sig`` to a process group; a group already gone is fine."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def group_alive(pgid: int) -> bool:
    """Whether any process (zombies included) is still in process group ``pgid``."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _wait_group_gone(pgid: int, timeout: float) -> None:
    """Wait until the group's last member (a ServerApp/ClientApp child, say) has gone."""
    deadline = time.monotonic() + timeout
    while group_alive(pgid) and time.monotonic() < deadline:
        _signal_group(pgid, signal.SIGKILL)
        time.sleep(0.2)
    if group_alive(pgid):
        log.warning("process group %d still has members %.0f s after SIGKILL", pgid, timeout)

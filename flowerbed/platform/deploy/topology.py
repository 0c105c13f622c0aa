"""Command lines of the deployment services, shared by local processes and compose files.

Process isolation, as in Flower's official compose: the SuperLink and every
SuperNode serve a runtime API, and a ``flower-superexec`` beside each one runs
the ServerApp or ClientApp processes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class TlsFiles:
    """Certificates as ``docker/make-certs.sh`` writes them (CA, server cert, server key)."""

    ca: Path
    cert: Path
    key: Path

    @classmethod
    def in_dir(cls, certdir: str | Path) -> TlsFiles:
        """``ca.crt``, ``server.pem`` and ``server.key`` in ``certdir`` (not checked)."""
        base = Path(certdir)
        return cls(base / "ca.crt", base / "server.pem", base / "server.key")

    @classmethod
    def from_dir(cls, certdir: str | Path) -> TlsFiles:
        """Like :meth:`in_dir` with absolute paths; every file must exist."""
        files = cls.in_dir(Path(certdir).resolve())
        missing = [str(p) for p in (files.ca, files.cert, files.key) if not p.is_file()]
        if missing:
            raise FileNotFoundError(
                f"missing certificate files {missing}; make them with "
                f"docker/make-certs.sh {Path(certdir).resolve()}"
            )
        return files

    def server_args(self) -> list[str]:
        """Flags that make a SuperLink or SuperNode runtime API serve TLS."""
        return [
            "--ssl-certfile", str(self.cert),
            "--ssl-keyfile", str(self.key),
            "--ssl-ca-certfile", str(self.ca),
        ]  # fmt: skip

    def client_args(self) -> list[str]:
        """Flags that make a SuperNode or SuperExec verify its server with the CA."""
        return ["--root-certificates", str(self.ca)]


def superlink_args(host: str, port: int, tls: TlsFiles | None = None) -> list[str]:
    """``flower-superlink`` arguments: one HTTP port, ServerApps run by a SuperExec."""
    args = [
        "--isolation", "process", "--host", host, "--port", str(port),
        "--disable-runtime-dependency-installation",
    ]  # fmt: skip
    return args + (tls.server_args() if tls else ["--insecure"])


def superexec_args(runtime_address: str, ca: Path | None = None) -> list[str]:
    """``flower-superexec`` arguments for the runtime API at ``runtime_address``."""
    args = ["--runtime-api-address", runtime_address]
    return args + (["--root-certificates", str(ca)] if ca else ["--insecure"])


def supernode_args(
    superlink: str,
    host: str,
    port: int,
    partition: tuple[int, int],
    link_ca: Path | None = None,
    runtime_tls: TlsFiles | None = None,
    state_dir: Path | None = None,
) -> list[str]:
    """``flower-supernode`` arguments for partition ``(index, count)``.

    ``link_ca`` verifies the SuperLink (``None``: insecure); ``runtime_tls``
    makes the node's own runtime API (used by its SuperExec) serve TLS;
    ``state_dir`` is the node's own folder for its clients' persistent state.
    """
    index, count = partition
    node_config = f"partition-id={index} num-partitions={count}"
    if state_dir is not None:
        node_config += f' state-dir="{state_dir}"'
    args = [
        "--superlink", superlink, "--isolation", "process",
        "--host", host, "--port", str(port),
        "--node-config", node_config,
    ]  # fmt: skip
    args += ["--root-certificates", str(link_ca)] if link_ca else ["--insecure"]
    return args + (runtime_tls.server_args() if runtime_tls else [])

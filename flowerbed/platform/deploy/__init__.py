"""Deployment: ``flowerbed deploy local`` (processes on loopback) and ``deploy compose``."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from typing import Any

from flowerbed.platform.deploy.connections import MissingConnectionError, write_connection
from flowerbed.platform.deploy.local import DEFAULT_CONNECTION, LocalDeployment

__all__ = ["LocalDeployment", "MissingConnectionError", "add_commands", "write_connection"]


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def node_count(text: str) -> int:
    """``--nodes``: a whole number of SuperNodes, at least one (argparse's one-line error else)."""
    try:
        nodes = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if nodes < 1:
        raise argparse.ArgumentTypeError(f"needs at least 1 SuperNode, got {nodes}")
    return nodes


def usage_text(dep: LocalDeployment) -> str:
    """What to tell the user once the deployment is up."""
    home = f" --set engine.flwr_home={dep.flwr_home}" if dep.flwr_home else ""
    env = f"FLWR_HOME={dep.flwr_home} " if dep.flwr_home else ""
    conn = (
        "" if dep.connection == DEFAULT_CONNECTION else f" --set engine.connection={dep.connection}"
    )
    return (
        f"SuperLink {dep.address} with {dep.nodes} SuperNodes "
        f"({'TLS' if dep.tls else 'insecure'}); logs in {dep.state_dir}\n"
        f"connection {dep.connection!r} written to {dep.config_file}\n"
        f"run a scenario on it (num_clients must be {dep.nodes}):\n"
        f"  flowerbed run scenarios/quickstart.yaml --set engine=deployment "
        f"--set num_clients={dep.nodes}{conn}{home}\n"
        f"or with Flower's CLI: {env}flwr run . {dep.connection} --stream\n"
        "Ctrl-C stops every process started here."
    )


def cmd_deploy_local(args: argparse.Namespace) -> int:
    """Run a local deployment until Ctrl-C or SIGTERM; exit 1 if a service dies."""
    signal.signal(signal.SIGTERM, _raise_interrupt)
    dep = LocalDeployment(
        args.nodes,
        tls=args.tls,
        flwr_home=args.flwr_home,
        connection=args.connection,
        state_dir=args.state_dir,
        startup_timeout=args.timeout,
    )
    try:
        with dep:
            print(usage_text(dep), flush=True)
            while True:
                dead = [s.name for s in dep.services if s.proc.poll() is not None]
                if dead:
                    print(f"stopped unexpectedly: {', '.join(dead)}", file=sys.stderr)
                    return 1
                time.sleep(1.0)
    except KeyboardInterrupt:
        print("stopped every SuperLink/SuperNode/SuperExec process started here", file=sys.stderr)
        return 0


def cmd_deploy_compose(args: argparse.Namespace) -> int:
    """Write the compose file and its TLS overlay for ``--nodes`` SuperNodes.

    Paths inside them are relative to where they are written, so they work
    from any ``--out``; exit status 2 when there is no checkout to build from.
    """
    from pathlib import Path

    from flowerbed.platform.deploy.compose import CERTS_DIR, project_root, write_compose

    try:
        written = write_compose(args.nodes, args.out, args.project, args.certs)
    except (FileNotFoundError, ValueError) as exc:
        print(f"deploy compose: {exc}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path}")
    root = Path(args.project) if args.project else project_root() or Path(".")
    certs = Path(args.certs) if args.certs else root / CERTS_DIR
    print(f"build context {root}; TLS certificates from {certs} "
          f"(make them with {root / 'docker' / 'make-certs.sh'} {certs})")
    return 0


def add_commands(subparsers: Any, commands: dict[str, Any]) -> None:
    """Add ``flowerbed deploy local ...`` and ``flowerbed deploy compose ...``."""
    p = subparsers.add_parser("deploy", help="Flower deployments (local processes, compose)")
    sub = p.add_subparsers(dest="deploy_command", required=True)
    local = sub.add_parser("local", help="SuperLink + N SuperNodes on loopback until Ctrl-C")
    local.add_argument("--nodes", type=node_count, default=2, help="SuperNodes to start (>= 1)")
    local.add_argument(
        "--tls",
        metavar="CERTDIR",
        default=None,
        help="folder made by docker/make-certs.sh (default: insecure)",
    )
    local.add_argument(
        "--flwr-home",
        default=None,
        help="where config.toml is written (default: $FLWR_HOME or ~/.flwr)",
    )
    local.add_argument("--connection", default=DEFAULT_CONNECTION)
    local.add_argument("--state-dir", default=None, help="logs and service homes (kept)")
    local.add_argument("--timeout", type=float, default=120.0, help="start-up timeout (s)")
    compose = sub.add_parser("compose", help="write docker compose files for N SuperNodes")
    compose.add_argument("--nodes", type=node_count, default=2, help="SuperNodes (>= 1)")
    compose.add_argument(
        "--out", default="docker/compose.yml",
        help="compose file, or a folder for compose.yml (with-tls.yml goes beside it)",
    )
    compose.add_argument(
        "--project", default=None, metavar="DIR",
        help="flowerbed checkout to build the image from (default: this one)",
    )
    compose.add_argument(
        "--certs", default=None, metavar="DIR",
        help="folder of ca.crt/server.pem/server.key (default: <project>/docker/certs)",
    )
    local.set_defaults(deploy_handler=cmd_deploy_local)
    compose.set_defaults(deploy_handler=cmd_deploy_compose)
    commands["deploy"] = _dispatch


def _dispatch(args: argparse.Namespace) -> int:
    status: int = args.deploy_handler(args)
    return status

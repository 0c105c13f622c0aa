"""A warm local Ray head for repeated runs: ``flowerbed up`` / ``flowerbed down``.

Starting Ray (its GCS server, raylet and object store) is the largest fixed
cost of a ``simulation`` run on a small machine. ``flowerbed up`` starts one
head with ``ray start`` and records its address in the artefact cache;
every later ``simulation`` run on this machine connects to it instead of
starting its own (``RAY_ADDRESS``, when set, still wins), until
``flowerbed down`` stops it. Each run is still its own Ray job, so its
workers start fresh and its numbers equal a cold run's.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from flowerbed.core.cache import cache_dir

log = logging.getLogger("flowerbed")

#: File in the artefact cache naming the warm head's address.
HEAD_FILE = "ray_head.json"
#: Port of the warm head's GCS server unless ``--port`` says otherwise.
DEFAULT_PORT = 6380


def head_file() -> Path:
    """Where the address of the head started by ``flowerbed up`` is kept."""
    return cache_dir() / HEAD_FILE


def _reachable(address: str, timeout: float = 0.5) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False


def recorded_head() -> dict[str, Any] | None:
    """The warm head's record when its GCS port answers; a stale record is removed."""
    path = head_file()
    try:
        record: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if _reachable(str(record.get("address", ""))):
        return record
    with contextlib.suppress(OSError):
        path.unlink()
    return None


def use_warm_head() -> str | None:
    """Point this process's Ray at the warm head, if one is up and ``RAY_ADDRESS`` is unset.

    Returns the address used, else ``None`` (Ray is started for the run as usual).
    """
    if os.environ.get("RAY_ADDRESS"):
        return None
    record = recorded_head()
    if record is None:
        return None
    os.environ["RAY_ADDRESS"] = str(record["address"])
    log.info("using the warm Ray head at %s (stop it with `flowerbed down`)", record["address"])
    return str(record["address"])


@contextlib.contextmanager
def warm_head(engine: str) -> Iterator[str | None]:
    """For a ``simulation`` run: ``RAY_ADDRESS`` names the warm head while the run lasts."""
    saved = os.environ.get("RAY_ADDRESS")
    address = use_warm_head() if engine == "simulation" else None
    try:
        yield address
    finally:
        if address is not None and saved is None:
            os.environ.pop("RAY_ADDRESS", None)


def _ray_executable() -> str:
    beside = Path(sys.executable).with_name("ray")
    found = str(beside) if beside.is_file() else shutil.which("ray")
    if found is None:
        raise SystemExit("flowerbed up: the `ray` command is not installed (pip install ray)")
    return found


def _ray_tmp() -> Path:
    """Ray's folder for session files, found the way Ray finds it."""
    return Path(os.environ.get("RAY_TMPDIR") or os.environ.get("TMPDIR") or "/tmp") / "ray"


def _session_dir() -> str | None:
    """The session folder of the Ray instance started last on this machine."""
    root = _ray_tmp() / "session_latest"
    return str(root.resolve()) if root.exists() else None


def up(num_cpus: int, port: int = DEFAULT_PORT) -> str:
    """Start the warm head (or report the running one) and record its address."""
    record = recorded_head()
    if record is not None:
        return str(record["address"])
    if _reachable(f"127.0.0.1:{port}"):
        raise SystemExit(
            f"flowerbed up: port {port} is taken by another program; choose one with --port"
        )
    env = dict(os.environ)
    # Workers inherit the head's environment: one torch thread per client by default.
    env.update({k: "1" for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")})
    env.pop("RAY_ADDRESS", None)
    cmd = [
        _ray_executable(), "start", "--head", f"--port={port}", f"--num-cpus={num_cpus}",
        "--include-dashboard=false", "--disable-usage-stats",
    ]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise SystemExit(f"flowerbed up: `ray start` failed: {tail[0]}")
    found = re.search(r"--address='([^']+)'", done.stdout + done.stderr)
    address = found.group(1) if found else f"127.0.0.1:{port}"
    path = head_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({
        "address": address, "num_cpus": num_cpus, "port": port, "session": _session_dir(),
    }))
    return address


def _end_session(session: str) -> bool:
    """End every process of one Ray session (its folder is on their command lines)."""
    try:
        import psutil
    except ImportError:
        return False
    procs = []
    for proc in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if session in " ".join(proc.info["cmdline"] or []):
                procs.append(proc)
    end_processes(procs, timeout=5)
    return True


def end_processes(procs: list[Any], timeout: float) -> None:
    """Terminate psutil processes, then kill those still alive after ``timeout`` seconds."""
    import psutil

    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()


def down() -> bool:
    """Stop the warm head; ``False`` when none was recorded as running."""
    record = recorded_head()
    with contextlib.suppress(OSError):
        head_file().unlink()
    if record is None:
        return False
    session = record.get("session")
    if not (session and _end_session(str(session))):
        # No narrower handle on a detached head: `ray stop` ends all of this user's Ray.
        subprocess.run([_ray_executable(), "stop"], capture_output=True, check=False)
    _forget_cluster(str(record["address"]))
    return True


def _forget_cluster(address: str) -> None:
    """Drop Ray's note of the last `ray start` when it names the head just stopped.

    `ray.init()` without an address joins the cluster that note names, and
    waits on a dead one; `ray stop` removes it, ending processes by hand does not.
    """
    note = _ray_tmp() / "ray_current_cluster"
    with contextlib.suppress(OSError):
        if note.read_text().strip() == address:
            note.unlink()


def cmd_up(args: argparse.Namespace) -> int:
    """``flowerbed up``: start (or show) the warm Ray head."""
    address = up(args.num_cpus or os.cpu_count() or 1, args.port)
    print(f"Ray head up at {address}; `flowerbed run` on the simulation engine uses it "
          "until `flowerbed down`")
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    """``flowerbed down``: stop the warm Ray head."""
    del args
    print("Ray head stopped" if down() else "no warm Ray head was running")
    return 0


def add_commands(subparsers: Any, commands: dict[str, Any]) -> None:
    """Register ``up`` and ``down``."""
    p = subparsers.add_parser(
        "up", help="keep a local Ray head running for repeated simulation runs",
        description="Start a local Ray head that later `flowerbed run`s on the simulation "
        "engine connect to, so they skip Ray's start-up. RAY_ADDRESS, when set, still wins.",
    )
    p.add_argument("--num-cpus", type=int, default=None,
                   help="CPUs the head offers (default: this machine's count)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT,
                   help=f"port of the head's GCS server (default: {DEFAULT_PORT})")
    commands["up"] = cmd_up
    p = subparsers.add_parser(
        "down", help="stop the Ray head started by `flowerbed up`",
        description="Stop the Ray head started by `flowerbed up` (its processes only; "
        "without psutil installed, `ray stop`, which ends every Ray instance of this user).",
    )
    commands["down"] = cmd_down

"""The ``deployment`` engine: ``flwr run`` of this app against a named SuperLink connection."""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flowerbed.core.records import METRICS_FILE, SUMMARY_FILE
from flowerbed.platform.deploy.connections import flwr_home, require_connection

if TYPE_CHECKING:
    from flowerbed.core.records import Recorder
    from flowerbed.core.scenario import Scenario

log = logging.getLogger("flowerbed")

#: The Flower app (``pyproject.toml`` with ``[tool.flwr.app]``) that ``flwr run`` builds.
PROJECT_ROOT = Path(__file__).resolve().parents[3]


def run_config(scenario: Scenario, run_dir: Path) -> dict[str, str]:
    """Run-config values: the resolved scenario (base64 JSON) and the run folder."""
    text = json.dumps(scenario.to_dict(), sort_keys=True)
    return {
        "scenario-b64": base64.b64encode(text.encode()).decode("ascii"),
        "run-dir": str(run_dir.resolve()),
    }


@contextmanager
def run_config_file(values: dict[str, str]) -> Iterator[Path]:
    """A temporary TOML file for ``flwr run -c`` (no quoting issues on the command line)."""
    import tomli_w  # a dependency of flwr

    fd, name = tempfile.mkstemp(prefix="flowerbed-run-config-", suffix=".toml")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(tomli_w.dumps(values))
        yield Path(name)
    finally:
        Path(name).unlink(missing_ok=True)


def flwr_env(home: str | None) -> dict[str, str]:
    """Environment of ``flwr run``: our Python's scripts first, no runtime installs."""
    bindir = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}",
        "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
    }
    if home:
        env["FLWR_HOME"] = str(Path(home).expanduser())
    return env


def stream_flwr_run(cmd: list[str], env: dict[str, str]) -> tuple[int, list[str]]:
    """Run ``cmd``, logging each output line; return its exit code and the output lines."""
    lines: list[str] = []
    with subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            log.debug("flwr run: %s", lines[-1])
    return proc.returncode, lines


def summary_from_output(lines: list[str]) -> dict[str, Any] | None:
    """The summary the ServerApp printed (for a SuperLink on another machine)."""
    from flowerbed.platform.server import SUMMARY_MARKER

    for line in reversed(lines):
        if SUMMARY_MARKER in line:
            found: dict[str, Any] = json.loads(line.split(SUMMARY_MARKER, 1)[1])
            return found
    return None


def collect(run_dir: Path, lines: list[str], recorder: Recorder) -> dict[str, Any] | None:
    """Summary and metric rows written by the ServerApp, fed into ``recorder``."""
    summary_path = run_dir / SUMMARY_FILE
    summary = (
        json.loads(summary_path.read_text())
        if summary_path.is_file()
        else summary_from_output(lines)
    )
    metrics_path = run_dir / METRICS_FILE
    if metrics_path.is_file():
        for text in metrics_path.read_text().splitlines():
            if text.strip():
                row = json.loads(text)
                recorder.rows.append(row)
                for listener in recorder.listeners:
                    listener(row)
    if summary is not None and not summary_path.is_file() and recorder.run_dir is not None:
        recorder.finish(summary)
    return summary


def run_on_superlink(scenario: Scenario, recorder: Recorder) -> dict[str, Any]:
    """Run ``scenario`` with ``flwr run`` on the connection ``scenario.engine.connection``.

    The ServerApp writes into ``recorder.run_dir`` when the SuperLink shares this
    file system; otherwise the summary comes back through the streamed log.
    """
    engine = scenario.engine
    require_connection(engine.connection, engine.flwr_home)
    with run_folder(recorder) as run_dir, run_config_file(run_config(scenario, run_dir)) as config:
        cmd = [
            str(Path(sys.executable).parent / "flwr"), "run", str(PROJECT_ROOT),
            engine.connection, "--stream", "-c", str(config),
        ]  # fmt: skip
        log.info("deployment: %s (FLWR_HOME=%s)", " ".join(cmd), flwr_home(engine.flwr_home))
        code, lines = stream_flwr_run(cmd, flwr_env(engine.flwr_home))
        summary = collect(run_dir, lines, recorder)
    if summary is None:
        tail = "\n".join(deque(lines, maxlen=40))
        error = server_error(lines)
        cause = f"ServerApp failed with {error}; " if error else ""
        raise RuntimeError(
            f"{cause}`flwr run` on connection {engine.connection!r} exited with code {code} "
            f"without a flowerbed summary; last output:\n{tail}"
        )
    return summary


_EXCEPTION_LINE = re.compile(r"^\s*(?:[\w.]+\.)?(\w+(?:Error|Exception)): (.+)$")


def server_error(lines: list[str]) -> str | None:
    """``RoundFailedError: train round 2: ...``: the last exception in the streamed log."""
    for line in reversed(lines):
        match = _EXCEPTION_LINE.match(line)
        if match:
            return f"{match.group(1)}: {match.group(2).strip()}"
    return None


@contextmanager
def run_folder(recorder: Recorder) -> Iterator[Path]:
    """The recorder's run folder, or a temporary one when the run is not saved."""
    if recorder.run_dir is not None:
        yield recorder.run_dir
        return
    with tempfile.TemporaryDirectory(prefix="flowerbed-deploy-run-") as tmp:
        yield Path(tmp)

"""Result sinks: the run folder's files, written so that nothing computed is lost.

Every file is written atomically (a temporary file and a rename) or appended a
whole line at a time, so a run killed at any moment leaves complete rows.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flowerbed.core.messages import Replies
    from flowerbed.core.scenario import Scenario
    from flowerbed.core.sinks import Sink

log = logging.getLogger("flowerbed")

SCENARIO_FILE = "scenario.resolved.yaml"
METRICS_FILE = "metrics.jsonl"
SUMMARY_FILE = "summary.json"
CLIENTS_FILE = "clients.json"
CLIENT_METRICS_FILE = "client_metrics.jsonl"
LOG_FILE = "run.log"
#: Folder of the clients' persistent state inside a run folder.
STATE_DIR_NAME = "client_state"
#: Folder of the arrays local tasks return, ``<source>/client_<pid>.npz``.
LOCAL_ARRAYS_DIR = "local_arrays"
#: Folder of the ``tensorboard`` sink's event files.
TENSORBOARD_DIR = "tensorboard"


def atomic_write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file and a rename (never half a file)."""
    atomic_write_bytes(path, text.encode())


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file and a rename (never half a file).

    The temporary name carries the process id, so two processes writing the
    same file (clients of one node) never share a temporary file.
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def publish_folder(
    out: Path, fill: Callable[[Path], object], source: dict[str, Any] | None = None
) -> None:
    """Build a folder beside ``out`` with ``fill`` and move it into place whole.

    A reader (another worker loading the same cached model) never sees half
    a folder, and a failed build leaves no temporary folder behind.
    ``source``, when given, is written as ``flowerbed_source.json`` (what
    produced the folder: parameters, metrics).
    """
    import shutil

    tmp = out.with_name(f".{out.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir(parents=True)
        fill(tmp)
        if source is not None:
            (tmp / "flowerbed_source.json").write_text(json.dumps(source, indent=1) + "\n")
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def append_line(path: Path, line: str) -> None:
    """Append ``line`` and a newline; see :func:`append_lines`."""
    append_lines(path, [line])


def append_lines(path: Path, lines: list[str]) -> None:
    """Append ``lines``, each with a newline, with one ``write`` call, then sync it to disk.

    Python's buffered files split writes larger than their buffer into several
    system calls, so a process killed between them would leave half a row. One
    ``os.write`` of the whole line on an ``O_APPEND`` descriptor leaves either
    the complete line or nothing (short writes, possible only when the disk
    is full, raise instead of tearing silently).

    Parameters
    ----------
    path
        The JSON-lines file (created if missing).
    lines
        Rows without their newlines; none may contain one.
    """
    data = "".join(line + "\n" for line in lines).encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        written = os.write(fd, data)
        if written != len(data):
            raise OSError(f"short write to {path}: {written} of {len(data)} bytes")
        os.fsync(fd)
    finally:
        os.close(fd)


def metric_name(phase: str, name: str) -> str:
    """``<phase>/<split>/<metric>``; a bare metric name is taken to be on the test split."""
    return f"{phase}/{name}" if "/" in name else f"{phase}/test/{name}"


def _checkpoint_round(folder: Path | None) -> int | None:
    """The round of a checkpoint folder (``round_000016`` -> 16); ``None`` for none."""
    if folder is None:
        return None
    return int(folder.name.rsplit("_", 1)[-1])


@dataclass
class Recorder:
    """Receives everything a run produces and writes it to the run folder.

    ``run_dir=None`` keeps results in memory only. ``listeners`` are called
    with each row (the live progress display is one); another process's rows
    may be fed to them too (a deployed ServerApp's). The scenario's ``sinks``
    (:mod:`flowerbed.core.sinks`) are opened by :meth:`start` when the run
    has a folder and ``use_sinks`` is set, get each row this recorder records,
    and the last summary given to :meth:`finish` (``None`` if none was) at
    :meth:`close`. ``sweep`` names the sweep the run is a point of.
    """

    scenario: Scenario
    run_dir: Path | None = None
    listeners: list[Callable[[dict[str, Any]], None]] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    started: float = field(default_factory=time.time)
    sweep: str | None = None
    use_sinks: bool = True
    sinks: list[Sink] = field(default_factory=list)
    summary: dict[str, Any] | None = None
    #: The checkpoint folder a resumed run continues from (see
    #: :func:`flowerbed.core.checkpoints.prepare_resume`); ``rows`` then holds
    #: the rows recorded before it.
    resume_from: Path | None = None
    #: ``client_metrics.jsonl``'s rows of a run without a folder (kept in memory).
    client_rows: list[dict[str, Any]] = field(default_factory=list)
    _handler: logging.Handler | None = None

    def start(self) -> None:
        """Write the resolved scenario and attach the run log."""
        if self.run_dir is None:
            return
        self.run_dir.mkdir(parents=True, exist_ok=True)
        atomic_write(self.run_dir / SCENARIO_FILE, self.scenario.to_yaml())
        handler = logging.FileHandler(self.run_dir / LOG_FILE)
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
        handler.setLevel(logging.INFO)
        for name in ("flowerbed", "flwr"):
            logging.getLogger(name).addHandler(handler)
        self._handler = handler
        if self.use_sinks:
            from flowerbed.core.sinks import SinkContext, open_sinks

            try:
                resumed = _checkpoint_round(self.resume_from)
                self.sinks = open_sinks(
                    SinkContext(self.scenario, self.run_dir, self.sweep, resumed)
                )
            except BaseException:
                self.close()
                raise

    def close(self) -> None:
        """Close the sinks (with the summary, if the run finished) and detach the run log."""
        sinks, self.sinks = self.sinks, []
        for sink in sinks:
            try:
                sink.close(self.summary)
            except Exception as exc:  # noqa: BLE001 - metrics.jsonl keeps everything
                log.warning("sink %s failed to close: %s: %s", _sink_name(sink),
                            type(exc).__name__, exc)
        if self._handler is not None:
            for name in ("flowerbed", "flwr"):
                logging.getLogger(name).removeHandler(self._handler)
            self._handler.close()
            self._handler = None

    def _append(self, row: dict[str, Any]) -> None:
        row = {"time_s": round(time.time() - self.started, 3), **row}
        self.rows.append(row)
        if self.run_dir is not None:
            append_line(self.run_dir / METRICS_FILE, json.dumps(row))
        for listener in self.listeners:
            listener(row)
        for sink in list(self.sinks):
            try:
                sink.row(row)
            except Exception as exc:  # noqa: BLE001 - metrics.jsonl keeps everything
                # A tracker failing mid-run must not end a long run: it is dropped
                # and said once; metrics.jsonl still has every row.
                self.sinks.remove(sink)
                log.warning("sink %s failed and is off for the rest of the run: %s: %s",
                            _sink_name(sink), type(exc).__name__, exc)

    def metrics(self, server_round: int, phase: str, values: dict[str, float]) -> None:
        """Record one row of metrics, named ``<phase>/<split>/<metric>``."""
        named = {metric_name(phase, k): float(v) for k, v in values.items()}
        self._append({"round": server_round, "phase": phase, **named})
        log.info("round %d %s %s", server_round, phase, _fmt(named))

    def replies(self, message_type: str, server_round: int, replies: Replies) -> None:
        """Record who answered a phase; failures are named by partition id."""
        row: dict[str, Any] = {
            "round": server_round,
            "phase": message_type,
            "event": "replies",
            **replies.counts(),
        }
        if replies.failed:
            row["failed_clients"] = {str(k): v for k, v in replies.failed.items()}
            for pid, reason in replies.failed.items():
                log.warning(
                    "round %d %s: client %d failed: %s", server_round, message_type, pid, reason
                )
        if replies.dropped or replies.late:
            row["dropped_clients"] = replies.dropped
            row["late_clients"] = replies.late
            row["virtual_time_s"] = round(replies.virtual_time, 4)
        if replies.empty():  # nothing to count (no local test rows): left out of the average
            row["empty_clients"] = replies.empty()
        if replies.missing:
            row["missing_clients"] = replies.missing
            log.warning(
                "round %d %s: no reply from clients %s", server_round, message_type, replies.missing
            )
        self._append(row)
        self._client_metrics(message_type, server_round, replies)

    def _client_metrics(self, message_type: str, server_round: int, replies: Replies) -> None:
        """One ``client_metrics.jsonl`` row per usable reply that carries metrics.

        ``metrics.jsonl`` holds the aggregates; this keeps each client's own
        figures (per-client accuracy, fairness across clients) without
        inflating the rows every listener sees. The client's metrics sit under
        ``metrics`` so a client metric named ``round`` cannot overwrite the row's.
        """
        rows = [
            {
                "round": server_round,
                "phase": message_type,
                "client": pid,
                "num_examples": p.num_examples,
                "metrics": p.metrics,
            }
            for pid, p in sorted(replies.ok.items())
            if p.metrics
        ]
        if self.run_dir is None:
            self.client_rows += rows  # a run kept in memory keeps them here
        elif rows:
            append_lines(self.run_dir / CLIENT_METRICS_FILE, [json.dumps(r) for r in rows])

    def event(self, name: str, **info: Any) -> None:
        """Record a notable event (connection, baseline start, error)."""
        self._append({"event": name, **info})
        log.info("%s %s", name, info)

    def write_json(self, filename: str, data: Any) -> None:
        """Write a JSON file into the run folder atomically."""
        if self.run_dir is not None:
            atomic_write(
                self.run_dir / filename, json.dumps(data, indent=2, default=_json_default) + "\n"
            )

    def write_arrays(self, relpath: str, arrays: dict[str, Any]) -> None:
        """Write named arrays as one ``.npz`` under the run folder, atomically."""
        if self.run_dir is None or not arrays:
            return
        import io

        import numpy as np

        path = self.run_dir / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        buf = io.BytesIO()
        np.savez(buf, **{k: np.asarray(v) for k, v in arrays.items()})  # type: ignore[arg-type]
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_bytes(buf.getvalue())
        os.replace(tmp, path)

    def finish(self, summary: dict[str, Any]) -> None:
        """Write ``summary.json`` (the last file a complete run writes)."""
        self.summary = summary
        self.write_json(SUMMARY_FILE, summary)


def _sink_name(sink: object) -> str:
    return type(sink).__name__


def _json_default(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


def _fmt(metrics: dict[str, float]) -> str:
    return " ".join(f"{k}={v:.4g}" for k, v in metrics.items())

"""Shared benchmark plumbing: a timing Grid, a process-tree memory sampler, tables.

Nothing here is imported by flowerbed; the benchmarks import it from their own
folder (``python benchmarks/platform/<name>.py`` puts this folder on ``sys.path``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from flwr.app import Message
from flwr.serverapp import Grid

from flowerbed.strategies.grids import DelegatingGrid

#: This folder (``_common`` and the raw Flower apps, imported by name) and ``benchmarks/``.
HERE = Path(__file__).resolve().parent
BENCH_DIR = HERE.parent
RESULTS_DIR = BENCH_DIR / "results" / "platform"

#: Environment variable the raw Flower ClientApp reads its data file from.
DATA_ENV = "FLOWERBED_BENCH_DATA"


def load_avg() -> float:
    """One-minute load average (other jobs may share the cores)."""
    return round(os.getloadavg()[0], 2)


@dataclass
class Phase:
    """One ``send_and_receive`` call as the ServerApp saw it (``time.perf_counter``)."""

    message_type: str
    messages: int
    replies: int
    start: float
    end: float
    first_reply: float | None = None

    @property
    def seconds(self) -> float:
        """Wall time of the phase."""
        return self.end - self.start


class TimedGrid(DelegatingGrid):
    """A ``Grid`` that delegates to another and times every phase.

    The first ``send_and_receive`` polls every 10 ms (instead of Flower's
    100 ms) so the arrival of the very first reply, i.e. the end of Ray
    start-up, is timed; every later call is the wrapped grid's own.
    """

    def __init__(self, inner: Grid) -> None:
        super().__init__(inner)
        self.phases: list[Phase] = []

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        """Delegate, recording message type, counts and wall time."""
        messages = list(messages)
        kind = messages[0].metadata.message_type if messages else "-"
        start = time.perf_counter()
        if self.phases:
            replies = list(self.inner.send_and_receive(messages, timeout=timeout))
            first = None
        else:
            replies, first = self._first_phase(messages, timeout)
        self.phases.append(
            Phase(kind, len(messages), len(replies), start, time.perf_counter(), first)
        )
        return replies

    def _first_phase(
        self, messages: list[Message], timeout: float | None
    ) -> tuple[list[Message], float | None]:
        pending = set(self.inner.push_messages(messages))
        deadline = time.perf_counter() + (timeout or 3600.0)
        replies: list[Message] = []
        first = None
        while pending and time.perf_counter() < deadline:
            got = list(self.inner.pull_messages(pending))
            if got and first is None:
                first = time.perf_counter()
            replies += got
            pending -= {m.metadata.reply_to_message_id for m in got}
            if pending:
                time.sleep(0.01)
        return replies, first

    def of_type(self, prefix: str) -> list[Phase]:
        """Phases whose message type starts with ``prefix``."""
        return [p for p in self.phases if p.message_type.startswith(prefix)]


_SAMPLER = r"""
import sys, time, psutil
root, interval, pss_every = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
me = psutil.Process()
last_pss = 0.0
while True:
    try:
        parent = psutil.Process(root)
        procs = [parent, *parent.children(recursive=True)]
    except psutil.Error:
        break
    procs = [p for p in procs if p.pid != me.pid]
    now = time.perf_counter()
    rss = count = 0
    for p in procs:
        try:
            rss += p.memory_info().rss
            count += 1
        except psutil.Error:
            pass
    line = f"{now} {rss} {count}"
    if now - last_pss >= pss_every:
        last_pss, pss = now, 0
        for p in procs:
            try:
                pss += p.memory_full_info().pss
            except (psutil.Error, AttributeError):
                pass
        line += f" {pss}"
    print(line, flush=True)
    if sys.stdin in __import__("select").select([sys.stdin], [], [], interval)[0]:
        break
"""


class TreeMemory:
    """Samples the summed RSS of this process and all its descendants.

    Ray's GCS, raylet and worker processes are descendants of the driver, so
    this covers the whole simulation. RSS double-counts shared pages (Ray's
    object store, shared libraries), so the sum is an upper bound; the PSS
    sum (shared pages split between processes) is sampled every few seconds.

    The sampler is a separate process (itself left out of the sums): run as a
    thread of the driver, reading ``smaps_rollup`` took a third of the
    driver's busy samples in a profile of a 1,000-client round, competing for
    the GIL with Flower's engine threads. ``time.perf_counter`` is the
    system's monotonic clock, so its timestamps compare with the driver's.
    """

    def __init__(
        self, interval: float = 0.1, pss_every: float = 5.0, root: int | None = None
    ) -> None:
        self.interval = interval
        self.pss_every = pss_every
        #: Root of the sampled tree (default: this process); sampling ends when it exits.
        self.root = root
        self.samples: list[tuple[float, int, int]] = []  # (time, rss sum, processes)
        self.pss_samples: list[tuple[float, int]] = []
        self._proc: Any = None
        self._reader = threading.Thread(target=self._read, daemon=True)

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            parts = line.split()
            if len(parts) < 3:
                continue
            t = float(parts[0])
            self.samples.append((t, int(parts[1]), int(parts[2])))
            if len(parts) > 3:
                self.pss_samples.append((t, int(parts[3])))

    def __enter__(self) -> TreeMemory:
        import subprocess

        self._proc = subprocess.Popen(
            [sys.executable, "-c", _SAMPLER, str(self.root or os.getpid()), str(self.interval),
             str(self.pss_every)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self._reader.start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._proc is not None and self._proc.stdin is not None
        self._proc.stdin.write("stop\n")
        self._proc.stdin.close()
        self._proc.wait(timeout=60)
        self._reader.join(timeout=60)

    def peak(self, start: float = 0.0, end: float = float("inf")) -> dict[str, float]:
        """Peak RSS sum, PSS sum (MiB) and process count within ``[start, end]``."""
        rss = [(r, c) for t, r, c in self.samples if start <= t <= end] or [(0, 0)]
        pss = [v for t, v in self.pss_samples if start <= t <= end] or [float("nan")]
        return {
            "rss_mib": round(max(r for r, _ in rss) / 2**20, 1),
            "pss_mib": round(max(pss) / 2**20, 1),
            "processes": max(c for _, c in rss),
        }


def backend_config(num_cpus: float = 1.0, ray_num_cpus: int | None = None) -> dict[str, Any]:
    """Ray settings identical for every arm: the ones flowerbed's runner uses."""
    init_args: dict[str, Any] = {"logging_level": "ERROR", "log_to_driver": False}
    if ray_num_cpus:
        init_args["num_cpus"] = ray_num_cpus
    return {
        "client_resources": {"num_cpus": num_cpus, "num_gpus": 0.0},
        "init_args": init_args,
    }


@dataclass
class SimRun:
    """Timings of one ``run_simulation`` call."""

    label: str
    called: float
    phases: list[Phase] = field(default_factory=list)
    main_started: float | None = None
    ended: float | None = None
    load: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def startup_s(self) -> float:
        """``run_simulation`` call to the first client reply (Ray start, actors, imports)."""
        first = next((p.first_reply for p in self.phases if p.first_reply), None)
        return (first or self.phases[0].end) - self.called


def simulate(
    label: str,
    body: Callable[[TimedGrid], dict[str, Any] | None],
    client_app: Any,
    num_nodes: int,
    config: dict[str, Any],
    *,
    indexed: bool = False,
) -> SimRun:
    """Run ``body`` as a ServerApp main under ``run_simulation`` and time it.

    ``body`` gets the timing grid and may return extra values to keep. Its
    exceptions are re-raised here. One BLAS/OpenMP thread per worker, as
    flowerbed's runner sets, for every arm. ``indexed`` installs flowerbed's
    indexed LinkState (what flowerbed's engine runs on); ``False`` keeps
    Flower's stock in-memory state.
    """
    from flwr.app import Context
    from flwr.serverapp import ServerApp
    from flwr.simulation import run_simulation

    from flowerbed.platform.console import quiet_flower
    from flowerbed.platform.linkstate import indexed_link_state
    from flowerbed.platform.resources import worker_threads

    app = ServerApp()
    run = SimRun(label, time.perf_counter(), load=load_avg())
    outcome: dict[str, Any] = {}

    @app.main()
    def _main(grid: Grid, context: Context) -> None:
        del context
        run.main_started = time.perf_counter()
        timed = TimedGrid(grid)
        run.phases = timed.phases
        try:
            run.extra.update(body(timed) or {})
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            outcome["error"] = exc

    _worker_path()
    link_state = indexed_link_state() if indexed else contextlib.nullcontext()
    with quiet_flower(), worker_threads(config["client_resources"]["num_cpus"]), link_state:
        run.called = time.perf_counter()
        run_simulation(
            server_app=app,
            client_app=client_app,
            num_supernodes=num_nodes,
            backend_config=config,
        )
    run.ended = time.perf_counter()
    if "error" in outcome:
        raise outcome["error"]
    return run


def _worker_path() -> None:
    """Let Ray workers import the raw Flower app module from this folder."""
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(HERE) not in parts:
        os.environ["PYTHONPATH"] = os.pathsep.join([str(HERE), *parts])


def median(values: Iterable[float]) -> float:
    """Median of a non-empty iterable (``nan`` if empty)."""
    vals = list(values)
    return statistics.median(vals) if vals else float("nan")


def machine() -> dict[str, Any]:
    """Cores, RAM and versions for the README."""
    import flwr
    import psutil
    import ray
    import torch

    return {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "cores": os.cpu_count(),
        "ram_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(),
        "flwr": flwr.__version__,
        "ray": ray.__version__,
        "torch": torch.__version__,
    }


@dataclass
class Check:
    """A target: ``value`` compared with ``target`` (``<=`` unless ``higher_is_better``)."""

    name: str
    value: float
    target: float
    unit: str = "x"
    higher_is_better: bool = False

    @property
    def passed(self) -> bool:
        """Whether the target is met."""
        if self.higher_is_better:
            return self.value >= self.target
        return self.value <= self.target


def print_table(title: str, columns: list[str], rows: list[list[Any]]) -> None:
    """Print a rich table (plain text when stdout is not a terminal)."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for i, col in enumerate(columns):
        table.add_column(col, justify="left" if i == 0 else "right")
    for row in rows:
        table.add_row(*(_cell(v) for v in row))
    Console(width=160).print(table)


def print_checks(checks: list[Check]) -> None:
    """Each target with its value and PASS/FAIL."""
    rows = [
        [
            c.name,
            f"{c.value:.3g} {c.unit}",
            f"{'>=' if c.higher_is_better else '<='} {c.target:g} {c.unit}",
            "PASS" if c.passed else "FAIL",
        ]
        for c in checks
    ]
    print_table("targets", ["check", "value", "target", "result"], rows)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _script(path: str) -> str:
    """The script path relative to the repository root (no machine-specific prefix)."""
    try:
        return str(Path(path).resolve().relative_to(BENCH_DIR.parent))
    except ValueError:
        return Path(path).name


def add_raw_link_state(parser: argparse.ArgumentParser) -> None:
    """``--raw-link-state``: the raw Flower arm on Flower's stock LinkState (the
    issue's baseline, default) or on flowerbed's indexed one (like for like)."""
    parser.add_argument(
        "--raw-link-state", choices=("stock", "indexed"), default="stock",
        help="raw Flower arm's LinkState: Flower's stock one (default) or flowerbed's indexed one",
    )


def result_name(base: str, raw_link_state: str, link_state: str = "indexed") -> str:
    """File stem for a run: ``_stock`` when flowerbed ran on Flower's LinkState,
    ``_raw_indexed`` when the raw arm ran on flowerbed's, so variants never
    overwrite the default figures."""
    return (
        base
        + ("_stock" if link_state == "stock" else "")
        + ("_raw_indexed" if raw_link_state == "indexed" else "")
    )


def save(name: str, quick: bool, payload: dict[str, Any], checks: list[Check]) -> Path:
    """Write ``results/platform/<name>[_quick].json`` (read by ``run_all.py``)."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}{'_quick' if quick else ''}.json"
    data = {
        "benchmark": name,
        "quick": quick,
        "command": " ".join(["python", _script(sys.argv[0]), *sys.argv[1:]]),
        "machine": machine(),
        "checks": [{**asdict(c), "passed": c.passed} for c in checks],
        **payload,
    }
    path.write_text(json.dumps(data, indent=2, default=str) + "\n")
    print(f"results written to {path}")
    return path

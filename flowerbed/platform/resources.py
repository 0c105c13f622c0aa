"""Memory estimate of a scenario, checked before an engine starts: fail fast, not by OOM.

The estimate is deliberately simple and stated in the error, so a user can see
which term is too large:

* the server holds the global model, one reply per client until it aggregates,
  the aggregate and an evaluation copy: ``model * (clients + 3)``, plus the data;
* each concurrently running client (one Ray actor, or the single inline
  process) holds the received weights, the model, its gradients, up to two
  optimiser states and its reply: ``model * 6``, plus its own copy of the data.

The model size comes from building the scenario's model on torch's ``meta``
device (no memory allocated); the data size from the dataset arrays.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from flowerbed.core.population import virtual_clients
from flowerbed.core.scenario import Scenario

log = logging.getLogger("flowerbed")

#: Copies of the model a training client holds at once (see the module docstring).
CLIENT_COPIES = 6
#: Server copies besides one reply per client: global, aggregate, evaluation model.
SERVER_COPIES = 3
#: Set to ``1`` to skip the check (an estimate can be wrong for exotic components).
SKIP_ENV = "FLOWERBED_SKIP_MEMORY_CHECK"


class ResourceLimitError(RuntimeError):
    """A scenario asks for more than the machine has: memory, CPUs or GPUs per client."""


def available_cpus() -> int:
    """CPUs this process may run on (its affinity mask, else the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


#: Thread variables BLAS and OpenMP libraries read once, at import.
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


@contextlib.contextmanager
def worker_threads(num_cpus: float) -> Iterator[None]:
    """One BLAS/OpenMP thread per client CPU in the environment processes started now inherit.

    Ray's workers and the process backend's fork server are started from
    this process's environment (Flower owns Ray's ``runtime_env``), so the
    variables are set here while they start and restored after.
    """
    saved = {k: os.environ.get(k) for k in THREAD_VARS}
    os.environ.update(dict.fromkeys(THREAD_VARS, str(max(1, int(num_cpus)))))
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes a run is expected to need at its peak.

    Attributes
    ----------
    model_bytes
        Parameters and buffers of one model instance.
    data_bytes
        The dataset's arrays (every process holds a copy).
    clients
        ``num_clients``: replies the server holds before aggregating.
    actors
        Clients running at the same time (1 for the inline engine).
    separate_processes
        Whether clients run in their own processes (Ray) or in the server's.
    """

    model_bytes: int
    data_bytes: int
    clients: int
    actors: int
    separate_processes: bool

    @property
    def server_bytes(self) -> int:
        """The server process: data plus ``clients + SERVER_COPIES`` models."""
        return self.data_bytes + self.model_bytes * (self.clients + SERVER_COPIES)

    @property
    def actor_bytes(self) -> int:
        """One client worker: ``CLIENT_COPIES`` models, plus data in its own process."""
        data = self.data_bytes if self.separate_processes else 0
        return data + self.model_bytes * CLIENT_COPIES

    @property
    def total_bytes(self) -> int:
        """Server plus every concurrent client worker."""
        return self.server_bytes + self.actors * self.actor_bytes

    def describe(self) -> str:
        """The estimate and how it is made up, in one line."""
        data_copies = 1 + (self.actors if self.separate_processes else 0)
        return (
            f"estimated memory {fmt_bytes(self.total_bytes)} = model "
            f"{fmt_bytes(self.model_bytes)} * ({self.clients} client replies + "
            f"{SERVER_COPIES} server copies + {CLIENT_COPIES} per client * {self.actors} "
            f"concurrent client(s)) + data {fmt_bytes(self.data_bytes)} * {data_copies}"
        )


def fmt_bytes(n: float) -> str:
    """Human-readable size in binary units, e.g. ``fmt_bytes(3 * 2**30) == '3.0 GiB'``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024:
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} TiB"


def model_bytes(scenario: Scenario, num_features: int, out_features: int) -> int:
    """Bytes of the scenario's model, built on torch's ``meta`` device (nothing allocated).

    Returns 0 for scenarios without a ``model:`` block (closed-form learners).
    """
    if scenario.model is None:
        return 0
    import torch

    from flowerbed.core import registry

    with torch.device("meta"):
        module = registry.build(
            "model", scenario.model, in_features=num_features, out_features=out_features
        )
    tensors = [*module.parameters(), *module.buffers()]
    return int(sum(t.numel() * t.element_size() for t in tensors))


def concurrent_actors(scenario: Scenario, cpus: int | None = None) -> int:
    """Clients that run at once here: Ray's pool size, 1 inline, 0 deployed (SuperNodes)."""
    if scenario.engine.name == "inline":
        return 1
    if scenario.engine.name == "deployment":
        return 0
    cpus = cpus or scenario.engine.ray_num_cpus or os.cpu_count() or 1
    per_client = scenario.engine.client_resources.num_cpus
    return max(1, min(scenario.num_clients, math.floor(cpus / per_client)))


def held_replies(scenario: Scenario) -> int:
    """Replies the server may hold at once: every client, or a virtual population's cohort.

    With virtual clients the population can be millions while a round asks a
    cohort: the bound is the largest ``fraction*`` of the strategy's params
    times ``num_clients`` (every client when the strategy names no fraction).
    """
    n = scenario.num_clients
    if not virtual_clients(scenario):
        return n
    params = scenario.component("strategy").model_dump()
    fractions = [
        float(v) for k, v in params.items()
        if k.startswith("fraction") and isinstance(v, (int, float)) and not isinstance(v, bool)
    ]
    if not fractions:
        return n
    return min(n, max(1, math.ceil(max(fractions) * n)))


def estimate_memory(scenario: Scenario, cpus: int | None = None) -> MemoryEstimate:
    """Estimate a run's peak memory (loads the dataset, which the run reuses)."""
    from flowerbed.data.federated import federated_data

    dataset = federated_data(scenario).dataset
    meta = dataset.meta
    out = meta.num_classes if meta.task == "classification" else 1
    arrays = (dataset.x_train, dataset.y_train, dataset.x_test, dataset.y_test)
    return MemoryEstimate(
        model_bytes=model_bytes(scenario, meta.num_features, out),
        data_bytes=int(sum(a.nbytes for a in arrays)),
        clients=held_replies(scenario),
        actors=concurrent_actors(scenario, cpus),
        separate_processes=scenario.engine.name == "simulation",
    )


def available_memory(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """Bytes of memory available to new work (psutil, else ``/proc/meminfo``), or None."""
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except ImportError:
        pass
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def check_memory(scenario: Scenario, available: int | None = None) -> MemoryEstimate | None:
    """Raise :class:`ResourceLimitError` when the estimate exceeds available memory.

    Parameters
    ----------
    scenario
        The validated scenario about to run.
    available
        Bytes available (default: measured now).

    Returns
    -------
    MemoryEstimate or None
        The estimate, or ``None`` when the check is skipped (``SKIP_ENV=1``).
    """
    if os.environ.get(SKIP_ENV) == "1":
        return None
    estimate = estimate_memory(scenario)
    available = available_memory() if available is None else available
    log.debug("%s; available %s", estimate.describe(), available)
    if available is not None and estimate.total_bytes > available:
        raise ResourceLimitError(
            f"{estimate.describe()}, more than the {fmt_bytes(available)} available; "
            f"use a smaller model, fewer clients or fewer concurrent clients "
            f"(engine.client_resources.num_cpus), or set {SKIP_ENV}=1 to run anyway"
        )
    return estimate


def visible_gpus() -> int:
    """GPUs this process may use: 0 if ``CUDA_VISIBLE_DEVICES`` hides them all, else torch's count.

    The environment variable is read first so that hiding the GPUs costs no
    torch import; torch (needed by the run anyway) is imported only here.
    """
    hidden = os.environ.get("CUDA_VISIBLE_DEVICES")
    if hidden is not None and hidden.strip() in ("", "-1"):
        return 0
    try:
        import torch
    except ImportError:
        return 0
    return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0


def check_resources(scenario: Scenario, cpus: int | None = None) -> None:
    """Refuse per-client resources Ray could never grant; say so when inline falls back to CPU.

    Ray does not fail on an actor it cannot place: it waits for resources
    that never come, so the run would hang. Nothing is checked when
    ``RAY_ADDRESS`` names a cluster (its nodes decide) or for deployments
    (each SuperNode has its own machine).

    Parameters
    ----------
    scenario
        The validated scenario about to run.
    cpus
        CPUs Ray gets (default: ``engine.ray_num_cpus``, else this machine's count).

    Raises
    ------
    ResourceLimitError
        Naming each field that cannot be satisfied.
    """
    engine = scenario.engine
    wanted = engine.client_resources
    if engine.name == "inline":
        if wanted.num_gpus > 0 and visible_gpus() == 0:
            log.warning(
                "engine.client_resources.num_gpus=%g: no GPU visible, the inline engine "
                "falls back to CPU",
                wanted.num_gpus,
            )
        return
    if engine.name != "simulation" or os.environ.get("RAY_ADDRESS"):
        return
    problems = []
    have_cpus = cpus or engine.ray_num_cpus or available_cpus()
    if wanted.num_cpus > have_cpus:
        problems.append(
            f"engine.client_resources.num_cpus={wanted.num_cpus:g} but the simulation has "
            f"{have_cpus} CPU(s) (engine.ray_num_cpus or this machine's count), so no client "
            f"could start"
        )
    if wanted.num_gpus > 0:
        have_gpus = visible_gpus()
        if have_gpus == 0:
            problems.append(
                f"engine.client_resources.num_gpus={wanted.num_gpus:g} asks for a GPU per "
                f"client but no GPU is visible (torch.cuda.is_available() is false or "
                f"CUDA_VISIBLE_DEVICES hides them); set it to 0 to train on CPU"
            )
        elif wanted.num_gpus > have_gpus:
            problems.append(
                f"engine.client_resources.num_gpus={wanted.num_gpus:g} but only "
                f"{have_gpus} GPU(s) are visible, so no client could start"
            )
    if problems:
        raise ResourceLimitError("; ".join(problems))

"""Flower's simulation engine with its clients in local worker processes instead of Ray actors.

On one machine, most of a short simulation's wall time went to Ray: its
head starting (4-5 s on two cores), then every actor importing Flower,
torch and the learner afresh (5-8 s), then shutting down (1-2 s), while
the rounds themselves took seconds. This backend keeps everything else of
Flower's simulation engine (``run_simulation``, its LinkState, Grid,
message queues and worker threads) and swaps only the part that runs a
ClientApp: a pool of processes forked from one server process that
imported those libraries once, while the driver was still building the
data.

A worker takes one ``(Message, Context)`` at a time, exactly as a Ray actor
does, runs the ClientApp and sends back the reply and the updated context;
the pool is as large as Ray's would be (all CPUs over
``engine.client_resources.num_cpus``), so the same clients run side by
side and the numbers match the Ray backend's. A worker that dies
(out of memory, a crash in native code) answers its message with an error
naming its exit code and is replaced.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import multiprocessing
import multiprocessing.connection
import os
import pickle
import queue
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing.context import BaseContext
from typing import TYPE_CHECKING, Any

from flwr.clientapp.client_app import ClientAppException
from flwr.server.superlink.fleet.vce.backend import Backend, BackendConfig

from flowerbed.platform.resources import THREAD_VARS, available_cpus, worker_threads

if TYPE_CHECKING:
    from flwr.app import Context, Message
    from flwr.clientapp import ClientApp

    from flowerbed.core.scenario import Scenario

log = logging.getLogger("flowerbed")

#: What every worker imports before its first message, in the fork server.
BASE_PRELOAD = (
    "flowerbed.platform.process_backend",
    "flowerbed.clients.client_app",
    "torch",
    "torch._dynamo",
)


_PROTOCOL = pickle.HIGHEST_PROTOCOL


def pool_size(num_cpus: float, total_cpus: float) -> int:
    """Clients that run at once: as many as ``num_cpus`` fit in ``total_cpus``, at least one.

    The same count Flower's Ray actor pool reaches on one node, so a scenario
    runs the same clients side by side on either backend.
    """
    return max(1, int(total_cpus // num_cpus))


def preload_modules(scenario: Scenario) -> list[str]:
    """The modules every worker of ``scenario`` will import: its learner's, model's and data's."""
    from flowerbed.core.plugins import component_index
    from flowerbed.core.registry import name_of

    index = component_index()
    named = {"learner": scenario.learner, "model": scenario.model, "dataset": scenario.dataset}
    wanted = [index.get((kind, name_of(spec))) for kind, spec in named.items() if spec is not None]
    return [*BASE_PRELOAD, *dict.fromkeys(m for m in wanted if m)]


_SERVER_LOCK = threading.Lock()


def pool_context() -> BaseContext:
    """The ``forkserver`` context the workers are started from."""
    return multiprocessing.get_context("forkserver")


def start_fork_server(scenario: Scenario) -> None:
    """Start the fork server now and let it import the workers' libraries meanwhile.

    Called while the driver builds the data; the import happens in the
    server process, on another core, and every worker forked from it
    inherits the modules. The server is this process's one fork server: a
    later run in the same process reuses it (its modules stay imported).
    Thread variables are set while it starts because torch and the BLAS
    libraries read them at import.
    """
    from multiprocessing import forkserver

    with _SERVER_LOCK, worker_threads(scenario.engine.client_resources.num_cpus):
        pool_context().set_forkserver_preload(preload_modules(scenario))
        forkserver.ensure_running()


def worker_environment() -> dict[str, str]:
    """The driver's environment as a worker should see it (the worker sets its thread variables).

    The fork server keeps the environment it started with; a later run (or
    a test) may have changed ``FLOWERBED_CACHE`` and the like since.
    """
    env = dict(os.environ)
    for key in THREAD_VARS:
        env.pop(key, None)
    return env


def _serve(
    conn: multiprocessing.connection.Connection,
    app_fn_bytes: bytes,
    env: dict[str, str],
    threads: int,
) -> None:
    """A worker's loop: one pickled ``(Message, Context)`` in, ``(ok, reply)`` out, until EOF."""
    import cloudpickle

    # Ctrl-C (and a scheduler's SIGTERM) reach the whole process group; the driver
    # decides how the run ends and closes the pipes, which ends the worker.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    os.environ.clear()
    os.environ.update({**env, **dict.fromkeys(THREAD_VARS, str(threads))})
    if "torch" in sys.modules:  # preloaded by the fork server, which may serve other runs
        sys.modules["torch"].set_num_threads(threads)
    app_fn: Callable[[], ClientApp] = cloudpickle.loads(app_fn_bytes)
    while True:
        try:
            data = conn.recv_bytes()
        except (EOFError, OSError):
            return
        message, context = pickle.loads(data)
        try:
            reply: tuple[bool, Any] = (True, (app_fn()(message=message, context=context), context))
        except Exception as exc:  # noqa: BLE001 - sent to the driver, as a Ray actor raises it
            reply = (False, (str(exc), traceback.format_exc()))
        try:
            conn.send_bytes(pickle.dumps(reply, protocol=_PROTOCOL))
        except OSError:  # the driver stopped (Ctrl-C, a crash): nobody waits for the reply
            return


@contextlib.contextmanager
def _main_not_reimported() -> Iterator[None]:
    """Start a worker without importing the driver's ``__main__`` in it.

    multiprocessing re-imports the parent's main script in every child it
    starts this way, so top-level code of a user's script calling
    ``flowerbed.run`` would run again in each client's process. The worker's
    code lives in this module; it needs nothing from ``__main__``.
    """
    from multiprocessing import spawn

    original = spawn.get_preparation_data

    def without_main(name: str) -> dict[str, Any]:
        data = original(name)
        data.pop("init_main_from_path", None)
        data.pop("init_main_from_name", None)
        return data

    spawn.get_preparation_data = without_main  # type: ignore[assignment]
    try:
        yield
    finally:
        spawn.get_preparation_data = original


@dataclass
class _Worker:
    process: Any
    conn: multiprocessing.connection.Connection


class ProcessBackend(Backend):
    """A Flower simulation backend running each ClientApp call in a pooled local process.

    Parameters
    ----------
    backend_config
        Flower's backend config: ``client_resources.num_cpus`` per client and
        ``init_args.num_cpus`` (the CPUs the simulation may use; default: all
        this process may run on), as for the Ray backend.
    """

    def __init__(self, backend_config: BackendConfig) -> None:
        super().__init__(backend_config)
        per_client = backend_config.get("client_resources", {}).get("num_cpus", 1.0)
        total = backend_config.get("init_args", {}).get("num_cpus") or available_cpus()
        self.size = pool_size(float(per_client), float(total))  # type: ignore[arg-type]
        self.threads = max(1, int(float(per_client)))  # type: ignore[arg-type]
        self._idle: queue.Queue[_Worker] = queue.Queue()
        self._workers: list[_Worker] = []
        self._app_fn_bytes = b""
        self._lock = threading.Lock()
        self._closing = threading.Event()

    @property
    def num_workers(self) -> int:
        """Messages processed at once: the pool's size."""
        return len(self._workers)

    def build(self, app_fn: Callable[[], ClientApp]) -> None:
        """Start the pool's processes (forked from the fork server: milliseconds each)."""
        import cloudpickle

        self._app_fn_bytes = cloudpickle.dumps(app_fn)
        for _ in range(self.size):
            worker = self._start()
            self._workers.append(worker)
            self._idle.put(worker)
        log.debug("process backend: %d worker processes", self.size)

    def _start(self) -> _Worker:
        parent, child = pool_context().Pipe()
        process = pool_context().Process(  # type: ignore[attr-defined]
            target=_serve,
            args=(child, self._app_fn_bytes, worker_environment(), self.threads),
            name="flowerbed-client",
            daemon=True,
        )
        with _main_not_reimported():
            process.start()
        child.close()
        return _Worker(process, parent)

    def is_worker_idle(self) -> bool:
        """Whether a worker waits for a message."""
        return not self._idle.empty()

    def process_message(self, message: Message, context: Context) -> tuple[Message, Context]:
        """Run the ClientApp on ``message`` in an idle worker; return its reply and the context."""
        worker = self._idle.get()
        try:
            worker.conn.send_bytes(pickle.dumps((message, context), protocol=_PROTOCOL))
            ok, payload = pickle.loads(worker.conn.recv_bytes())
        except (EOFError, OSError) as exc:
            if self._closing.is_set():  # terminate() ended it mid-message
                raise ClientAppException("the simulation stopped") from exc
            worker, code = self._replace(worker)
            raise ClientAppException(death_text(code, exc)) from exc
        finally:
            self._idle.put(worker)
        if not ok:
            text, trace = payload
            log.debug("a client raised in its worker process:\n%s", trace)
            raise ClientAppException(text)
        reply: tuple[Message, Context] = payload
        return reply

    def _replace(self, dead: _Worker) -> tuple[_Worker, int | None]:
        """A new worker in place of ``dead``, and ``dead``'s exit code."""
        dead.process.join(timeout=5)
        with contextlib.suppress(OSError):
            dead.conn.close()
        worker = self._start()
        with self._lock:
            self._workers[self._workers.index(dead)] = worker
        return worker, dead.process.exitcode

    def terminate(self) -> None:
        """End every worker: close its pipe (it exits on EOF), then kill what is left.

        A worker still busy (the run was interrupted) is killed after the
        grace time; it is not replaced.
        """
        self._closing.set()
        for worker in self._workers:
            with contextlib.suppress(OSError):
                worker.conn.close()
        for worker in self._workers:
            worker.process.join(timeout=2)
            if worker.process.is_alive():
                worker.process.kill()
                worker.process.join(timeout=2)
        self._workers.clear()


def death_text(code: int | None, exc: BaseException) -> str:
    """Why a worker answered nothing: its exit code or the signal that ended it."""
    why = f"exit code {code}" if code is not None else type(exc).__name__
    if code is not None and code < 0:
        with contextlib.suppress(ValueError):
            why = f"killed by {signal.Signals(-code).name}"
    return f"the client's worker process died ({why}); a new one replaces it"


@contextlib.contextmanager
def process_backend() -> Iterator[None]:
    """Make ``run_simulation`` build a :class:`ProcessBackend` instead of its Ray backend.

    Flower 1.42's engine builds its backend from the ``RayBackend`` name in
    its module, its one hook (as for the LinkState and the Grid); if a
    release moves it, the run stops with one line instead of silently
    starting Ray.
    """
    module = importlib.import_module("flwr.server.superlink.fleet.vce.backend.raybackend")
    original = getattr(module, "RayBackend", None)
    if original is None:
        raise RuntimeError(
            "engine.backend=process: this Flower release builds its simulation backend "
            "differently; use engine.backend=ray"
        )
    module.RayBackend = ProcessBackend  # type: ignore[attr-defined]
    try:
        yield
    finally:
        module.RayBackend = original  # type: ignore[attr-defined]

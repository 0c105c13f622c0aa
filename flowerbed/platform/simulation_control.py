"""Stopping Flower's simulation engine cleanly: one Ctrl-C or a crash leaves nothing behind.

``run_simulation`` runs the ServerApp in a thread of its own and the engine in
the caller's; when the engine ends first, the stock grid would leave that
thread polling until ``federation.timeout``. :func:`stoppable_simulation`
releases it, shuts Ray down, ends this process's Ray children and joins the
threads the call started.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

from flwr.app import Message
from flwr.superlink.grid.inmemory_grid import InMemoryGrid

from flowerbed.core import keys
from flowerbed.platform.progress import activity, waiting_text
from flowerbed.platform.warm_ray import end_processes

log = logging.getLogger("flowerbed")


class SimulationStoppedError(RuntimeError):
    """Raised in a ServerApp still waiting on the grid once the simulation engine has stopped."""


def engine_failure(exc: BaseException) -> str:
    """One line for an engine error: its first cause, with Flower's tracebacks left to run.log.

    Flower raises ``RuntimeError("An error was encountered. Ending
    simulation.")`` from ``RuntimeError("Simulation Runtime crashed.")`` from
    what actually went wrong.
    """
    root = exc
    while root.__cause__ is not None:
        root = root.__cause__
    lines = [ln.strip() for ln in str(root).splitlines() if ln.strip()]
    first = lines[0] if lines else "(no message)"
    return f"the simulation engine stopped: {type(root).__name__}: {first} (details in run.log)"




#: Seconds between two looks for replies (Flower's in-memory grid: 0.1).
PULL_INTERVAL_S = 0.02


def stoppable_grid(stop: threading.Event) -> type[InMemoryGrid]:
    """Flower's in-memory Grid, raising :class:`SimulationStoppedError` once ``stop`` is set.

    ``run_simulation`` runs the ServerApp in a thread of its own and the
    engine in the caller's. When the engine ends first (Ctrl-C, a crash), the
    stock grid leaves that thread polling for replies until
    ``federation.timeout``, and Python waits for it before the process can
    exit. Its waits are also shown on the live display.
    """

    class StoppableInMemoryGrid(InMemoryGrid):
        """``InMemoryGrid`` that gives up once the simulation engine has stopped.

        It also looks for replies every 20 ms instead of Flower's 100 ms: a
        round that waits on its replies otherwise lost 50 ms on average, 5 s
        over a 100-round cross-device run whose clients train in milliseconds.
        """

        def __init__(self, state_factory: Any, pull_interval: float = PULL_INTERVAL_S) -> None:
            super().__init__(state_factory=state_factory, pull_interval=pull_interval)

        def _check(self) -> None:
            if stop.is_set():
                raise SimulationStoppedError("the simulation engine has stopped")

        def get_node_ids(self) -> Iterable[int]:
            """Flower's node ids, unless the engine has stopped."""
            self._check()
            return super().get_node_ids()

        def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
            """Flower's push, unless the engine has stopped."""
            self._check()
            return super().push_messages(messages)

        def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
            """Flower's pull, unless the engine has stopped."""
            self._check()
            return super().pull_messages(message_ids)

        def send_and_receive(
            self, messages: Iterable[Message], *, timeout: float | None = None
        ) -> Iterable[Message]:
            """Push, then poll for the replies as Flower does, telling the display how many came."""
            sent = list(messages)
            pending = set(self.push_messages(sent))
            kind = sent[0].metadata.message_type if sent else ""
            group = sent[0].metadata.group_id if sent else ""
            end = None if timeout is None else time.time() + timeout
            replies: list[Message] = []
            # The backend starts its workers while the first (setup) message waits for them.
            starting = " (the client workers are starting)" if kind == keys.SETUP else ""
            # flowerbed's LinkState wakes this loop when a reply is stored.
            wake = getattr(self.state, "res_stored", None)
            while pending and (end is None or time.time() < end):
                activity(waiting_text(len(sent), len(replies), kind, group) + starting)
                if wake is not None:
                    wake.clear()
                got = list(self.pull_messages(pending))
                replies.extend(got)
                pending.difference_update(m.metadata.reply_to_message_id for m in got)
                if pending and wake is not None:
                    wake.wait(self.pull_interval)
                elif pending:
                    time.sleep(self.pull_interval)
            return replies

    return StoppableInMemoryGrid


@contextlib.contextmanager
def stoppable_simulation(grace_s: float = 10.0) -> Iterator[None]:
    """Give ``run_simulation`` the :func:`stoppable_grid`; clean up however the call ends.

    On an exception (``KeyboardInterrupt`` included) the ServerApp thread is
    released, Ray is shut down and its processes ended, and the threads the
    call started get ``grace_s`` seconds to finish, so the process can exit.
    Flower builds its grid from a name in its module, the one hook it offers
    (as for the LinkState); if a release moves it, a warning says so.
    """
    module = importlib.import_module("flwr.simulation.run_simulation")
    stop = threading.Event()
    before = set(threading.enumerate())
    hooked = getattr(module, "InMemoryGrid", None) is InMemoryGrid
    if hooked:
        module.InMemoryGrid = stoppable_grid(stop)  # type: ignore[attr-defined]
    else:
        log.warning("this Flower release builds its Grid differently; Ctrl-C may not stop at once")
    try:
        yield
    except BaseException:
        stop.set()
        stop_ray()
        join_threads(set(threading.enumerate()) - before, grace_s)
        raise
    finally:
        stop.set()
        if hooked:
            module.InMemoryGrid = InMemoryGrid  # type: ignore[attr-defined]


def join_threads(threads: Iterable[threading.Thread], grace_s: float) -> None:
    """Wait up to ``grace_s`` seconds in all for the non-daemon ``threads`` to end."""
    deadline = time.monotonic() + grace_s
    for thread in threads:
        if thread.daemon or thread is threading.current_thread():
            continue
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            log.debug("thread %s still running after the simulation stopped", thread.name)


#: What the processes of a local Ray instance (its head and its workers) are called.
RAY_PROCESS_MARKERS = ("raylet", "gcs_server", "ray::", "ray/", "dashboard", "log_monitor")


def stop_ray() -> None:
    """Shut Ray down if it runs, then end any Ray process this process started.

    ``ray.shutdown()`` stops the local instance it knows of; a Ctrl-C inside
    ``ray.init`` can leave processes it does not, so this process's own Ray
    children are ended as well (with psutil, when installed).
    """
    ray = sys.modules.get("ray")
    if ray is not None:
        try:
            if ray.is_initialized():
                ray.shutdown()
        except Exception as exc:  # noqa: BLE001 - the cleanup goes on regardless
            log.debug("ray.shutdown failed: %s", exc)
    try:
        import psutil
    except ImportError:
        return
    children = []
    for child in psutil.Process().children(recursive=True):
        try:
            text = f"{child.name()} {' '.join(child.cmdline())}"
        except psutil.Error:
            continue
        if any(marker in text for marker in RAY_PROCESS_MARKERS):
            children.append(child)
    end_processes(children, timeout=3)

"""Engines: run a scenario's ServerApp and ClientApp with Ray (simulation) or inline.

:func:`run` is the one entry point (CLI and Python API). Before any work it
checks the scenario file and the output folder (bad input: one line, no run
folder) and the resources the engine would need; then it runs the engine
with Flower's console quiet, records an ``interrupted`` or ``run_failed`` row
when the run stops early, and times every phase for ``summary.json``.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import os
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from flwr.app import Context, Message
from flwr.serverapp import Grid, ServerApp
from flwr.superlink.grid.inmemory_grid import InMemoryGrid

from flowerbed.core import keys
from flowerbed.core.records import METRICS_FILE, Recorder
from flowerbed.core.scenario import Scenario, from_dict, load_scenario
from flowerbed.platform.progress import LiveProgress, RunClock, activity, timed_by, waiting_text
from flowerbed.platform.resources import check_memory, check_resources
from flowerbed.platform.results import (
    InputPathError,
    Result,
    check_output_dir,
    check_scenario_file,
    new_run_dir,
)

log = logging.getLogger("flowerbed")


class RunError(RuntimeError):
    """The run stopped early; ``run_dir`` holds everything finished before the error."""

    def __init__(self, message: str, run_dir: Path | None) -> None:
        where = f" (partial results in {run_dir})" if run_dir else ""
        super().__init__(f"{message}{where}")
        self.run_dir = run_dir


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped the run; ``run_dir`` holds the finished rounds and an ``interrupted`` row.

    A ``KeyboardInterrupt``, so code that already handles Ctrl-C keeps doing so.
    """

    def __init__(self, run_dir: Path | None) -> None:
        where = f"; finished rounds are saved in {run_dir}" if run_dir else ""
        super().__init__(f"interrupted{where}")
        self.run_dir = run_dir


class SimulationStoppedError(RuntimeError):
    """Raised in a ServerApp still waiting on the grid once the simulation engine has stopped."""


class SimulationError(RuntimeError):
    """Flower's simulation engine stopped on an error; the message names its first cause."""


def client_app() -> Any:
    """Return flowerbed's generic ClientApp (imported on first use)."""
    from flowerbed.clients.client_app import app

    return app


def run_inline(scenario: Scenario, recorder: Recorder) -> dict[str, Any]:
    """The same ServerApp/ClientApp code in one process through an in-process Grid."""
    from flowerbed.platform.inline import InlineGrid
    from flowerbed.platform.server import serve

    grid = InlineGrid(client_app(), scenario.num_clients)
    return serve(grid, scenario, recorder)


THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


@contextlib.contextmanager
def worker_threads(num_cpus: float) -> Iterator[None]:
    """Environment Ray workers inherit: one BLAS/OpenMP thread per client CPU.

    Flower owns ``runtime_env``, so the variables are set in this process
    while Ray starts (its local workers inherit them) and restored after.
    """
    saved = {k: os.environ.get(k) for k in THREAD_VARS}
    os.environ.update({k: str(max(1, int(num_cpus))) for k in THREAD_VARS})
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def backend_config(scenario: Scenario) -> dict[str, Any]:
    """Ray settings: per-client resources and quiet logs."""
    res = scenario.engine.client_resources
    init_args: dict[str, Any] = {"logging_level": "ERROR", "log_to_driver": False}
    if scenario.engine.ray_num_cpus and os.environ.get("RAY_ADDRESS"):
        # Ray refuses num_cpus when joining an existing cluster; the cluster decides.
        log.warning("engine.ray_num_cpus is ignored: RAY_ADDRESS names an existing Ray cluster")
    elif scenario.engine.ray_num_cpus:
        init_args["num_cpus"] = scenario.engine.ray_num_cpus
    return {
        "client_resources": {"num_cpus": res.num_cpus, "num_gpus": res.num_gpus},
        "init_args": init_args,
    }


def run_ray(scenario: Scenario, recorder: Recorder) -> dict[str, Any]:
    """Flower's simulation engine (``run_simulation``, Ray backend)."""
    from flwr.simulation import run_simulation

    from flowerbed.platform.server import serve

    outcome: dict[str, Any] = {}
    server_app = ServerApp()

    @server_app.main()
    def _main(grid: Grid, context: Context) -> None:
        del context
        try:
            outcome["summary"] = serve(grid, scenario, recorder)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            outcome["error"] = exc

    activity("starting Ray and its client workers")
    try:
        with simulation_engine(scenario):
            run_simulation(
                server_app=server_app,
                client_app=client_app(),
                num_supernodes=scenario.num_clients,
                backend_config=backend_config(scenario),  # type: ignore[arg-type]
            )
    except Exception as exc:
        server_error = outcome.get("error")
        if server_error is not None and not isinstance(server_error, SimulationStoppedError):
            raise server_error from None  # the ServerApp's own error says more than Flower's
        raise SimulationError(engine_failure(exc)) from exc
    if "error" in outcome:
        raise outcome["error"]
    if "summary" not in outcome:
        raise RuntimeError("the Flower simulation ended without running the ServerApp")
    summary: dict[str, Any] = outcome["summary"]
    return summary


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


@contextlib.contextmanager
def simulation_engine(scenario: Scenario) -> Iterator[None]:
    """Settings around a ``run_simulation`` call: quiet logs, worker threads, indexed LinkState.

    The call is also made stoppable (:func:`stoppable_simulation`): however
    it ends, nothing is left waiting or running afterwards.
    """
    from flowerbed.platform.linkstate import indexed_link_state

    with (
        quiet_flower(),
        worker_threads(scenario.engine.client_resources.num_cpus),
        indexed_link_state(),
        stoppable_simulation(),
    ):
        yield


def stoppable_grid(stop: threading.Event) -> type[InMemoryGrid]:
    """Flower's in-memory Grid, raising :class:`SimulationStoppedError` once ``stop`` is set.

    ``run_simulation`` runs the ServerApp in a thread of its own and the
    engine in the caller's. When the engine ends first (Ctrl-C, a crash), the
    stock grid leaves that thread polling for replies until
    ``federation.timeout``, and Python waits for it before the process can
    exit. Its waits are also shown on the live display.
    """

    class StoppableInMemoryGrid(InMemoryGrid):
        """``InMemoryGrid`` that gives up once the simulation engine has stopped."""

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
            # Ray starts its workers while the first (setup) message waits for them.
            starting = " (Ray is starting its workers)" if kind == keys.SETUP else ""
            while pending and (end is None or time.time() < end):
                activity(waiting_text(len(sent), len(replies), kind, group) + starting)
                got = list(self.pull_messages(pending))
                replies.extend(got)
                pending.difference_update(m.metadata.reply_to_message_id for m in got)
                if pending:
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
    for child in children:
        with contextlib.suppress(psutil.Error):
            child.terminate()
    _, alive = psutil.wait_procs(children, timeout=3)
    for child in alive:
        with contextlib.suppress(psutil.Error):
            child.kill()


class _DropRunSimulationBanner(logging.Filter):
    """Drops Flower's ``run_simulation`` deprecation banner, from the console and run.log.

    Flower 1.42 deprecates ``run_simulation`` in favour of ``flwr run``
    against a simulation SuperLink, which loads a packaged app in another
    process: not a drop-in for an engine that hands Flower live Python
    objects and reads results back in-process. flowerbed keeps it knowingly
    (``flwr run`` is its deployment engine), so the banner, logged on every
    start, gives users nothing to act on.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """False for the banner, True for every other record."""
        if not str(record.msg).lstrip().startswith("DEPRECATED FEATURE"):
            return True
        args = record.args if isinstance(record.args, tuple) else (record.args,)
        return not any("run_simulation" in str(a) for a in args)


BANNER_FILTER = _DropRunSimulationBanner()


@contextlib.contextmanager
def quiet_flower() -> Iterator[None]:
    """Keep Flower's log lines out of the terminal (they all go to run.log).

    Flower's console shows nothing unless flowerbed logs at DEBUG (``-v``),
    and then Flower's own level; it writes plain text, without colour codes,
    when its stream is not a terminal. Client failures still reach the
    terminal through flowerbed's own one-line warnings, named by partition id.
    """
    flwr_log = logging.getLogger("flwr")
    verbose = log.isEnabledFor(logging.DEBUG)
    console = [
        h
        for h in flwr_log.handlers
        if isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler)
    ]
    saved = [(h.level, getattr(h, "colored", None)) for h in console]
    for h in console:
        if not verbose:
            h.setLevel(logging.CRITICAL + 1)
        if hasattr(h, "colored"):  # Flower's ConsoleHandler
            setattr(h, "colored", _is_terminal(h.stream))  # noqa: B010 - not a StreamHandler field
    added = BANNER_FILTER not in flwr_log.filters  # nested blocks: the outermost removes it
    flwr_log.addFilter(BANNER_FILTER)
    # Ray warns on every start that a future release changes a GPU env default.
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
    try:
        yield
    finally:
        if added:
            flwr_log.removeFilter(BANNER_FILTER)
        for h, (level, colored) in zip(console, saved, strict=True):
            h.setLevel(level)
            if colored is not None:
                setattr(h, "colored", colored)  # noqa: B010


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


@contextlib.contextmanager
def warnings_once() -> Iterator[None]:
    """Python warnings raised during a run go to the log; each source reaches the terminal once.

    Libraries warn from loops with a changing message (flwr-datasets'
    Dirichlet partitioner on every resampling try), which Python's
    once-per-message rule repeats. Here the first warning from each
    (category, file, line) is a one-line WARNING; repeats go to run.log only.
    Warning filters (``-W``, pytest's) apply as usual.
    """
    seen: set[tuple[Any, ...]] = set()

    def show(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: Any = None,
        line: str | None = None,
    ) -> None:
        del file, line
        key = (category, filename, lineno)
        level = logging.INFO if key in seen else logging.WARNING
        seen.add(key)
        log.log(level, "%s: %s", category.__name__, " ".join(str(message).split()))

    with warnings.catch_warnings():
        warnings.showwarning = show
        yield


def run_deployment(scenario: Scenario, recorder: Recorder) -> dict[str, Any]:
    """A running Flower deployment: ``flwr run`` on the connection ``engine.connection``."""
    from flowerbed.platform.deploy.flwr_run import run_on_superlink

    activity(
        f"deployment: `flwr run` on connection {scenario.engine.connection!r}, waiting for "
        f"the ServerApp (a deployed round takes several seconds)"
    )
    with follow_rows(recorder):
        return run_on_superlink(scenario, recorder)


@contextlib.contextmanager
def follow_rows(recorder: Recorder, every_s: float = 0.5) -> Iterator[None]:
    """Show the rows another process appends to the run's ``metrics.jsonl`` while they come.

    A deployed ServerApp writes the run folder itself, and its rows reach the
    recorder only when ``flwr run`` ends; meanwhile they are fed to the live
    listeners (which count a row seen twice once).
    """
    if recorder.run_dir is None or not recorder.listeners:
        yield
        return
    path = recorder.run_dir / METRICS_FILE
    listeners = list(recorder.listeners)
    stop = threading.Event()

    def follow() -> None:
        offset = 0
        while not stop.wait(every_s):
            offset = _feed_rows(path, offset, listeners)

    thread = threading.Thread(target=follow, name="flowerbed-follow-rows", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=2)


def _feed_rows(
    path: Path, offset: int, listeners: list[Callable[[dict[str, Any]], None]]
) -> int:
    """Pass the complete rows after byte ``offset`` to ``listeners``; return the new offset."""
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            data = fh.read()
    except OSError:
        return offset
    end = data.rfind(b"\n") + 1  # a line still being written waits for the next poll
    for line in data[:end].splitlines():
        with contextlib.suppress(ValueError):
            row = json.loads(line)
            for listener in listeners:
                listener(row)
    return offset + end


ENGINES = {"inline": run_inline, "simulation": run_ray, "deployment": run_deployment}


def run(
    scenario: Scenario | str | Path | dict[str, Any],
    overrides: list[str] | None = None,
    *,
    output_dir: str | Path | None = None,
    save: bool = True,
    progress: bool = False,
    clock: RunClock | None = None,
) -> Result:
    """Run a scenario end to end and return its :class:`Result`.

    Parameters
    ----------
    scenario
        A validated scenario, a YAML path, or a mapping.
    overrides
        ``key.path=value`` strings applied before validation.
    output_dir
        Root of run folders (default: the scenario's ``output_dir``).
    save
        Write the run folder; ``False`` keeps results in memory only.
    progress
        Show the live rich display on stderr.
    clock
        What the summary's ``wall_time_s`` and ``phases_s`` are measured on
        (default: a clock started now; the CLI passes one started with the process).

    Raises
    ------
    ScenarioError
        Bad input, before any work: an invalid scenario, or a scenario file
        or output folder that cannot be used (:class:`InputPathError`).
    RunError
        The run started and failed; its ``run_dir`` keeps what was finished.
    RunInterrupted
        Ctrl-C (a ``KeyboardInterrupt``); its ``run_dir`` keeps the finished rounds.

    Examples
    --------
    >>> import flowerbed
    >>> result = flowerbed.run("scenarios/quickstart.yaml", ["engine=inline"])  # doctest: +SKIP
    >>> result.final("federated")["test/accuracy"] > 0.8  # doctest: +SKIP
    True
    """
    clock = clock or RunClock()
    with clock.phase("validate", "validating the scenario"):
        scenario = _resolve(scenario, overrides)
        run_dir = _new_run_folder(scenario, output_dir) if save else None
    recorder = Recorder(scenario, run_dir)
    display = None
    if progress:
        display = LiveProgress(scenario.name, scenario.rounds, scenario.metrics.summary)
        recorder.listeners.append(display)
    with quiet_flower(), warnings_once(), timed_by(recorder, clock):
        try:
            recorder.start()
            with display if display is not None else contextlib.nullcontext():
                # Both fail fast, before Ray or any client starts: Ray would wait
                # forever for resources it cannot have, and memory runs out late.
                check_resources(scenario)
                with clock.phase("data", "building data (memory estimate)"):
                    check_memory(scenario)
                engine_started = time.time()
                summary = ENGINES[scenario.engine.name](scenario, recorder)
                engine_s = time.time() - engine_started
        except KeyboardInterrupt:
            _record(recorder, "interrupted", rounds_done=finished_rounds(recorder.rows))
            raise RunInterrupted(run_dir) from None
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            _record(recorder, "run_failed", error=error)
            raise RunError(error, run_dir) from exc
        finally:
            recorder.close()
    return Result(_final_timing(summary, clock, recorder, engine_s), recorder.rows, run_dir)


def _resolve(
    scenario: Scenario | str | Path | dict[str, Any], overrides: list[str] | None
) -> Scenario:
    if isinstance(scenario, (str, Path)):
        check_scenario_file(scenario)
        return load_scenario(scenario, overrides)
    if isinstance(scenario, dict):
        return from_dict(scenario, overrides)
    if overrides:
        return from_dict(scenario.to_dict(), overrides)
    return scenario


def _new_run_folder(scenario: Scenario, output_dir: str | Path | None) -> Path:
    """A new run folder, after checking that the output folder can take one (bad input if not)."""
    root = Path(output_dir if output_dir is not None else scenario.output_dir)
    check_output_dir(root, create=True)
    try:
        return new_run_dir(scenario, root)
    except OSError as exc:
        problem = f"cannot hold a run folder: {exc.strerror} ({exc.filename})"
        raise InputPathError("output_dir", root, problem) from None


def finished_rounds(rows: list[dict[str, Any]]) -> int:
    """The last round with a metrics row (0 before the first round ends)."""
    return max((int(r["round"]) for r in rows if "round" in r and "event" not in r), default=0)


def _record(recorder: Recorder, event: str, **info: Any) -> None:
    """Record how the run ended, if the run folder can still be written."""
    try:
        recorder.event(event, **info)
    except OSError as exc:
        log.warning("could not record %s in the run folder: %s", event, exc)


def _final_timing(
    summary: dict[str, Any], clock: RunClock, recorder: Recorder, engine_s: float
) -> dict[str, Any]:
    """The summary with the wall time and phases as measured here; ``summary.json`` rewritten.

    The server writes its summary before the engine has shut down (Ray takes
    seconds): that tail becomes the ``shutdown`` phase. A ServerApp that ran
    in another process (deployment) timed its phases on its own clock; they
    are added to the ones measured here, and the rest of the engine's time
    (``flwr run`` starting, the SuperLink scheduling the app) is ``engine_overhead``.
    """
    total = clock.elapsed()
    if clock.shared_with_server:
        written = float(summary.get("wall_time_s", total))
        phases = {**clock.phases, "shutdown": round(max(0.0, total - written), 3)}
    else:
        remote = {k: v for k, v in summary.get("phases_s", {}).items() if k != "total"}
        names = [*remote, *(k for k in clock.phases if k not in remote)]
        phases = {k: round(remote.get(k, 0.0) + clock.phases.get(k, 0.0), 3) for k in names}
        phases["engine_overhead"] = round(max(0.0, engine_s - sum(remote.values())), 3)
    timed = {**summary, "wall_time_s": total, "phases_s": {**phases, "total": total}}
    try:
        recorder.finish(timed)
    except OSError as exc:
        log.warning("could not rewrite summary.json with the final wall time: %s", exc)
    return timed

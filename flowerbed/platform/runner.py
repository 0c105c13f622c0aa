"""Engines: run a scenario's ServerApp and ClientApp with Ray (simulation) or inline.

:func:`run` is the one entry point (CLI and Python API). Before any work it
checks the scenario file and the output folder (bad input: one line, no run
folder) and the resources the engine would need; then it runs the engine
with Flower's console quiet, records an ``interrupted`` or ``run_failed`` row
when the run stops early, and times every phase for ``summary.json``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from flowerbed.core.population import flower_nodes, virtual_clients
from flowerbed.core.records import METRICS_FILE, Recorder
from flowerbed.core.scenario import Scenario, from_dict, load_scenario
from flowerbed.platform.console import quiet_flower, sigterm_as_interrupt, warnings_once
from flowerbed.platform.progress import LiveProgress, RunClock, activity, timed_by
from flowerbed.platform.resources import (
    THREAD_VARS,
    check_memory,
    check_resources,
    worker_threads,
)
from flowerbed.platform.results import (
    InputPathError,
    Result,
    check_output_dir,
    check_scenario_file,
    new_run_dir,
)
from flowerbed.platform.simulation_control import (
    SimulationStoppedError,
    engine_failure,
    stop_ray,
    stoppable_simulation,
)
from flowerbed.platform.warm_ray import warm_head

log = logging.getLogger("flowerbed")


class RunError(RuntimeError):
    """The run stopped early; ``run_dir`` holds everything finished before the error."""

    def __init__(self, message: str, run_dir: Path | None) -> None:
        where = f" (partial results in {run_dir})" if run_dir else ""
        super().__init__(f"{message}{where}")
        self.run_dir = run_dir


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM stopped the run; ``run_dir`` holds the finished rounds and a row.

    A ``KeyboardInterrupt``, so code that already handles Ctrl-C keeps doing
    so; ``signal_name`` says which (``SIGINT`` or ``SIGTERM``).
    """

    def __init__(self, run_dir: Path | None, signal_name: str = "SIGINT") -> None:
        where = f"; finished rounds are saved in {run_dir}" if run_dir else ""
        what = "terminated (SIGTERM)" if signal_name == "SIGTERM" else "interrupted"
        super().__init__(f"{what}{where}")
        self.run_dir = run_dir
        self.signal_name = signal_name


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

    grid = InlineGrid(client_app(), flower_nodes(scenario))
    return serve(grid, scenario, recorder)


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


def start_ray(scenario: Scenario) -> None:
    """Start Ray now, as Flower's Ray backend would, so the driver's work overlaps its start-up.

    Flower's backend only initialises Ray when it is not running yet, so the
    instance started here is the one the simulation uses: the same init
    arguments and the same ``PYTHONPATH`` for the workers. The per-worker
    thread variables are set around the call because Ray's processes inherit
    the environment they are started in.
    """
    import ray

    if ray.is_initialized():
        return
    args = dict(backend_config(scenario)["init_args"])
    args.setdefault("include_dashboard", False)
    if not os.environ.get("RAY_ADDRESS"):
        # Without an address Ray joins the cluster the last `ray start` on this machine
        # recorded, even one long dead (then it waits on it); a run joins a cluster only
        # when RAY_ADDRESS (or `flowerbed up`) names one.
        args["address"] = "local"
    pythonpath = os.pathsep.join(sys.path)
    if os.environ.get("PYTHONPATH"):
        pythonpath = f"{pythonpath}{os.pathsep}{os.environ['PYTHONPATH']}"
    threads = str(max(1, int(scenario.engine.client_resources.num_cpus)))
    # Job-level variables reach the workers of a head started elsewhere (`flowerbed up`)
    # too, whose processes inherit that head's environment, not this one's.
    env_vars = {"PYTHONPATH": pythonpath, **dict.fromkeys(THREAD_VARS, threads)}
    with worker_threads(scenario.engine.client_resources.num_cpus):
        os.environ["PYTHONPATH"] = pythonpath
        ray.init(runtime_env={"env_vars": env_vars}, **args)


def overlapped(scenario: Scenario, work: Callable[[], object]) -> None:
    """Run ``work`` (the driver's data and memory check) while Ray starts, for ``simulation``.

    Ray's start-up is seconds of waiting on its own processes; building the
    data and importing the learner's libraries meanwhile takes them off the
    critical path. A failure of either is raised here, Ray stopped, before
    any client starts.
    """
    if scenario.engine.name != "simulation":
        work()
        return
    failure: list[BaseException] = []

    def guarded() -> None:
        try:
            work()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            failure.append(exc)

    thread = threading.Thread(target=guarded, name="flowerbed-prepare", daemon=True)
    thread.start()
    try:
        if scenario.engine.simulation_backend() == "ray":
            start_ray(scenario)
        else:
            from flowerbed.platform.process_backend import start_fork_server

            start_fork_server(scenario)
    finally:
        thread.join()
    if failure:
        stop_ray()
        raise failure[0]


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

    activity(
        "starting Ray and its client workers"
        if scenario.engine.simulation_backend() == "ray"
        else "starting the client worker processes"
    )
    try:
        with simulation_engine(scenario):
            run_simulation(
                server_app=server_app,
                client_app=client_app(),
                num_supernodes=flower_nodes(scenario),
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


def clients_backend(scenario: Scenario) -> contextlib.AbstractContextManager[None]:
    """What runs the clients: Flower's Ray backend as is, or :mod:`.process_backend`'s pool.

    The pool's fork server is started here unless the run already started it
    while building the data (a sweep's group does not).
    """
    if scenario.engine.simulation_backend() == "ray":
        return contextlib.nullcontext()
    from flowerbed.platform.process_backend import process_backend, start_fork_server

    start_fork_server(scenario)
    return process_backend()


@contextlib.contextmanager
def simulation_engine(scenario: Scenario) -> Iterator[None]:
    """Settings around a ``run_simulation`` call: quiet logs, threads, LinkState, clients' backend.

    The call is also made stoppable (:func:`stoppable_simulation`): however
    it ends, nothing is left waiting or running afterwards.
    """
    from flowerbed.platform.linkstate import indexed_link_state, prompt_delivery

    with (
        quiet_flower(),
        worker_threads(scenario.engine.client_resources.num_cpus),
        indexed_link_state(deliver_all=virtual_clients(scenario)),
        prompt_delivery(),
        stoppable_simulation(),
        clients_backend(scenario),
    ):
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


def _feed_rows(path: Path, offset: int, listeners: list[Callable[[dict[str, Any]], None]]) -> int:
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
        Ctrl-C or SIGTERM (a ``KeyboardInterrupt``); its ``run_dir`` keeps the
        finished rounds.

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
        _check_checkpointing(scenario)
        run_dir = _new_run_folder(scenario, output_dir) if save else None
    # A deployed ServerApp records the run (and feeds the sinks) in its own process.
    recorder = Recorder(scenario, run_dir, use_sinks=scenario.engine.name != "deployment")
    return _execute(scenario, recorder, progress, clock)


def resume(run_dir: str | Path, *, progress: bool = False, clock: RunClock | None = None) -> Result:
    """Continue the run in ``run_dir`` from its newest checkpoint; return its :class:`Result`.

    The scenario is the run's own ``scenario.resolved.yaml``. Rows recorded
    after the checkpoint are cut from ``metrics.jsonl`` and
    ``client_metrics.jsonl`` and computed again, so every round appears once;
    the clients' state goes back to the checkpoint's copy. On CPU the final
    numbers equal those of a run never interrupted. A run without a usable
    checkpoint (none asked for, or killed before the first) is refused: starting
    it again in the same folder would record its rounds twice.

    Raises
    ------
    ScenarioError
        ``run_dir`` is not an unfinished run folder, or its newest checkpoint
        is unreadable, corrupted or another scenario's, or it has no checkpoint
        (one line naming the file or saying how to start afresh).
    RunError, RunInterrupted
        As :func:`run`.
    """
    from flowerbed.core.checkpoints import CheckpointError, prepare_resume
    from flowerbed.core.records import SCENARIO_FILE, SUMMARY_FILE

    clock = clock or RunClock()
    folder = Path(run_dir)
    with clock.phase("validate", "checking the run folder and its checkpoint"):
        if not (folder / SCENARIO_FILE).is_file():
            raise InputPathError("--resume", folder, f"not a run folder (no {SCENARIO_FILE})")
        if (folder / SUMMARY_FILE).is_file():
            raise InputPathError("--resume", folder, f"the run has finished ({SUMMARY_FILE})")
        scenario = load_scenario(folder / SCENARIO_FILE)
        if scenario.engine.name == "deployment":
            # The deployed ServerApp records the run in its own process, which
            # would start again from round 0 after the files were cut back.
            raise InputPathError(
                "--resume", folder, "a deployment run cannot be resumed (inline and simulation can)"
            )
        _check_checkpointing(scenario)
        try:
            checkpoint = prepare_resume(folder, scenario.digest())
        except CheckpointError as exc:
            raise InputPathError("--resume", folder, str(exc)) from None
        if checkpoint is None:
            raise InputPathError("--resume", folder, _no_checkpoint(scenario, folder))
    recorder = Recorder(
        scenario,
        folder,
        use_sinks=scenario.engine.name != "deployment",
        rows=read_rows(folder / METRICS_FILE),
        resume_from=checkpoint,
    )
    activity(f"resuming {folder} from round {int(checkpoint.name.split('_')[-1])}")
    return _execute(scenario, recorder, progress, clock)


def _no_checkpoint(scenario: Scenario, folder: Path) -> str:
    """Why a run folder without a checkpoint cannot be resumed, and how to start afresh."""
    from flowerbed.core.records import SCENARIO_FILE

    every = scenario.checkpoint.every
    why = (
        f"no checkpoint (checkpoint.every={every}: the run stopped before its first one, "
        f"or its checkpoints folder was deleted)"
        if every
        else "no checkpoint (the run's scenario has checkpoint.every: 0)"
    )
    return (
        f"{why}, so nothing to resume from; start afresh in a new folder with "
        f"`flowerbed run {folder / SCENARIO_FILE}`"
    )


def _check_checkpointing(scenario: Scenario) -> None:
    """Bad input before any work: checkpoints asked of a strategy that cannot write them.

    Also components only this process knows, on an engine whose clients run elsewhere.
    """
    from flowerbed.core.scenario import ScenarioError
    from flowerbed.platform.server import checked_strategy

    checked_strategy(scenario)
    problems = process_local_components(scenario)
    if problems:
        raise ScenarioError(problems, scenario.name)


def process_local_components(scenario: Scenario) -> list[str]:
    """Components registered in this process only, named where other processes need them.

    A ``register(...)`` call in a script or notebook (not in a discovered
    plugin module) reaches neither the simulation's client processes (forked
    from a server that imported only plugin modules, or Ray actors) nor a
    deployment's ServerApp and SuperNodes: each would fail at setup with the
    same "unknown" error. ``inline`` runs everything here, so it is free.
    """
    if scenario.engine.name == "inline":
        return []
    from flowerbed.core import registry
    from flowerbed.core.plugins import UNKNOWN_SOURCE, component_source
    from flowerbed.core.scenario import COMPONENT_FIELDS, LIST_COMPONENT_FIELDS

    specs = [(f, k, getattr(scenario, f)) for f, k in COMPONENT_FIELDS.items()]
    specs += [
        (f"{field}[{i}]", kind, spec)
        for field, kind in LIST_COMPONENT_FIELDS.items()
        for i, spec in enumerate(getattr(scenario, field))
    ]
    found = []
    for where, kind, spec in specs:
        name = None if spec is None else registry.name_of(spec)
        if name is not None and component_source(kind, name) == UNKNOWN_SOURCE:
            found.append(
                f"{where}.name: {kind} {name!r} is registered in this process only (by a "
                f"script, notebook or test), so the {scenario.engine.name} engine's other "
                f"processes do not know it; use engine: inline, or register it in an "
                f"installed plugin package (entry point group flowerbed.plugins)"
            )
    return found


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a ``metrics.jsonl`` (none when it does not exist)."""
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _execute(scenario: Scenario, recorder: Recorder, progress: bool, clock: RunClock) -> Result:
    """Run ``scenario`` on its engine into ``recorder``; see :func:`run`."""
    run_dir = recorder.run_dir
    display = None
    if progress:
        display = LiveProgress(scenario.name, scenario.rounds, scenario.metrics.summary)
        recorder.listeners.append(display)
    with (
        sigterm_as_interrupt(),
        quiet_flower(),
        warnings_once(),
        timed_by(recorder, clock),
        warm_head(scenario.engine.name),
    ):
        try:
            recorder.start()
            with display if display is not None else contextlib.nullcontext():
                # Both fail fast, before Ray or any client starts: Ray would wait
                # forever for resources it cannot have, and memory runs out late.
                check_resources(scenario)
                with clock.phase("data", "building data (memory estimate) while the engine starts"):
                    overlapped(scenario, lambda: check_memory(scenario))
                engine_started = time.time()
                summary = ENGINES[scenario.engine.name](scenario, recorder)
                engine_s = time.time() - engine_started
        except KeyboardInterrupt as exc:
            signal_name = getattr(exc, "signal_name", "SIGINT")
            _record(recorder, "interrupted", rounds_done=finished_rounds(recorder.rows),
                    signal=signal_name)
            raise RunInterrupted(run_dir, signal_name) from None
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            log.info("run failed", exc_info=True)  # the traceback: run.log, and stderr with -v
            _record(recorder, "run_failed", error=error)
            raise RunError(error, run_dir) from exc
        finally:
            recorder.close()
    timed = _final_timing(summary, clock, recorder, engine_s)
    return Result(timed, recorder.rows, run_dir, recorder.client_rows)


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

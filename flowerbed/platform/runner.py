"""Engines: run a scenario's ServerApp and ClientApp with Ray (simulation) or inline."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from flowerbed.core.records import Recorder
from flowerbed.core.scenario import Scenario, from_dict, load_scenario
from flowerbed.platform.resources import check_memory
from flowerbed.platform.results import Result, new_run_dir

log = logging.getLogger("flowerbed")


class RunError(RuntimeError):
    """The run stopped early; ``run_dir`` holds everything finished before the error."""

    def __init__(self, message: str, run_dir: Path | None) -> None:
        where = f" (partial results in {run_dir})" if run_dir else ""
        super().__init__(f"{message}{where}")
        self.run_dir = run_dir


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

    with simulation_engine(scenario):
        run_simulation(
            server_app=server_app,
            client_app=client_app(),
            num_supernodes=scenario.num_clients,
            backend_config=backend_config(scenario),  # type: ignore[arg-type]
        )
    if "error" in outcome:
        raise outcome["error"]
    if "summary" not in outcome:
        raise RuntimeError("the Flower simulation ended without running the ServerApp")
    summary: dict[str, Any] = outcome["summary"]
    return summary


@contextlib.contextmanager
def simulation_engine(scenario: Scenario) -> Iterator[None]:
    """Settings around a ``run_simulation`` call: quiet logs, worker threads, indexed LinkState."""
    from flowerbed.platform.linkstate import indexed_link_state

    with (
        quiet_flower(),
        worker_threads(scenario.engine.client_resources.num_cpus),
        indexed_link_state(),
    ):
        yield


@contextlib.contextmanager
def quiet_flower() -> Iterator[None]:
    """Keep Flower's log lines out of the terminal (they all go to run.log).

    Client failures still reach the terminal through flowerbed's own warnings,
    named by partition id; Flower's console is left with errors only (its
    deprecation notice for ``run_simulation`` is noise for our users).
    """
    flwr_log = logging.getLogger("flwr")
    console = [h for h in flwr_log.handlers if not isinstance(h, logging.FileHandler)]
    levels = [h.level for h in console]
    for h in console:
        h.setLevel(logging.ERROR)
    # Ray warns on every start that a future release changes a GPU env default.
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
    try:
        yield
    finally:
        for h, level in zip(console, levels, strict=True):
            h.setLevel(level)


def run_deployment(scenario: Scenario, recorder: Recorder) -> dict[str, Any]:
    """A running Flower deployment: ``flwr run`` on the connection ``engine.connection``."""
    from flowerbed.platform.deploy.flwr_run import run_on_superlink

    return run_on_superlink(scenario, recorder)


ENGINES = {"inline": run_inline, "simulation": run_ray, "deployment": run_deployment}


def run(
    scenario: Scenario | str | Path | dict[str, Any],
    overrides: list[str] | None = None,
    *,
    output_dir: str | Path | None = None,
    save: bool = True,
    progress: bool = False,
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

    Examples
    --------
    >>> import flowerbed
    >>> result = flowerbed.run("scenarios/quickstart.yaml", ["engine=inline"])  # doctest: +SKIP
    >>> result.final("federated")["test/accuracy"] > 0.8  # doctest: +SKIP
    True
    """
    scenario = _resolve(scenario, overrides)
    run_dir = new_run_dir(scenario, output_dir) if save else None
    recorder = Recorder(scenario, run_dir)
    recorder.start()
    display = None
    if progress:
        from flowerbed.platform.progress import LiveProgress

        display = LiveProgress(scenario.name, scenario.rounds, scenario.metrics.summary)
        recorder.listeners.append(display)
    try:
        check_memory(scenario)  # fail fast, before Ray or any client starts
        with display if display is not None else contextlib.nullcontext():
            summary = ENGINES[scenario.engine.name](scenario, recorder)
    except Exception as exc:
        recorder.event("run_failed", error=f"{type(exc).__name__}: {exc}")
        raise RunError(f"{type(exc).__name__}: {exc}", run_dir) from exc
    finally:
        recorder.close()
    return Result(summary, recorder.rows, run_dir)


def _resolve(
    scenario: Scenario | str | Path | dict[str, Any], overrides: list[str] | None
) -> Scenario:
    if isinstance(scenario, (str, Path)):
        return load_scenario(scenario, overrides)
    if isinstance(scenario, dict):
        return from_dict(scenario, overrides)
    if overrides:
        return from_dict(scenario.to_dict(), overrides)
    return scenario

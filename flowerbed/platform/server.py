"""The ServerApp: one code path for simulation, inline runs and ``flwr run``."""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from flowerbed.core import keys, registry
from flowerbed.core.attacks import malicious_clients
from flowerbed.core.checkpoints import Checkpoints
from flowerbed.core.messages import Payload
from flowerbed.core.population import AUTO_VIRTUAL_ABOVE, flower_nodes, virtual_clients
from flowerbed.core.records import CLIENTS_FILE, STATE_DIR_NAME, Recorder
from flowerbed.core.scenario import (
    Scenario,
    ScenarioError,
    checkpoint_problems,
    load_scenario,
    validate_scenario,
)
from flowerbed.data.table_data import dropped_rows
from flowerbed.platform.progress import RunClock, clock_of
from flowerbed.platform.results import new_run_dir, versions
from flowerbed.strategies.base import ServerContext, Strategy
from flowerbed.strategies.federation import Federation, RoundFailedError

log = logging.getLogger("flowerbed")


#: ``clients.json`` of a virtual population above ``AUTO_VIRTUAL_ABOVE``: the first this many.
CLIENT_TABLE_LIMIT = 100


def listed_clients(scenario: Scenario) -> int:
    """How many clients ``clients.json`` lists: all, or the first few of a large virtual population.

    Listing every client of a million would build every client's data, the
    very cost virtual clients avoid; populations up to ``AUTO_VIRTUAL_ABOVE``
    are listed whole in either mode.
    """
    n = scenario.num_clients
    if virtual_clients(scenario) and n > AUTO_VIRTUAL_ABOVE:
        return CLIENT_TABLE_LIMIT
    return n


def client_table(ctx: ServerContext) -> list[dict[str, Any]]:
    """Per-client sizes, label histograms and domains (written to ``clients.json``).

    ``domain`` is the partition's description of the client: ``id hosp_A`` for
    the natural id a ``natural_id`` partition gave it, a transform for a
    domain-shift partition; absent when the partition describes none.
    """
    data = ctx.data
    meta = data.dataset.meta
    dropped = dropped_rows(meta)
    attack = ctx.scenario.clients.attack
    malicious = set(malicious_clients(attack, ctx.scenario.num_clients, ctx.scenario.seed))
    rows = []
    for pid in range(listed_clients(ctx.scenario)):
        client = data.client(pid)
        row: dict[str, Any] = {
            "partition_id": pid,
            "num_train": int(client.num_train),
            "num_test": len(client.y_test),
        }
        if meta.task == "classification":
            row["label_histogram"] = np.bincount(
                client.y_train, minlength=meta.num_classes
            ).tolist()
        if client.columns is not None:
            row["columns"] = client.columns.tolist()
        if "domain" in client.extra:  # its natural id (site name...) or domain shift
            row["domain"] = str(client.extra["domain"])
        if dropped is not None:  # a user table: how many of its rows ``missing:`` dropped
            row["dataset_dropped_rows"] = dropped
        if registry.name_of(attack) != "none":  # ``clients.attack``: who attacks
            row["malicious"] = pid in malicious
        rows.append(row)
    return rows


def run_baselines(ctx: ServerContext) -> dict[str, dict[str, float]]:
    """Run every baseline the scenario lists; a failing baseline is recorded, not fatal."""
    out: dict[str, dict[str, float]] = {}
    for spec in ctx.scenario.baselines:
        name = registry.name_of(spec)
        ctx.recorder.event("baseline_start", baseline=name)
        try:
            metrics = registry.build("baseline", spec, ctx=ctx)
        except Exception as exc:
            log.exception("baseline %s failed", name)
            ctx.recorder.event(
                "baseline_failed", baseline=name, error=f"{type(exc).__name__}: {exc}"
            )
            continue
        ctx.recorder.metrics(ctx.scenario.rounds, name, metrics)
        out[name] = metrics
    return out


@contextlib.contextmanager
def torch_threads(num_cpus: float) -> Iterator[None]:
    """Server-side work uses as many torch threads as one client.

    Thread count changes floating-point summation order; pinning it makes
    server evaluation and baselines identical whichever engine runs them.
    """
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(max(1, int(num_cpus)))
    try:
        yield
    finally:
        torch.set_num_threads(before)


def serve(grid: Grid, scenario: Scenario, recorder: Recorder) -> dict[str, Any]:
    """Connect the clients, run the strategy and the baselines, write the summary."""
    with torch_threads(scenario.engine.client_resources.num_cpus):
        return _serve(grid, scenario, recorder)


def state_location(scenario: Scenario, recorder: Recorder) -> tuple[Path, str, bool]:
    """Client-state root, run name and whether the root is a temporary folder.

    A run with a folder keeps its clients' state in ``<run>/client_state``; a
    run kept in memory gets a temporary folder, deleted at the end.
    """
    if recorder.run_dir is not None:
        run_dir = recorder.run_dir
        return run_dir / STATE_DIR_NAME, f"{scenario.name}/{run_dir.name}", False
    root = Path(tempfile.mkdtemp(prefix="flowerbed-state-"))
    return root, f"{scenario.name}/{root.name}", True


def _drop_state(fed: Federation, root: Path) -> None:
    """``clients.keep_state: false``: every client deletes its folder, then the server's.

    Virtual clients share the server's run folder (simulation, inline): the
    server deletes it, without a message to every client.
    """
    if fed.virtual:
        shutil.rmtree(root, ignore_errors=True)
        return
    try:
        fed.ask(keys.STATE_CLEANUP, Payload(), server_round=0, min_replies=1e-9)
    except RoundFailedError as exc:
        log.warning("client state cleanup: %s", exc)
    shutil.rmtree(root, ignore_errors=True)


def _run_clock(recorder: Recorder) -> RunClock:
    """The caller's clock for this run (counting from the process start or the API call).

    A ServerApp with no caller in its process (``flwr run``, a sweep point)
    times from here.
    """
    clock = clock_of(recorder)
    if clock is None:
        return RunClock()
    clock.shared_with_server = True
    return clock


def checked_strategy(scenario: Scenario) -> Strategy:
    """The scenario's strategy; one that cannot checkpoint is refused when checkpoints are asked.

    Validation refuses it already from the strategy's class; the built
    instance is what finally decides.
    """
    strategy: Strategy = registry.build(
        "strategy", scenario.component("strategy"), scenario=scenario
    )
    if scenario.checkpoint.every and not strategy.checkpointing:
        problems = checkpoint_problems(scenario) or [
            f"checkpoint.every: strategy {registry.name_of(scenario.strategy)!r} does not "
            f"save checkpoints; set checkpoint.every: 0"
        ]
        raise ScenarioError(problems, scenario.name)
    return strategy


def _serve(grid: Grid, scenario: Scenario, recorder: Recorder) -> dict[str, Any]:
    clock = _run_clock(recorder)
    strategy = checked_strategy(scenario)
    root, run_name, temporary = state_location(scenario, recorder)
    try:
        with clock.phase("data", "building data"):
            checkpoints = Checkpoints(scenario, recorder.run_dir, root, recorder.resume_from)
            ctx = ServerContext(scenario, recorder, state_root=root, checkpoints=checkpoints)
            recorder.write_json(CLIENTS_FILE, client_table(ctx))
            if listed_clients(scenario) < scenario.num_clients:
                recorder.event(
                    "client_table", listed=listed_clients(scenario), clients=scenario.num_clients
                )
        fed = Federation(grid, scenario, recorder)
        waiting = f"connecting clients (waiting for {flower_nodes(scenario)} nodes)"
        with clock.phase("connect", waiting):
            fed.connect({keys.STATE_DIR: str(root), keys.RUN_NAME: run_name})
        with clock.phase("strategy", "running the strategy"):
            federated = strategy.run(fed, ctx)
        extra = dict(ctx.extra_results)
        with clock.phase("baselines", "running the baselines"):
            baselines = run_baselines(ctx)
        results = {"federated": federated, **extra, **baselines}
        if not scenario.clients.keep_state:
            _drop_state(fed, root)
    finally:
        if temporary:
            shutil.rmtree(root, ignore_errors=True)
    phases = clock.report()
    summary = {
        "scenario": scenario.name,
        "digest": scenario.digest(),
        "seed": scenario.seed,
        "engine": scenario.engine.name,
        "num_clients": scenario.num_clients,
        "rounds": scenario.rounds,
        "results": results,
        "wall_time_s": phases["total"],
        "phases_s": phases,
        "versions": versions(),
        "run_dir": str(recorder.run_dir) if recorder.run_dir else None,
    }
    if ctx.legend:
        summary["legend"] = dict(ctx.legend)
    recorder.finish(summary)
    return summary


def _app_path(path: str) -> Path:
    """A scenario path as given, else relative to the app folder (where ``flwr run`` unpacks it)."""
    given = Path(path)
    if given.is_absolute() or given.exists():
        return given
    return Path(__file__).resolve().parents[2] / given


# ``flwr run .`` entry point: the scenario file and overrides come from the run config.
app = ServerApp()


#: Prefix of the stdout line carrying the summary JSON (read back from ``flwr run --stream``).
SUMMARY_MARKER = "flowerbed-summary: "


def scenario_from_run_config(config: Mapping[str, Any]) -> Scenario:
    """The resolved scenario in ``scenario-b64``, else the file ``scenario`` plus ``overrides``."""
    encoded = str(config.get("scenario-b64", ""))
    if encoded:
        data = json.loads(base64.b64decode(encoded))
        return validate_scenario(data, "run config scenario-b64")
    overrides = [o.strip() for o in str(config.get("overrides", "")).split(";") if o.strip()]
    return load_scenario(_app_path(str(config["scenario"])), overrides)


def run_dir_from_run_config(config: Mapping[str, Any], scenario: Scenario) -> Path:
    """The folder given as ``run-dir`` (made by the caller's runner), else a new one."""
    given = str(config.get("run-dir", ""))
    if given:
        Path(given).mkdir(parents=True, exist_ok=True)
        return Path(given)
    return new_run_dir(scenario, str(config.get("output-dir", "")) or None)


@app.main()
def main(grid: Grid, context: Context) -> None:
    """ServerApp main for the Flower CLI (``[tool.flwr.app.config]`` names the scenario)."""
    config = context.run_config
    scenario = scenario_from_run_config(config)
    recorder = Recorder(scenario, run_dir_from_run_config(config, scenario))
    recorder.start()
    try:
        summary = serve(grid, scenario, recorder)
        log.warning("flowerbed: results in %s: %s", recorder.run_dir, summary["results"])
        print(SUMMARY_MARKER + json.dumps(summary, default=str), flush=True)
    finally:
        recorder.close()

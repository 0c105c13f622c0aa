"""Scale: one-shot FQR and FedAvg rounds with 10, 100 and 1,000 simulated clients.

One ``run_simulation`` with the largest number of nodes serves every point
(Ray start-up is paid once): after one ``query.setup`` to all nodes, each
point runs flowerbed's ``serve`` on a view of the grid that lists only the
nodes of partitions ``0..N-1``. Each point is a real scenario run:

* one-shot: ``scenarios/fqr/synthetic.yaml`` with N clients, 40 training rows
  each, the median only and no iterative baseline (the server-side pooled
  oracle and per-client comparisons still run and are timed with the point);
* FedAvg: an MLP on a Gaussian mixture, 40 training rows per client, one
  local epoch, server evaluation every round.

Peak memory is the summed RSS (and PSS) of the driver and every descendant
(Ray GCS, raylet, workers), sampled by a separate process. Ray gets 2 CPUs,
one per client. The flowerbed arm runs on flowerbed's indexed LinkState, as
its engine does (``--link-state stock``: Flower's, for before/after); the
raw Flower arm on Flower's stock state (``--raw-link-state indexed``: like
for like). Run ``python benchmarks/platform/scale.py`` (full) or ``--quick`` (the
same sizes without the raw Flower arm).
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import (
    Check,
    TimedGrid,
    TreeMemory,
    add_raw_link_state,
    load_avg,
    median,
    print_checks,
    print_table,
    result_name,
    save,
    simulate,
)

from flowerbed.strategies.grids import DelegatingGrid

ROOT = Path(__file__).resolve().parents[2]
ROWS = 50  # rows per client before the 20% local test split
ENGINE = ["engine.client_resources.num_cpus=1", "engine.ray_num_cpus=2"]


def store_sizes(grid: Any) -> dict[str, int]:
    """Messages held by Flower's in-memory LinkState (diagnostic; empty if not reachable)."""
    inner = grid
    while hasattr(inner, "inner") and not hasattr(inner, "state"):
        inner = inner.inner
    state = getattr(inner, "state", None)
    out = {}
    for name in ("message_ins_store", "message_res_store", "message_ins_id_to_message_res_id"):
        if hasattr(state, name):
            out[name] = len(getattr(state, name))
    return out


class SubsetGrid(DelegatingGrid):
    """A grid that lists only some nodes; everything else is the wrapped grid's."""

    def __init__(self, inner: TimedGrid, nodes: list[int]) -> None:
        super().__init__(inner)
        self.nodes = nodes

    def get_node_ids(self) -> list[int]:
        """Only the nodes of this point."""
        return list(self.nodes)



def fqr_scenario(n: int) -> Any:
    """The FQR one-shot scenario at N clients (median only, no iterative baseline)."""
    from flowerbed.core.scenario import load_scenario

    return load_scenario(
        ROOT / "scenarios" / "fqr" / "synthetic.yaml",
        [
            f"num_clients={n}",
            f"dataset.n_train={ROWS * n}",
            "dataset.n_test=2000",
            "strategy.taus=[0.5]",
            "strategy.iterative_rounds=0",
            *ENGINE,
        ],
    )


def fedavg_scenario(n: int, rounds: int) -> Any:
    """FedAvg with an MLP on a Gaussian mixture, ``ROWS`` rows per client."""
    from flowerbed.core.scenario import from_dict

    return from_dict(
        {
            "name": "scale_fedavg",
            "seed": 0,
            "num_clients": n,
            "rounds": rounds,
            "dataset": {"name": "gaussian_mixture", "n_train": ROWS * n, "n_test": 1000},
            "partition": {"name": "iid"},
            "model": {"name": "mlp", "hidden": [64]},
            "learner": {"name": "sgd", "lr": 0.05, "batch_size": 16, "local_epochs": 1},
            "strategy": {"name": "fedavg", "fraction_evaluate": 0.0},
            "engine": {"name": "simulation"},
        },
        ENGINE,
    )


def run_points(
    grid: TimedGrid, sizes: list[int], rounds: int, kinds: tuple[str, ...] = ("fqr", "fedavg")
) -> dict[str, Any]:
    """ServerApp body: discover partition ids once, then run every point."""
    from flowerbed.core.records import Recorder
    from flowerbed.platform.server import serve
    from flowerbed.strategies.federation import Federation

    largest = fedavg_scenario(max(sizes), rounds)
    everyone = Federation(grid, largest, Recorder(largest, None))
    everyone.connect()
    points = []
    for n in sizes:
        view = SubsetGrid(grid, [everyone.node_of[p] for p in range(n)])
        runs = (("one-shot FQR", fqr_scenario(n)), ("FedAvg", fedavg_scenario(n, rounds)))
        for kind, scenario in runs:
            if kind.lower().split()[-1] not in kinds:
                continue
            print(f"  start: {kind} at {n} clients, store {store_sizes(grid)}", file=sys.stderr)
            first, start = len(grid.phases), time.perf_counter()
            summary = serve(view, scenario, Recorder(scenario, None))
            points.append(
                {
                    "clients": n,
                    "kind": kind,
                    "start": start,
                    "end": time.perf_counter(),
                    "phases": (first, len(grid.phases)),
                    "load": load_avg(),
                    "final": summary["results"]["federated"],
                }
            )
            print(f"  done: {kind} at {n} clients, load {load_avg()}", file=sys.stderr)
    return {"points": points}


def raw_points(
    grid: TimedGrid, sizes: list[int], rounds: int, run_fedavg: Any
) -> dict[str, Any]:
    """ServerApp body of the raw Flower arm: Flower's FedAvg on the first N nodes."""
    from overhead import wait_for_nodes

    nodes = wait_for_nodes(grid, max(sizes))
    points = []
    for n in sizes:
        view = SubsetGrid(grid, nodes[:n])
        print(f"  start: raw FedAvg at {n} clients, store {store_sizes(grid)}", file=sys.stderr)
        first, start = len(grid.phases), time.perf_counter()
        accuracy = run_fedavg(view, rounds)
        points.append(
            {
                "clients": n,
                "kind": "FedAvg, raw Flower",
                "start": start,
                "end": time.perf_counter(),
                "phases": (first, len(grid.phases)),
                "load": load_avg(),
                "final": {"accuracy": accuracy},
            }
        )
        print(f"  done: raw Flower FedAvg at {n} clients, load {load_avg()}", file=sys.stderr)
    return {"points": points}


def raw_arm(
    sizes: list[int], rounds: int, memory: TreeMemory, link_state: str = "stock"
) -> tuple[Any, list[dict[str, Any]]]:
    """Flower's FedAvg and a hand-written ClientApp at each size, in one simulation.

    The same layout as flowerbed's arm (one ``run_simulation`` with the
    largest number of nodes, each point on the first N of them), the same
    MLP, SGD settings, rows per client and server evaluation every round.
    """
    import raw_flower_app
    from _common import DATA_ENV, backend_config
    from overhead import export_data, raw_server

    scenario = fedavg_scenario(max(sizes), rounds)
    with tempfile.TemporaryDirectory() as tmp:
        path, init = export_data(scenario, tmp)
        os.environ[DATA_ENV] = path
        run_fedavg = raw_server(scenario, init)
        run = simulate(
            "raw Flower",
            lambda g: raw_points(g, sizes, rounds, run_fedavg),
            raw_flower_app.train_app,
            max(sizes),
            backend_config(1.0, ray_num_cpus=2),
            indexed=link_state == "indexed",
        )
    return run, [figures(p, run.phases, memory) for p in run.extra["points"]]


def figures(point: dict[str, Any], phases: list[Any], memory: TreeMemory) -> dict[str, Any]:
    """Wall time per round, time per client update and peak memory of one point."""
    n = point["clients"]
    mine = phases[slice(*point["phases"])]
    if point["kind"].startswith("FedAvg"):
        work = [p for p in mine if p.message_type.startswith("train")]
        steady = work[1:] or work
        starts = [p.start for p in work] + [point["end"]]
        round_s = median(b - a for a, b in itertools.pairwise(starts[1:]))
    else:
        work = [p for p in mine if p.message_type.startswith("query.fqr")]
        steady = work
        round_s = point["end"] - work[0].start
    phase_s = median(p.seconds for p in steady)
    return {
        "clients": n,
        "kind": point["kind"],
        "round_s": round_s,
        "phase_s": phase_s,
        "ms_per_update": 1e3 * phase_s / n,
        "point_s": point["end"] - point["start"],
        **memory.peak(point["start"], point["end"]),
        "load": point["load"],
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run every point in one simulation per arm and print the table and the targets."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="no raw Flower arm"
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=None)
    parser.add_argument("--rounds", type=int, default=3, help="FedAvg rounds per point")
    parser.add_argument(
        "--raw-sizes",
        type=int,
        nargs="*",
        default=None,
        help="sizes for the raw Flower FedAvg arm (default: 100 and the largest; none in --quick)",
    )
    parser.add_argument(
        "--kinds", nargs="+", choices=("fqr", "fedavg"), default=["fqr", "fedavg"],
        help="which flowerbed points to run",
    )
    parser.add_argument(
        "--link-state", choices=("indexed", "stock"), default="indexed",
        help="flowerbed arm's LinkState: flowerbed's indexed one (default) or Flower's stock one",
    )
    add_raw_link_state(parser)
    args = parser.parse_args(argv)
    sizes = args.sizes or [10, 100, 1000]
    if args.raw_sizes is not None:
        raw_sizes = args.raw_sizes
    else:
        raw_sizes = [] if args.quick else sorted({s for s in sizes if s >= 100})
    from flowerbed.platform.runner import backend_config, client_app

    config = backend_config(fedavg_scenario(max(sizes), args.rounds))
    with TreeMemory() as memory:
        run = simulate(
            "flowerbed",
            lambda g: run_points(g, sizes, args.rounds, tuple(args.kinds)),
            client_app(),
            max(sizes),
            config,
            indexed=args.link_state == "indexed",
        )
        rows = [figures(p, run.phases, memory) for p in run.extra["points"]]
        overall = memory.peak(run.called, run.ended or float("inf"))
        raw_run, raw_rows = (None, [])
        if raw_sizes:
            raw_run, raw_rows = raw_arm(raw_sizes, args.rounds, memory, args.raw_link_state)
    raw_peak = memory.peak(raw_run.called, raw_run.ended or float("inf")) if raw_run else None
    startups = f"start-up to first reply: flowerbed {run.startup_s:.1f} s" + (
        f", raw Flower {raw_run.startup_s:.1f} s" if raw_run else ""
    )
    print_table(
        f"scale on 2 cores (one simulation per arm, {max(sizes)} nodes; {startups})",
        [
            "kind",
            "clients",
            "round s",
            "client phase s",
            "ms / client update",
            "point s",
            "peak RSS MiB",
            "peak PSS MiB",
            "procs",
            "load 1m",
        ],
        [
            [
                r["kind"],
                r["clients"],
                r["round_s"],
                r["phase_s"],
                r["ms_per_update"],
                r["point_s"],
                r["rss_mib"],
                r["pss_mib"],
                r["processes"],
                r["load"],
            ]
            for r in rows + raw_rows
        ],
    )
    checks = [
        Check(
            f"scale: {max(sizes)} clients complete",
            float(len(rows)),
            float(len(args.kinds) * len(sizes)),
            unit="points",
            higher_is_better=True,
        ),
        Check("scale: peak tree RSS (flowerbed run)", overall["rss_mib"] / 1024, 4.0, unit="GiB"),
    ]
    ratios: dict[str, float] = {}
    per_update = {(r["kind"], r["clients"]): r["ms_per_update"] for r in rows + raw_rows}
    for kind in ("one-shot FQR", "FedAvg"):
        if (kind, 100) in per_update and (kind, 1000) in per_update:
            value = per_update[(kind, 1000)] / per_update[(kind, 100)]
            ratios[f"{kind} per update 1000 / 100"] = value
            checks.append(Check(f"scale: {kind} per update 1000 / 100", value, 1.5))
    raw_kind = "FedAvg, raw Flower"
    if (raw_kind, 100) in per_update and (raw_kind, 1000) in per_update:
        ratios["raw Flower FedAvg per update 1000 / 100 (reference)"] = (
            per_update[(raw_kind, 1000)] / per_update[(raw_kind, 100)]
        )
    for n in raw_sizes:
        if ("FedAvg", n) in per_update and (raw_kind, n) in per_update:
            ratios[f"FedAvg flowerbed / raw Flower per update at {n}"] = (
                per_update[("FedAvg", n)] / per_update[(raw_kind, n)]
            )
    if ratios:
        print_table("ratios (same run)", ["ratio", "value"], [[k, v] for k, v in ratios.items()])
    if 1000 in raw_sizes and ("FedAvg", 1000) in per_update:
        checks.append(
            Check(
                "scale: FedAvg flowerbed / raw Flower per update at 1000",
                ratios["FedAvg flowerbed / raw Flower per update at 1000"],
                1.10,
            )
        )
    print_checks(checks)
    payload = {
        "sizes": sizes,
        "raw_sizes": raw_sizes,
        "rounds": args.rounds,
        "link_state": args.link_state,
        "raw_link_state": args.raw_link_state,
        "startup_s": run.startup_s,
        "raw_startup_s": raw_run.startup_s if raw_run else None,
        "points": rows,
        "raw_points": raw_rows,
        "ratios": ratios,
        "peak": overall,
        "raw_peak": raw_peak,
        "finals": [p["final"] for p in run.extra["points"]],
        "raw_finals": [p["final"] for p in raw_run.extra["points"]] if raw_run else [],
        "load_end": load_avg(),
    }
    name = result_name("scale", args.raw_link_state, args.link_state)
    save(name, args.quick, payload, checks)
    return payload


if __name__ == "__main__":
    main()

"""Overhead of flowerbed's simulation engine against a hand-written Flower app.

Both arms run the quickstart-like FedAvg workload (the same digits partitions,
the same one-hidden-layer MLP, SGD with momentum, the same initial weights and
rounds) through ``flwr.simulation.run_simulation`` with identical Ray settings,
alternating A B B A ... in one process after discarded warm-up simulations
(the first simulations in a process ran slowest, whichever arm). Rounds are
timed inside the ServerApp, so Ray start-up (call to first client reply) is
reported apart from the steady state. The first training round warms each
worker (imports, data, torch) and is left out of the steady state. The check
is the median of the pairs' ratios (each pair ran back to back).

Run ``python benchmarks/platform/overhead.py`` (full) or ``--quick`` (smoke).
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

import numpy as np
from _common import (
    DATA_ENV,
    Check,
    SimRun,
    TimedGrid,
    add_raw_link_state,
    backend_config,
    load_avg,
    median,
    print_checks,
    print_table,
    result_name,
    save,
    simulate,
)

ROOT = Path(__file__).resolve().parents[2]
TARGET = 1.10


def scenario_for(clients: int, rounds: int) -> Any:
    """Quickstart with N clients, R rounds, server evaluation only, no baselines."""
    from flowerbed.core.scenario import load_scenario

    return load_scenario(
        ROOT / "scenarios" / "quickstart.yaml",
        [
            f"num_clients={clients}",
            f"rounds={rounds}",
            "strategy.fraction_evaluate=0",
            "baselines=[]",
        ],
    )


def export_data(scenario: Any, folder: str) -> tuple[str, dict[str, np.ndarray]]:
    """Write each client's training split for the raw app; return path and init weights."""
    from flowerbed.core import registry
    from flowerbed.core.seeds import derive_seed
    from flowerbed.data.federated import federated_data

    data = federated_data(scenario)
    arrays: dict[str, np.ndarray] = {}
    for pid in range(scenario.num_clients):
        client = data.client(pid)
        arrays[f"x{pid}"] = np.asarray(client.x_train, dtype=np.float32)
        arrays[f"y{pid}"] = np.asarray(client.y_train, dtype=np.int64)
    meta = data.dataset.meta
    arrays["hidden"] = np.array(scenario.model.hidden[0])
    arrays["num_classes"] = np.array(meta.num_classes)
    path = os.path.join(folder, "clients.npz")
    np.savez(path, **arrays)
    learner = registry.build("learner", scenario.component("learner"), scenario=scenario)
    init = learner.init_arrays(meta, derive_seed(scenario.seed, "init"))
    return path, init


def flowerbed_arm(scenario: Any) -> SimRun:
    """flowerbed's ServerApp body (``serve``) and generic ClientApp under run_simulation."""
    from flowerbed.core.records import Recorder
    from flowerbed.platform.runner import backend_config as fb_backend
    from flowerbed.platform.runner import client_app
    from flowerbed.platform.server import serve

    def body(grid: TimedGrid) -> dict[str, Any]:
        summary = serve(grid, scenario, Recorder(scenario, None))
        return {"accuracy": summary["results"]["federated"].get("test/accuracy")}

    return simulate(
        "flowerbed", body, client_app(), scenario.num_clients, fb_backend(scenario), indexed=True
    )


def raw_server(scenario: Any, init: dict[str, np.ndarray]) -> Any:
    """Flower's FedAvg with server evaluation: ``run(grid, rounds) -> final accuracy``.

    Shared by the overhead and scale benchmarks. The hand-written ClientApp
    (``raw_flower_app.train_app``) does the clients' work.
    """
    import raw_flower_app
    import torch
    from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord
    from flwr.serverapp.strategy import FedAvg

    from flowerbed.data.federated import federated_data

    dataset = federated_data(scenario).dataset
    x_test = torch.as_tensor(np.asarray(dataset.x_test, dtype=np.float32))
    y_test = torch.as_tensor(np.asarray(dataset.y_test, dtype=np.int64))
    lp = scenario.learner
    hidden, classes = scenario.model.hidden[0], dataset.meta.num_classes

    def evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        del server_round
        model = raw_flower_app.mlp(x_test.shape[1], hidden, classes)
        model.load_state_dict(arrays.to_torch_state_dict())
        model.eval()
        with torch.no_grad():
            out = model(x_test)
            loss = float(torch.nn.functional.cross_entropy(out, y_test))
            acc = float((out.argmax(dim=1) == y_test).float().mean())
        return MetricRecord({"loss": loss, "accuracy": acc})

    def run(grid: Any, rounds: int) -> float | None:
        torch.set_num_threads(1)  # as flowerbed's server does for num_cpus=1
        n = len(list(grid.get_node_ids()))
        strategy = FedAvg(fraction_evaluate=0.0, min_available_nodes=n, min_evaluate_nodes=0)
        config = ConfigRecord(
            {
                "lr": lp.lr,
                "momentum": lp.momentum,
                "batch-size": lp.batch_size,
                "local-epochs": lp.local_epochs,
            }
        )
        result = strategy.start(
            grid=grid,
            initial_arrays=ArrayRecord({k: Array(v) for k, v in init.items()}),
            num_rounds=rounds,
            train_config=config,
            evaluate_fn=evaluate,
        )
        final = result.evaluate_metrics_serverapp.get(rounds, {})
        acc = final.get("accuracy")
        return None if acc is None else float(acc)  # type: ignore[arg-type]

    return run


def wait_for_nodes(grid: Any, n: int, timeout: float = 3600.0) -> list[int]:
    """Block until ``n`` nodes are registered; return them sorted."""
    deadline = time.monotonic() + timeout
    while len(nodes := sorted(grid.get_node_ids())) < n:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {len(nodes)} of {n} nodes connected")
        time.sleep(0.05)
    return nodes


def raw_arm(scenario: Any, init: dict[str, np.ndarray], indexed: bool = False) -> SimRun:
    """Flower's FedAvg with a hand-written ClientApp, the same work and settings.

    ``indexed`` puts it on flowerbed's indexed LinkState instead of Flower's stock one.
    """
    import raw_flower_app

    run = raw_server(scenario, init)
    n = scenario.num_clients

    def body(grid: TimedGrid) -> dict[str, Any]:
        wait_for_nodes(grid, n)
        return {"accuracy": run(grid, scenario.rounds)}

    label = "raw Flower (indexed)" if indexed else "raw Flower"
    return simulate(label, body, raw_flower_app.train_app, n, backend_config(1.0), indexed=indexed)


def steady(run: SimRun, clients: int) -> dict[str, float]:
    """Steady-state figures from the train phases after the first."""
    trains = [p for p in run.phases if p.message_type.startswith("train")]
    # A round runs from one train phase to the next: train, aggregation, server eval.
    rounds = [b.start - a.start for a, b in itertools.pairwise(trains[1:])]
    return {
        "train_phase_ms_per_update": 1e3 * median(p.seconds for p in trains[1:]) / clients,
        "round_ms_per_update": 1e3 * median(rounds) / clients,
        "first_round_s": trains[0].seconds,
        "startup_s": run.startup_s,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the alternating comparison and print the table and targets."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short smoke version")
    parser.add_argument("--clients", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--pairs", type=int, default=None, help="A/B pairs (A B, then B A ...)")
    parser.add_argument(
        "--warmup",
        type=int,
        default=None,
        help="discarded runs before measuring, raw Flower first (default 2, quick 1)",
    )
    add_raw_link_state(parser)
    args = parser.parse_args(argv)
    raw_indexed = args.raw_link_state == "indexed"
    # 20 clients: quickstart's Dirichlet(0.3) split cannot give 50 clients enough rows.
    clients = args.clients or 20
    rounds = args.rounds or 8
    # Rounds of 20 clients last ~0.3 s against Flower's 0.1 s reply polling: one
    # pair of 4 rounds read anywhere from 1.03 to 1.28 for the same code.
    pairs = args.pairs or (2 if args.quick else 3)
    scenario = scenario_for(clients, rounds)
    rows, records = [], []
    with tempfile.TemporaryDirectory() as tmp:
        path, init = export_data(scenario, tmp)
        os.environ[DATA_ENV] = path
        # Warm-up, discarded: the first simulations in a process were the slowest
        # whichever arm ran them (driver-side imports, caches, Ray's first start).
        warm = scenario_for(clients, 2)
        warmup = args.warmup if args.warmup is not None else (1 if args.quick else 2)
        for i in range(warmup):
            run = raw_arm(warm, init, raw_indexed) if i % 2 == 0 else flowerbed_arm(warm)
            print(f"  warm-up {run.label}: start-up {run.startup_s:.1f} s", file=sys.stderr)
        order = []
        for i in range(pairs):
            order += ["flowerbed", "raw"] if i % 2 == 0 else ["raw", "flowerbed"]
        for arm in order:
            if arm == "flowerbed":
                run = flowerbed_arm(scenario)
            else:
                run = raw_arm(scenario, init, raw_indexed)
            fig = steady(run, clients)
            rec = {"arm": run.label, "load": run.load, **fig, **run.extra}
            records.append(rec)
            print(f"  {run.label}: {fig} load {run.load}", file=sys.stderr)
    for rec in records:
        rows.append(
            [
                rec["arm"],
                rec["round_ms_per_update"],
                rec["train_phase_ms_per_update"],
                rec["first_round_s"],
                rec["startup_s"],
                rec.get("accuracy") or float("nan"),
                rec["load"],
            ]
        )
    print_table(
        f"FedAvg quickstart workload: {clients} clients, {rounds} rounds, A/B alternated",
        [
            "arm",
            "round ms/update",
            "train-phase ms/update",
            "1st round s",
            "start-up s",
            "accuracy",
            "load 1m",
        ],
        rows,
    )
    fb = [r for r in records if r["arm"] == "flowerbed"]
    raw = [r for r in records if r["arm"] != "flowerbed"]
    ratio_round = median(r["round_ms_per_update"] for r in fb) / median(
        r["round_ms_per_update"] for r in raw
    )
    ratio_train = median(r["train_phase_ms_per_update"] for r in fb) / median(
        r["train_phase_ms_per_update"] for r in raw
    )
    startup = median(r["startup_s"] for r in fb) / median(r["startup_s"] for r in raw)
    # Each pair ran back to back, so its ratio is least affected by drifting load.
    pair_ratios = []
    for a, b in zip(records[0::2], records[1::2], strict=False):
        f, r = (a, b) if a["arm"] == "flowerbed" else (b, a)
        pair_ratios.append(f["round_ms_per_update"] / r["round_ms_per_update"])
    ratio_pairs = median(pair_ratios)
    print_table(
        "ratios flowerbed / raw Flower",
        ["figure", "ratio"],
        [
            ["round time per client update, median of pair ratios", ratio_pairs],
            ["round time per client update, median over runs", ratio_round],
            ["train phase per client update, median over runs", ratio_train],
            ["start-up (call to first reply), median over runs", startup],
            [
                "start-up s, flowerbed / raw Flower (medians)",
                f"{median(r['startup_s'] for r in fb):.1f} / "
                f"{median(r['startup_s'] for r in raw):.1f}",
            ],
        ],
    )
    checks = [
        Check("overhead: flowerbed / raw Flower per client update", ratio_pairs, TARGET),
    ]
    print_checks(checks)
    payload = {
        "clients": clients,
        "rounds": rounds,
        "raw_link_state": args.raw_link_state,
        "runs": records,
        "warmup": warmup,
        "pair_ratios": pair_ratios,
        "ratio_round_per_update_pairs": ratio_pairs,
        "ratio_round_per_update": ratio_round,
        "ratio_train_phase_per_update": ratio_train,
        "ratio_startup": startup,
        "load_end": load_avg(),
    }
    save(result_name("overhead", args.raw_link_state), args.quick, payload, checks)
    return payload


if __name__ == "__main__":
    main()

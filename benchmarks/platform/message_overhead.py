"""Per-message overhead: a client that does no work, through every path.

Each round sends every client a 1,000-float32 array (plus the round number)
and the client answers with zero examples and no arrays. Paths:

* flowerbed, simulation: ``Federation.ask`` -> Ray -> generic ClientApp ->
  learner handler (``evaluate`` of the ``sgd`` learner with no local test
  split, which returns at once);
* raw Flower, simulation: ``grid.send_and_receive`` -> Ray -> a hand-written
  ClientApp (``raw_flower_app.trivial_app``);
* flowerbed, inline engine: the same ``Federation.ask`` on ``InlineGrid``;
* raw Flower, in-process: the raw ServerApp loop on the same ``InlineGrid``;
* plain loop: a Python loop that copies the array and builds the reply dict.

Simulation runs alternate A B B A ... after one discarded warm-up simulation;
the check is the median of the pairs' ratios. The first round of each run warms the
workers and is left out. Run ``python benchmarks/platform/message_overhead.py``
(full) or ``--quick``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from _common import (
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
ARRAY = np.linspace(0, 1, 1000, dtype=np.float32)


def scenario_for(clients: int, rounds: int) -> Any:
    """Quickstart settings with no local test split, so ``evaluate`` does nothing."""
    from flowerbed.core.scenario import load_scenario

    return load_scenario(
        ROOT / "scenarios" / "quickstart.yaml",
        [
            f"num_clients={clients}",
            f"rounds={rounds}",
            "partition=iid",
            "clients.local_test_fraction=0",
            "baselines=[]",
        ],
    )


def flowerbed_rounds(grid: Any, scenario: Any, rounds: int) -> None:
    """Connect, then ``rounds`` trivial asks to every client through the Federation."""
    from flowerbed.core.messages import Payload
    from flowerbed.core.records import Recorder
    from flowerbed.strategies.federation import Federation

    fed = Federation(grid, scenario, Recorder(scenario, None))
    fed.connect()
    payload = Payload(arrays={"w": ARRAY})
    for r in range(1, rounds + 1):
        fed.ask("evaluate", payload, server_round=r)


def raw_rounds(grid: Any, clients: int, rounds: int, timeout: float = 600.0) -> None:
    """Hand-written Flower server loop: the same message to every node, ``rounds`` times."""
    from flwr.app import Array, ArrayRecord, ConfigRecord, Message, RecordDict

    deadline = time.monotonic() + timeout
    while len(nodes := sorted(grid.get_node_ids())) < clients:
        if time.monotonic() > deadline:
            raise RuntimeError("nodes did not connect")
        time.sleep(0.05)
    for r in range(1, rounds + 1):
        messages = [
            Message(
                RecordDict(
                    {
                        "arrays": ArrayRecord({"w": Array(ARRAY)}),
                        "config": ConfigRecord({"server-round": r}),
                    }
                ),
                dst_node_id=n,
                message_type="evaluate",
            )
            for n in nodes
        ]
        replies = list(grid.send_and_receive(messages, timeout=timeout))
        if len(replies) != clients or any(m.has_error() for m in replies):
            raise RuntimeError(f"round {r}: bad replies")


def per_update_us(phases: list[Any], clients: int) -> float:
    """Median phase time per client (µs), first ``evaluate`` phase excluded."""
    asks = [p for p in phases if p.message_type.startswith("evaluate")][1:]
    return 1e6 * median(p.seconds for p in asks) / clients


def sim_arm(arm: str, scenario: Any, rounds: int, raw_indexed: bool = False) -> SimRun:
    """One ``run_simulation`` of the flowerbed or raw Flower arm.

    ``raw_indexed`` runs the raw arm on flowerbed's indexed LinkState too, which
    leaves only the two apps' own per-message costs in the comparison.
    """
    import raw_flower_app

    from flowerbed.platform.runner import backend_config as fb_backend
    from flowerbed.platform.runner import client_app

    n = scenario.num_clients
    if arm == "flowerbed":
        return simulate(
            "flowerbed sim",
            lambda g: flowerbed_rounds(g, scenario, rounds),
            client_app(),
            n,
            fb_backend(scenario),
            indexed=True,
        )
    return simulate(
        "raw Flower sim (indexed)" if raw_indexed else "raw Flower sim",
        lambda g: raw_rounds(g, n, rounds),
        raw_flower_app.trivial_app,
        n,
        backend_config(1.0),
        indexed=raw_indexed,
    )


def inline_arms(scenario: Any, rounds: int, repeats: int) -> dict[str, float]:
    """µs per client update for the three in-process paths (best of ``repeats``)."""
    import raw_flower_app

    from flowerbed.platform.inline import InlineGrid
    from flowerbed.platform.runner import client_app

    n = scenario.num_clients
    out: dict[str, list[float]] = {"flowerbed inline": [], "raw Flower inline": [], "plain": []}
    for _ in range(repeats):
        grid = TimedGrid(InlineGrid(client_app(), n))
        flowerbed_rounds(grid, scenario, rounds)
        out["flowerbed inline"].append(per_update_us(grid.phases, n))
        grid = TimedGrid(InlineGrid(raw_flower_app.trivial_app, n))
        raw_rounds(grid, n, rounds)
        out["raw Flower inline"].append(per_update_us(grid.phases, n))
        out["plain"].append(plain_loop(n, rounds))
    return {k: min(v) for k, v in out.items()}


def plain_loop(clients: int, rounds: int) -> float:
    """µs per client update of a Python loop doing the same trivial exchange."""
    times = []
    for r in range(rounds):
        start = time.perf_counter()
        replies = []
        for pid in range(clients):
            received = {"w": ARRAY.copy(), "server-round": r}
            replies.append({"partition-id": pid, "num-examples": 0, "n": len(received)})
        times.append(time.perf_counter() - start)
    return 1e6 * median(times[1:] or times) / clients


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run all paths and print µs per client update and the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short smoke version")
    parser.add_argument("--clients", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--pairs", type=int, default=None, help="simulation A/B pairs")
    parser.add_argument("--warmup", type=int, default=1, help="discarded simulations first")
    add_raw_link_state(parser)
    args = parser.parse_args(argv)
    raw_indexed = args.raw_link_state == "indexed"
    clients = args.clients or (50 if args.quick else 200)
    rounds = args.rounds or (5 if args.quick else 6)
    pairs = args.pairs or 2
    scenario = scenario_for(clients, rounds)

    inline_load = load_avg()
    inline = inline_arms(scenario, rounds, repeats=2 if args.quick else 3)
    # Warm-up, discarded: the first simulation in a process ran slowest, whichever arm.
    for _ in range(args.warmup):
        run = sim_arm("raw", scenario_for(clients, 2), 2, raw_indexed)
        print(f"  warm-up {run.label}: start-up {run.startup_s:.1f} s", file=sys.stderr)
    records = []
    for i in range(pairs):
        for arm in ["flowerbed", "raw"] if i % 2 == 0 else ["raw", "flowerbed"]:
            run = sim_arm(arm, scenario, rounds, raw_indexed)
            rec = {
                "arm": run.label,
                "us_per_update": per_update_us(run.phases, clients),
                "startup_s": run.startup_s,
                "load": run.load,
            }
            records.append(rec)
            print(f"  {rec}", file=sys.stderr)
    fb_sim = median(r["us_per_update"] for r in records if r["arm"] == "flowerbed sim")
    raw_sim = median(r["us_per_update"] for r in records if r["arm"] != "flowerbed sim")
    pair_ratios = []
    for a, b in zip(records[0::2], records[1::2], strict=False):
        f, r = (a, b) if a["arm"] == "flowerbed sim" else (b, a)
        pair_ratios.append(f["us_per_update"] / r["us_per_update"])
    plain = inline["plain"]
    rows = [
        [r["arm"], r["us_per_update"], r["us_per_update"] / plain, r["startup_s"], r["load"]]
        for r in records
    ]
    rows += [[k, v, v / plain, "-", inline_load] for k, v in inline.items()]
    print_table(
        f"trivial client: {clients} clients, {rounds} rounds (first round excluded)",
        ["path", "µs / client update", "x plain loop", "start-up s", "load 1m"],
        rows,
    )
    ratios = {
        "flowerbed sim / raw Flower sim, median of pair ratios": median(pair_ratios),
        "flowerbed sim / raw Flower sim": fb_sim / raw_sim,
        "flowerbed inline / raw Flower inline": inline["flowerbed inline"]
        / inline["raw Flower inline"],
        "flowerbed sim / flowerbed inline": fb_sim / inline["flowerbed inline"],
        "raw Flower sim / plain loop": raw_sim / plain,
    }
    print_table("ratios (same process)", ["ratio", "value"], [[k, v] for k, v in ratios.items()])
    checks = [
        Check(
            "message overhead: flowerbed sim / raw Flower sim",
            ratios["flowerbed sim / raw Flower sim, median of pair ratios"],
            1.10,
        )
    ]
    print_checks(checks)
    payload = {
        "clients": clients,
        "rounds": rounds,
        "raw_link_state": args.raw_link_state,
        "runs": records,
        "inline_us_per_update": inline,
        "inline_load": inline_load,
        "ratios": ratios,
        "load_end": load_avg(),
    }
    save(result_name("message_overhead", args.raw_link_state), args.quick, payload, checks)
    return payload


if __name__ == "__main__":
    main()

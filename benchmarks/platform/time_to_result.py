"""What a user waits for: whole-process wall of ``flowerbed run`` against a hand-written Flower app.

Two workloads, each run as separate processes, alternated (flowerbed, raw, raw,
flowerbed, ...) after one discarded warm-up of each arm:

- ``quickstart``: ``scenarios/quickstart.yaml`` (digits, Dirichlet(0.3), 10
  clients x 10 rounds, MLP, FedAvg), without baselines or client evaluation,
  so both arms do the same work: local SGD on every client, server-side test
  accuracy every round;
- ``cross_device``: in the style of FLUTE's published comparison with Flower:
  1,000 clients, 10 per round, 100 rounds, logistic regression, here on
  Fashion-MNIST (IID shares of 60 rows).

The raw arm (``raw_flower_e2e.py``) reads the clients' arrays from an ``.npz``
written before any timing, so its process does not pay for building the
partition; flowerbed's does (conservative for flowerbed). The flowerbed arm
is the default ``simulation`` engine (``engine.backend: auto``, which on one
machine runs the clients in worker processes); beside it run the same engine
on its Ray backend (``engine.backend=ray``, what raw Flower uses), the
``inline`` engine, and ``flowerbed run`` against a warm Ray head
(``flowerbed up`` once before the pairs, ``flowerbed down`` after: what a user
running one scenario after another waits for; each run is still its own Ray
job with fresh workers). flowerbed's phases (start-up to the run folder, data
and connection, round 1, steady rounds, exit) come from its run folder.

Run ``python benchmarks/platform/time_to_result.py`` (full) or ``--quick`` (fewer pairs
and rounds, smoke).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from _common import Check, load_avg, median, print_checks, print_table, save

ROOT = Path(__file__).resolve().parents[2]
BENCH = Path(__file__).resolve().parent
FLOWERBED = str(Path(sys.executable).with_name("flowerbed"))
TARGET = 0.8

WORKLOADS: dict[str, dict[str, Any]] = {
    "quickstart": {
        "scenario": "scenarios/quickstart.yaml",
        "sets": ["baselines=[]", "strategy.fraction_evaluate=0"],
        "raw": ["--lr", "0.05", "--momentum", "0.9", "--batch-size", "16", "--local-epochs", "2"],
        "rounds": 10,
        "fraction": 1.0,
    },
    "cross_device": {
        "scenario": "scenarios/quickstart.yaml",
        "sets": [
            "name=cross_device", "num_clients=1000", "dataset=fashion_mnist",
            "partition={name: iid}", "model={name: linear}",
            "learner={name: sgd, lr: 0.05, momentum: 0.0, batch_size: 16, local_epochs: 1}",
            "strategy={name: fedavg, fraction_train: 0.01, fraction_evaluate: 0}",
            "baselines=[]", "clients.local_test_fraction=0",
        ],
        "raw": ["--lr", "0.05", "--momentum", "0.0", "--batch-size", "16", "--local-epochs", "1"],
        "rounds": 100,
        "fraction": 0.01,
    },
}


def scenario_sets(
    work: dict[str, Any], rounds: int, engine: str, backend: str = "auto"
) -> list[str]:
    """``--set`` overrides of one flowerbed arm."""
    return [*work["sets"], f"rounds={rounds}", f"engine.name={engine}", f"engine.backend={backend}"]


def write_data(work: dict[str, Any], path: Path) -> None:
    """The same clients' rows and test split flowerbed builds, for the raw arm."""
    from flowerbed.core.scenario import load_scenario
    from flowerbed.data.federated import federated_data

    scenario = load_scenario(ROOT / work["scenario"], scenario_sets(work, 1, "inline"))
    fed = federated_data(scenario)
    arrays: dict[str, np.ndarray] = {}
    for pid in range(scenario.num_clients):
        client = fed.client(pid)
        arrays[f"x{pid}"], arrays[f"y{pid}"] = client.x_train, client.y_train
    arrays["x_test"], arrays["y_test"] = fed.dataset.x_test, fed.dataset.y_test
    hidden = getattr(scenario.model, "hidden", ())
    arrays["hidden"] = np.array(hidden[0] if hidden else 0)
    arrays["num_classes"] = np.array(fed.dataset.meta.num_classes)
    np.savez(path, **arrays)  # type: ignore[arg-type]


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, str]:
    """Whole-process wall seconds of ``cmd`` and its output; raises if it fails."""
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        tail = f"{done.stdout[-2000:]}{done.stderr[-2000:]}"
        raise RuntimeError(f"{' '.join(cmd[:3])} failed:\n{tail}")
    return wall, done.stdout + done.stderr


def flowerbed_arm(
    work: dict[str, Any], rounds: int, engine: str, out: Path, backend: str = "auto"
) -> dict[str, Any]:
    """One ``flowerbed run`` process: wall and phases read from its run folder."""
    before = set(out.rglob("summary.json"))
    cmd = [FLOWERBED, "run", work["scenario"], "--output-dir", str(out)]
    for s in scenario_sets(work, rounds, engine, backend):
        cmd += ["--set", s]
    load = load_avg()
    wall, _ = timed(cmd, {**os.environ, "OMP_NUM_THREADS": "1"})
    (summary_path,) = set(out.rglob("summary.json")) - before
    return {"wall_s": wall, "load": load, **phases(summary_path.parent, wall)}


def phases(run_dir: Path, wall: float) -> dict[str, float]:
    """Round 1 and steady-round times, and what came before and after, from ``metrics.jsonl``."""
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x]
    # round 0 is the initial model's evaluation, before any training
    ends = {r["round"]: r["time_s"] for r in rows
            if r.get("phase") == "server_eval" and r.get("round", 0) >= 1}
    connected = next((r["time_s"] for r in rows if r.get("event") == "connected"), 0.0)
    rounds = sorted(ends)
    steps = [ends[b] - ends[a] for a, b in itertools.pairwise(rounds)]
    summary = json.loads((run_dir / "summary.json").read_text())
    return {
        "to_connected_s": connected,
        "round1_s": ends[rounds[0]] - connected if rounds else float("nan"),
        "steady_round_s": median(steps),
        "recorded_wall_s": float(summary.get("wall_time_s", float("nan"))),
        "outside_recorder_s": wall - (ends[rounds[-1]] if rounds else 0.0),
    }


def raw_arm(work: dict[str, Any], rounds: int, data: Path) -> dict[str, Any]:
    """One hand-written Flower process."""
    cmd = [sys.executable, str(BENCH / "raw_flower_e2e.py"), str(data), "--rounds", str(rounds),
           "--fraction", str(work["fraction"]), *work["raw"]]
    load = load_avg()
    wall, _ = timed(cmd, {**os.environ, "OMP_NUM_THREADS": "1"})
    return {"wall_s": wall, "load": load}


def warm_arm(work: dict[str, Any], rounds: int, out: Path) -> dict[str, Any]:
    """``flowerbed run`` on a warm Ray head: ``flowerbed up``, the run, ``flowerbed down``.

    Only the run is timed (a user starts the head once for many runs); the
    head is stopped after each run, so the other arms never see it.
    """
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    subprocess.run([FLOWERBED, "up"], check=True, capture_output=True, env=env, cwd=ROOT)
    try:
        return flowerbed_arm(work, rounds, "simulation", out)
    finally:
        subprocess.run([FLOWERBED, "down"], check=False, capture_output=True, env=env, cwd=ROOT)


def run_workload(
    name: str, rounds: int, pairs: int, out: Path, warm: bool = True
) -> dict[str, Any]:
    """Warm-up, then alternated pairs; the median pair ratios and flowerbed's phases."""
    work = WORKLOADS[name]
    data = out / f"{name}.npz"
    write_data(work, data)
    print(f"{name}: warm-up", flush=True)
    flowerbed_arm(work, rounds, "simulation", out)
    raw_arm(work, rounds, data)
    fb_runs, raw_runs, inline_runs, warm_runs, ray_runs = [], [], [], [], []
    for i in range(pairs):
        order = ("fb", "raw") if i % 2 == 0 else ("raw", "fb")
        for arm in order:
            if arm == "fb":
                fb_runs.append(flowerbed_arm(work, rounds, "simulation", out))
            else:
                raw_runs.append(raw_arm(work, rounds, data))
        inline_runs.append(flowerbed_arm(work, rounds, "inline", out))
        ray_runs.append(flowerbed_arm(work, rounds, "simulation", out, backend="ray"))
        if warm:
            warm_runs.append(warm_arm(work, rounds, out))
        shown = f", warm head {warm_runs[-1]['wall_s']:.1f} s" if warm else ""
        print(f"{name}: pair {i + 1}/{pairs}: flowerbed {fb_runs[-1]['wall_s']:.1f} s, "
              f"raw {raw_runs[-1]['wall_s']:.1f} s, inline {inline_runs[-1]['wall_s']:.1f} s, "
              f"Ray backend {ray_runs[-1]['wall_s']:.1f} s{shown}", flush=True)
    ratios = [f["wall_s"] / r["wall_s"] for f, r in zip(fb_runs, raw_runs, strict=True)]
    warm_ratios = [w["wall_s"] / r["wall_s"] for w, r in zip(warm_runs, raw_runs, strict=True)
                   ] if warm_runs else []
    ray_ratios = [w["wall_s"] / r["wall_s"] for w, r in zip(ray_runs, raw_runs, strict=True)]
    return {
        "rounds": rounds, "pairs": pairs, "ratio": median(ratios), "ratios": ratios,
        "warm_ratio": median(warm_ratios) if warm_ratios else None, "warm_ratios": warm_ratios,
        "ray_backend_ratio": median(ray_ratios), "ray_backend_ratios": ray_ratios,
        "flowerbed": fb_runs, "raw": raw_runs, "inline": inline_runs, "warm_head": warm_runs,
        "ray_backend": ray_runs,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 pair, fewer rounds (smoke)")
    parser.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    parser.add_argument("--pairs", type=int, default=None)
    parser.add_argument("--no-warm", action="store_true",
                        help="leave out the warm-head arm (flowerbed up / down)")
    args = parser.parse_args()
    pairs = args.pairs or (1 if args.quick else 3)
    results: dict[str, Any] = {}
    checks: list[Check] = []
    with tempfile.TemporaryDirectory(prefix="fb-ttr-") as tmp:
        for name in args.workloads:
            rounds = WORKLOADS[name]["rounds"] // (5 if args.quick else 1)
            res = run_workload(name, max(rounds, 3), pairs, Path(tmp), warm=not args.no_warm)
            results[name] = res
            fb = res["flowerbed"]
            checks.append(Check(f"{name}: flowerbed / raw Flower, whole process", res["ratio"],
                                TARGET))
            if res["warm_ratio"] is not None:
                checks.append(Check(f"{name}: flowerbed on a warm head (flowerbed up) / raw "
                                    "Flower", res["warm_ratio"], TARGET))
            r1 = median(f["round1_s"] for f in fb) / median(f["steady_round_s"] for f in fb)
            checks.append(Check(f"{name}: round 1 / steady round", r1, 2.0))
    rows = []
    for name, res in results.items():
        fb, raw, inl = res["flowerbed"], res["raw"], res["inline"]
        warm = median(w["wall_s"] for w in res["warm_head"]) if res["warm_head"] else float("nan")
        rows.append([name, median(f["wall_s"] for f in fb), median(r["wall_s"] for r in raw),
                     median(i["wall_s"] for i in inl), warm,
                     median(r["wall_s"] for r in res["ray_backend"]), res["ratio"],
                     res["ray_backend_ratio"],
                     median(f["to_connected_s"] for f in fb), median(f["round1_s"] for f in fb),
                     median(f["steady_round_s"] for f in fb),
                     median(f["outside_recorder_s"] for f in fb)])
    print_table("whole-process wall (s), medians",
                ["workload", "flowerbed", "raw Flower", "inline", "warm head", "Ray backend",
                 "fb/raw", "Ray backend/raw",
                 "to connected",
                 "round 1", "steady round", "outside recorder"], rows)
    print_checks(checks)
    save("time_to_result", args.quick, {"workloads": results}, checks)
    return 0


if __name__ == "__main__":
    sys.exit(main())

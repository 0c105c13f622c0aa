"""A light simulation sweep against the same points run one by one, each with its own Ray start.

``flowerbed sweep`` runs simulation points that share engine, client count and
resources inside one ``run_simulation`` call, so Ray starts once. Run singly
(``flowerbed.run`` per point), every point pays Flower's simulation start-up
and shutdown. Both are measured here, in this one process, on the same points
(a tiny digits scenario, seeds 0..n-1), and their final metrics are compared.

Usage::

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/platform/sweep_startup.py           # 10 points
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/platform/sweep_startup.py --quick   # 3 points

The target is a sweep at least 3x faster than the single runs. The load
average is printed with the figures: on shared machines it moves them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

#: A light scenario: a couple of seconds of training per point once Ray runs.
SCENARIO: dict[str, Any] = {
    "name": "sweep_startup",
    "num_clients": 2,
    "rounds": 1,
    "dataset": {"name": "digits"},
    "partition": {"name": "iid"},
    "model": {"name": "mlp", "hidden": [16]},
    "learner": {"name": "sgd", "lr": 0.1, "batch_size": 32, "local_epochs": 1},
    "strategy": {"name": "fedavg"},
    "engine": {"name": "simulation", "client_resources": {"num_cpus": 1}, "ray_num_cpus": 2},
}
TARGET = 3.0


def load() -> tuple[float, float, float]:
    """Load averages over 1, 5 and 15 minutes."""
    one, five, fifteen = os.getloadavg()
    return round(one, 2), round(five, 2), round(fifteen, 2)


def make_plan(points: int) -> Any:
    """Expand the scenario with a ``seeds`` axis of ``points`` values."""
    from flowerbed.platform import sweep

    data = {**SCENARIO, "sweep": {"name": "sweep_startup", "seeds": list(range(points))}}
    return sweep.expand(data, source="benchmarks/platform/sweep_startup.py")


def warm_up() -> None:
    """Import torch/Flower and cache the dataset with an untimed inline run."""
    import flowerbed
    from flowerbed.platform.console import quiet_flower

    with quiet_flower():
        flowerbed.run({**SCENARIO, "engine": {"name": "inline"}}, save=False)


def time_sweep(plan: Any, out: Path) -> tuple[float, Any]:
    """Wall time of ``run_sweep`` over every point (all in one simulation)."""
    from flowerbed.platform import sweep

    started = time.perf_counter()
    result = sweep.run_sweep(plan, out)
    wall = time.perf_counter() - started
    failed = [(r.point.index, r.error) for r in result.points if r.status != "ok"]
    if failed:
        raise SystemExit(f"sweep points failed: {failed}")
    return wall, result


def time_singles(plan: Any, out: Path) -> tuple[float, list[float], list[dict[str, Any]]]:
    """Wall time of ``flowerbed.run`` per point, each a fresh simulation (Ray start-up)."""
    import flowerbed

    walls, summaries = [], []
    started = time.perf_counter()
    for point in plan.points:
        t0 = time.perf_counter()
        result = flowerbed.run(point.scenario, output_dir=out)
        walls.append(time.perf_counter() - t0)
        summaries.append(result.summary)
        print(f"  single run {point.index}: {walls[-1]:.1f} s (load {load()[0]})", flush=True)
    return time.perf_counter() - started, walls, summaries


def main(argv: list[str] | None = None) -> int:
    """Measure both ways, print the table; exit status 1 when the sweep misses the target."""
    from rich.console import Console
    from rich.table import Table

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 points instead of 10")
    parser.add_argument("--points", type=int, default=None, help="number of points")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args(argv)
    points = args.points or (3 if args.quick else 10)

    console = Console()
    plan = make_plan(points)
    load_start = load()
    console.print(f"{points} points, load average {load_start} ({os.cpu_count()} CPUs)")
    warm_up()
    with tempfile.TemporaryDirectory(prefix="sweep_startup-") as tmp:
        sweep_wall, sweep_result = time_sweep(plan, Path(tmp) / "sweep")
        console.print(f"  sweep: {sweep_wall:.1f} s (load {load()[0]})")
        single_wall, walls, singles = time_singles(plan, Path(tmp) / "single")
    load_end = load()

    same = all(
        r.summary["results"] == s["results"]
        for r, s in zip(sweep_result.points, singles, strict=True)
    )
    ratio = single_wall / sweep_wall
    table = Table(
        "mode", "points", "Ray starts", "wall (s)", "per point (s)",
        title=f"sweep start-up: {points} light simulation points",
        caption=f"load average {load_start} at start, {load_end} at end; "
        f"{os.cpu_count()} CPUs; same final metrics: {same}",
    )  # fmt: skip
    table.add_row(
        "sweep (one simulation)", str(points),
        str(sweep_result.simulation_starts), f"{sweep_wall:.1f}", f"{sweep_wall / points:.1f}",
    )  # fmt: skip
    table.add_row(
        "flowerbed.run per point", str(points), str(points),
        f"{single_wall:.1f}", f"{single_wall / points:.1f}",
    )  # fmt: skip
    table.add_row("ratio (single / sweep)", "", "", f"{ratio:.2f}x", f"target >= {TARGET:.0f}x")
    console.print(table)
    figures = {
        "points": points,
        "sweep_wall_s": round(sweep_wall, 2),
        "single_wall_s": round(single_wall, 2),
        "single_walls_s": [round(w, 2) for w in walls],
        "ratio": round(ratio, 2),
        "simulation_starts": sweep_result.simulation_starts,
        "same_final_metrics": same,
        "load_start": load_start,
        "load_end": load_end,
        "cpus": os.cpu_count(),
    }
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0 if ratio >= TARGET and same else 1


if __name__ == "__main__":
    sys.exit(main())

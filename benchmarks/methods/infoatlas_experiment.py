"""InfoAtlas vs KSG, MINE, InfoNCE and the Gaussian plug-in on held-out tasks with known MI.

Tasks (``flowerbed.methods.infoatlas.algorithm_reference.known_mi_task``, seeds disjoint from
training): Gaussian through random rotations and monotone maps, Gaussian copulas
with Beta and Gamma marginals, correlated Bernoulli, shared-Poisson; ``dx = dy = d``;
true MI drawn from U(0, 3) nats. Per (d, n) bucket the table gives each estimator's
mean absolute error and mean seconds per estimate. InfoAtlas is timed per call
(one dataset per forward pass, preprocessing included) and batched (all tasks of
a bucket in one forward pass). MINE runs at 100, 300 and 1000 steps, InfoNCE at
300 (``--quick``) or 1000; the speed ratio
at matched accuracy is MINE's time per estimate at the cheapest budget whose
overall MAE is at most InfoAtlas's, divided by InfoAtlas's time per call, all in
this one process.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/methods/infoatlas_experiment.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from flowerbed.methods.infoatlas import algorithm as ia
from flowerbed.methods.infoatlas import algorithm_reference as ref

RESULTS = Path(__file__).resolve().parents[1] / "results" / "infoatlas"


def timed(fn: Callable[[], float]) -> tuple[float, float]:
    """``(value, seconds)`` of one call."""
    start = time.perf_counter()
    value = fn()
    return float(value), time.perf_counter() - start


def run_bucket(
    net: ia.InfoAtlasNet,
    d: int,
    n: int,
    tasks: int,
    budgets: list[int],
    nce_steps: int,
    seed: int,
    offset: int,
) -> list[dict[str, float | str]]:
    """All estimators on ``tasks`` tasks of dimension ``d`` and size ``n``.

    Families rotate with ``offset`` so small buckets still cover all of them.
    """
    gen = np.random.default_rng(seed)
    families = [ref.FAMILIES[(offset + i) % len(ref.FAMILIES)] for i in range(tasks)]
    drawn = [ref.known_mi_task(f, n, d, gen) for f in families]
    rows: list[dict[str, float | str]] = []
    start = time.perf_counter()
    batched = ia.estimate_many(net, [(t.x, t.y) for t in drawn])
    batch_seconds = (time.perf_counter() - start) / tasks
    for i, t in enumerate(drawn):
        row: dict[str, float | str] = {"d": d, "n": n, "family": t.family, "true": t.mi}
        row["infoatlas"], row["infoatlas_s"] = timed(lambda t=t: ia.estimate(net, t.x, t.y))
        row["infoatlas_batched"], row["infoatlas_batched_s"] = float(batched[i]), batch_seconds
        row["ksg"], row["ksg_s"] = timed(lambda t=t: ref.ksg(t.x, t.y, k=3))
        row["gaussian"], row["gaussian_s"] = timed(lambda t=t: ref.gaussian_estimate(t.x, t.y))
        for steps in budgets:
            row[f"mine{steps}"], row[f"mine{steps}_s"] = timed(
                lambda t=t, s=steps, i=i: ref.neural_mi(t.x, t.y, objective="mine", steps=s, seed=i)
            )
        row["infonce"], row["infonce_s"] = timed(
            lambda t=t, i=i: ref.neural_mi(t.x, t.y, objective="infonce", steps=nce_steps, seed=i)
        )
        rows.append(row)
    return rows


def summarise(
    rows: list[dict[str, float | str]], methods: list[str]
) -> dict[str, dict[str, float]]:
    """MAE and mean seconds per method over ``rows``."""
    truth = np.array([r["true"] for r in rows], dtype=float)
    return {
        m: {
            "mae": float(np.mean(np.abs(np.array([r[m] for r in rows], dtype=float) - truth))),
            "seconds": float(np.mean([r[f"{m}_s"] for r in rows])),
        }
        for m in methods
    }


def print_table(rows: list[dict[str, float | str]], methods: list[str], key: str) -> None:
    """One line per group of ``key`` values: MAE (seconds) per method."""
    groups = sorted({tuple(r[k] for k in key.split(",")) for r in rows})
    print(f"{key:>10} " + " ".join(f"{m:>20}" for m in methods))
    for g in groups:
        sub = [r for r in rows if tuple(r[k] for k in key.split(",")) == g]
        s = summarise(sub, methods)
        cells = " ".join(f"{s[m]['mae']:8.3f} ({s[m]['seconds']:8.4f}s)" for m in methods)
        print(f"{'/'.join(str(v) for v in g):>10} {cells}")


def plot(rows: list[dict[str, float | str]], methods: list[str], path: str) -> None:
    """MAE against d (left) and seconds per estimate (right, log scale) per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dims = sorted({int(r["d"]) for r in rows})
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for m in methods:
        stats_by_d = [summarise([r for r in rows if r["d"] == d], [m])[m] for d in dims]
        left.plot(dims, [s["mae"] for s in stats_by_d], marker="o", label=m)
        right.plot(dims, [s["seconds"] for s in stats_by_d], marker="o", label=m)
    left.set(xscale="log", xlabel="d (= dx = dy)", ylabel="MAE (nats)", title="error vs true MI")
    right.set(xscale="log", yscale="log", xlabel="d", ylabel="seconds per estimate")
    right.set_title("time per estimate")
    for ax in (left, right):
        ax.set_xticks(dims, [str(d) for d in dims])
    left.legend(fontsize=7)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


def main() -> None:
    """Run the buckets, print the tables and the matched-accuracy speed ratio."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer buckets and tasks")
    parser.add_argument("--weights", default=None, help="network file (default: shipped)")
    parser.add_argument("--tasks", type=int, default=None, help="tasks per (d, n) bucket")
    parser.add_argument("--dims", type=int, nargs="+", default=None)
    parser.add_argument("--sizes", type=int, nargs="+", default=None)
    parser.add_argument("--seed", type=int, default=1000)
    parser.add_argument("--out", default=str(RESULTS / "benchmark.json"))
    parser.add_argument("--plot", default=None, help="write a PNG of MAE and time against d")
    args = parser.parse_args()
    torch.set_num_threads(1)
    from flowerbed.methods.infoatlas.model import load_model

    net = load_model(args.weights)
    dims = args.dims or ([1, 4, 16] if args.quick else [1, 2, 4, 8, 16])
    sizes = args.sizes or ([100, 1000, 5000] if args.quick else [100, 500, 2000, 5000])
    tasks = args.tasks or (2 if args.quick else 5)
    budgets = [100, 300, 1000]
    nce_steps = 300 if args.quick else 1000
    mine = [f"mine{s}" for s in budgets]
    methods = ["infoatlas", "infoatlas_batched", "ksg", "gaussian", *mine, "infonce"]
    # warm-up: first calls pay one-off costs (lazy imports in torch's optimizers)
    warm = ref.known_mi_task("gaussian", 64, 1, np.random.default_rng(0))
    ia.estimate(net, warm.x, warm.y)
    ref.neural_mi(warm.x, warm.y, steps=2)
    ref.neural_mi(warm.x, warm.y, objective="infonce", steps=2)
    rows: list[dict[str, float | str]] = []
    for b, (d, n) in enumerate((d, n) for d in dims for n in sizes):
        rows += run_bucket(net, d, n, tasks, budgets, nce_steps, args.seed + 97 * d + n, b)
        print(f"done d={d} n={n} ({len(rows)} tasks)", flush=True)
    print("\nMAE in nats (mean seconds per estimate) by d/n:")
    print_table(rows, methods, "d,n")
    print("\nby family:")
    print_table(rows, methods, "family")
    overall = summarise(rows, methods)
    print("\noverall:")
    for m in methods:
        print(
            f"  {m:>18}: MAE {overall[m]['mae']:.3f} nats, {overall[m]['seconds']:.4f} s/estimate"
        )
    ia_mae, ia_s = overall["infoatlas"]["mae"], overall["infoatlas"]["seconds"]
    matched = [m for m in mine if overall[m]["mae"] <= ia_mae]
    ref_m = matched[0] if matched else min(mine, key=lambda m: overall[m]["mae"])
    ratio = overall[ref_m]["seconds"] / ia_s
    batched_ratio = overall[ref_m]["seconds"] / overall["infoatlas_batched"]["seconds"]
    status = "matched" if matched else "NOT matched (most accurate MINE budget shown)"
    print(
        f"\nspeed ratio MINE/InfoAtlas at matched accuracy: {ratio:.1f}x per call, "
        f"{batched_ratio:.1f}x batched ({ref_m}, MAE {overall[ref_m]['mae']:.3f} vs "
        f"InfoAtlas {ia_mae:.3f}; {status}); load average {os.getloadavg()[0]:.1f}"
    )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "rows": rows,
                "overall": overall,
                "matched_mine": ref_m,
                "matched": bool(matched),
                "ratio_per_call": ratio,
                "ratio_batched": batched_ratio,
                "quick": args.quick,
            },
            indent=1,
        )
    )
    print(f"wrote {out}")
    if args.plot:
        plot(rows, methods, args.plot)


if __name__ == "__main__":
    main()

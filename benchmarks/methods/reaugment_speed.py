"""Speed of one ReAugment grid point before and after issue #33's changes, in one process.

Yuan et al., "ReAugment: Model Zoo-Guided RL for Few-Shot Time Series Augmentation
and Forecasting", arXiv 2409.06282; the grid is ``reaugment_experiment.py``'s. A
cProfile of the point El Niño x DLinear x 5 % x seed 0 (federated + centralized, all
arms) put ~60 % of the time in REINFORCE (13 runs x 200 iterations: per iteration the
VMAE forward / backward, the zoo's forecasts of 256 augmented windows and an Adam
step) and most of the rest in Adam-trained forecasters and VMAE pre-training; the zoo
and the ``none`` arm are already computed once per point. The changes, both leaving
every number bit-identical:

- Adam with ``foreach=True`` (:func:`flowerbed.methods.reaugment.algorithm_ops.adam`): on CPU
  the same element-wise update, one dispatch per step instead of one per tensor;
- :func:`flowerbed.methods.reaugment.algorithm.zoo_errors` converts and slices the windows
  once for the whole zoo and writes each member's errors into one array, instead of
  one :func:`~flowerbed.methods.reaugment.algorithm_ops.window_mse` call per member;
- the pre-trained VMAE is cached in the process
  (:func:`flowerbed.methods.reaugment.algorithm_arms._pretrained`): it depends on the windows
  and the seed, not on the forecaster, so points that differ only in the family
  (the grid's inner loop) pre-train it once per client and once pooled.

``old`` re-installs the previous implementations (per-tensor Adam, the per-member
``window_mse`` loop, no VMAE cache) for the duration of a run; ``new`` is the code as
it is (cache cleared first). The points of ``--families`` (same dataset, fraction and
seed, in the grid's order) are run in this process, all ``old`` then all ``new``; each
point's results under the two are compared key by key (``results_identical`` /
``max_abs_diff``) and the ratio of CPU (process) times is the speed-up, per point and
over the sequence (wall time on a shared machine mostly measures the other processes;
the load average is recorded; a tiny warm-up run first takes the one-off imports out
of both). ``--record`` appends the ``new`` rows of points the grid
has not run yet to ``runs_speed.jsonl`` beside the grid's results (the same function
and scenario produce them). Writes ``benchmarks/results/reaugment/speed.json``.

Usage::

    nice -n 10 env OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 .venv/bin/python \\
        benchmarks/methods/reaugment_speed.py [--dataset elnino --families dlinear forecast_mlp \\
        --fraction 10 --seed 2 --record]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import reaugment_experiment as ex

from flowerbed.methods.reaugment import algorithm as ra
from flowerbed.methods.reaugment import algorithm_arms as arms
from flowerbed.methods.reaugment import algorithm_ops as ops
from flowerbed.methods.reaugment import algorithm_vmae as vm

OUT = Path(__file__).resolve().parents[1] / "results" / "reaugment" / "speed.json"


def _adam_per_tensor(params, lr: float) -> torch.optim.Adam:  # type: ignore[no-untyped-def]
    """The optimizer as it was: torch's default on CPU (the per-tensor loop)."""
    return torch.optim.Adam(params, lr=lr)


def _zoo_errors_per_member(members, windows, lookback: int) -> np.ndarray:  # type: ignore[no-untyped-def]
    """``zoo_errors`` as it was: one ``window_mse`` call per member."""
    return np.stack([ops.window_mse(m, windows, lookback) for m in members], axis=1)


def _pretrained_uncached(train, cfg, seed: int):  # type: ignore[no-untyped-def]
    """``_pretrained`` as it was: pre-train afresh every time."""
    return arms.pretrained_vmae(train, cfg.vmae, seed)


@contextlib.contextmanager
def old_code() -> Iterator[None]:
    """Swap the pre-#33 implementations in wherever the pipeline looks them up."""
    saved = (ops.adam, ra.adam, vm.adam, ra.zoo_errors, arms._pretrained)
    ops.adam = ra.adam = vm.adam = _adam_per_tensor
    ra.zoo_errors = _zoo_errors_per_member
    arms._pretrained = _pretrained_uncached
    try:
        yield
    finally:
        ops.adam, ra.adam, vm.adam, ra.zoo_errors, arms._pretrained = saved


def compare(a: dict, b: dict) -> tuple[bool, float, int]:
    """(all result values equal, largest absolute difference, keys compared); timings skipped."""
    same, worst, n = True, 0.0, 0
    for setting in ("federated", "centralized"):
        for key, value in a[setting].items():
            if key.startswith("time/") or "/time/" in key:
                continue
            other = b[setting][key]
            n += 1
            if value != other and not (np.isnan(value) and np.isnan(other)):
                same = False
                worst = max(worst, abs(value - other))
    return same, worst, n


def warm_up(spec: dict) -> dict:
    """A tiny run of the same pipeline: the one-off imports (flwr, statsmodels, the
    ``torch._dynamo`` import of Adam's first step) then cost neither ``old`` nor ``new``."""
    return {
        **spec,
        "rounds": 1,
        "learner": {
            "name": "reaugment",
            "arms": ["none", "vmae", "reaugment"],
            "train": {"steps": 2},
            "vmae": {"pretrain_steps": 2},
            "rl": {"iterations": 2},
        },
        "strategy": {"name": "reaugment", "arms": ["none", "reaugment"], "local_steps": 1},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="elnino", choices=list(ex.DATASETS))
    ap.add_argument("--families", nargs="+", default=["dlinear"], choices=ex.FAMILIES)
    ap.add_argument("--fraction", type=float, default=5.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--local-steps", type=int, default=20)
    ap.add_argument("--record", action="store_true", help="append new rows the grid lacks")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    torch.set_num_threads(1)
    specs = {
        f: ex.scenario(args.dataset, f, args.fraction, args.seed, args.rounds, args.local_steps)
        for f in args.families
    }
    load = [os.getloadavg()[0]]
    runs: dict[str, dict[str, dict]] = {"old": {}, "new": {}}
    with tempfile.TemporaryDirectory() as tmp:
        ex.run_point(warm_up(specs[args.families[0]]), Path(tmp) / "warm")
        for mode in ("old", "new"):
            arms.clear_vmae_cache()
            for family, spec in specs.items():
                ctx = old_code() if mode == "old" else contextlib.nullcontext()
                with ctx:
                    row = ex.run_point(spec, Path(tmp) / mode)
                runs[mode][family] = row
                print(
                    f"{mode} {family}: CPU {row['cpu_s']:.1f} s, wall {row['wall_s']:.1f} s",
                    flush=True,
                )
    load.append(os.getloadavg()[0])
    points = {}
    for family in args.families:
        old, new = runs["old"][family], runs["new"][family]
        same, worst, n = compare(old, new)
        points[family] = {
            "cpu_s": {"old": old["cpu_s"], "new": new["cpu_s"]},
            "wall_s": {"old": old["wall_s"], "new": new["wall_s"]},
            "speedup_cpu": old["cpu_s"] / new["cpu_s"],
            "results_identical": same,
            "max_abs_diff": worst,
            "values_compared": n,
        }
    total = {m: sum(r["cpu_s"] for r in v.values()) for m, v in runs.items()}
    result = {
        "sequence": {
            "dataset": args.dataset,
            "families": args.families,
            "fraction": args.fraction,
            "seed": args.seed,
            "rounds": args.rounds,
            "local_steps": args.local_steps,
        },
        "points": points,
        "cpu_s_total": total,
        "speedup_cpu_total": total["old"] / total["new"],
        "results_identical": all(p["results_identical"] for p in points.values()),
        "load_average_1min": load,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "python": platform.python_version(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    if args.record:
        grid = args.out.parent
        done = {(r["dataset"], r["family"], r["fraction"], r["seed"]) for r in ex.load(grid)}
        with (grid / "runs_speed.jsonl").open("a") as fh:
            for family, row in runs["new"].items():
                key = (args.dataset, family, args.fraction, args.seed)
                if key not in done:
                    fh.write(
                        json.dumps(
                            {
                                "dataset": args.dataset,
                                "family": family,
                                "fraction": args.fraction,
                                "seed": args.seed,
                                **row,
                            }
                        )
                        + "\n"
                    )


if __name__ == "__main__":
    main()

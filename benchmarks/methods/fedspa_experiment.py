"""FedSPA on Fashion-MNIST with the two-tower VLM: every arm's personalised and global accuracy.

Runs ``scenarios/fedspa/fmnist.yaml`` inline (FedSPA plus its in-run baselines:
zero-shot, FedAvg linear head, PromptFL, local-only prototypes) for Dirichlet
alpha in {0.1, 0.5} x seeds {0, 1, 2}, then prints

- personalised accuracy (mean over clients of each client's test share, last
  round) and global accuracy (pooled test split), mean +- std over seeds;
- bytes per round per client, each way, and client compute seconds per round;

and writes ``docs/methods/img/fedspa_rounds.png`` (personalised accuracy per round, mean
over seeds) plus ``benchmarks/results/fedspa/table.md``. Every training arm (FedSPA,
local-only, FedAvg head, PromptFL) gets ``strategy.local_epochs_last`` epochs in the
last round. ``--subdir scale100 --set learner.vlm.logit_scale=100`` is the authors'
logit scale (a sensitivity check), stored apart. Finished points are
kept in ``points-<alpha>.json`` and skipped on a re-run, so the alphas can run
as separate processes (``--alphas 0.1`` and ``--alphas 0.5``, then ``--report``).

    OMP_NUM_THREADS=1 python benchmarks/methods/fedspa_experiment.py  # ~25 min, 2 busy cores
    OMP_NUM_THREADS=1 python benchmarks/methods/fedspa_experiment.py --quick  # toy, 1 seed

The first run also pre-trains the two-tower heads and encodes the 10,000 test
images once (both cached on disk, shared by every point).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
import torch

import flowerbed

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "benchmarks" / "results" / "fedspa"
PLOT = ROOT / "docs" / "methods" / "img" / "fedspa_rounds.png"
ARMS = ("fedspa", "zero_shot", "fedavg_linear", "promptfl", "local_only")
LABELS = {"fedspa": "FedSPA", "zero_shot": "zero-shot", "fedavg_linear": "FedAvg linear head",
          "promptfl": "PromptFL", "local_only": "local-only prototypes"}


def run_point(scenario: str, alpha: float, seed: int, extra: list[str]) -> dict[str, object]:
    """One run: final metrics and the per-round personalised curve of every arm."""
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        result = flowerbed.run(scenario, [f"seed={seed}", f"partition.alpha={alpha}", *extra],
                               output_dir=tmp)
        wall = time.perf_counter() - start
    res = dict(result.summary["results"])
    res["fedspa"] = res.pop("federated")
    curves = {arm: [r[f"{arm}/local_test/accuracy"] for r in result.rows
                    if r.get("round", 0) > 0 and f"{arm}/local_test/accuracy" in r]
              for arm in ARMS}
    return {"alpha": alpha, "seed": seed, "wall_s": wall, "results": res, "curves": curves}


def mean_std(values: list[float], scale: float = 100.0) -> str:
    """``mean +- sd`` (sample sd over seeds; the mean alone for one seed), scaled."""
    a = np.asarray(values) * scale
    return f"{a.mean():.1f} ± {a.std(ddof=1):.1f}" if len(a) > 1 else f"{a.mean():.1f}"


def table(points: list[dict], alphas: list[float]) -> str:  # type: ignore[type-arg]
    """Markdown: per arm and alpha, personalised / global accuracy, bytes and client time."""
    lines = ["| alpha | arm | personalised acc (%) | global acc (%) | bytes down / round / client "
             "| bytes up / round / client | client s / round |", "|---|---|---|---|---|---|---|"]
    for alpha in alphas:
        sub = [p for p in points if p["alpha"] == alpha]
        for arm in ARMS:
            rs = [p["results"][arm] for p in sub if arm in p["results"]]
            if not rs:
                continue
            pers = mean_std([r["local_test/accuracy"] for r in rs])
            glob = mean_std([r["test/accuracy"] for r in rs])
            down = np.mean([r["comm/bytes_down_per_client_round"] for r in rs])
            up = np.mean([r["comm/bytes_up_per_client_round"] for r in rs])
            secs = np.mean([r["time/client_train_s"] for r in rs])
            lines.append(f"| {alpha} | {LABELS[arm]} | {pers} | {glob} | {down:,.0f} | "
                         f"{up:,.0f} | {secs:.3f} |")
    return "\n".join(lines)


def plot(points: list[dict], alphas: list[float], path: Path) -> None:  # type: ignore[type-arg]
    """One panel per alpha: personalised accuracy per round, mean over seeds (band: +- sd)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(alphas), figsize=(5.5 * len(alphas), 4), sharey=True,
                             squeeze=False)
    for ax, alpha in zip(axes[0], alphas, strict=True):
        sub = [p for p in points if p["alpha"] == alpha]
        for arm in ARMS:
            curves = [p["curves"][arm] for p in sub if p["curves"].get(arm)]
            if not curves:
                continue
            c = np.asarray(curves) * 100
            rounds = np.arange(1, c.shape[1] + 1)
            ax.plot(rounds, c.mean(0), marker="o", ms=3, label=LABELS[arm],
                    lw=2.2 if arm == "fedspa" else 1.2)
            sd = c.std(0, ddof=1) if len(c) > 1 else np.zeros(c.shape[1])
            ax.fill_between(rounds, c.mean(0) - sd, c.mean(0) + sd, alpha=0.15)
        ax.set_title(f"Dirichlet alpha = {alpha} ({len(sub)} seeds)")
        ax.set_xlabel("round (last round: local_epochs_last)")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("personalised accuracy (%)")
    axes[0][-1].legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main() -> None:
    """Run (or resume) every point, print the table, write the plot."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--alphas", type=float, nargs="+", default=[0.1, 0.5])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--quick", action="store_true", help="synthetic toy, seed 0 only")
    parser.add_argument("--set", nargs="*", default=[], help="extra scenario overrides")
    parser.add_argument("--report", action="store_true", help="table and plot of stored points")
    parser.add_argument("--subdir", default="",
                        help="results subfolder of a variant (e.g. scale100 with "
                        "--set learner.vlm.logit_scale=100); its plot goes there too")
    args = parser.parse_args()
    torch.set_num_threads(1)
    scenario = "scenarios/fedspa/synthetic.yaml" if args.quick else "scenarios/fedspa/fmnist.yaml"
    seeds = [0] if args.quick else args.seeds
    out = OUT / ("quick" if args.quick else args.subdir)
    out.mkdir(parents=True, exist_ok=True)
    for alpha in [] if args.report else args.alphas:
        store = out / f"points-{alpha}.json"
        points = json.loads(store.read_text()) if store.is_file() else []
        for seed in seeds:
            if any(p["seed"] == seed for p in points):
                continue
            points.append(run_point(scenario, alpha, seed, args.set))
            store.write_text(json.dumps(points, indent=1))
            print(f"alpha={alpha} seed={seed}: {points[-1]['wall_s']:.0f} s", flush=True)
    points = [p for f in sorted(out.glob("points-*.json")) for p in json.loads(f.read_text())
              if p["alpha"] in args.alphas and p["seed"] in seeds]
    md = table(points, args.alphas)
    (out / "table.md").write_text(md + "\n")
    print(md)
    plot(points, args.alphas,
         out / "fedspa_rounds.png" if args.quick or args.subdir else PLOT)


if __name__ == "__main__":
    main()

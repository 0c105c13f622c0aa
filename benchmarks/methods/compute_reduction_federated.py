"""Communication and compute savings against accuracy in the federation (Fashion-MNIST).

Runs the two compute-reduction scenarios in-process (engine ``inline``):

* ``scenarios/compute_reduction/fmnist.yaml`` (learner ``sgd_pruned``, MLP 784-64-10)
  at several upload sparsities: test accuracy against the bytes a client uploads
  per round (kept values + 1-bit mask);
* ``scenarios/compute_reduction/fmnist_early_exit.yaml`` (learner ``sgd_early_exit``,
  MLP 784-64-256-256-10 with exit heads after blocks 1 and 2) with dense and 90%-pruned
  uploads: test accuracy against the mean compute per input as the exit threshold
  moves (every ``curve_thresholds`` value is scored in the same final evaluation),
  and the disagreement with the full model (the theory's excess error E) against
  the exit fraction (its compute gap g).

Accuracy has a standard error of about 0.02 at 500 test images. Usage::

    OMP_NUM_THREADS=1 python benchmarks/methods/compute_reduction_federated.py [--quick]
        [--out benchmarks/results/compute_reduction] [--img docs/methods/img]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import torch
import yaml

import flowerbed

SCEN = Path(__file__).resolve().parents[2] / "scenarios" / "compute_reduction"


def _spec(name: str, rounds: int | None, **learner: Any) -> dict[str, Any]:
    spec: dict[str, Any] = yaml.safe_load((SCEN / name).read_text())
    spec.pop("sweep", None)
    spec["learner"].update(learner)
    if rounds:
        spec["rounds"] = rounds
    return spec


def _run(spec: dict[str, Any]) -> tuple[dict[str, float], dict[str, float]]:
    """Final server test metrics and round-averaged client upload metrics."""
    result = flowerbed.run(spec, save=False)
    train = [r for r in result.rows if "train/train/upload_bytes" in r]
    keys = ("train/train/upload_bytes", "train/train/upload_bytes_dense")
    upload = {k.rsplit("/", 1)[1]: float(np.mean([r[k] for r in train])) for k in keys}
    return result.final(), upload


def pruning_runs(sparsities: list[float], rounds: int | None) -> list[dict[str, Any]]:
    """Accuracy and upload bytes per sparsity (MLP, ``sgd_pruned``)."""
    out = []
    for s in sparsities:
        final, up = _run(_spec("fmnist.yaml", rounds, upload_sparsity=s))
        out.append({"sparsity": s, "accuracy": final["test/accuracy"], **up})
        print(
            f"pruned upload s={s:<5}: accuracy {final['test/accuracy']:.3f}, upload "
            f"{up['upload_bytes']:,.0f} B of {up['upload_bytes_dense']:,.0f} "
            f"({up['upload_bytes_dense'] / up['upload_bytes']:.1f}x less)",
            flush=True,
        )
    return out


def early_exit_runs(sparsities: list[float], rounds: int | None) -> list[dict[str, Any]]:
    """Accuracy against mean compute per exit threshold, per upload sparsity."""
    out = []
    for s in sparsities:
        spec = _spec("fmnist_early_exit.yaml", rounds, upload_sparsity=s)
        final, up = _run(spec)
        taus = spec["learner"]["curve_thresholds"]
        curve = [
            {
                "threshold": t,
                **{m: final[f"test/{m}_at_{t:g}"] for m in ("accuracy", "compute_fraction")},
                **{m: final[f"test/{m}_at_{t:g}"] for m in ("exit_fraction", "exit_disagreement")},
            }
            for t in taus
        ]
        heads = {
            k: final[f"test/{k}"] for k in ("accuracy_full", "accuracy_exit1", "accuracy_exit2")
        }
        out.append({"sparsity": s, "curve": curve, **heads, **up})
        print(
            f"early exit, upload s={s}: full model {heads['accuracy_full']:.3f}, exit-1 head "
            f"{heads['accuracy_exit1']:.3f}, exit-2 head {heads['accuracy_exit2']:.3f}; upload "
            f"{up['upload_bytes']:,.0f} B of {up['upload_bytes_dense']:,.0f}",
            flush=True,
        )
        for c in curve:
            print(
                f"  threshold {c['threshold']:<6}: accuracy {c['accuracy']:.3f}, exits "
                f"{c['exit_fraction']:.3f}, disagrees with full {c['exit_disagreement']:.3f}, "
                f"compute {c['compute_fraction']:.3f} (saved {1 - c['compute_fraction']:+.3f})",
                flush=True,
            )
    return out


def plot(pruned: list[dict[str, Any]], early: list[dict[str, Any]], path: Path) -> None:
    """Accuracy vs upload bytes; accuracy vs mean compute; disagreement vs exit fraction."""
    fig, ax = plt.subplots(1, 3, figsize=(17, 4.8))
    dense = pruned[0]["upload_bytes_dense"]
    ax[0].plot([p["upload_bytes"] / dense for p in pruned], [p["accuracy"] for p in pruned], "o-")
    for p in pruned:
        ax[0].annotate(f"s={p['sparsity']}", (p["upload_bytes"] / dense, p["accuracy"]), fontsize=8)
    ax[0].set(
        xscale="log",
        xlabel="upload bytes per client per round / dense",
        ylabel="test accuracy",
        title="Pruned uploads (MLP 784-64-10, 5 clients)",
    )
    for e in early:
        curve = sorted(e["curve"], key=lambda c: c["compute_fraction"])
        label = f"upload sparsity {e['sparsity']}"
        line = ax[1].plot(
            [c["compute_fraction"] for c in curve],
            [c["accuracy"] for c in curve],
            "o-",
            label=label,
        )
        color = line[0].get_color()
        ax[1].axhline(e["accuracy_full"], ls=":", color=color)
        pts = [c for c in curve if c["exit_disagreement"] > 0]
        ax[2].loglog(
            [c["exit_fraction"] for c in pts],
            [c["exit_disagreement"] for c in pts],
            "o-",
            color=color,
            label=label,
        )
    ax[1].set(
        xlabel="mean compute per input (MLP without heads = 1)",
        ylabel="test accuracy",
        title="Early exit: threshold sweep (dotted: full model; SE ~0.02)",
    )
    ax[2].set(
        xlabel="exit fraction g",
        ylabel="disagreement with the full model E",
        title="Early exit: excess error vs compute gap",
    )
    ax[1].legend(fontsize=8)
    ax[2].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    """Run both scenarios, print the tables, save JSON + PNG."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="benchmarks/results/compute_reduction")
    ap.add_argument("--img", default="docs/methods/img", help="folder of the full run's PNG")
    ap.add_argument("--quick", action="store_true", help="2 rounds, fewer points")
    args = ap.parse_args()
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    rounds = 2 if args.quick else None
    pruned = pruning_runs([0.0, 0.9] if args.quick else [0.0, 0.5, 0.9, 0.99], rounds)
    early = early_exit_runs([0.0] if args.quick else [0.0, 0.9], rounds)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tag = "_quick" if args.quick else ""
    img = out if args.quick else Path(args.img)
    img.mkdir(parents=True, exist_ok=True)
    plot(pruned, early, img / f"compute_federated{tag}.png")
    wall = round(time.perf_counter() - t0, 1)
    (out / f"compute_federated{tag}.json").write_text(
        json.dumps(
            {"quick": args.quick, "pruning": pruned, "early_exit": early, "wall_s": wall}, indent=1
        )
    )
    print(f"wall {wall} s; results in {out}")


if __name__ == "__main__":
    main()

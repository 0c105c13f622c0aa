"""HFM vs FMA (and zero-shot, linear probe, Tip-Adapter cache, HFM's ablations) vs shots.

Issue #30. Two feature sets, both offline:

- ``fmnist``: Fashion-MNIST through the ``two_tower`` VLM (EfficientNet-Lite0 +
  MiniLM, heads aligned on training rows 55,000-59,999); shots drawn from
  training rows 0-2,999, scored on test rows 0-1,999; text roots from
  "a photo of a {class}.";
- ``hierarchy``: the controlled hierarchical set (``hfm_hierarchy``, 5 x 10
  classes, ``sibling`` = entanglement knob) with its text features.

Per cell (dataset, setting, shots, seed) every arm runs on the same shots:
zero-shot (cosine to the text features), linear probe (logistic regression),
Tip-Adapter cache (FedSPA's prototype objective, local), FMA (k = 10 and, as in
FMA's code, the best k on the test set), HFM (adaptive stop), HFM with K fixed
steps (same net), HFM without the corridor loss, and HFM's objectives in
Euclidean space. ``central`` trains on the pooled shots; ``fed`` cuts them
over ``--clients`` clients by per-class Dirichlet(``--alpha``) shares
(``fewshot_dirichlet``'s split) and FedAvg-s the velocity net for ``--rounds``
rounds of ``epochs / rounds`` local epochs. The entanglement metric is the
share of test trajectories whose nearest corridor changes at least once.

Cells are appended to ``benchmarks/results/hfm/cells.jsonl`` and skipped when
present, so a run can be stopped and resumed; ``--report-only`` rebuilds the
table (``table.md``) and the plots (``docs/methods/img/hfm_*.png``).

    nice -n 10 env OMP_NUM_THREADS=1 .venv/bin/python benchmarks/methods/hfm_experiment.py \
        --seeds 0 1 2 --shots 1 2 4 8 16
    .venv/bin/python benchmarks/methods/hfm_experiment.py --report-only
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "benchmarks" / "results" / "hfm"
CELLS = OUT / "cells.jsonl"
IMG = ROOT / "docs" / "methods" / "img"

#: The paper's numbers: not retrieved (only the abstract is public). Its claim:
#: HFM beats its Euclidean counterparts (FMA) on 11 CLIP benchmarks.
PAPER = "not retrieved (claim: HFM > FMA on 11 CLIP benchmarks, 1-16 shots)"
#: Optimiser steps of a centralized training; other values are reported as their own rows.
DEFAULT_STEPS = 100
#: About this many test rows (every n-th) carry the entanglement metric.
ENTANGLE_ROWS = 1000
ARMS = ("zero_shot", "linear_probe", "tip_cache", "fma_k10", "fma_best_k", "hfm",
        "hfm_fixed_steps", "hfm_no_corridor", "hfm_euclidean")


# --- features ------------------------------------------------------------------------------


def fmnist_features() -> dict[str, np.ndarray]:
    """two_tower features of train rows 0-2,999 and test rows 0-1,999, and the text roots."""
    from flowerbed.core import registry
    from flowerbed.data.image_data import FashionParams, fashion_mnist
    from flowerbed.models.vlm import DEFAULT_TEMPLATES, build_vlm

    ds = fashion_mnist(FashionParams(), seed=0)
    vlm = build_vlm(registry.get("vlm", "two_tower").params())
    return {"f_pool": vlm.encode_images(ds.x_train[:3000], ds.meta), "y_pool": ds.y_train[:3000],
            "f_test": vlm.encode_images(ds.x_test[:2000], ds.meta), "y_test": ds.y_test[:2000],
            "text": vlm.class_text_features(list(ds.meta.class_names), DEFAULT_TEMPLATES),
            "logit_scale": np.float32(vlm.logit_scale)}


def hierarchy_features(sibling: float, text_noise: float) -> dict[str, np.ndarray]:
    """The controlled hierarchical set (seed 0) and its class text features."""
    from flowerbed.methods.hfm import data as hd

    p = hd.HierarchyParams(sibling=sibling)
    ds = hd.hfm_hierarchy(p, seed=0)
    text = np.stack([hd.text_feature(p.world, k, j, p.dim, p.sibling, text_noise)
                     for k in range(p.supers) for j in range(p.per_super)])
    return {"f_pool": ds.x_train, "y_pool": ds.y_train, "f_test": ds.x_test,
            "y_test": ds.y_test, "text": text.astype(np.float32),
            "logit_scale": np.float32(100.0)}


# --- arms ----------------------------------------------------------------------------------


def shots_of(y: np.ndarray, shots: int, seed: int) -> np.ndarray:
    """``fewshot_dirichlet``'s shot draw (per class, seeded)."""
    from flowerbed.data.fewshot import fewshot_rows

    return fewshot_rows(y, int(y.max()) + 1, shots, seed)


def baselines(d: dict[str, np.ndarray], rows: np.ndarray, seed: int) -> dict[str, float]:
    """Zero-shot, logistic-regression probe, Tip-Adapter cache (FedSPA's objective)."""
    from sklearn.linear_model import LogisticRegression

    from flowerbed.algorithms import adapter_training as at
    from flowerbed.methods.fedspa import algorithm as fs

    f, y, ft, yt, text = d["f_pool"][rows], d["y_pool"][rows], d["f_test"], d["y_test"], d["text"]
    out = {"zero_shot": float(((ft @ text.T).argmax(1) == yt).mean())}
    probe = LogisticRegression(max_iter=2000).fit(f, y)
    out["linear_probe"] = float((probe.predict(ft) == yt).mean())
    c = text.shape[0]
    p0, _ = fs.init_prototypes(*fs.class_sums(f, y, c), text)
    cfg = at.TrainConfig(2e-3, 50, 8, seed)
    scale = float(d["logit_scale"])
    protos, _ = fs.train_prototypes(p0, text, f, y, cfg, alpha=5.0, beta=5.0, logit_scale=scale)
    logits = fs.tip_logits(torch.as_tensor(ft), torch.as_tensor(text), torch.as_tensor(protos),
                           5.0, 5.0, scale)
    out["tip_cache"] = float((logits.argmax(1).numpy() == yt).mean())
    return out


def _net(cfg: Any, dim: int, args: argparse.Namespace, seed: int) -> torch.nn.Module:
    from flowerbed.methods.hfm import model as hv

    return hv.build(dim, cfg.point_dim(dim), args.width, args.depth, seed)


def train_flow(cfg: Any, d: dict[str, np.ndarray], rows: np.ndarray, parts: list[np.ndarray] | None,
               args: argparse.Namespace, seed: int) -> torch.nn.Module:
    """Centralized (``parts is None``) or FedAvg training of one variant's velocity net."""
    from flowerbed.algorithms import adapter_training as at
    from flowerbed.methods.hfm import algorithm as hfm
    from flowerbed.methods.hfm import model as hv

    dim = d["f_pool"].shape[1]
    roots = hfm.embed(torch.as_tensor(d["text"]), cfg.rho_text, cfg)
    net = _net(cfg, dim, args, seed)

    def leaves_of(r: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        x = hfm.embed(torch.as_tensor(d["f_pool"][r]), cfg.rho_image, cfg)
        return x, torch.as_tensor(d["y_pool"][r], dtype=torch.long)

    epochs = max(1, round(args.steps / math.ceil(len(rows) / 32)))
    if parts is None:
        hfm.train(net, *leaves_of(rows), roots, cfg,
                  hfm.TrainConfig(epochs=epochs, lr=args.lr, seed=seed))
        return net
    local_epochs = max(1, epochs // args.rounds)
    for r in range(args.rounds):
        weights, sizes = [], []
        for k, part in enumerate(parts):
            if len(part) == 0:
                continue
            local = hv.load_arrays(_net(cfg, dim, args, seed), hv.to_arrays(net))
            hfm.train(local, *leaves_of(part), roots, cfg,
                      hfm.TrainConfig(epochs=local_epochs, lr=args.lr,
                                      seed=seed * 1000 + r * 50 + k))
            weights.append(hv.to_arrays(local))
            sizes.append(len(part))
        avg = {name: at.weighted_average([w[name] for w in weights], sizes)
               for name in weights[0]}
        hv.load_arrays(net, avg)
    return net


def flow_arms(d: dict[str, np.ndarray], rows: np.ndarray, parts: list[np.ndarray] | None,
              args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """FMA, HFM and its ablations: accuracies, stop steps, entanglement."""
    from flowerbed.methods.hfm import algorithm as hfm

    yt = d["y_test"]
    out: dict[str, Any] = {}
    for name in ("fma", "hfm", "hfm_no_corridor", "hfm_euclidean"):
        cfg = hfm.variant(name, corridor_samples=args.corridor_samples)
        start = time.perf_counter()
        net = train_flow(cfg, d, rows, parts, args, seed)
        leaves = hfm.embed(torch.as_tensor(d["f_test"]), cfg.rho_image, cfg)
        roots = hfm.embed(torch.as_tensor(d["text"]), cfg.rho_text, cfg)
        traj = hfm.trajectory(net, leaves, cfg)
        chosen, per_step, k = hfm.classify(traj, roots, cfg)
        acc_k = (per_step == yt[None]).mean(1)
        every = max(1, traj.shape[1] // ENTANGLE_ROWS)
        switches = hfm.corridor_switches(traj[:, ::every], roots, cfg)
        extra = {"seconds": time.perf_counter() - start, "acc_per_step": acc_k.tolist(),
                 "entangled": float((switches >= 1).mean()),
                 "switches": float(switches.mean())}
        if name == "fma":
            out["fma_k10"] = {"acc": float(acc_k[-1]), **extra}
            out["fma_best_k"] = {"acc": float(acc_k.max()), "best_k": int(acc_k.argmax())}
        else:
            out[name] = {"acc": float((chosen == yt).mean()), "mean_stop": float(k.mean()),
                         **extra}
        if name == "hfm":
            out["hfm_fixed_steps"] = {"acc": float(acc_k[-1])}
            if args.save_traj:
                keep = np.flatnonzero(yt < 5)[::8][:40]
                fma_traj = out.pop("_fma_traj", None)
                np.savez(OUT / f"traj-{args.save_traj}.npz", hfm=traj[:, keep].numpy(),
                         fma=fma_traj[:, keep] if fma_traj is not None else np.zeros(0),
                         y=yt[keep], text=d["text"])
        if name == "fma" and args.save_traj:
            out["_fma_traj"] = traj.numpy()
    out.pop("_fma_traj", None)
    return out


# --- the grid ------------------------------------------------------------------------------


def done_keys() -> set[str]:
    if not CELLS.is_file():
        return set()
    return {json.loads(line)["key"] for line in CELLS.read_text().splitlines() if line.strip()}


def run_cell(dataset: str, setting: str, shots: int, seed: int, d: dict[str, np.ndarray],
             args: argparse.Namespace) -> None:
    from flowerbed.data.fewshot import class_shares, split_by_shares

    key = f"{dataset}|{setting}|{shots}|{seed}"
    rows = shots_of(d["y_pool"], shots, seed)
    parts = None
    if setting == "fed":
        shares = class_shares(d["text"].shape[0], args.clients, args.alpha, seed)
        parts = [rows[p] for p in split_by_shares(d["y_pool"][rows], np.arange(len(rows)),
                                                  shares, seed, "train")]
    start = time.perf_counter()
    res: dict[str, Any] = {k: {"acc": v} for k, v in baselines(d, rows, seed).items()}
    res |= flow_arms(d, rows, parts, args, seed)
    line = {"key": key, "dataset": dataset, "setting": setting, "shots": shots, "seed": seed,
            "seconds": time.perf_counter() - start, "arms": res,
            "config": {k: getattr(args, k) for k in ("steps", "lr", "width", "depth", "rounds",
                                                    "clients", "alpha", "corridor_samples")}}
    with CELLS.open("a") as fh:
        fh.write(json.dumps(line) + "\n")
    accs = "  ".join(f"{a}={res[a]['acc']:.3f}" for a in ARMS if a in res)
    print(f"{key}: {line['seconds']:.0f}s  {accs}", flush=True)


# --- report --------------------------------------------------------------------------------


def load_cells() -> list[dict[str, Any]]:
    if not CELLS.is_file():
        return []
    return [json.loads(line) for line in CELLS.read_text().splitlines() if line.strip()]


def report() -> str:
    cells = load_cells()
    groups: dict[tuple[str, str], dict[int, list[dict[str, Any]]]] = {}
    for c in cells:
        groups.setdefault((c["dataset"], c["setting"]), {}).setdefault(c["shots"], []).append(c)
    lines = [f"Paper: {PAPER}.", ""]
    for (dataset, setting), by_shots in sorted(groups.items()):
        arms = [a for a in ARMS if setting == "central" or a not in
                ("linear_probe", "tip_cache")]
        lines += [f"### {dataset}, {setting} (accuracy %, mean ± std over seeds)", "",
                  "| shots | seeds | " + " | ".join(arms) + " | HFM > FMA(k=10) |",
                  "|---" * (len(arms) + 3) + "|"]
        for shots in sorted(by_shots):
            cs = by_shots[shots]
            row = [str(shots), str(len(cs))]
            for a in arms:
                v = 100 * np.array([c["arms"][a]["acc"] for c in cs])
                row.append(f"{v.mean():.1f} ± {v.std():.1f}")
            wins = sum(c["arms"]["hfm"]["acc"] > c["arms"]["fma_k10"]["acc"] for c in cs)
            row.append(f"{wins}/{len(cs)}")
            lines.append("| " + " | ".join(row) + " |")
        lines += ["", "Entanglement (share of test trajectories whose nearest corridor "
                  "changes; mean stop step of HFM):", ""]
        for shots in sorted(by_shots):
            cs = by_shots[shots]
            e = {a: np.mean([c["arms"][a]["entangled"] for c in cs])
                 for a in ("fma_k10", "hfm", "hfm_euclidean")}
            stop = np.mean([c["arms"]["hfm"]["mean_stop"] for c in cs])
            best = np.mean([c["arms"]["fma_best_k"]["best_k"] for c in cs])
            lines.append(f"- {shots} shots: FMA {e['fma_k10']:.3f}, HFM {e['hfm']:.3f}, "
                         f"Euclidean-HFM {e['hfm_euclidean']:.3f}; HFM stops at step "
                         f"{stop:.1f} of 10; FMA's best k {best:.1f}")
        lines.append("")
    text = "\n".join(lines)
    (OUT / "table.md").write_text(text + "\n")
    plot(groups)
    return text


def plot(groups: dict[tuple[str, str], dict[int, list[dict[str, Any]]]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if groups:
        cols = 2 if len(groups) > 1 else 1
        rows_n = math.ceil(len(groups) / cols)
        fig, axes = plt.subplots(rows_n, cols, figsize=(6.4 * cols, 4.6 * rows_n), squeeze=False)
        styles = {"zero_shot": ("k", ":"), "linear_probe": ("tab:gray", "--"),
                  "tip_cache": ("tab:brown", "--"), "fma_k10": ("tab:blue", "-"),
                  "fma_best_k": ("tab:blue", ":"), "hfm": ("tab:red", "-"),
                  "hfm_fixed_steps": ("tab:orange", "-."), "hfm_no_corridor": ("tab:pink", "-."),
                  "hfm_euclidean": ("tab:green", "-.")}
        for ax, ((dataset, setting), by_shots) in zip(axes.flat, sorted(groups.items()),
                                                      strict=False):
            shots = sorted(by_shots)
            for arm, (col, ls) in styles.items():
                central_only = setting == "fed" and arm in ("linear_probe", "tip_cache")
                if central_only or arm not in by_shots[shots[0]][0]["arms"]:
                    continue
                m = [100 * np.mean([c["arms"][arm]["acc"] for c in by_shots[s]]) for s in shots]
                ax.plot(shots, m, color=col, ls=ls, marker="o", ms=3, label=arm)
            ax.set_xscale("log", base=2)
            ax.set_xticks(shots, [str(s) for s in shots])
            ax.set_xlabel("shots per class")
            ax.set_ylabel("test accuracy (%)")
            seeds = len(by_shots[shots[0]])
            ax.set_title(f"{dataset}, {setting} ({seeds} seed{'s' if seeds > 1 else ''})")
            ax.grid(alpha=0.3)
        axes[0][0].legend(fontsize=8)
        fig.tight_layout()
        IMG.mkdir(parents=True, exist_ok=True)
        fig.savefig(IMG / "hfm_shots.png", dpi=110)
        plt.close(fig)
    traj_files = sorted(OUT.glob("traj-hierarchy-*.npz")) or sorted(OUT.glob("traj-*.npz"))
    if traj_files:
        plot_trajectories(traj_files[0], plt)


def plot_trajectories(path: Path, plt: Any) -> None:
    """2-D PCA of the space parts (log map at the origin for HFM) of a few trajectories."""
    from flowerbed.methods.hfm import algorithm_lorentz as lz

    z = np.load(path)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.6))
    for ax, name in zip(axes, ("fma", "hfm"), strict=True):
        traj = z[name]
        if traj.size == 0:
            continue
        pts = traj if name == "fma" else lz.logmap0(torch.as_tensor(traj)).numpy()
        flat = pts.reshape(-1, pts.shape[-1])
        mean = flat.mean(0)
        _, _, vt = np.linalg.svd(flat - mean, full_matrices=False)
        p2 = (pts - mean) @ vt[:2].T
        colours = plt.cm.tab10(z["y"] % 10)
        for i in range(p2.shape[1]):
            ax.plot(p2[:, i, 0], p2[:, i, 1], color=colours[i], lw=0.8, alpha=0.8)
            ax.scatter(p2[0, i, 0], p2[0, i, 1], color=colours[i], s=8, marker="o")
            ax.scatter(p2[-1, i, 0], p2[-1, i, 1], color=colours[i], s=18, marker="x")
        title = "FMA (Euclidean, unit sphere)" if name == "fma" else \
            "HFM (Lorentz, log map at origin)"
        ax.set_title(f"{title}\n{path.stem[5:]}: o = leaf, x = step 10, colour = class")
        ax.set_xlabel("PC 1")
        ax.set_ylabel("PC 2")
        ax.set_aspect("equal", adjustable="datalim")
    fig.tight_layout()
    fig.savefig(IMG / "hfm_trajectories.png", dpi=110)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--datasets", nargs="+", default=["hierarchy", "fmnist"])
    ap.add_argument("--settings", nargs="+", default=["central", "fed"])
    ap.add_argument("--shots", nargs="+", type=int, default=[1, 2, 4, 8, 16])
    ap.add_argument("--fed-shots", nargs="+", type=int, default=None,
                    help="shots of the fed setting (default: --shots)")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=DEFAULT_STEPS,
                    help="optimiser steps of a centralized training (sets the epochs)")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--depth", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--clients", type=int, default=5)
    ap.add_argument("--alpha", type=float, default=0.5)
    ap.add_argument("--corridor-samples", type=int, default=2)
    ap.add_argument("--sibling", type=float, default=0.5)
    ap.add_argument("--text-noise", type=float, default=0.8)
    ap.add_argument("--save-traj", default="", help="(internal) name of a trajectory dump")
    ap.add_argument("--budget-min", type=float, default=1e9, help="stop starting cells after")
    ap.add_argument("--report-only", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    OUT.mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        done, start = done_keys(), time.perf_counter()
        feats: dict[str, dict[str, np.ndarray]] = {}
        for seed in args.seeds:
            for dataset in args.datasets:
                for setting in args.settings:
                    shot_list = args.fed_shots if setting == "fed" and args.fed_shots \
                        else args.shots
                    for shots in shot_list:
                        label = dataset if args.steps == DEFAULT_STEPS else \
                            f"{dataset}@{args.steps}steps"
                        if f"{label}|{setting}|{shots}|{seed}" in done:
                            continue
                        if (time.perf_counter() - start) / 60 > args.budget_min:
                            print("budget reached; rerun to continue", flush=True)
                            print(report())
                            return
                        if dataset not in feats:
                            feats[dataset] = fmnist_features() if dataset == "fmnist" else \
                                hierarchy_features(args.sibling, args.text_noise)
                        args.save_traj = (f"{dataset}-{shots}shot" if seed == 0 and shots == 4
                                          and setting == "central" and label == dataset
                                          else "")
                        run_cell(label, setting, shots, seed, feats[dataset], args)
    print(report())


if __name__ == "__main__":
    main()

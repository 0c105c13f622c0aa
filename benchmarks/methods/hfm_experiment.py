"""HFM vs FMA (and zero-shot, linear probe, Tip-Adapter cache, HFM's ablations) vs shots.

Issues #30 and #53. Two feature sets, both offline:

- ``fmnist``: Fashion-MNIST through the ``two_tower`` VLM (EfficientNet-Lite0 +
  MiniLM, heads aligned on training rows 55,000-59,999); shots drawn from
  training rows 0-2,999, scored on test rows 0-1,999; text roots from
  "a photo of a {class}.";
- ``hierarchy``: the controlled hierarchical set (``hfm_hierarchy``, 5 x 10
  classes, ``sibling`` = entanglement knob) with its text features.

Protocol (FMA's code, HKUST-LongGroup/FMA, with the CPU's limits stated in
docs/methods/hfm.md): every flow trains ``--epochs`` (FMA: 200) epochs of AdamW
(lr 2e-4, wd 0.01, batch 32, one warm-up epoch, cosine); on ``fmnist`` each shot
has ``--views`` random-resized-crop + flip views encoded once, and every epoch
trains on one view per shot (FMA re-encodes an augmented view each epoch; the
hierarchy set has no images, so no augmentation there). A validation split of
``min(shots, 4)`` rows per class, drawn from the training pool outside the shots
(CoOp's and FMA's few-shot protocol), chooses FMA's and HFM's read-out step k
and the linear probe's C; the test rows are only scored.

Per cell (dataset, setting, shots, seed) every arm runs on the same shots, the
same validation rows and the same test rows: zero-shot (cosine to the text
features), linear probe (logistic regression, C chosen on validation), Tip-Adapter
cache (FedSPA's prototype objective, local), FMA at k = 10, at the validation-chosen
k and (FMA's own protocol, an upper bound) at the best k on the test set, HFM at its
adaptive stop, after all K = 10 steps and at the validation-chosen k, HFM without
the corridor loss, and HFM's objectives in Euclidean space. ``central`` trains on
the pooled shots; ``fed`` cuts them over ``--clients`` clients by per-class
Dirichlet(``--alpha``) shares and FedAvg-s the velocity net for ``--rounds`` rounds
of ``epochs / rounds`` local epochs. The entanglement metric is the share of test
trajectories whose nearest corridor changes at least once.

Cells are appended to ``--results`` (``benchmarks/results/hfm/cells.jsonl``) as each
finishes and skipped when present, so a run can be stopped and resumed; a file
holding cells of another configuration is refused. ``--report-only`` rebuilds the
table (``table.md``: mean and sample sd over seeds) and the plots
(``docs/methods/img/hfm_*.png``). The 100-step results of issue #30 are kept apart
in ``benchmarks/results/hfm/v1_100steps/``.

    nice -n 10 env OMP_NUM_THREADS=1 .venv/bin/python benchmarks/methods/hfm_experiment.py \
        --seeds 0 1 2 --shots 1 4 16
    .venv/bin/python benchmarks/methods/hfm_experiment.py --report-only
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
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
#: About this many test rows (every n-th) carry the entanglement metric.
ENTANGLE_ROWS = 1000
#: The linear probe's inverse regularisation strengths, chosen on validation.
PROBE_C = (0.01, 0.1, 1.0, 10.0, 100.0)
ARMS = ("zero_shot", "linear_probe", "tip_cache", "fma_k10", "fma_val_k", "fma_test_best_k",
        "hfm", "hfm_fixed_steps", "hfm_val_k", "hfm_no_corridor", "hfm_euclidean")
#: The settings that make a cell's numbers (a results file holds one of them).
CONFIG_KEYS = ("epochs", "lr", "width", "depth", "batch_size", "views", "val_cap", "rounds",
               "clients", "alpha", "corridor_samples", "sibling", "text_noise")


# --- features ------------------------------------------------------------------------------


def fmnist_features() -> dict[str, Any]:
    """two_tower features of train rows 0-2,999 and test rows 0-1,999, the text roots,
    and what augmentation needs (the pool's images and the VLM)."""
    from flowerbed.core import registry
    from flowerbed.data.image_data import FashionParams, fashion_mnist
    from flowerbed.models.vlm import DEFAULT_TEMPLATES, build_vlm

    ds = fashion_mnist(FashionParams(), seed=0)
    vlm = build_vlm(registry.get("vlm", "two_tower").params())
    return {"f_pool": vlm.encode_images(ds.x_train[:3000], ds.meta), "y_pool": ds.y_train[:3000],
            "f_test": vlm.encode_images(ds.x_test[:2000], ds.meta), "y_test": ds.y_test[:2000],
            "text": vlm.class_text_features(list(ds.meta.class_names), DEFAULT_TEMPLATES),
            "logit_scale": np.float32(vlm.logit_scale), "images": ds.x_train[:3000],
            "meta": ds.meta, "vlm": vlm}


def hierarchy_features(sibling: float, text_noise: float) -> dict[str, Any]:
    """The controlled hierarchical set (seed 0) and its class text features (no images)."""
    from flowerbed.methods.hfm import data as hd

    p = hd.HierarchyParams(sibling=sibling)
    ds = hd.hfm_hierarchy(p, seed=0)
    text = np.stack([hd.text_feature(p.world, k, j, p.dim, p.sibling, text_noise)
                     for k in range(p.supers) for j in range(p.per_super)])
    return {"f_pool": ds.x_train, "y_pool": ds.y_train, "f_test": ds.x_test,
            "y_test": ds.y_test, "text": text.astype(np.float32),
            "logit_scale": np.float32(100.0)}


def train_views(d: dict[str, Any], rows: np.ndarray, views: int, seed: int) -> np.ndarray:
    """``(V, n, dim)`` features of augmented views of the shots, or ``(n, dim)`` without images."""
    from flowerbed.methods.hfm import data as hd

    if "images" not in d or views < 1:
        return np.asarray(d["f_pool"][rows])
    shape = d["meta"].input_shape
    imgs = hd.augment_views(d["images"][rows], shape, views, seed)
    feats = d["vlm"].encode_images(imgs.reshape(views * len(rows), -1), d["meta"])
    return np.asarray(feats).reshape(views, len(rows), -1)


# --- arms ----------------------------------------------------------------------------------


def shots_of(y: np.ndarray, shots: int, seed: int) -> np.ndarray:
    """``fewshot_dirichlet``'s shot draw (per class, seeded)."""
    from flowerbed.data.fewshot import fewshot_rows

    return fewshot_rows(y, int(y.max()) + 1, shots, seed)


def linear_probe(f: np.ndarray, y: np.ndarray, fv: np.ndarray, yv: np.ndarray,
                 ft: np.ndarray, yt: np.ndarray) -> dict[str, float]:
    """Logistic regression on the shots, C of :data:`PROBE_C` chosen on validation."""
    from sklearn.linear_model import LogisticRegression

    fits = [LogisticRegression(C=c, max_iter=2000).fit(f, y) for c in PROBE_C]
    val = [float((m.predict(fv) == yv).mean()) for m in fits]
    best = int(np.argmax(val))
    return {"acc": float((fits[best].predict(ft) == yt).mean()), "C": PROBE_C[best],
            "val_acc": val[best]}


def baselines(d: dict[str, Any], rows: np.ndarray, val: np.ndarray, seed: int
              ) -> dict[str, dict[str, float]]:
    """Zero-shot, logistic-regression probe, Tip-Adapter cache (FedSPA's objective)."""
    from flowerbed.algorithms import adapter_training as at
    from flowerbed.methods.fedspa import algorithm as fs

    f, y, ft, yt, text = d["f_pool"][rows], d["y_pool"][rows], d["f_test"], d["y_test"], d["text"]
    out = {"zero_shot": {"acc": float(((ft @ text.T).argmax(1) == yt).mean())},
           "linear_probe": linear_probe(f, y, d["f_pool"][val], d["y_pool"][val], ft, yt)}
    c = text.shape[0]
    p0, _ = fs.init_prototypes(*fs.class_sums(f, y, c), text)
    cfg = at.TrainConfig(2e-3, 50, 8, seed)
    scale = float(d["logit_scale"])
    protos, _ = fs.train_prototypes(p0, text, f, y, cfg, alpha=5.0, beta=5.0, logit_scale=scale)
    logits = fs.tip_logits(torch.as_tensor(ft), torch.as_tensor(text), torch.as_tensor(protos),
                           5.0, 5.0, scale)
    out["tip_cache"] = {"acc": float((logits.argmax(1).numpy() == yt).mean())}
    return out


def _net(cfg: Any, dim: int, args: argparse.Namespace, seed: int) -> torch.nn.Module:
    from flowerbed.methods.hfm import model as hv

    return hv.build(dim, cfg.point_dim(dim), args.width, args.depth, seed)


def train_flow(cfg: Any, d: dict[str, Any], x: np.ndarray, y: np.ndarray,
               parts: list[np.ndarray] | None, args: argparse.Namespace, seed: int
               ) -> torch.nn.Module:
    """Centralized (``parts is None``) or FedAvg training of one variant's velocity net.

    ``x`` holds the shots' features, ``(n, dim)`` or ``(V, n, dim)`` augmented views;
    ``parts`` index the shots of each client.
    """
    from flowerbed.algorithms import adapter_training as at
    from flowerbed.methods.hfm import algorithm as hfm
    from flowerbed.methods.hfm import model as hv

    dim = x.shape[-1]
    roots = hfm.embed(torch.as_tensor(d["text"]), cfg.rho_text, cfg)
    leaves = hfm.embed(torch.as_tensor(x), cfg.rho_image, cfg)
    labels = torch.as_tensor(y, dtype=torch.long)
    net = _net(cfg, dim, args, seed)

    def tcfg(epochs: int, run_seed: int) -> Any:
        return hfm.TrainConfig(epochs=epochs, batch_size=args.batch_size, lr=args.lr,
                               seed=run_seed)

    if parts is None:
        hfm.train(net, leaves, labels, roots, cfg, tcfg(args.epochs, seed))
        return net
    local_epochs = max(1, args.epochs // args.rounds)
    for r in range(args.rounds):
        weights, sizes = [], []
        for k, part in enumerate(parts):
            if len(part) == 0:
                continue
            local = hv.load_arrays(_net(cfg, dim, args, seed), hv.to_arrays(net))
            idx = torch.as_tensor(part, dtype=torch.long)
            hfm.train(local, leaves[..., idx, :], labels[idx], roots, cfg,
                      tcfg(local_epochs, seed * 1000 + r * 50 + k))
            weights.append(hv.to_arrays(local))
            sizes.append(len(part))
        avg = {name: at.weighted_average([w[name] for w in weights], sizes)
               for name in weights[0]}
        hv.load_arrays(net, avg)
    return net


def read_flow(net: torch.nn.Module, cfg: Any, d: dict[str, Any], val: np.ndarray
              ) -> dict[str, Any]:
    """Test and validation trajectories of a trained flow, read every way the arms need."""
    from flowerbed.methods.hfm import algorithm as hfm

    roots = hfm.embed(torch.as_tensor(d["text"]), cfg.rho_text, cfg)
    yt, yv = d["y_test"], d["y_pool"][val]
    traj = hfm.trajectory(net, hfm.embed(torch.as_tensor(d["f_test"]), cfg.rho_image, cfg), cfg)
    chosen, per_step, k = hfm.classify(traj, roots, cfg)
    vtraj = hfm.trajectory(net, hfm.embed(torch.as_tensor(d["f_pool"][val]), cfg.rho_image,
                                          cfg), cfg)
    v_chosen, v_per_step, _ = hfm.classify(vtraj, roots, cfg)
    k_val = hfm.select_step(v_per_step, yv)
    acc_k = (per_step == yt[None]).mean(1)
    every = max(1, traj.shape[1] // ENTANGLE_ROWS)
    switches = hfm.corridor_switches(traj[:, ::every], roots, cfg)
    return {"traj": traj, "acc_per_step": acc_k, "acc_stop": float((chosen == yt).mean()),
            "val_acc_per_step": (v_per_step == yv[None]).mean(1).tolist(),
            "val_acc_stop": float((v_chosen == yv).mean()), "k_val": k_val,
            "mean_stop": float(k.mean()), "entangled": float((switches >= 1).mean()),
            "switches": float(switches.mean())}


def flow_arms(d: dict[str, Any], x: np.ndarray, y: np.ndarray, val: np.ndarray,
              parts: list[np.ndarray] | None, args: argparse.Namespace, seed: int,
              save_traj: str) -> dict[str, Any]:
    """FMA, HFM and its ablations: accuracies, chosen steps, stop steps, entanglement."""
    from flowerbed.methods.hfm import algorithm as hfm

    out: dict[str, Any] = {}
    trajs: dict[str, np.ndarray] = {}
    for name in ("fma", "hfm", "hfm_no_corridor", "hfm_euclidean"):
        cfg = hfm.variant(name, corridor_samples=args.corridor_samples)
        start = time.process_time()
        net = train_flow(cfg, d, x, y, parts, args, seed)
        r = read_flow(net, cfg, d, val)
        acc_k = r["acc_per_step"]
        extra = {"cpu_seconds": time.process_time() - start, "acc_per_step": acc_k.tolist(),
                 "val_acc_per_step": r["val_acc_per_step"], "entangled": r["entangled"],
                 "switches": r["switches"]}
        if name == "fma":
            out["fma_k10"] = {"acc": float(acc_k[-1]), **extra}
            out["fma_val_k"] = {"acc": float(acc_k[r["k_val"]]), "k": r["k_val"]}
            out["fma_test_best_k"] = {"acc": float(acc_k.max()), "k": int(acc_k.argmax())}
        else:
            out[name] = {"acc": r["acc_stop"], "val_acc": r["val_acc_stop"],
                         "mean_stop": r["mean_stop"], **extra}
        if name == "hfm":
            out["hfm_fixed_steps"] = {"acc": float(acc_k[-1])}
            out["hfm_val_k"] = {"acc": float(acc_k[r["k_val"]]), "k": r["k_val"]}
        if name in ("fma", "hfm"):
            trajs[name] = r["traj"].numpy()
    if save_traj:
        yt = d["y_test"]
        keep = np.flatnonzero(yt < 5)[::8][:40]
        np.savez(OUT / f"traj-{save_traj}.npz", hfm=trajs["hfm"][:, keep],
                 fma=trajs["fma"][:, keep], y=yt[keep], text=d["text"])
    return out


# --- the grid ------------------------------------------------------------------------------


def config_of(args: argparse.Namespace) -> dict[str, Any]:
    """The settings that make a cell's numbers."""
    return {k: getattr(args, k) for k in CONFIG_KEYS}


def load_cells(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run_cell(dataset: str, setting: str, shots: int, seed: int, d: dict[str, Any],
             args: argparse.Namespace, save_traj: str) -> None:
    from flowerbed.data.fewshot import class_shares, split_by_shares
    from flowerbed.methods.hfm import data as hd

    key = f"{dataset}|{setting}|{shots}|{seed}"
    num_classes = d["text"].shape[0]
    rows = shots_of(d["y_pool"], shots, seed)
    val = hd.validation_rows(d["y_pool"], num_classes, shots, rows, seed, args.val_cap)
    parts = None
    if setting == "fed":
        shares = class_shares(num_classes, args.clients, args.alpha, seed)
        parts = split_by_shares(d["y_pool"][rows], np.arange(len(rows)), shares, seed, "train")
    wall, cpu = time.perf_counter(), time.process_time()
    res: dict[str, Any] = baselines(d, rows, val, seed)
    x = train_views(d, rows, args.views, seed)
    res |= flow_arms(d, x, d["y_pool"][rows], val, parts, args, seed, save_traj)
    line = {"key": key, "dataset": dataset, "setting": setting, "shots": shots, "seed": seed,
            "seconds": time.perf_counter() - wall, "cpu_seconds": time.process_time() - cpu,
            "train_rows": len(rows), "val_rows": len(val),
            "views": int(x.shape[0]) if x.ndim == 3 else 0, "arms": res,
            "config": config_of(args)}
    with args.results.open("a") as fh:
        fh.write(json.dumps(line) + "\n")
    accs = "  ".join(f"{a}={res[a]['acc']:.3f}" for a in ARMS if a in res)
    print(f"{key}: {line['cpu_seconds']:.0f} cpu-s  {accs}", flush=True)


# --- report --------------------------------------------------------------------------------


def mean_sd(v: np.ndarray) -> str:
    """``mean ± sample sd`` (ddof = 1; just the mean for one value)."""
    return f"{v.mean():.1f} ± {v.std(ddof=1):.1f}" if len(v) > 1 else f"{v.mean():.1f}"


def report(path: Path) -> str:
    cells = load_cells(path)
    groups: dict[tuple[str, str], dict[int, list[dict[str, Any]]]] = {}
    for c in cells:
        groups.setdefault((c["dataset"], c["setting"]), {}).setdefault(c["shots"], []).append(c)
    lines = [f"Paper: {PAPER}.", ""]
    if cells:
        lines += ["Configuration: " + ", ".join(f"{k}={v}" for k, v in cells[0]["config"].items())
                  + ".", "", "Verdicts: `claims.md` (computed from these cells).", ""]
    for (dataset, setting), by_shots in sorted(groups.items()):
        arms = [a for a in ARMS if setting == "central" or a not in
                ("linear_probe", "tip_cache")]
        lines += [f"### {dataset}, {setting} (accuracy %, mean ± sample sd over seeds)", "",
                  "| shots | seeds | " + " | ".join(arms) + " |",
                  "|---" * (len(arms) + 2) + "|"]
        for shots in sorted(by_shots):
            cs = by_shots[shots]
            row = [str(shots), str(len(cs))]
            row += [mean_sd(100 * np.array([c["arms"][a]["acc"] for c in cs])) for a in arms]
            lines.append("| " + " | ".join(row) + " |")
        lines += ["", "Read-out steps, entanglement (share of test trajectories whose nearest "
                  "corridor changes) and CPU cost per cell (means over seeds):", ""]
        for shots in sorted(by_shots):
            cs = by_shots[shots]

            def avg(arm: str, field: str, cs: list[dict[str, Any]] = cs) -> float:
                return float(np.mean([c["arms"][arm][field] for c in cs]))

            lines.append(
                f"- {shots} shots: FMA k chosen on validation {avg('fma_val_k', 'k'):.1f} "
                f"(on test {avg('fma_test_best_k', 'k'):.1f}); HFM's adaptive stop at step "
                f"{avg('hfm', 'mean_stop'):.1f} of 10, its validation k "
                f"{avg('hfm_val_k', 'k'):.1f}; entangled: FMA {avg('fma_k10', 'entangled'):.3f}, "
                f"HFM {avg('hfm', 'entangled'):.3f}, Euclidean-HFM "
                f"{avg('hfm_euclidean', 'entangled'):.3f}; "
                f"{np.mean([c['cpu_seconds'] for c in cs]):.0f} CPU-s per cell")
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
                  "fma_val_k": ("tab:blue", "--"), "fma_test_best_k": ("tab:blue", ":"),
                  "hfm": ("tab:red", "-"), "hfm_fixed_steps": ("tab:orange", "-."),
                  "hfm_val_k": ("tab:red", "--"), "hfm_no_corridor": ("tab:pink", "-."),
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
            counts = sorted({len(by_shots[s]) for s in shots})
            seeds = "-".join(str(n) for n in (counts[0], counts[-1])[:len(set(counts))])
            ax.set_title(f"{dataset}, {setting} ({seeds} seeds per point)")
            ax.grid(alpha=0.3)
        handles, labels = axes[0][0].get_legend_handles_labels()
        # Beside the panels, not over them: the curves fill every corner.
        fig.legend(handles, labels, fontsize=8, loc="center left", bbox_to_anchor=(1.0, 0.5))
        fig.tight_layout()
        IMG.mkdir(parents=True, exist_ok=True)
        fig.savefig(IMG / "hfm_shots.png", dpi=110, bbox_inches="tight")
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


def check_config(path: Path, config: dict[str, Any]) -> None:
    """Refuse to append to a results file whose cells used other settings (one clear line)."""
    for c in load_cells(path):
        if c.get("config") != config:
            diff = sorted(k for k in config if c.get("config", {}).get(k) != config[k])
            sys.exit(f"{path.name}: cell {c['key']} was run with other settings "
                     f"({', '.join(diff) or 'config'}); pass --results <new file>")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--datasets", nargs="+", default=["fmnist", "hierarchy"])
    ap.add_argument("--settings", nargs="+", default=["central"])
    ap.add_argument("--shots", nargs="+", type=int, default=[1, 4, 16])
    ap.add_argument("--fed-shots", nargs="+", type=int, default=None,
                    help="shots of the fed setting (default: --shots)")
    ap.add_argument("--only-shots", nargs="+", default=[], metavar="DATASET=S,S",
                    help="central shots of one data set (e.g. hierarchy=1,4), else --shots")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--epochs", type=int, default=200, help="training epochs (FMA: 200)")
    ap.add_argument("--lr", type=float, default=2e-4, help="AdamW learning rate (FMA: 2e-4)")
    ap.add_argument("--batch-size", type=int, default=32, help="(FMA: 32)")
    ap.add_argument("--width", type=int, default=128, help="velocity net width (FMA: 512)")
    ap.add_argument("--depth", type=int, default=4, help="residual blocks (FMA: 12)")
    ap.add_argument("--views", type=int, default=16,
                    help="augmented views per shot, encoded once (fmnist; 0: none)")
    ap.add_argument("--val-cap", type=int, default=4,
                    help="validation rows per class: min(shots, this)")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--clients", type=int, default=5)
    ap.add_argument("--alpha", type=float, default=0.5)
    ap.add_argument("--corridor-samples", type=int, default=2)
    ap.add_argument("--sibling", type=float, default=0.5)
    ap.add_argument("--text-noise", type=float, default=0.8)
    ap.add_argument("--results", type=Path, default=CELLS, help="cells file (jsonl)")
    ap.add_argument("--budget-min", type=float, default=1e9,
                    help="stop starting cells after this many CPU minutes")
    ap.add_argument("--report-only", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    OUT.mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        check_config(args.results, config_of(args))
        done = {c["key"] for c in load_cells(args.results)}
        start = time.process_time()
        feats: dict[str, dict[str, Any]] = {}
        own = {k: [int(v) for v in vs.split(",")] for k, vs in
               (item.split("=", 1) for item in args.only_shots)}
        for seed in args.seeds:
            for dataset in args.datasets:
                for setting in args.settings:
                    shot_list = args.fed_shots if setting == "fed" and args.fed_shots \
                        else own.get(dataset, args.shots)
                    for shots in shot_list:
                        if f"{dataset}|{setting}|{shots}|{seed}" in done:
                            continue
                        if (time.process_time() - start) / 60 > args.budget_min:
                            print("budget reached; rerun the same command to continue",
                                  flush=True)
                            print(report(args.results))
                            return
                        if dataset not in feats:
                            feats[dataset] = fmnist_features() if dataset == "fmnist" else \
                                hierarchy_features(args.sibling, args.text_noise)
                        save = (f"{dataset}-{shots}shot" if seed == 0 and shots == 4
                                and setting == "central" else "")
                        run_cell(dataset, setting, shots, seed, feats[dataset], args, save)
    print(report(args.results))


if __name__ == "__main__":
    main()

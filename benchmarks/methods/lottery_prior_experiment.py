"""Lottery Prior's small CPU experiment (issue 32).

Wu, You, Dragotti, Gündüz, "Lottery Prior: Randomized Neural Compression for
Zero-Shot Inverse Problems", ICML 2026. The paper's numbers were not retrievable,
so the reference column is the paper's two qualitative claims and the
spec's probe (camera 64x64, sigma = 25): the S = 4 ensemble beats its mean member
(+1.7 dB in the probe) and λ_R > 0 beats λ_R = 0 at convergence (+0.65 dB).

What runs (per picture x task x seed): Lottery Prior (S = 4, λ_R by the discrepancy
principle), its ablations (member 0 alone = S = 1; member 0's twin with λ_R = 0),
scikit-image's classical restorers, BM3D (if installed), Deep Image Prior (last
iterate, and the oracle best iterate). Then PSNR-vs-iteration curves for a longer
fit, and the wall time and code size of one 256x256 restoration beside DIP's.

Usage::

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/methods/lottery_prior_experiment.py \
        [--out benchmarks/results/lottery_prior] [--quick] [--workers 2]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import numpy as np

IMAGES = ("camera", "astronaut", "coffee", "chelsea", "coins", "moon")
TASKS = (("denoise", 15.0), ("denoise", 25.0), ("denoise", 50.0), ("sr", 10.0), ("inpaint", 10.0))
METHODS = (
    ("lp", "Lottery Prior (S=4)"), ("lp_weighted", "LP fit-weighted"),
    ("lp_members", "LP mean member"), ("lp_single", "LP S=1"), ("lp_no_rate", "LP λ_R=0"),
    ("input", "noisy / masked input"), ("bicubic", "bicubic"), ("tv", "TV (discrepancy)"),
    ("nlm", "NL-means"), ("wavelet", "wavelet BayesShrink"), ("bm3d", "BM3D"),
    ("biharmonic", "biharmonic"), ("dip", "DIP (last iterate)"),
    ("dip_oracle", "DIP (oracle stop)"),
)  # fmt: skip
PROBE = {"ensemble_gain_db": 1.68, "rate_gain_db": 0.65}
#: The picture whose restorations the crops figure shows.
CROP_PICTURE = "camera"


def task_label(task: str, sigma: float) -> str:
    return {"denoise": f"denoise \u03c3={sigma:g}", "sr": f"SR \u00d72, \u03c3={sigma:g}",
            "inpaint": f"inpaint 50%, \u03c3={sigma:g}"}[task]


def _params(task: str, sigma: float, args: argparse.Namespace) -> Any:
    from flowerbed.methods.lottery_prior.learner import LotteryPriorParams

    return LotteryPriorParams(
        task=task, sigma=sigma, iters=args.iters, polish_iters=args.iters // 10,
        baselines=("input", "tv", "nlm", "wavelet", "bm3d", "bicubic", "biharmonic", "dip"),
        dip_iters=args.dip_iters,
    )


def _clean(name: str, args: argparse.Namespace) -> np.ndarray:
    from flowerbed.methods.lottery_prior.data import load_picture, prepare

    return prepare(load_picture(name), args.crop, args.size, True, name)


def cell(job: tuple[str, str, float, int, argparse.Namespace]) -> dict[str, Any]:
    """One picture x task x seed: every method, metrics (and images for seed 0)."""
    import torch

    from flowerbed.core.seeds import derive_seed
    from flowerbed.methods.lottery_prior.learner import observe, restore_image

    torch.set_num_threads(1)
    name, task, sigma, seed, args = job
    p = _params(task, sigma, args)
    clean = _clean(name, args)
    obs = observe(p, clean, seed, name)
    res = restore_image(p, clean, obs, derive_seed(seed, "bench", name))
    out: dict[str, Any] = {"image": name, "task": task, "sigma": sigma, "seed": seed,
                           "metrics": res.metrics}
    if seed == 0 and name == CROP_PICTURE:  # kept for the figure only, never in the jsonl
        shown = obs.y if task != "sr" else np.repeat(np.repeat(obs.y, 2, 1), 2, 2)
        out["images"] = {**res.images, "clean": clean, "observed": shown}
    return out


# --------------------------------------------------------------------------- result files
def _crop_key(task: str, sigma: float, method: str) -> str:
    return f"{task}|{sigma:g}|{method}"


def save_crops(path: Path, row: dict[str, Any]) -> None:
    """Add one cell's pictures to ``crops.npz`` (8-bit: they are only displayed)."""
    store = dict(np.load(path)) if path.exists() else {}
    for method, img in row["images"].items():
        img8 = np.round(255 * np.clip(np.asarray(img, dtype=float), 0, 1)).astype(np.uint8)
        store[_crop_key(row["task"], row["sigma"], method)] = img8
    np.savez_compressed(path, **store)


def read_cells(out: Path) -> dict[str, dict[str, Any]]:
    """Rows of ``cells.jsonl`` by key; pictures found there move to ``crops.npz``.

    Older versions stored the seed-0 pictures in the jsonl; they are moved out (the
    figure's picture) or dropped, and the file is rewritten with metrics only.
    """
    cache = out / "cells.jsonl"
    done: dict[str, dict[str, Any]] = {}
    if not cache.exists():
        return done
    slimmed = False
    for line in cache.read_text().splitlines():
        rec = json.loads(line)
        row = rec["row"]
        if "images" in row:
            slimmed = True
            if row["seed"] == 0 and row["image"] == CROP_PICTURE:
                save_crops(out / "crops.npz", row)
            row = {k: v for k, v in row.items() if k != "images"}
        done[rec["key"]] = row
    if slimmed:
        tmp = cache.with_suffix(".tmp")
        tmp.write_text("".join(json.dumps({"key": k, "row": r}) + "\n" for k, r in done.items()))
        tmp.replace(cache)
    return done


# --------------------------------------------------------------------------- tables
def summarise(rows: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, float]]]:
    """Per task and method: mean ± std over seeds of the mean over pictures.

    Only seeds with every picture of the task count (a partly run seed would
    average other pictures); ``n_seeds`` says how many.
    """
    table: dict[str, dict[str, dict[str, float]]] = {}
    for task, sigma in TASKS:
        key = task_label(task, sigma)
        sel = [r for r in rows if r["task"] == task and r["sigma"] == sigma]
        count = {s: sum(r["seed"] == s for r in sel) for s in {r["seed"] for r in sel}}
        seeds = sorted(s for s, c in count.items() if c == max(count.values()))
        sel = [r for r in sel if r["seed"] in seeds]
        table[key] = {"n_seeds": {"mean": float(len(seeds)), "std": 0.0}}
        for m, _ in METHODS:
            for q in ("psnr", "ssim"):
                vals = [[r["metrics"][f"{q}_{m}"] for r in sel
                         if r["seed"] == s and f"{q}_{m}" in r["metrics"]] for s in seeds]
                per_seed = [float(np.mean(v)) for v in vals if v]
                if per_seed:
                    table[key][f"{q}_{m}"] = {"mean": float(np.mean(per_seed)),
                                              "std": float(np.std(per_seed))}
        for extra in ("lp_bpp", "lp_bits", "lp_fit_ratio", "lp_lambda", "seconds_lp",
                      "seconds_dip", "dip_params", "dip_oracle_iter", "lp_mask_bits",
                      "lp_latent_bits", "lp_psi_bits"):
            vals = [r["metrics"][extra] for r in sel if extra in r["metrics"]]
            if vals:
                table[key][extra] = {"mean": float(np.mean(vals)), "std": float(np.std(vals))}
    return table


def claims(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The paper's two claims, cell by cell (picture x task x seed)."""
    def gap(a: str, b: str) -> dict[str, float]:
        d = np.array([r["metrics"][f"psnr_{a}"] - r["metrics"][f"psnr_{b}"] for r in rows])
        return {"mean_db": float(d.mean()), "min_db": float(d.min()), "wins": int((d > 0).sum()),
                "cells": len(d)}

    return {"ensemble_vs_mean_member": gap("lp", "lp_members"),
            "ensemble_vs_single": gap("lp", "lp_single"),
            "rate_vs_no_rate": gap("lp_single", "lp_no_rate"),
            "weighted_vs_mean_ensemble": gap("lp_weighted", "lp")}


def markdown(table: dict[str, Any], claim: dict[str, Any], meta: dict[str, Any]) -> str:
    tasks = list(table)
    lines = [f"# Lottery Prior — {meta['size']}\u00d7{meta['size']} grey crops, "
             f"{len(meta['images'])} pictures \u00d7 {len(meta['seeds'])} seeds",
             "", "PSNR (dB) / SSIM, mean ± std over seeds of the mean over pictures.", "",
             "| method | " + " | ".join(f"{t} ({table[t]['n_seeds']['mean']:.0f} seeds)"
                                        for t in tasks) + " |",
             "|---" * (len(tasks) + 1) + "|"]
    for m, label in METHODS:
        cells = []
        for t in tasks:
            p, s = table[t].get(f"psnr_{m}"), table[t].get(f"ssim_{m}")
            cells.append("\u2013" if p is None else
                         f"{p['mean']:.2f} ± {p['std']:.2f} / {s['mean']:.3f}")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += ["", "| claim | paper / probe | ours: mean gap (dB) | wins / cells | worst (dB) |",
              "|---|---|---|---|---|"]
    gain = PROBE["ensemble_gain_db"]
    ref = {"ensemble_vs_mean_member": f"ensemble > mean member (probe +{gain})",
           "ensemble_vs_single": "ensemble > one network",
           "rate_vs_no_rate": f"λ_R > 0 > λ_R = 0 at convergence (probe +{PROBE['rate_gain_db']})",
           "weighted_vs_mean_ensemble": "fit-weighted vs plain mean (spec: optional)"}
    for k, v in claim.items():
        lines.append(f"| {k} | {ref[k]} | {v['mean_db']:+.2f} | {v['wins']}/{v['cells']} | "
                     f"{v['min_db']:+.2f} |")
    lines += ["", "Code of one member (bits, mean over cells) beside DIP's parameters; "
              "seconds per picture on one core (S = 4 members + the λ_R = 0 twin, batched):",
              "", "| task | mask | latents | ψ | total (bpp) | λ_R (final) | "
              "D / σ² | LP s | DIP params | DIP s | DIP oracle iter |", "|---" * 11 + "|"]
    for t in tasks:
        g = {k: v["mean"] for k, v in table[t].items() if not k.startswith(("psnr", "ssim"))}
        if "lp_bits" not in g:
            continue
        lines.append(
            f"| {t} | {g.get('lp_mask_bits', 0):.0f} | {g.get('lp_latent_bits', 0):.0f} | "
            f"{g.get('lp_psi_bits', 0):.0f} | {g['lp_bits']:.0f} ({g['lp_bpp']:.2f}) | "
            f"{g['lp_lambda']:.2g} | {g['lp_fit_ratio']:.2f} | {g['seconds_lp']:.0f} | "
            f"{g.get('dip_params', 0):.0f} | {g.get('seconds_dip', 0):.0f} | "
            f"{g.get('dip_oracle_iter', 0):.0f} |")
    return "\n".join(lines) + "\n"


def timing_markdown(timing: dict[str, Any] | None, iters: int, dip_iters: int,
                    members: int = 4) -> str:
    """One 256x256 picture: seconds and effective parameters, Lottery Prior beside DIP.

    Wall seconds depend on the machine's load; CPU seconds (both threads) much less.
    A picture costs ``iters`` plus ``iters // 10`` polishing iterations per member
    (linear in the number of members) and ``dip_iters`` for DIP.
    """
    if not timing:
        return ""
    lp_its, t = iters + iters // 10, timing

    def row(label: str, key: str, its: int, params: str) -> str:
        wall, cpu = t[f"{key}_wall_s_per_iter"], t[f"{key}_cpu_s_per_iter"]
        return (f"| {label} | {wall:.2f} / {cpu:.2f} | {wall * its:.0f} / {cpu * its:.0f} "
                f"({its} its) | {params} |")

    eff = t["lp_mask_bits"] + t["lp_psi_params"]
    lp_params = (f"frozen {t['lp_frozen_weights']} (from the seed); learned: mask "
                 f"{t['lp_mask_bits']:.0f} bits, ψ {t['lp_psi_params']}, latents "
                 f"{t['lp_latents']} (coded in bits)")
    return "\n".join([
        "", f"256\u00d7256 camera, denoise \u03c3=25, {t['threads']} threads, "
        f"{t['timed_iters']} timed iterations, machine load {t['load_avg']:.1f}:", "",
        "| | s / iteration, wall / CPU | s / picture, wall / CPU | parameters |",
        "|---|---|---|---|",
        row("Lottery Prior, one member", "lp", lp_its, lp_params),
        row(f"Lottery Prior, S = {members}", "lp", members * lp_its, "S \u00d7 the above"),
        row("DIP", "dip", dip_iters, str(t["dip_params"])),
        "", f"Mask bits + ψ parameters of one member: {eff:.0f} "
        f"({eff / t['dip_params']:.2f}\u00d7 DIP's weights); the latents are paid in bits.", ""])


# --------------------------------------------------------------------------- figures
def crops_figure(rows: list[dict[str, Any]], crops: Path, path: Path, args_size: int) -> None:
    """Restorations of ``CROP_PICTURE`` (seed 0) per task, PSNR in the titles."""
    if not crops.exists():
        return
    store = dict(np.load(crops))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = ("clean", "observed", "lp", "lp_single", "lp_no_rate", "best_classical", "dip_oracle")
    titles = {"clean": "clean", "observed": "observed", "lp": "Lottery Prior S=4",
              "lp_single": "LP S=1", "lp_no_rate": "LP λ_R=0", "dip_oracle": "DIP (oracle)"}
    sel = [r for r in rows if r["seed"] == 0 and r["image"] == CROP_PICTURE
           and _crop_key(r["task"], r["sigma"], "clean") in store]
    if not sel:
        return
    sel.sort(key=lambda r: [t for t, _ in TASKS].index(r["task"]) * 100 + r["sigma"])
    fig, axes = plt.subplots(len(sel), len(shown), figsize=(1.9 * len(shown), 2.1 * len(sel)))
    for i, r in enumerate(sel):
        classical = {"denoise": "bm3d", "sr": "bicubic", "inpaint": "biharmonic"}[r["task"]]
        for j, k in enumerate(shown):
            key = classical if k == "best_classical" else k
            img = store[_crop_key(r["task"], r["sigma"], key)][0] / 255.0
            ax = axes[i, j]
            ax.imshow(img, cmap="gray", vmin=0, vmax=1, interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            title = titles.get(key, {"bm3d": "BM3D", "bicubic": "bicubic",
                                     "biharmonic": "biharmonic"}.get(key, key))
            psnr = r["metrics"].get(f"psnr_{key}")
            ax.set_title(title + ("" if psnr is None else f"\n{psnr:.2f} dB"), fontsize=8)
            if j == 0:
                ax.set_ylabel(task_label(r["task"], r["sigma"]), fontsize=8)
    fig.suptitle(f"{CROP_PICTURE} ({args_size}\u00d7{args_size}), seed 0: restorations and PSNR",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def curve_one(job: tuple[str, argparse.Namespace]) -> dict[str, Any]:
    """A longer fit on one picture (denoise sigma=25): PSNR every 25 iterations."""
    import torch

    from flowerbed.methods.lottery_prior.learner import LotteryPriorParams, observe, restore_image

    torch.set_num_threads(1)
    name, args = job
    p = LotteryPriorParams(task="denoise", sigma=25.0, iters=args.curve_iters, polish_iters=0,
                           ensemble_size=1, baselines=("dip",), dip_iters=args.curve_iters)
    clean = _clean(name, args)
    obs = observe(p, clean, 0, name)
    res = restore_image(p, clean, obs, 7, track_every=25)
    out: dict[str, Any] = dict(res.curves)
    out["noisy_psnr"] = float(10 * np.log10(1 / np.mean((obs.y - clean) ** 2)))
    return out


def curves(args: argparse.Namespace) -> dict[str, Any]:
    """PSNR-vs-iteration curves on camera and coins, one process each."""
    names = ("camera", "coins")
    with ProcessPoolExecutor(max_workers=min(args.workers, len(names))) as pool:
        return dict(zip(names, pool.map(curve_one, [(n, args) for n in names]), strict=True))


def curves_figure(data: dict[str, Any], path: Path, size: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(data), figsize=(5.2 * len(data), 3.6))
    style = {"lp_single": ("Lottery Prior, λ_R by discrepancy", "C0"),
             "lp_no_rate": ("same network, λ_R = 0", "C3"), "dip": ("Deep Image Prior", "C2")}
    for ax, (name, c) in zip(np.atleast_1d(axes), data.items(), strict=True):
        for key, (label, color) in style.items():
            if c.get(key):
                it, v = zip(*c[key], strict=True)
                ax.plot(it, v, label=label, color=color)
        ax.axhline(c["noisy_psnr"], color="grey", ls=":", label="noisy input")
        ax.set_xlabel("iteration")
        ax.set_ylabel("PSNR (dB)")
        ax.set_title(f"{name} {size}\u00d7{size}, denoise \u03c3=25")
        ax.grid(alpha=0.3)
    handles, labels = np.atleast_1d(axes)[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(path, dpi=130)
    plt.close(fig)


def timing_256(iters: int, threads: int = 2) -> dict[str, Any]:
    """Wall and CPU seconds per iteration of one member and of DIP on a 256x256 picture."""
    import torch

    from flowerbed.methods.lottery_prior import algorithm as lp
    from flowerbed.methods.lottery_prior.algorithm_baselines import fit_dip
    from flowerbed.methods.lottery_prior.algorithm_net import NetConfig
    from flowerbed.methods.lottery_prior.data import degrade, load_picture, prepare
    from flowerbed.methods.lottery_prior.model_dip import DipUNet, parameter_count

    torch.set_num_threads(threads)
    clean = prepare(load_picture("camera"), 256, 256, True)
    obs = degrade(clean, "denoise", 25 / 255, 0)
    net = lp.with_size(NetConfig(1, 1), 1, 256, 256)
    t, c = time.perf_counter(), time.process_time()
    res = lp.fit_family(obs.y, obs.op, obs.sigma, net, [(0, "discrepancy")],
                        lp.FitConfig(iters=iters, polish_iters=0))
    lp_wall, lp_cpu = (time.perf_counter() - t) / iters, (time.process_time() - c) / iters
    fam = lp.LotteryFamily(net, [0])
    psi = sum(p[0].numel() for p in fam.psi.values())
    latents = sum(z[0].numel() for z in fam.latents)
    unet = DipUNet(32, 1, 16, 4)
    t, c = time.perf_counter(), time.process_time()
    fit_dip(unet, obs.y, obs.op, clean.shape, clean, iters=iters, track_every=iters)
    dip_wall, dip_cpu = (time.perf_counter() - t) / iters, (time.process_time() - c) / iters
    return {"lp_wall_s_per_iter": lp_wall, "lp_cpu_s_per_iter": lp_cpu,
            "dip_wall_s_per_iter": dip_wall, "dip_cpu_s_per_iter": dip_cpu,
            "lp_frozen_weights": lp.frozen_count(net), "lp_mask_bits": res[0].mask_bits,
            "lp_psi_params": psi, "lp_latents": latents, "dip_params": parameter_count(unet),
            "threads": threads, "timed_iters": iters, "load_avg": os.getloadavg()[0]}


def _key(job: tuple[Any, ...]) -> str:
    name, task, sigma, seed, args = job
    return f"{name}|{task}|{sigma:g}|{seed}|{args.size}|{args.crop}|{args.iters}|{args.dip_iters}"


def run_grid(jobs: list[tuple[Any, ...]], args: argparse.Namespace) -> list[dict[str, Any]]:
    """Run every cell (in ``args.workers`` processes), resuming from ``cells.jsonl``."""
    cache = args.out / "cells.jsonl"
    done = read_cells(args.out)
    todo = [j for j in jobs if _key(j) not in done]
    print(f"{len(jobs) - len(todo)} cells cached, {len(todo)} to run", file=sys.stderr)
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.workers) as pool, cache.open("a") as fh:
        futures = {pool.submit(cell, j): j for j in todo}
        for i, fut in enumerate(as_completed(futures), 1):
            job, row = futures[fut], fut.result()
            if "images" in row:
                save_crops(args.out / "crops.npz", row)
                row = {k: v for k, v in row.items() if k != "images"}
            done[_key(job)] = row
            fh.write(json.dumps({"key": _key(job), "row": row}) + "\n")
            fh.flush()
            print(f"[{i}/{len(todo)}] {job[0]} {job[1]} {job[2]:g} seed {job[3]}: "
                  f"LP {row['metrics']['psnr_lp']:.2f} dB, "
                  f"{time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    return [done[_key(j)] for j in jobs]


def _cached(path: Path, make: Any) -> Any:
    """``make()``, kept in ``path`` (JSON) so a later report reuses it."""
    if path.exists():
        return json.loads(path.read_text())
    value = make()
    path.write_text(json.dumps(value))
    return value


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/lottery_prior"))
    ap.add_argument("--quick", action="store_true", help="2 pictures, 1 seed, short fits")
    ap.add_argument("--part", choices=("all", "grid", "curves", "timing", "report"),
                    default="all", help="run one part; 'report' only tabulates what is cached")
    ap.add_argument("--report-only", action="store_true", help="same as --part report")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--size", type=int, default=32)
    ap.add_argument("--crop", type=int, default=64)
    ap.add_argument("--iters", type=int, default=300)
    ap.add_argument("--dip-iters", type=int, default=500)
    ap.add_argument("--curve-iters", type=int, default=1500)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = ap.parse_args()
    images = IMAGES
    if args.quick:
        images, args.seeds = IMAGES[:2], [0]
        args.iters, args.dip_iters, args.curve_iters = 60, 60, 100
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    start = time.perf_counter()
    jobs = [(n, t, s, seed, args) for seed in args.seeds for t, s in TASKS for n in images]
    part = "report" if args.report_only else args.part
    if part == "report":
        rows = cached_rows(jobs, args)
    elif part in ("all", "grid"):
        rows = run_grid(jobs, args)
    if part in ("all", "curves"):
        _cached(args.out / "curves.json", lambda: curves(args))
    if part in ("all", "timing"):
        _cached(args.out / "timing_256.json", lambda: timing_256(20 if args.quick else 50))
    if part not in ("all", "report", "grid"):
        return
    report(rows, args, images, time.perf_counter() - start)


def cached_rows(jobs: list[tuple[Any, ...]], args: argparse.Namespace) -> list[dict[str, Any]]:
    """The cells already in ``cells.jsonl`` (a partial grid gives a partial table)."""
    done = read_cells(args.out)
    return [done[_key(j)] for j in jobs if _key(j) in done]


def report(rows: list[dict[str, Any]], args: argparse.Namespace, images: tuple[str, ...],
           seconds: float) -> None:
    """Tables, figures and the JSON record from the cells and whatever parts are cached."""
    table, claim = summarise(rows), claims(rows)
    seeds = sorted({r["seed"] for r in rows})
    meta = {"size": args.size, "crop": args.crop, "images": list(images), "seeds": seeds,
            "iters": args.iters, "dip_iters": args.dip_iters, "cells": len(rows),
            "workers": args.workers, "load_avg": os.getloadavg()[0], "seconds": seconds}
    crops_figure(rows, args.out / "crops.npz", args.out / "lottery_prior_crops.png", args.size)
    curve_file, timing_file = args.out / "curves.json", args.out / "timing_256.json"
    curve = json.loads(curve_file.read_text()) if curve_file.exists() else None
    timing = json.loads(timing_file.read_text()) if timing_file.exists() else None
    if curve:
        curves_figure(curve, args.out / "lottery_prior_curves.png", args.size)
    md = markdown(table, claim, meta) + timing_markdown(timing, args.iters, args.dip_iters)
    md += "\n" + json.dumps({"timing_256": timing, "meta": meta}, indent=1) + "\n"
    (args.out / "lottery_prior.md").write_text(md)
    (args.out / "lottery_prior.json").write_text(json.dumps(
        {"table": table, "claims": claim, "timing_256": timing, "meta": meta}, indent=1))
    print(md)
    print(f"wall time {seconds:.0f} s")


if __name__ == "__main__":
    main()

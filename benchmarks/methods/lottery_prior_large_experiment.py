"""Lottery Prior at the picture sizes the paper restores: 128² and 256² grey pictures (issue 54).

Set12-style pictures from scikit-image's bundled photos: the largest centred
square whose side is a multiple of 256, area-averaged to 256² (so 512² photos
are halved, as Set12's 256² cameraman is) and, for 128², averaged once more.
Denoising at sigma 25 (0..255 scale), one noise draw per picture (seed 0);
every method restores the same noisy picture:

- Lottery Prior: ``--members`` random networks (the ensemble), ``--iters``
  Adam iterations + ``--iters // 10`` soft-round polish, λ_R by the
  discrepancy principle (LotteryCodec's network and settings otherwise);
- BM3D (true sigma), NL-means and wavelet shrinkage (scikit-image, true sigma);
- Deep Decoder (Heckel & Hand 2019; written here from the paper): the
  paper's weights-per-pixel ratio (k = 38 at 128², 70 at 256²), ``--dd-iters``
  Adam iterations at lr 0.01, last iterate.

``--timing`` measures one picture's CPU seconds per iteration first (the
budget is set from it). Cells (picture x size) are appended to
``benchmarks/results/lottery_prior/large_cells.jsonl`` as they finish and
skipped when present (resumable; several processes may run different
pictures). ``--report-only`` writes ``large.md``.

    nice -n 10 env OMP_NUM_THREADS=1 python benchmarks/methods/lottery_prior_large_experiment.py \\
        --sizes 128 --pictures camera coins [--members 2 --iters 1000 --dd-iters 1000]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "benchmarks" / "results" / "lottery_prior"
CELLS = OUT / "large_cells.jsonl"
PICTURES = ("camera", "coins", "moon", "astronaut", "coffee", "chelsea")
METHODS = (("lp", "Lottery Prior (ensemble)"), ("lp_members", "LP mean member"),
           ("lp_single", "LP one network"), ("bm3d", "BM3D"),
           ("deep_decoder", "Deep Decoder"), ("deep_decoder_oracle", "Deep Decoder (oracle stop)"),
           ("nlm", "NL-means"), ("wavelet", "wavelet BayesShrink"), ("input", "noisy input"))


def picture(name: str, size: int) -> np.ndarray:
    """The Set12-style grey ``(1, size, size)`` picture."""
    from flowerbed.methods.lottery_prior.data import load_picture, prepare

    img = load_picture(name)
    crop = min(img.shape[:2]) // 256 * 256
    return prepare(img, crop, size, True, name)


def params(args: argparse.Namespace, iters: int, dd_iters: int) -> Any:
    from flowerbed.methods.lottery_prior.learner import LotteryPriorParams

    return LotteryPriorParams(task="denoise", sigma=args.sigma, iters=iters,
                              polish_iters=iters // 10, ensemble_size=args.members,
                              ablate_rate=False, dd_iters=dd_iters,
                              baselines=("input", "nlm", "wavelet", "bm3d", "deep_decoder"))


def restore(args: argparse.Namespace, name: str, size: int, iters: int,
            dd_iters: int) -> dict[str, Any]:
    """One picture at one size: every method's metrics and CPU seconds."""
    from flowerbed.core.seeds import derive_seed
    from flowerbed.methods.lottery_prior.learner import observe, restore_image

    clean = picture(name, size)
    p = params(args, iters, dd_iters)
    obs = observe(p, clean, args.seed, name)
    cpu = time.process_time()
    res = restore_image(p, clean, obs, derive_seed(args.seed, "large", name))
    return {"metrics": res.metrics, "cpu_s": time.process_time() - cpu}


def timing(args: argparse.Namespace) -> None:
    """Marginal CPU seconds per LP member-iteration and per Deep Decoder iteration, per size.

    On one picture (camera), after a warm-up: LP alone with ``n`` and ``3n``
    iterations, Deep Decoder alone with ``n`` and ``3n``; the differences
    remove the fixed costs.
    """
    import torch

    from flowerbed.methods.lottery_prior import algorithm_baselines as bl
    from flowerbed.methods.lottery_prior.data import degrade
    from flowerbed.methods.lottery_prior.learner import LotteryPriorParams, restore_image
    from flowerbed.methods.lottery_prior.model_deep_decoder import for_size

    torch.set_num_threads(1)
    out = {}
    n = 5
    for size in args.sizes:
        clean = picture("camera", size)
        obs = degrade(clean, "denoise", args.sigma / 255, 0)

        def lp_cpu(iters: int, clean: np.ndarray = clean, obs: Any = obs) -> float:
            p = LotteryPriorParams(iters=iters, polish_iters=0, ensemble_size=1,
                                   ablate_rate=False, baselines=("input",))
            start = time.process_time()
            restore_image(p, clean, obs, 0)
            return time.process_time() - start

        def dd_cpu(iters: int, clean: np.ndarray = clean, obs: Any = obs,
                   size: int = size) -> float:
            start = time.process_time()
            bl.fit_deep_decoder(for_size(size), obs.y, obs.op, clean, iters=iters)
            return time.process_time() - start

        lp_cpu(1), dd_cpu(1)  # warm-up
        out[str(size)] = {"lp_cpu_s_per_member_iter": (lp_cpu(3 * n) - lp_cpu(n)) / (2 * n),
                          "dd_cpu_s_per_iter": (dd_cpu(3 * n) - dd_cpu(n)) / (2 * n)}
    (OUT / "large_timing.json").write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))


def load_cells() -> dict[str, dict[str, Any]]:
    if not CELLS.exists():
        return {}
    rows = (json.loads(line) for line in CELLS.read_text().splitlines() if line.strip())
    return {r["key"]: r for r in rows}


def run(args: argparse.Namespace) -> None:
    """Every picture x size not stored yet, pictures in order, each size per picture first."""
    import torch

    torch.set_num_threads(1)
    for name in args.pictures:
        for size in args.sizes:
            key = f"{size}/{name}/{args.sigma:g}/{args.seed}"
            if key in load_cells():
                continue
            row = {"key": key, "size": size, "image": name, "sigma": args.sigma,
                   "seed": args.seed, "iters": args.iters, "members": args.members,
                   "dd_iters": args.dd_iters, **restore(args, name, size, args.iters,
                                                        args.dd_iters)}
            with CELLS.open("a") as fh:
                fh.write(json.dumps(row) + "\n")
            m = row["metrics"]
            print(f"{key}: LP {m['psnr_lp']:.2f}  BM3D {m['psnr_bm3d']:.2f}  DD "
                  f"{m['psnr_deep_decoder']:.2f}  input {m['psnr_input']:.2f}  "
                  f"{row['cpu_s']:.0f} CPU-s", flush=True)


def report() -> None:
    """``large.md``: PSNR per picture and method, per size."""
    cells = load_cells()
    lines = ["# Lottery Prior at 128² / 256²: denoising PSNR (dB)", "",
             "Written by `benchmarks/methods/lottery_prior_large_experiment.py --report-only`; "
             "sigma 25, one noise draw per picture (seed 0).", ""]
    for size in sorted({r["size"] for r in cells.values()}):
        rows = sorted((r for r in cells.values() if r["size"] == size),
                      key=lambda r: PICTURES.index(r["image"]) if r["image"] in PICTURES else 99)
        r0 = rows[0]
        lines += [f"## {size}²: {r0['members']} members, {r0['iters']} + {r0['iters'] // 10} "
                  f"iterations; Deep Decoder {r0['dd_iters']} iterations", "",
                  "| method | " + " | ".join(r["image"] for r in rows) + " | mean |",
                  "|---|" + "---|" * (len(rows) + 1)]
        for m, label in METHODS:
            v = [r["metrics"].get(f"psnr_{m}", float("nan")) for r in rows]
            lines.append(f"| {label} | " + " | ".join(f"{x:.2f}" for x in v)
                         + f" | {np.mean(v):.2f} |")
        bits = [(r["metrics"]["lp_latent_bits"], r["metrics"]["lp_psi_bits"]) for r in rows]
        lines += ["", "Bits per member, latents / modules psi: "
                  + ", ".join(f"{r['image']} {a:.0f} / {b:.0f}" for r, (a, b) in
                              zip(rows, bits, strict=True))
                  + f". CPU seconds per picture: {np.mean([r['cpu_s'] for r in rows]):.0f}.", ""]
    (OUT / "large.md").write_text("\n".join(lines))
    print("\n".join(lines))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[128, 256])
    ap.add_argument("--pictures", nargs="+", default=list(PICTURES))
    ap.add_argument("--sigma", type=float, default=25.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--members", type=int, default=2)
    ap.add_argument("--iters", type=int, default=1000)
    ap.add_argument("--dd-iters", type=int, default=1000)
    ap.add_argument("--timing", action="store_true")
    ap.add_argument("--report-only", action="store_true")
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    if args.timing:
        timing(args)
    elif not args.report_only:
        run(args)
    report()


if __name__ == "__main__":
    main()

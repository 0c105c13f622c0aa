"""Frozen-backbone early exit under the NNGP model: predicted vs simulated trade-off.

Theory: docs/methods/compute_reduction.md (reconstructed from the abstract of ICML
2026 poster 63550); code: ``exit_tradeoff`` and ``local_exponent`` in
flowerbed/methods/compute_reduction/algorithm_theory.py.

E4 setup: a random He-initialised ReLU MLP (width 512, depth L = 8, inputs
N(0, I_64)) is frozen; its label is the sign of the centred final readout v. For
each layer l < L a ridge head is fitted from h^l to v on 5,000 inputs, and its
alignment rho_l = corr(head, v) is measured on a separate probe set. The
conditional perceptron (exit with sign(head) when |standardised head| > tau)
then predicts, from rho_l alone, the whole curve of excess error E against the
exited fraction g (E ~ g^(1/(1-rho_l^2)) in the tail) and the mean compute
1 - g (1 - l/L). The simulation applies the rule on fresh test inputs.

Checks, per exit head (printed with PASS/FAIL):

* the log E vs log g slope fitted to the simulation over the thresholds where
  the predicted error count is >= 25 (and tau >= 0.25; at least the first three
  such thresholds) is within 15% of the slope of the predicted curve over the
  same thresholds;
* max |E_sim - E_pred| over tau in [0, 3] is <= 0.01 (one accuracy point);
* the fitted slopes increase with depth (deeper exits: steeper error-vs-gap).

Usage::

    OMP_NUM_THREADS=1 python benchmarks/methods/compute_reduction_early_exit.py [--quick]
        [--out benchmarks/results/compute_reduction] [--img docs/methods/img]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from flowerbed.methods.compute_reduction import algorithm_theory as ct

TAUS = np.linspace(0.0, 3.0, 31)
SLOPE_TOL, CURVE_TOL, MIN_COUNT, MIN_POINTS = 0.15, 0.01, 25, 3


def backbone(width: int, depth: int, d_in: int, rng: np.random.Generator) -> list[np.ndarray]:
    """He-initialised weights of a bias-free ReLU MLP plus a final readout row."""
    dims = [d_in] + [width] * depth
    ws = [
        rng.standard_normal((dims[i + 1], dims[i])) * np.sqrt(2.0 / dims[i]) for i in range(depth)
    ]
    ws.append(rng.standard_normal((1, width)) / np.sqrt(width))
    return [w.astype(np.float32) for w in ws]


def forward(ws: list[np.ndarray], x: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
    """Hidden activations of every layer and the final score."""
    hs, h = [], x.astype(np.float32)
    for w in ws[:-1]:
        h = np.maximum(h @ w.T, 0.0)
        hs.append(h)
    return hs, (h @ ws[-1].T)[:, 0].astype(np.float64)


def ridge_head(
    h: np.ndarray, v: np.ndarray, rel_lam: float = 1e-2
) -> tuple[np.ndarray, np.ndarray]:
    """Centred ridge regression ``v ~ (h - mean) b``; returns ``(mean, b)``."""
    h = h.astype(np.float64)
    mean = h.mean(0)
    hc = h - mean
    gram = hc.T @ hc
    lam = rel_lam * np.trace(gram) / gram.shape[0]
    return mean, np.linalg.solve(gram + lam * np.eye(gram.shape[0]), hc.T @ (v - v.mean()))


def simulate(width: int, n_probe: int, n_test: int, rng: np.random.Generator) -> dict:
    """Fit heads, measure rho_l, and compare simulated (g, E) with the prediction."""
    depth, d_in, n_train = 8, 64, 5000
    ws = backbone(width, depth, d_in, rng)
    (h_tr, v_tr), (h_pr, v_pr), (h_te, v_te) = (
        forward(ws, rng.standard_normal((n, d_in))) for n in (n_train, n_probe, n_test)
    )
    centre = v_tr.mean()
    v = v_te - centre
    out = {}
    for layer in range(1, depth):
        mean, b = ridge_head(h_tr[layer - 1], v_tr)
        probe = (h_pr[layer - 1] - mean) @ b
        rho = float(np.corrcoef(probe, v_pr)[0, 1])
        u = ((h_te[layer - 1] - mean) @ b - probe.mean()) / probe.std()
        wrong = np.sign(u) != np.sign(v)
        gap = np.array([np.mean(np.abs(u) > t) for t in TAUS])
        err = np.array([np.mean((np.abs(u) > t) & wrong) for t in TAUS])
        g_pred, c_pred, e_pred = ct.exit_tradeoff(rho, layer / depth, TAUS)
        fit = (e_pred * n_test >= MIN_COUNT) & (TAUS >= 0.25) & (err > 0)
        if fit.sum() < MIN_POINTS:  # too few thresholds with enough errors: first three
            fit = (TAUS >= 0.25) & (np.cumsum(TAUS >= 0.25) <= MIN_POINTS) & (err > 0)
        slope_sim = float(np.polyfit(np.log(gap[fit]), np.log(err[fit]), 1)[0])
        slope_pred = float(np.polyfit(np.log(g_pred[fit]), np.log(e_pred[fit]), 1)[0])
        curve_dev = float(np.max(np.abs(err - e_pred)))
        out[layer] = {
            "rho": rho,
            "alpha": ct.exponent(rho),
            "tau_fit": [float(TAUS[fit].min()), float(TAUS[fit].max())],
            "gap_sim": gap.tolist(),
            "error_sim": err.tolist(),
            "compute_sim": (1 - gap * (1 - layer / depth)).tolist(),
            "gap_pred": g_pred.tolist(),
            "error_pred": e_pred.tolist(),
            "compute_pred": c_pred.tolist(),
            "slope_sim": slope_sim,
            "slope_pred": slope_pred,
            "max_curve_dev": curve_dev,
            "ok": abs(slope_sim / slope_pred - 1) <= SLOPE_TOL and curve_dev <= CURVE_TOL,
        }
    return out


def plot(res: dict, path: Path, title: str) -> None:
    """Left: log E vs log g; right: accuracy vs mean compute; lines theory, dots sim."""
    fig, ax = plt.subplots(1, 2, figsize=(13, 5))
    cmap = plt.get_cmap("viridis")
    for i, (layer, r) in enumerate(res.items()):
        color = cmap(i / max(len(res) - 1, 1))
        lab = (
            f"exit l={layer}: rho={r['rho']:.3f}, fit {r['slope_sim']:.2f} vs {r['slope_pred']:.2f}"
        )
        ax[0].loglog(r["gap_pred"], r["error_pred"], "-", color=color, label=lab)
        ax[0].loglog(r["gap_sim"], r["error_sim"], "o", ms=3, color=color)
        ax[1].plot(r["compute_pred"], 1 - np.array(r["error_pred"]), "-", color=color)
        ax[1].plot(r["compute_sim"], 1 - np.array(r["error_sim"]), "o", ms=3, color=color)
    ax[0].set(
        xlabel="compute gap g = fraction exiting",
        ylabel="excess error E",
        ylim=(1e-5, 0.5),
        title="E4 frozen backbone: E vs g (line: theory from rho_l, o: simulation)",
    )
    ax[1].set(
        xlabel="mean compute (full pass = 1)",
        ylabel="accuracy vs full-network label",
        title=title,
    )
    ax[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    """Run E4, save JSON + PNG, print the comparison with PASS/FAIL."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="benchmarks/results/compute_reduction")
    ap.add_argument("--img", default="docs/methods/img", help="folder of the full run's PNG")
    ap.add_argument("--quick", action="store_true", help="fewer probe and test inputs")
    args = ap.parse_args()
    t0 = time.perf_counter()
    n_probe, n_test = (10_000, 20_000) if args.quick else (20_000, 50_000)
    width = 512
    res = simulate(width, n_probe, n_test, np.random.default_rng(0))
    slopes = [r["slope_sim"] for r in res.values()]
    steeper = bool(np.all(np.diff(slopes) > 0))
    for layer, r in res.items():
        print(
            f"E4 exit after layer {layer}/8: rho {r['rho']:.4f} (alpha {r['alpha']:.2f}); "
            f"slope over tau {r['tau_fit'][0]:.2f}..{r['tau_fit'][1]:.2f}: sim "
            f"{r['slope_sim']:.3f} vs theory {r['slope_pred']:.3f} (tol {SLOPE_TOL:.0%}); "
            f"max |E_sim - E_pred| {r['max_curve_dev']:.4f} (tol {CURVE_TOL}) "
            f"{'PASS' if r['ok'] else 'FAIL'}"
        )
    print(f"E4 fitted slopes increase with depth: {'PASS' if steeper else 'FAIL'}")
    ok = steeper and all(r["ok"] for r in res.values())
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tag = "_quick" if args.quick else ""
    img = out if args.quick else Path(args.img)
    img.mkdir(parents=True, exist_ok=True)
    plot(res, img / f"compute_early_exit{tag}.png", f"E4 trade-off, width {width}, depth 8")
    (out / f"compute_early_exit{tag}.json").write_text(
        json.dumps(
            {
                "quick": args.quick,
                "width": width,
                "n_test": n_test,
                "e4": res,
                "steeper_with_depth": steeper,
                "all_ok": ok,
                "wall_s": round(time.perf_counter() - t0, 1),
            },
            indent=1,
        )
    )
    print(
        f"all within tolerance: {'PASS' if ok else 'FAIL'}; wall {time.perf_counter() - t0:.1f} s"
    )


if __name__ == "__main__":
    main()

"""Scaling laws of one-shot pruning and early exit: reconstructed theory vs simulation.

Theory: docs/methods/compute_reduction.md (reconstructed from the abstract of ICML 2026
poster 63550); code: flowerbed/methods/compute_reduction/algorithm_theory.py. Three laws, each with
a fitted rate printed next to the predicted one and a stated tolerance:

* E1 concentration: RMS|rho_hat - rho(kappa)| ~ d^slope, predicted slope -1/2
  (tolerance +-0.1);
* E2 conditional perceptron: log E vs log g; tail slope over tau in [5, 6] vs
  alpha = 1/(1-rho^2) (tolerance 3% for rho <= 0.9, 10% for rho = 0.95, where the
  log(tau)/tau^2 prefactor decays slowest); Monte-Carlo E within 3 sigma of the
  quadrature for tau <= 3;
* E3 depth: pruned/full cosine per layer of He ReLU MLPs vs the recursion
  c_l = rho K(c_{l-1}). One network at width n deviates from the recursion by
  finite-width noise of size ~ (1 - c^2)/sqrt(n) per layer (about 0.02 at
  n = 2000, kappa = 0.2, so a 0.02 bound on one network is below its noise
  floor). Two checks instead: (a) the mean over R independent networks at the
  largest width is within 4 standard errors + 0.002 of the recursion at every
  layer (no systematic deviation: the recursion is the width -> infinity
  limit); (b) the RMS deviation of one network shrinks like n^slope, slope -1/2
  by the central limit theorem over the n units of a layer (tolerance +-0.25:
  the RMS comes from correlated deep-layer deviations of a few dozen networks,
  so each point carries ~10-15% error and slopes over widths 125..1000 scatter
  by about +-0.15 between seeds).

Usage::

    OMP_NUM_THREADS=1 python benchmarks/methods/compute_reduction_scaling.py [--quick]
        [--out benchmarks/results/compute_reduction] [--img docs/methods/img]
        [--widths 125 250 500 1000] [--nets 16]

The full run writes docs/methods/img/compute_scaling.png; --quick writes its plot into --out.
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

KAPPAS_E1 = (0.2, 0.5)
RHOS_E2 = (0.5, 0.7, 0.9, 0.95)
KAPPAS_E3 = (0.2, 0.5, 0.8)


def e1_concentration(dims: list[int], reps: int, rng: np.random.Generator) -> dict:
    """RMS error of rho_hat per (kappa, d) and the fitted log-log slope."""
    out = {}
    for kappa in KAPPAS_E1:
        rms = [ct.concentration_rms(d, kappa, reps, rng) for d in dims]
        slope = float(np.polyfit(np.log(dims), np.log(rms), 1)[0])
        out[kappa] = {
            "dims": dims,
            "rms": rms,
            "slope": slope,
            "predicted": -0.5,
            "ok": abs(slope + 0.5) <= 0.1,
        }
    return out


def _mc_error(rho: float, taus: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    u = rng.standard_normal(n)
    v = rho * u + np.sqrt(1 - rho * rho) * rng.standard_normal(n)
    wrong = np.sign(u) != np.sign(v)
    return np.array([np.mean(wrong & (np.abs(u) > t)) for t in taus])


def e2_early_exit(n_mc: int, rng: np.random.Generator) -> dict:
    """Quadrature curve, Monte-Carlo check and tail slope per alignment rho."""
    taus = np.linspace(1.0, 6.0, 26)
    mc_taus = taus[taus <= 3.0]
    out = {}
    for rho in RHOS_E2:
        err = np.array([ct.excess_error(t, rho) for t in taus])
        mc = _mc_error(rho, mc_taus, n_mc, rng)
        exact = err[: len(mc_taus)]
        sigma = np.sqrt(exact * (1 - exact) / n_mc)  # binomial sd at the predicted value
        e5, e6 = ct.excess_error(5.0, rho), ct.excess_error(6.0, rho)
        g5, g6 = ct.compute_gap(5.0), ct.compute_gap(6.0)
        slope = float(np.log(e6 / e5) / np.log(g6 / g5))
        alpha, tol = ct.exponent(rho), (0.03 if rho <= 0.9 else 0.10)
        mc_z = float(np.max(np.abs(mc - exact) / sigma))
        out[rho] = {
            "taus": taus.tolist(),
            "gap": ct.compute_gap(taus).tolist(),
            "error": err.tolist(),
            "mc_taus": mc_taus.tolist(),
            "mc": mc.tolist(),
            "slope": slope,
            "predicted": alpha,
            "rel_tol": tol,
            "mc_max_z": mc_z,
            "ok": abs(slope / alpha - 1) <= tol and mc_z <= 3.0,
        }
    return out


def e3_depth(widths: list[int], nets: int, depth: int, rng: np.random.Generator) -> dict:
    """Per-layer cosine of independent networks per width vs the recursion.

    ``nets`` networks at the largest width, proportionally more at smaller ones.
    """
    out = {}
    for kappa in KAPPAS_E3:
        rho = float(ct.rho_limit(kappa))
        rec = ct.depth_recursion(rho, depth)
        rms, sims = [], np.empty(0)
        for width in widths:  # more networks at smaller widths: same cost per width
            reps = nets * widths[-1] // width
            sims = np.array([ct.simulate_depth(width, depth, kappa, 32, rng) for _ in range(reps)])
            rms.append(float(np.sqrt(np.mean((sims - rec) ** 2))))
        mean, se = sims.mean(0), sims.std(0, ddof=1) / np.sqrt(nets)
        bound = 4.0 * se + 0.002
        slope = float(np.polyfit(np.log(widths), np.log(rms), 1)[0])
        out[kappa] = {
            "widths": widths,
            "nets": nets,
            "rms_dev": rms,
            "rms_slope": slope,
            "sim_mean": mean.tolist(),
            "sim_se": se.tolist(),
            "recursion": rec.tolist(),
            "fixed_point": ct.fixed_point(rho),
            "max_abs_mean_dev": float(np.max(np.abs(mean - rec))),
            "max_z": float(np.max(np.abs(mean - rec) / se)),
            "single_net_max_dev": float(np.max(np.abs(sims - rec), axis=1).mean()),
            "ok": bool(np.all(np.abs(mean - rec) <= bound)) and abs(slope + 0.5) <= 0.25,
        }
    return out


def plot(e1: dict, e2: dict, e3: dict, path: Path) -> None:
    """Four panels, theory as lines and simulation as markers."""
    fig, axes = plt.subplots(2, 2, figsize=(12, 9))
    ax = axes.ravel()
    for kappa, r in e1.items():
        d = np.array(r["dims"], float)
        line = ax[0].loglog(d, r["rms"], "o", label=f"sim kappa={kappa} (slope {r['slope']:.2f})")
        ax[0].loglog(d, r["rms"][0] * (d / d[0]) ** -0.5, "-", color=line[0].get_color())
    ax[0].set(
        xlabel="d", ylabel="RMS |rho_hat - rho(kappa)|", title="E1 concentration (line: d^-1/2)"
    )
    for rho, r in e2.items():
        line = ax[1].loglog(
            r["gap"],
            r["error"],
            "-",
            label=f"rho={rho}: fit {r['slope']:.2f} vs {r['predicted']:.2f}",
        )
        gap_mc = ct.compute_gap(np.array(r["mc_taus"]))
        ax[1].loglog(gap_mc, r["mc"], "o", ms=4, color=line[0].get_color())
    ax[1].set(
        xlabel="compute gap g = P(exit)",
        ylabel="excess error E",
        ylim=(1e-12, 1.0),
        title="E2 early exit (line: quadrature, o: Monte Carlo)",
    )
    for kappa, r in e3.items():
        layers = np.arange(1, len(r["sim_mean"]) + 1)
        line = ax[2].plot(layers, r["recursion"], "-", label=f"kappa={kappa}")
        ax[2].errorbar(
            layers,
            r["sim_mean"],
            yerr=2 * np.array(r["sim_se"]),
            fmt="o",
            ms=4,
            color=line[0].get_color(),
        )
        ax[2].axhline(r["fixed_point"], ls=":", color=line[0].get_color())
        w = np.array(r["widths"], float)
        line = ax[3].loglog(
            w, r["rms_dev"], "o", label=f"kappa={kappa}: slope {r['rms_slope']:.2f}"
        )
        ax[3].loglog(w, r["rms_dev"][0] * (w / w[0]) ** -0.5, "-", color=line[0].get_color())
    r0 = next(iter(e3.values()))
    ax[2].set(
        xlabel="layer",
        ylabel="cos(pruned, full)",
        title=f"E3 depth, width {r0['widths'][-1]} (line: recursion, o: mean of "
        f"{r0['nets']} nets +-2 SE, dotted: c*)",
    )
    ax[3].set(
        xlabel="width n",
        ylabel="RMS (sim - recursion), one net",
        title="E3 finite-width deviation (line: n^-1/2)",
    )
    for a in ax:
        a.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def report(e1: dict, e2: dict, e3: dict) -> bool:
    """Print fitted vs predicted rates; return whether every law is within tolerance."""
    for kappa, r in e1.items():
        print(
            f"E1 kappa={kappa}: slope {r['slope']:+.3f} vs -0.500 (tol 0.1) "
            f"{'PASS' if r['ok'] else 'FAIL'}"
        )
    for rho, r in e2.items():
        print(
            f"E2 rho={rho}: tail slope {r['slope']:.3f} vs alpha {r['predicted']:.3f} "
            f"(tol {r['rel_tol']:.0%}), MC max |z| {r['mc_max_z']:.2f} "
            f"{'PASS' if r['ok'] else 'FAIL'}"
        )
    for kappa, r in e3.items():
        print(
            f"E3 kappa={kappa}: width {r['widths'][-1]}, mean of {r['nets']} nets: max "
            f"|mean - recursion| {r['max_abs_mean_dev']:.4f} (max z {r['max_z']:.2f}; tol "
            f"4 SE + 0.002), one net {r['single_net_max_dev']:.4f}; RMS dev ~ n^"
            f"{r['rms_slope']:+.3f} vs -0.500 (tol 0.25); layer-{len(r['recursion'])} "
            f"{r['sim_mean'][-1]:.4f} vs {r['recursion'][-1]:.4f}, c* "
            f"{r['fixed_point']:.4f} {'PASS' if r['ok'] else 'FAIL'}"
        )
    return all(r["ok"] for e in (e1, e2, e3) for r in e.values())


def main() -> None:
    """Run E1-E3, save JSON + PNG, print the comparison."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="benchmarks/results/compute_reduction")
    ap.add_argument("--img", default="docs/methods/img", help="folder of the full run's PNG")
    ap.add_argument("--quick", action="store_true", help="smaller sizes (smoke run)")
    ap.add_argument("--widths", type=int, nargs="+", help="E3 widths (default 125..1000)")
    ap.add_argument("--nets", type=int, help="E3 networks at the largest width (default 16)")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    dims = [100, 1000, 10_000] if args.quick else [100, 1000, 10_000, 100_000]
    e1 = e1_concentration(dims, 50 if args.quick else 200, rng)
    e2 = e2_early_exit(1_000_000 if args.quick else 4_000_000, rng)
    widths = args.widths or ([125, 250, 500] if args.quick else [125, 250, 500, 1000])
    e3 = e3_depth(sorted(widths), args.nets or (8 if args.quick else 16), 12, rng)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tag = "_quick" if args.quick else ""
    img = out if args.quick else Path(args.img)
    img.mkdir(parents=True, exist_ok=True)
    plot(e1, e2, e3, img / f"compute_scaling{tag}.png")
    ok = report(e1, e2, e3)
    (out / f"compute_scaling{tag}.json").write_text(
        json.dumps(
            {
                "quick": args.quick,
                "e1": e1,
                "e2": e2,
                "e3": e3,
                "all_ok": ok,
                "wall_s": round(time.perf_counter() - t0, 1),
            },
            indent=1,
            default=str,
        )
    )
    print(
        f"all within tolerance: {'PASS' if ok else 'FAIL'}; "
        f"wall {time.perf_counter() - t0:.1f} s; results in {out}"
    )


if __name__ == "__main__":
    main()

"""Monte-Carlo check of the FQR ensemble (pure algorithm calls, no Flower).

Synthetic setting of ``scenarios/fqr/synthetic.yaml``: d = 6 AR(1)(0.5)
Gaussian features, t3 noise, agents on cyclic feature windows. Per tau it reports
the slope MSE (sum over coordinates) of the ensemble (estimated Sigma), the
ensemble with oracle Sigma, the identity-weight ensemble, Naive-OSFL averaging and
pooled QR on all rows and features, and the 95% CI coverage of the true slopes
with the corrected covariance, the reference recipe's plug-in one and oracle Sigma.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/methods/fqr_experiment.py --reps 200
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
from scipy import stats

from flowerbed.data.feature_partitions import window_subsets
from flowerbed.methods.fqr import algorithm as fqr
from flowerbed.methods.fqr.algorithm_local import fit_local, quantreg
from flowerbed.methods.fqr.data import (
    SyntheticQuantileParams,
    design_cov,
    simulate,
    true_quantile_coefficients,
)

TAUS = np.array([0.1, 0.25, 0.5, 0.75, 0.9])
DESIGNS = {"spec": (3, 4), "overlap5": (6, 5)}  # (agents, features per agent), d = 6


def one_rep(args: tuple[int, str, int, float]) -> dict[str, np.ndarray]:
    """One replication: returns squared errors (K, d) and z-scores per estimator."""
    seed, design, n, hetero = args
    params = SyntheticQuantileParams(hetero=hetero)
    truth = true_quantile_coefficients(params, TAUS)[:, 1:]
    rng = np.random.default_rng(seed)
    agents, width = DESIGNS[design]
    subsets = window_subsets(6, agents, width)
    fits, xs, ys = [], [], []
    for s in subsets:
        x, y = simulate(params, n, rng)
        xs.append(x)
        ys.append(y)
        fits.append(fit_local(x[:, s], y, TAUS, s))
    est = fqr.ensemble(fits, 6)
    orc = fqr.ensemble(fits, 6, sigma=design_cov(params))
    ident = fqr.ensemble(fits, 6, "identity", sigma_correction=False)
    x_all, y_all = np.vstack(xs), np.concatenate(ys)
    pooled = np.array([quantreg(x_all, y_all, t)[1:] for t in TAUS])

    def se(cov: np.ndarray) -> np.ndarray:
        return np.sqrt(np.diagonal(cov, axis1=1, axis2=2))

    return {
        "err_ensemble": est.beta - truth,
        "err_oracle_sigma": orc.beta - truth,
        "err_identity": ident.beta - truth,
        "err_naive": fqr.naive_average(fits, 6) - truth,
        "err_pooled": pooled - truth,
        "z_corrected": (est.beta - truth) / se(est.cov),
        "z_plugin": (est.beta - truth) / se(est.cov_qr),
        "z_oracle_sigma": (orc.beta - truth) / se(orc.cov),
    }


def summarise(reps: list[dict[str, np.ndarray]]) -> list[dict[str, float]]:
    """One row per tau: MSEs, ratios, coverages and z-score sd."""
    stack = {k: np.array([r[k] for r in reps]) for k in reps[0]}  # (R, K, d)
    rows = []
    for k, tau in enumerate(TAUS):
        mse = {
            e: float(np.mean(np.sum(stack[f"err_{e}"][:, k] ** 2, axis=1)))
            for e in ("ensemble", "oracle_sigma", "identity", "naive", "pooled")
        }
        row = {"tau": float(tau), **{f"mse_{e}": v for e, v in mse.items()}}
        row["ratio_ensemble_pooled"] = mse["ensemble"] / mse["pooled"]
        row["ratio_ensemble_oracle_sigma"] = mse["ensemble"] / mse["oracle_sigma"]
        row["max_abs_bias_ensemble"] = float(np.max(np.abs(stack["err_ensemble"][:, k].mean(0))))
        row["max_abs_bias_naive"] = float(np.max(np.abs(stack["err_naive"][:, k].mean(0))))
        for z in ("corrected", "plugin", "oracle_sigma"):
            vals = stack[f"z_{z}"][:, k]
            row[f"coverage_{z}"] = float(np.mean(np.abs(vals) <= 1.959964))
            row[f"zsd_{z}"] = float(np.std(vals))
        rows.append(row)
    return rows


def write_outputs(
    rows: list[dict[str, float]], reps: list[dict[str, np.ndarray]], out: Path, tag: str
) -> None:
    """CSV + markdown table and the coverage / QQ figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    cols = list(rows[0])
    lines = [",".join(cols)] + [",".join(f"{r[c]:.5g}" for c in cols) for r in rows]
    (out / f"montecarlo_{tag}.csv").write_text("\n".join(lines) + "\n")
    md = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    md += ["| " + " | ".join(f"{r[c]:.4g}" for c in cols) + " |" for r in rows]
    (out / f"montecarlo_{tag}.md").write_text("\n".join(md) + "\n")
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    width = 0.25
    for i, z in enumerate(("corrected", "plugin", "oracle_sigma")):
        ax1.bar(
            np.arange(len(TAUS)) + (i - 1) * width,
            [r[f"coverage_{z}"] for r in rows],
            width,
            label=z,
        )
    ax1.axhspan(0.93, 0.97, color="green", alpha=0.15, label="93-97% target")
    ax1.axhline(0.95, color="k", lw=0.8)
    ax1.set(
        xticks=range(len(TAUS)),
        xticklabels=[f"{t:g}" for t in TAUS],
        ylim=(0.8, 1.0),
        xlabel="tau",
        ylabel="95% CI coverage",
        title=f"CI coverage ({len(reps)} reps)",
    )
    ax1.legend(fontsize=8, loc="lower left")
    z = np.sort(np.concatenate([r["z_corrected"].ravel() for r in reps]))
    theo = stats.norm.ppf((np.arange(1, len(z) + 1) - 0.5) / len(z))
    ax2.plot(theo, z, ".", ms=2, label="corrected SE")
    zp = np.sort(np.concatenate([r["z_plugin"].ravel() for r in reps]))
    ax2.plot(theo, zp, ".", ms=2, alpha=0.5, label="plug-in SE (spec)")
    ax2.plot([-4, 4], [-4, 4], "k-", lw=0.8)
    ax2.set(
        xlabel="N(0,1) quantile",
        ylabel="z = (beta_hat - beta) / SE",
        title="QQ of z-scores, all taus",
    )
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / f"coverage_qq_{tag}.png", dpi=110)


def main() -> None:
    """Run the replications and write the table and figure."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--n", type=int, default=2000, help="rows per agent")
    ap.add_argument("--design", choices=sorted(DESIGNS), default="spec")
    ap.add_argument("--hetero", type=float, default=0.0, help="scale slope on feature 0 (stress)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/fqr"))
    a = ap.parse_args()
    started = time.perf_counter()
    jobs = [(a.seed * 100_003 + r, a.design, a.n, a.hetero) for r in range(a.reps)]
    with ProcessPoolExecutor(a.workers) as pool:
        reps = list(pool.map(one_rep, jobs, chunksize=4))
    rows = summarise(reps)
    tag = f"{a.design}_n{a.n}" + (f"_hetero{a.hetero:g}" if a.hetero else "")
    write_outputs(rows, reps, a.out, tag)
    print((a.out / f"montecarlo_{tag}.md").read_text())
    print(f"{a.reps} reps in {time.perf_counter() - started:.0f} s -> {a.out}")


if __name__ == "__main__":
    main()

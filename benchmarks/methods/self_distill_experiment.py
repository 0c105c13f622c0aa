"""Small CPU experiment for optimal self-distillation in ridge.

Dang, Patil, Rinaldo, "Optimal Unconstrained Self-Distillation in Ridge Regression",
arXiv 2602.17565. Claims checked: (1) the optimally mixed student's risk is strictly
below the teacher's wherever R'(λ) ≠ 0; (2) ξ* < 0 in the over-regularised regime
and crosses 0 at λ_opt; (3) the one-shot estimate ξ̂ tracks the oracle ξ* and its
error shrinks as n grows; plus an OOD check and diabetes with random ReLU features.

Usage::

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/methods/self_distill_experiment.py \
        [--out benchmarks/results/self_distill] [--quick]
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
from sklearn.datasets import load_diabetes

from flowerbed.methods.self_distill import algorithm as sd
from flowerbed.methods.self_distill.data import ar1_covariance

RHO, NOISE = 0.5, 1.0


def problem(n, p, seed, rho=RHO):
    gen = np.random.default_rng(seed)
    cov = ar1_covariance(p, rho)
    beta = np.random.default_rng(12345 + p).standard_normal(p)
    beta /= np.sqrt(beta @ cov @ beta)
    x = gen.standard_normal((n, p)) @ np.linalg.cholesky(cov).T
    return x, x @ beta + NOISE * gen.standard_normal(n), beta, cov


def curves(n, p, lams, seed):
    """Oracle, one-shot and asymptotic quantities along the λ grid for one draw."""
    x, y, beta, cov = problem(n, p, seed)
    fit = sd.decompose(x, y)
    evals, vecs = np.linalg.eigh(cov)
    signal = (vecs.T @ beta) ** 2
    rows = []
    for lam in lams:
        o, g = sd.oracle_quadratic(fit, lam, beta, cov, NOISE**2), sd.gcv_quadratic(fit, lam)
        a = sd.asymptotic_quadratic(lam, evals, signal, n, NOISE**2)
        rows.append(
            {
                "lam": lam,
                "R": o.a,
                "R_sd_star": o.optimal_risk(),
                "R_sd_hat": float(o.risk(g.xi_star())),
                "xi_star": o.xi_star(),
                "xi_hat": g.xi_star(),
                "xi_de": a.xi_star(),
                "R_de": a.a,
                "R_sd_de": a.optimal_risk(),
                "R_prime": o.slope(),
            }
        )
    return rows


def synthetic(configs, lams):
    out = {}
    for n, p in configs:
        rows = curves(n, p, lams, seed=n + p)
        r = np.array([row["R"] for row in rows])
        i_opt = int(np.argmin(r))
        gains = np.array([row["R"] - row["R_sd_star"] for row in rows])
        over = [row["xi_star"] for row in rows[i_opt + 1 :]]
        out[f"n={n},p={p}"] = {
            "rows": rows,
            "lam_opt_grid": lams[i_opt],
            "strict_gain_everywhere_but_opt": bool(np.all(np.delete(gains, i_opt) > 0)),
            "min_gain_off_opt": float(np.delete(gains, i_opt).min()),
            "xi_star_negative_above_opt": bool(all(v < 0 for v in over)),
            "xi_star_positive_below_opt": bool(all(row["xi_star"] > 0 for row in rows[:i_opt])),
        }
    return out


def consistency(ratios, ns, lams, seeds):
    """Relative error |ξ̂-ξ*|/max(1,|ξ*|) and regret R_SD(ξ̂)-R_SD(ξ*) as n grows."""
    table = []
    for ratio in ratios:
        for n in ns:
            p = int(ratio * n)
            errs = {lam: [] for lam in lams}
            regret = {lam: [] for lam in lams}
            for s in range(seeds):
                x, y, beta, cov = problem(n, p, seed=1000 * s + n)
                fit = sd.decompose(x, y)
                for lam in lams:
                    o, g = (
                        sd.oracle_quadratic(fit, lam, beta, cov, NOISE**2),
                        sd.gcv_quadratic(fit, lam),
                    )
                    errs[lam].append(abs(g.xi_star() - o.xi_star()) / max(1.0, abs(o.xi_star())))
                    regret[lam].append(float(o.risk(g.xi_star())) - o.optimal_risk())
            for lam in lams:
                table.append(
                    {
                        "p/n": ratio,
                        "n": n,
                        "p": p,
                        "lam": lam,
                        "rel_err": float(np.mean(errs[lam])),
                        "regret": float(np.mean(regret[lam])),
                    }
                )
    return table


def ood(n, p, lams, test_rho=0.9):
    """Oracle ξ* under a shifted test covariance vs the in-distribution ξ* and ξ̂."""
    x, y, beta, cov = problem(n, p, seed=7)
    fit = sd.decompose(x, y)
    cov0 = ar1_covariance(p, test_rho)
    rows = []
    for lam in lams:
        o_id, o_ood = (
            sd.oracle_quadratic(fit, lam, beta, cov, 1.0),
            sd.oracle_quadratic(fit, lam, beta, cov0, 1.0),
        )
        g = sd.gcv_quadratic(fit, lam)
        rows.append(
            {
                "lam": lam,
                "xi_star_id": o_id.xi_star(),
                "xi_star_ood": o_ood.xi_star(),
                "xi_hat_id": g.xi_star(),
                "R_ood": o_ood.a,
                "R_ood_sd_star": o_ood.optimal_risk(),
                "R_ood_sd_with_id_xi": float(o_ood.risk(o_id.xi_star())),
            }
        )
    return rows


def diabetes(lams, splits=20, width=600):
    """Diabetes (standardised), 300/142 splits, ``width`` random ReLU features: ridge vs SD(ξ̂)."""
    x, y = load_diabetes(return_X_y=True)
    x = (x - x.mean(0)) / x.std(0)
    y = (y - y.mean()) / y.std()
    res = {lam: {"ridge": [], "sd": [], "xi": []} for lam in lams}
    for s in range(splits):
        gen = np.random.default_rng(s)
        order = gen.permutation(len(y))
        tr, te = order[:300], order[300:]
        w = gen.standard_normal((x.shape[1], width)) / np.sqrt(x.shape[1])
        feats = np.maximum(x @ w, 0.0)
        mu, ym = feats[tr].mean(0), y[tr].mean()
        ftr, fte = feats[tr] - mu, feats[te] - mu
        fit = sd.decompose(ftr, y[tr] - ym)
        for lam in lams:
            xi = sd.gcv_quadratic(fit, lam, df_offset=1.0).xi_star()
            for key, coef in (
                ("ridge", sd.teacher_coef(fit, lam)),
                ("sd", sd.student_coef(fit, lam, xi)),
            ):
                res[lam][key].append(float(np.mean((fte @ coef + ym - y[te]) ** 2)))
            res[lam]["xi"].append(xi)
    return [
        {
            "lam": lam,
            "ridge": float(np.mean(v["ridge"])),
            "sd": float(np.mean(v["sd"])),
            "mean_xi_hat": float(np.mean(v["xi"])),
            "sd_wins": int(np.sum(np.array(v["sd"]) < np.array(v["ridge"]))),
            "splits": splits,
        }
        for lam, v in res.items()
    ]


def plot(syn, path):
    fig, axes = plt.subplots(2, len(syn), figsize=(4.2 * len(syn), 7), squeeze=False)
    for j, (name, block) in enumerate(syn.items()):
        rows = block["rows"]
        lam = [r["lam"] for r in rows]
        ax = axes[0, j]
        ax.plot(lam, [r["R"] for r in rows], "k-", label="ridge R(λ)")
        ax.plot(lam, [r["R_sd_star"] for r in rows], "b-", label="SD, oracle ξ*")
        ax.plot(lam, [r["R_sd_hat"] for r in rows], "r--", label="SD, one-shot ξ̂")
        ax.plot(lam, [r["R_de"] for r in rows], "k:", label="ridge, asymptotic")
        ax.plot(lam, [r["R_sd_de"] for r in rows], "c:", label="SD ξ*, asymptotic")
        ax.axvline(block["lam_opt_grid"], color="grey", lw=0.8)
        ax.set_xscale("log")
        ax.set_title(name)
        ax.set_ylabel("prediction risk")
        ax = axes[1, j]
        ax.plot(lam, [r["xi_star"] for r in rows], "b-", label="oracle ξ*")
        ax.plot(lam, [r["xi_hat"] for r in rows], "r--", label="one-shot ξ̂")
        ax.plot(lam, [r["xi_de"] for r in rows], "c:", label="asymptotic ξ*")
        ax.axhline(0, color="grey", lw=0.8)
        ax.axvline(block["lam_opt_grid"], color="grey", lw=0.8)
        ax.set_xscale("log")
        ax.set_yscale("symlog", linthresh=1.0)
        ax.set_xlabel("λ")
        ax.set_ylabel("ξ")
    axes[0, 0].legend(fontsize=7)
    axes[1, 0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def markdown(syn, cons, ood_rows, dia):
    lines = [
        "## Synthetic (AR(1) rho=0.5, ‖β‖²_Σ=1, sigma=1): claims",
        "",
        "| setting | λ_opt (grid) | min R-R_SD(ξ*) off λ_opt | ξ*<0 above λ_opt | ξ*>0 below |",
        "|---|---|---|---|---|",
    ]
    for name, b in syn.items():
        lines.append(
            f"| {name} | {b['lam_opt_grid']:.3g} | {b['min_gain_off_opt']:.2e} | "
            f"{b['xi_star_negative_above_opt']} | {b['xi_star_positive_below_opt']} |"
        )
    lines += [
        "",
        "## Synthetic: selected λ",
        "",
        "| setting | λ | R(λ) | R_SD(ξ*) | R_SD(ξ̂) | ξ* | ξ̂ | ξ* (asymptotic) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, b in syn.items():
        for r in b["rows"][::4]:
            lines.append(
                f"| {name} | {r['lam']:.3g} | {r['R']:.4f} | {r['R_sd_star']:.4f} "
                f"| {r['R_sd_hat']:.4f} "
                f"| {r['xi_star']:.3f} | {r['xi_hat']:.3f} | {r['xi_de']:.3f} |"
            )
    lines += [
        "",
        "## One-shot ξ̂ vs oracle ξ* as n grows (mean over seeds)",
        "",
        "| p/n | n | λ | abs(ξ̂-ξ*)/max(1,abs(ξ*)) | R_SD(ξ̂)-R_SD(ξ*) |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['p/n']} | {r['n']} | {r['lam']} | {r['rel_err']:.4f} | {r['regret']:.2e} |"
        for r in cons
    ]
    lines += [
        "",
        "## OOD (train rho=0.5, test rho=0.9)",
        "",
        "| λ | ξ*_ID | ξ*_OOD | ξ̂ (ID) | R_OOD(λ) | R_OOD SD(ξ*_OOD) | R_OOD SD(ξ*_ID) |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['lam']:.3g} | {r['xi_star_id']:.3f} | {r['xi_star_ood']:.3f} "
        f"| {r['xi_hat_id']:.3f} | "
        f"{r['R_ood']:.4f} | {r['R_ood_sd_star']:.4f} | {r['R_ood_sd_with_id_xi']:.4f} |"
        for r in ood_rows
    ]
    lines += [
        "",
        "## Diabetes, 600 random ReLU features, 300/142 splits (standardised y)",
        "",
        "| λ | ridge MSE | SD(ξ̂) MSE | mean ξ̂ | SD wins |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['lam']:g} | {r['ridge']:.4f} | {r['sd']:.4f} | {r['mean_xi_hat']:+.2f} | "
        f"{r['sd_wins']}/{r['splits']} |"
        for r in dia
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="benchmarks/results/self_distill")
    ap.add_argument("--quick", action="store_true", help="smaller n (for a smoke run)")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    lams = list(np.logspace(-3, 1, 25))
    big = 400 if args.quick else 2000
    syn = synthetic([(400, 200), (400, 800), (big, big // 2), (big, 2 * big)], lams)
    ns = [100, 200, 400] if args.quick else [200, 400, 800, 1600]
    cons = consistency([0.5, 2.0], ns, [0.1, 3.0], seeds=3 if args.quick else 5)
    ood_rows = ood(400, 200, [0.01, 0.1, 0.3, 1.0, 3.0, 10.0])
    dia = diabetes([1e-3, 1e-2, 1.0, 10.0])
    plot(syn, out / "self_distill.png")
    text = markdown(syn, cons, ood_rows, dia)
    (out / "self_distill.md").write_text(text)
    (out / "self_distill.json").write_text(
        json.dumps(
            {"synthetic": syn, "consistency": cons, "ood": ood_rows, "diabetes": dia}, indent=1
        )
    )
    print(text)
    print(f"wrote {out}/self_distill.{{md,json,png}} in {time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()

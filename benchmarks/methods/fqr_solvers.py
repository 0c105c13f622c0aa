"""Exact local quantile-regression solvers for FQR, timed in one process.

Baseline: statsmodels ``QuantReg`` (IRLS, the reference recipe's default). Compared: FQR's
dual LP through HiGHS (``flowerbed.methods.fqr.algorithm_local.quantreg``), scipy
``linprog`` on the primal LP (HiGHS), scikit-learn ``QuantileRegressor``
(``solver='highs'``, ``alpha=0``). Prints each solver's time as a ratio to the
baseline's and its check-loss gap to the best objective found.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/methods/fqr_solvers.py
"""

from __future__ import annotations

import argparse
import time
import warnings
from collections.abc import Callable

import numpy as np
import scipy.sparse as sp
from scipy import optimize

from flowerbed.methods.fqr.algorithm_local import pinball_loss, quantreg

Solver = Callable[[np.ndarray, np.ndarray, float], np.ndarray]


def statsmodels_irls(x: np.ndarray, y: np.ndarray, tau: float) -> np.ndarray:
    import statsmodels.api as sm

    design = np.column_stack([np.ones(len(y)), x])
    return np.asarray(sm.QuantReg(y, design).fit(q=tau, max_iter=5000, p_tol=1e-8).params)


def primal_lp(x: np.ndarray, y: np.ndarray, tau: float) -> np.ndarray:
    n = len(y)
    design = np.column_stack([np.ones(n), x])
    p = design.shape[1]
    c = np.concatenate([np.zeros(p), np.full(n, tau), np.full(n, 1 - tau)])
    a_eq = sp.hstack([sp.csr_matrix(design), sp.eye(n), -sp.eye(n)]).tocsc()
    bounds = [(None, None)] * p + [(0, None)] * (2 * n)
    return optimize.linprog(c, A_eq=a_eq, b_eq=y, bounds=bounds, method="highs").x[:p]


def sklearn_highs(x: np.ndarray, y: np.ndarray, tau: float) -> np.ndarray:
    from sklearn.linear_model import QuantileRegressor

    model = QuantileRegressor(quantile=tau, alpha=0.0, solver="highs").fit(x, y)
    return np.concatenate([[model.intercept_], model.coef_])


SOLVERS: dict[str, Solver] = {
    "statsmodels_irls (baseline)": statsmodels_irls,
    "fqr dual LP highs": quantreg,
    "scipy primal LP highs": primal_lp,
    "sklearn QuantileRegressor highs": sklearn_highs,
}


def timed(
    fn: Solver, x: np.ndarray, y: np.ndarray, tau: float, repeat: int
) -> tuple[float, np.ndarray]:
    best, coef = np.inf, np.empty(0)
    for _ in range(repeat):
        t0 = time.perf_counter()
        coef = fn(x, y, tau)
        best = min(best, time.perf_counter() - t0)
    return best, coef


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", default="2000x4,2000x10,10000x10,20000x20")
    ap.add_argument("--tau", type=float, default=0.3)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    warnings.filterwarnings("ignore")
    rng = np.random.default_rng(0)
    for size in a.sizes.split(","):
        n, d = (int(v) for v in size.split("x"))
        x = rng.standard_normal((n, d))
        y = x @ np.linspace(-1, 1, d) + rng.standard_t(3, n)
        results = {}
        for name, fn in SOLVERS.items():
            slow = name.startswith(("scipy primal", "sklearn")) and n * d > 200_000
            results[name] = timed(fn, x, y, a.tau, 1 if slow else a.repeat)
        base_t = results["statsmodels_irls (baseline)"][0]
        best_obj = min(pinball_loss(y - c[0] - x @ c[1:], a.tau) for _, c in results.values())
        print(f"n={n} d={d} tau={a.tau}: baseline statsmodels IRLS {base_t * 1e3:.1f} ms")
        for name, (t, c) in results.items():
            gap = pinball_loss(y - c[0] - x @ c[1:], a.tau) / best_obj - 1
            ratio = t / base_t
            print(f"  {name:34s} {t * 1e3:9.1f} ms  ratio {ratio:6.2f}x  obj gap {gap:.1e}")


if __name__ == "__main__":
    main()

"""SLOT-Align cost: statistics bytes per client and BW barycenter time against feature dim d.

Each of K clients holds n = d/2 samples (fewer than d, so Ledoit-Wolf shrinkage is
what keeps the covariance SPD) of a Gaussian with its own random covariance. The
upload is n, the mean and the covariance's upper triangle: 8 (d(d+3)/2 + 1) bytes.
Barycenter time is our eigh-based Alvarez-Esteban iteration (relative tol 1e-8);
for d <= --pot-max-dim POT's ``bures_wasserstein_barycenter`` (its defaults) runs
in the same process and the ratio is printed.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/methods/slot_align_cost.py \
        --dims 64 128 256 512 1280
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from flowerbed.methods.slot_align import algorithm as sa


def client_stats(d: int, k: int, seed: int) -> list[sa.Gaussian]:
    """K clients' LW Gaussians from n = max(2, d // 2) samples each."""
    gen = np.random.default_rng(seed)
    out = []
    for _ in range(k):
        mix = gen.standard_normal((d, d)) / np.sqrt(d) + np.eye(d) * gen.uniform(0.5, 2)
        z = gen.standard_normal((max(2, d // 2), d)) @ mix + gen.standard_normal(d)
        out.append(sa.gaussian_stats(z))
    return out


def main() -> None:
    """Print one row per dimension."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dims", type=int, nargs="+", default=[64, 128, 256, 512])
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--pot-max-dim", type=int, default=128)
    args = parser.parse_args()
    print(f"{'d':>6} {'bytes/client':>13} {'iters':>6} {'ours s':>8} {'POT s':>8} {'POT/ours':>9}")
    for d in args.dims:
        stats = client_stats(d, args.clients, seed=d)
        weights = np.array([g.n for g in stats], dtype=float)
        nbytes = 8 * (d * (d + 3) // 2 + 1)
        start = time.perf_counter()
        bary = sa.bw_barycenter([g.mean for g in stats], [g.cov for g in stats], weights)
        ours = time.perf_counter() - start
        pot = float("nan")
        if d <= args.pot_max_dim:
            import ot

            start = time.perf_counter()
            ot.gaussian.bures_wasserstein_barycenter(
                np.array([g.mean for g in stats]), np.array([g.cov for g in stats]),
                weights=weights / weights.sum())
            pot = time.perf_counter() - start
        print(f"{d:>6} {nbytes:>13,} {bary.iterations:>6} {ours:>8.2f} {pot:>8.2f} "
              f"{pot / ours:>9.1f}")


if __name__ == "__main__":
    main()

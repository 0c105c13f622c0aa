"""InfoAtlas preprocessing: one dataset put in canonical form before the network reads it.

Exact rank-Gaussian copula per column, per-side ZCA whitening with an eigenvalue
floor, then a per-side rotation to the sample's canonical (CCA) coordinates; rows
in a canonical order so the estimate does not depend on their order (step 1 of
:mod:`flowerbed.methods.infoatlas.algorithm`). Every map is invertible per side, so the
mutual information is unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import special

WHITEN_FLOOR = 1e-3


@dataclass(frozen=True)
class Prepared:
    """One dataset in canonical form: ``z`` ``(n, 2 max_dim)`` = [x padded, y padded]."""

    z: np.ndarray
    dx: int
    dy: int

    @property
    def n(self) -> int:
        """Number of samples."""
        return int(self.z.shape[0])


def as_2d(a: np.ndarray, name: str) -> np.ndarray:
    """``a`` as a finite float64 ``(n, d)`` matrix (a vector becomes one column)."""
    arr = np.asarray(a, dtype=np.float64)
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2:
        raise ValueError(f"{name} must be (n,) or (n, d), got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or infinite values")
    return arr


def _whiten(g: np.ndarray) -> np.ndarray:
    g = g - g.mean(axis=0)
    vals, vecs = np.linalg.eigh(g.T @ g / len(g))
    return np.asarray(g @ ((vecs / np.sqrt(np.maximum(vals, WHITEN_FLOOR))) @ vecs.T))


def average_ranks(a: np.ndarray) -> np.ndarray:
    """Column-wise ranks 1..n, ties given their average rank (``scipy.stats.rankdata``)."""
    t = np.ascontiguousarray(a.T)
    n = t.shape[1]
    order = np.argsort(t, axis=1)
    s = np.take_along_axis(t, order, axis=1)
    idx = np.broadcast_to(np.arange(n), t.shape)
    change = np.ones(t.shape, dtype=bool)
    change[:, 1:] = s[:, 1:] != s[:, :-1]
    first = np.maximum.accumulate(np.where(change, idx, 0), axis=1)
    ends = np.ones(t.shape, dtype=bool)
    ends[:, :-1] = change[:, 1:]
    last = np.minimum.accumulate(np.where(ends, idx, n - 1)[:, ::-1], axis=1)[:, ::-1]
    ranks = np.empty(t.shape)
    np.put_along_axis(ranks, order, (first + last) / 2 + 1, axis=1)
    return ranks.T


def canonical_order(ranks: np.ndarray) -> np.ndarray:
    """Row order that depends only on the set of rows: sort by a fixed random hash.

    The hash ``Σ_j ranks_ij w_j`` (fixed weights in [1, 2), summed per row in a
    fixed order) is equal for two rows only if they are equal, almost surely.
    """
    w = 1 + np.random.default_rng(20260600).random(ranks.shape[1])
    return np.argsort((ranks * w).sum(axis=1), kind="stable")


def prepare(x: np.ndarray, y: np.ndarray, max_dim: int) -> Prepared:
    """Copula, whitening and canonical rotation of one dataset (see module docstring)."""
    x, y = as_2d(x, "x"), as_2d(y, "y")
    n, dx, dy = len(x), x.shape[1], y.shape[1]
    if len(y) != n:
        raise ValueError(f"x and y must have the same number of rows, got {n} and {len(y)}")
    if n < 4:
        raise ValueError(f"need at least 4 samples to estimate MI, got {n}")
    if max(dx, dy) > max_dim:
        raise ValueError(f"dims ({dx}, {dy}) exceed max_dim={max_dim}; use sliced_mi")
    ranks = average_ranks(np.hstack([x, y]))
    ranks = ranks[canonical_order(ranks)]
    # van der Waerden scores Φ^{-1}(r / (n + 1)); tied ranks are half-integers
    g = special.ndtri(np.arange(1, 2 * n + 2) / (2 * (n + 1)))[(2 * ranks).astype(np.int64) - 1]
    xw, yw = _whiten(g[:, :dx]), _whiten(g[:, dx:])
    u, _, vt = np.linalg.svd(xw.T @ yw / n)
    z = np.zeros((n, 2 * max_dim))
    z[:, :dx] = xw @ u
    z[:, max_dim : max_dim + dy] = yw @ vt.T
    return Prepared(z, dx, dy)


__all__ = ["WHITEN_FLOOR", "Prepared", "as_2d", "average_ranks", "canonical_order", "prepare"]

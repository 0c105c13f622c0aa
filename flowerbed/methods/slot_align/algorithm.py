"""SLOT-Align: single-round, learning-free Gaussian-OT feature alignment (arXiv 2606.16655).

Each client summarises its frozen-encoder features by a Gaussian N(m_k, S_k)
(Ledoit-Wolf covariance, eigen-floored); the server computes their
Bures-Wasserstein barycenter N(m_b, S_b) (Agueh & Carlier 2011) with the
fixed-point iteration of Alvarez-Esteban et al. (2016); each client's features
are moved towards it by the closed-form Monge map T_k(z) = A_k z + b_k,
A_k = S_k^{-1/2} (S_k^{1/2} S_b S_k^{1/2})^{1/2} S_k^{-1/2}, b_k = m_b - A_k m_k,
or part of the way along the W2 (McCann) geodesic: (1 - tau) z + tau T_k(z).
Everything is float64 numpy; no Flower, no Ray.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SPD_EPSILON = 1e-8


@dataclass(frozen=True)
class Gaussian:
    """Sample count, mean ``(d,)`` and SPD covariance ``(d, d)`` of one client's features."""

    n: int
    mean: np.ndarray
    cov: np.ndarray


def sym(a: np.ndarray) -> np.ndarray:
    """Symmetric part ``(a + a^T) / 2``."""
    return (a + a.T) / 2


def psd_power(s: np.ndarray, power: float, floor: float = 0.0) -> np.ndarray:
    """``s^power`` of a symmetric PSD matrix by ``eigh``; eigenvalues clipped at ``floor``.

    Negative round-off eigenvalues are clipped before any root, so a
    near-singular input gives a finite result; inverse powers need ``floor > 0``
    (the default for them is a tiny relative floor).
    """
    vals, vecs = np.linalg.eigh(sym(s))
    if power < 0 and floor <= 0:
        floor = max(float(vals.max()), 1.0) * 1e-12
    vals = np.maximum(vals, floor)
    return sym((vecs * vals**power) @ vecs.T)


def ledoit_wolf(z: np.ndarray) -> tuple[np.ndarray, float]:
    """Ledoit-Wolf (2004) shrunk covariance of rows ``z`` and its shrinkage coefficient.

    MLE covariance ``C`` (divided by n) shrunk towards ``mu I`` with
    ``mu = tr(C) / d``: ``(1 - s) C + s mu I``, ``s = min(beta, delta) / delta``.
    """
    n, d = z.shape
    x = z - z.mean(axis=0)
    emp = x.T @ x / n
    mu = np.trace(emp) / d
    x2 = x**2
    beta_sum = float(np.sum(x2.T @ x2)) / n
    delta_sum = float(np.sum(emp**2))
    beta = (beta_sum - delta_sum) / (d * n)
    delta = (delta_sum - 2 * mu * np.trace(emp) + d * mu**2) / d
    shrink = 0.0 if delta <= 0 else min(beta, delta) / delta
    return (1 - shrink) * emp + shrink * mu * np.eye(d), float(shrink)


def eigen_floor(cov: np.ndarray, eps: float = SPD_EPSILON) -> np.ndarray:
    """Symmetrise, then lift the spectrum to at least ``eps * max(1, tr/d)``."""
    cov = sym(cov)
    floor = eps * max(1.0, float(np.trace(cov)) / len(cov))
    low = float(np.linalg.eigvalsh(cov)[0])
    return cov + (floor - low) * np.eye(len(cov)) if low < floor else cov


def gaussian_stats(z: np.ndarray, eps: float = SPD_EPSILON) -> Gaussian:
    """A client's Gaussian: mean and Ledoit-Wolf covariance (eigen-floored) in float64.

    Safe when ``n < d`` (LW shrinks towards a scaled identity). Needs ``n >= 2``.
    """
    z = np.asarray(z, dtype=np.float64)
    if z.ndim != 2 or len(z) < 2:
        raise ValueError(f"need at least 2 feature rows, got shape {z.shape}")
    cov, _ = ledoit_wolf(z)
    return Gaussian(len(z), z.mean(axis=0), eigen_floor(cov, eps))


def check_stats(stats: dict[int, Gaussian]) -> None:
    """Raise ``ValueError`` naming the first client whose statistics are unusable."""
    dims = {g.mean.shape for g in stats.values()}
    if len(dims) > 1:
        raise ValueError(f"clients report different feature dimensions: {sorted(dims)}")
    for pid, g in stats.items():
        d = len(g.mean)
        if not (np.all(np.isfinite(g.mean)) and np.all(np.isfinite(g.cov))):
            raise ValueError(f"client {pid}: non-finite mean or covariance")
        if g.cov.shape != (d, d) or g.n < 1:
            raise ValueError(f"client {pid}: covariance {g.cov.shape} or n={g.n} is invalid")


@dataclass(frozen=True)
class Barycenter:
    """BW barycenter ``N(mean, cov)`` with the iterations used and the final relative residual."""

    mean: np.ndarray
    cov: np.ndarray
    iterations: int
    residual: float
    converged: bool


def bw_barycenter(
    means: list[np.ndarray], covs: list[np.ndarray], weights: np.ndarray | None = None,
    tol: float = 1e-8, max_iter: int = 1000,
) -> Barycenter:
    """Bures-Wasserstein barycenter of Gaussians (Alvarez-Esteban et al. 2016 fixed point).

    Iterates ``S <- S^{-1/2} (sum_k w_k (S^{1/2} S_k S^{1/2})^{1/2})^2 S^{-1/2}`` from the
    weighted mean covariance until the relative Frobenius change is below ``tol``.
    ``residual`` is ``||sum_k w_k (S^{1/2} S_k S^{1/2})^{1/2} - S||_F / ||S||_F``,
    zero exactly at the barycenter equation.
    """
    w = np.full(len(covs), 1 / len(covs)) if weights is None else np.asarray(weights, float)
    w = w / w.sum()
    mean = np.einsum("k,kd->d", w, np.asarray(means, dtype=np.float64))
    s = sym(np.einsum("k,kij->ij", w, np.asarray(covs, dtype=np.float64)))
    converged, it = False, 0
    for it in range(1, max_iter + 1):  # noqa: B007 - ``it`` is reported
        root, inv_root = psd_power(s, 0.5), psd_power(s, -0.5)
        avg = sum(wk * psd_power(root @ c @ root, 0.5) for wk, c in zip(w, covs, strict=True))
        new = sym(inv_root @ avg @ avg @ inv_root)
        change = np.linalg.norm(new - s) / np.linalg.norm(s)
        s = new
        if change < tol:
            converged = True
            break
    return Barycenter(mean, s, it, fixed_point_residual(s, covs, w), converged)


def fixed_point_residual(s: np.ndarray, covs: list[np.ndarray], w: np.ndarray) -> float:
    """Relative residual of the barycenter equation at ``s``."""
    root = psd_power(s, 0.5)
    avg = sum(wk * psd_power(root @ c @ root, 0.5) for wk, c in zip(w, covs, strict=True))
    return float(np.linalg.norm(avg - s) / np.linalg.norm(s))


def monge_map(
    m_src: np.ndarray, s_src: np.ndarray, m_dst: np.ndarray, s_dst: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Closed-form OT map ``z -> A z + b`` pushing ``N(m_src, s_src)`` onto ``N(m_dst, s_dst)``.

    ``A = s_src^{-1/2} (s_src^{1/2} s_dst s_src^{1/2})^{1/2} s_src^{-1/2}`` is
    symmetric positive definite and solves ``A s_src A = s_dst``; ``b = m_dst - A m_src``.
    """
    root, inv_root = psd_power(s_src, 0.5), psd_power(s_src, -0.5)
    a = sym(inv_root @ psd_power(root @ s_dst @ root, 0.5) @ inv_root)
    return a, m_dst - a @ m_src


def partial_map(a: np.ndarray, b: np.ndarray, tau: float) -> tuple[np.ndarray, np.ndarray]:
    """The map at time ``tau`` of the W2 geodesic: ``((1 - tau) I + tau A, tau b)``."""
    if not 0.0 <= tau <= 1.0:
        raise ValueError(f"tau must lie in [0, 1], got {tau}")
    return (1 - tau) * np.eye(len(a)) + tau * a, tau * b


def transport(z: np.ndarray, a: np.ndarray, b: np.ndarray, tau: float = 1.0) -> np.ndarray:
    """Rows ``z`` moved a fraction ``tau`` of the way along their OT map (``tau=0``: ``z``)."""
    if tau == 0.0:
        return np.asarray(z)
    m, c = partial_map(a, b, tau)
    out: np.ndarray = np.asarray(z, dtype=np.float64) @ m.T + c
    return out


def w2_gaussian(m1: np.ndarray, s1: np.ndarray, m2: np.ndarray, s2: np.ndarray) -> float:
    """2-Wasserstein distance ``W2(N(m1, s1), N(m2, s2))`` (Bures metric plus mean term)."""
    root = psd_power(s1, 0.5)
    cross = np.trace(psd_power(root @ s2 @ root, 0.5))
    sq = float(np.sum((m1 - m2) ** 2) + np.trace(s1) + np.trace(s2) - 2 * cross)
    return float(np.sqrt(max(sq, 0.0)))


def tau_schedule(mode: str, tau_min: float, tau_max: float, steps: int) -> list[float]:
    """Per-epoch tau: ``fixed`` (``tau_max``) or ``cosine`` rising from ~``tau_min`` to ``tau_max``.

    ``cosine`` is the reversed cosine annealing
    ``tau_min + (tau_max - tau_min)(1 + cos(pi s / steps)) / 2``, ``s = 0..steps-1``.
    """
    if mode == "fixed":
        return [tau_max] * steps
    ramp = [tau_min + 0.5 * (tau_max - tau_min) * (1 + np.cos(np.pi * s / steps))
            for s in range(steps)]
    return [float(t) for t in reversed(ramp)]


def pooled_pca(
    ns: list[int], means: list[np.ndarray], scatters: list[np.ndarray],
    variance: float = 0.99, max_dim: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Global mean and top principal directions ``(d, r)`` from per-client scatter matrices.

    Pools ``sum_k [S_k + n_k (m_k - m)(m_k - m)^T] / (N - 1)`` and keeps the fewest
    components reaching ``variance`` of the total, at most ``max_dim`` and ``N - 1``.
    """
    n = np.asarray(ns, dtype=np.float64)
    mean = np.einsum("k,kd->d", n, np.asarray(means)) / n.sum()
    total = sum(s + nk * np.outer(m - mean, m - mean)
                for nk, m, s in zip(n, means, scatters, strict=True))
    vals, vecs = np.linalg.eigh(sym(total / (n.sum() - 1)))
    vals, vecs = np.maximum(vals[::-1], 0), vecs[:, ::-1]
    r = int(np.searchsorted(np.cumsum(vals) / vals.sum(), variance) + 1)
    r = min(r, max_dim or r, int(n.sum()) - 1, len(vals))
    return mean, vecs[:, :r]

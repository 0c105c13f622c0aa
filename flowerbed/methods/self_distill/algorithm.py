"""Optimal unconstrained self-distillation (SD) in ridge regression (Dang, Patil, Rinaldo).

Paper: "Optimal Unconstrained Self-Distillation in Ridge Regression", arXiv 2602.17565
(ICML 2026). Only the abstract could be read; the closed forms below are derived from
its definitions, the one-shot tuner of ξ is our reconstruction, and the
proportional-asymptotics formulas are our own
deterministic equivalents of the ridge cross-risk (the reference recipe gives none).

Notation: ``Σ̂ = XᵀX/n``, ``R_λ = (Σ̂ + λI)⁻¹``. The teacher is ``β̂_λ = R_λXᵀy/n``; the
student refits ridge with the same λ on ``ξ·Xβ̂_λ + (1 - ξ)·y`` for any real ξ, which
gives ``β̂_SD = β̂_λ + ξλ ∂_λβ̂_λ``. Every squared risk of the student is therefore a
quadratic in ξ, :class:`SDQuadratic`; this module builds that quadratic three ways:
from the truth (:func:`oracle_quadratic`), from the data alone (:func:`gcv_quadratic`,
:func:`gcv_quadratic_gram`, the one-shot estimator) and in the proportional limit
(:func:`asymptotic_quadratic`).

Examples
--------
>>> rng = np.random.default_rng(0)
>>> x = rng.standard_normal((200, 50)); y = x @ np.ones(50) / 7 + rng.standard_normal(200)
>>> fit = decompose(x, y)
>>> q = gcv_quadratic(fit, lam=3.0)            # over-regularised here
>>> bool(q.xi_star() < 0)
True
>>> student_coef(fit, 3.0, q.xi_star()).shape
(50,)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import brentq


@dataclass(frozen=True)
class RidgeSVD:
    """One thin SVD of the training data, enough for every λ and ξ.

    ``X/√n = U diag(s) Vᵀ`` with the ``k = rank`` positive singular values,
    ``uy = Uᵀy/√n`` and ``resid_sq = ‖y/√n - U uy‖²`` (the part of y outside
    the column space of X, which no ridge fit can explain).
    """

    v: np.ndarray
    s: np.ndarray
    uy: np.ndarray
    resid_sq: float
    n: int


def decompose(x: np.ndarray, y: np.ndarray, rtol: float = 1e-12) -> RidgeSVD:
    """Thin SVD of ``X/√n`` and the projected response (one O(np·min(n,p)) step)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    n = x.shape[0]
    u, s, vt = np.linalg.svd(x / np.sqrt(n), full_matrices=False)
    keep = s > rtol * max(s[0], 1e-300) if s.size else s > 0
    u, s, vt = u[:, keep], s[keep], vt[keep]
    uy = u.T @ y / np.sqrt(n)
    resid_sq = float(max(y @ y / n - uy @ uy, 0.0))
    return RidgeSVD(vt.T, s, uy, resid_sq, n)


def teacher_coef(fit: RidgeSVD, lam: float) -> np.ndarray:
    """Ridge teacher ``β̂_λ = V diag(s/(s²+λ)) Uᵀy/√n``."""
    return fit.v @ (fit.s / (fit.s**2 + lam) * fit.uy)


def derivative_coef(fit: RidgeSVD, lam: float) -> np.ndarray:
    """Ridge path derivative ``∂_λβ̂_λ = -R_λβ̂_λ``."""
    return fit.v @ (-fit.s / (fit.s**2 + lam) ** 2 * fit.uy)


def student_coef(fit: RidgeSVD, lam: float, xi: float) -> np.ndarray:
    """Self-distilled student ``β̂_λ + ξλ∂_λβ̂_λ`` (ridge refit on mixed targets)."""
    e = fit.s**2
    return fit.v @ ((fit.s / (e + lam)) * (1.0 - xi * lam / (e + lam)) * fit.uy)


@dataclass(frozen=True)
class SDQuadratic:
    """Risk of the student as a function of ξ: ``a + 2ξλb + ξ²λ²c``.

    ``a`` is the teacher's risk ``R(λ)``, ``b = R'(λ)/2`` and
    ``c = ‖∂_λβ̂_λ‖²`` in the risk's norm (``c ≥ 0``).
    """

    lam: float
    a: float
    b: float
    c: float

    def risk(self, xi: float | np.ndarray) -> float | np.ndarray:
        """Risk of the student with mixing weight ``xi``."""
        return self.a + 2.0 * xi * self.lam * self.b + (xi * self.lam) ** 2 * self.c

    def slope(self) -> float:
        """``R'(λ)``, the derivative of the teacher's risk along the ridge path."""
        return 2.0 * self.b

    def xi_star(self) -> float:
        """Minimiser ``ξ* = -R'(λ)/(2λ‖∂β̂‖²)``; sign rule ``sign ξ* = -sign R'(λ)``."""
        return -self.b / (self.lam * self.c) if self.c > 0 else 0.0

    def optimal_risk(self) -> float:
        """``R(λ) - R'(λ)²/(4‖∂β̂‖²)``: strictly below ``R(λ)`` whenever ``R'(λ) ≠ 0``."""
        return self.a - self.b**2 / self.c if self.c > 0 else self.a


def excess_risk(coef: np.ndarray, beta: np.ndarray, cov: np.ndarray, noise_var: float) -> float:
    """Exact prediction risk ``‖coef - β‖²_Σ₀ + sigma²`` under test covariance ``cov``."""
    d = np.asarray(coef, dtype=float) - beta
    return float(d @ cov @ d + noise_var)


def oracle_quadratic(
    fit: RidgeSVD, lam: float, beta: np.ndarray, cov: np.ndarray, noise_var: float
) -> SDQuadratic:
    """Exact finite-sample risk quadratic given the truth (``cov`` may be OOD)."""
    err, dbeta = teacher_coef(fit, lam) - beta, derivative_coef(fit, lam)
    return SDQuadratic(
        lam,
        float(err @ cov @ err + noise_var),
        float(err @ cov @ dbeta),
        float(dbeta @ cov @ dbeta),
    )


def _gcv_from_residuals(
    lam: float, rr: float, rd: float, dd: float, dof: float, ddof: float, n: int
) -> SDQuadratic:
    """Cross-GCV quadratic from ``‖r‖², <r,r'>, ‖r'‖²`` and ``df``, ``∂_λdf``.

    ``h = r/D`` with ``D = 1 - df/n``; ``D' = -∂_λdf/n``.
    """
    den, dden = 1.0 - dof / n, -ddof / n
    if den <= 0:
        raise ValueError(f"GCV undefined at lam={lam}: degrees of freedom {dof:.1f} >= n={n}")
    hh = rr / den**2
    hdh = rd / den**2 - rr * dden / den**3
    dhdh = dd / den**2 - 2.0 * rd * dden / den**3 + rr * dden**2 / den**4
    return SDQuadratic(lam, hh, hdh, dhdh)


def gcv_quadratic(fit: RidgeSVD, lam: float, df_offset: float = 0.0) -> SDQuadratic:
    """One-shot estimate of the in-distribution risk quadratic (cross-GCV).

    With ``h(λ) = (y - Xβ̂_λ)/(√n(1 - df_λ/n))`` the cross-GCV ``<h(λ), h(μ)>``
    estimates the cross-risk ``<β̂_λ-β, β̂_μ-β>_Σ + sigma²``, so ``‖h + ξλh'‖²``
    estimates the student's risk and its minimiser ``-<h,h'>/(λ‖h'‖²)`` is a
    consistent estimate of ξ* (no grid, no sample splitting, no refit).

    Parameters
    ----------
    fit
        Output of :func:`decompose`.
    lam
        Ridge penalty (on the ``XᵀX/n`` scale).
    df_offset
        Extra degrees of freedom of the smoother (1 when an unpenalised
        intercept was removed by centring).
    """
    e = fit.s**2
    f, fp = e / (e + lam), -e / (e + lam) ** 2
    r_in = (1.0 - f) * fit.uy  # residual coordinates inside col(X)
    rp_in = -fp * fit.uy
    rr = float(r_in @ r_in + fit.resid_sq)
    return _gcv_from_residuals(
        lam,
        rr,
        float(r_in @ rp_in),
        float(rp_in @ rp_in),
        float(f.sum()) + df_offset,
        float(fp.sum()),
        fit.n,
    )


def gcv_quadratic_gram(
    xtx: np.ndarray, xty: np.ndarray, yty: float, n: int, lam: float, df_offset: float = 0.0
) -> SDQuadratic:
    """:func:`gcv_quadratic` from sufficient statistics ``(XᵀX, Xᵀy, yᵀy, n)`` only.

    This is the form a server can evaluate from summed client statistics.
    """
    gram = np.asarray(xtx, dtype=float) / n
    evals = np.clip(np.linalg.eigvalsh(gram), 0.0, None)
    solve = np.linalg.inv(gram + lam * np.eye(gram.shape[0]))
    beta = solve @ (xty / n)
    dbeta = -solve @ beta
    rr = (yty - 2.0 * xty @ beta + n * beta @ gram @ beta) / n
    rd = -float((xty / n - gram @ beta) @ dbeta)
    dd = float(dbeta @ gram @ dbeta)
    f, fp = evals / (evals + lam), -evals / (evals + lam) ** 2
    return _gcv_from_residuals(
        lam, float(rr), rd, dd, float(f.sum()) + df_offset, float(fp.sum()), n
    )


def solve_kappa(lam: float, evals: np.ndarray, n: int) -> float:
    """Effective regularisation κ > λ solving ``λ = κ(1 - tr(Σ(Σ+κI)⁻¹)/n)``."""

    def gap(k: float) -> float:
        return k - float(np.sum(k * evals / (evals + k))) / n - lam

    return float(brentq(gap, lam, lam + float(evals.sum()) / n + 1e-12, xtol=1e-14, rtol=1e-14))


def asymptotic_quadratic(
    lam: float, evals: np.ndarray, signal: np.ndarray, n: int, noise_var: float
) -> SDQuadratic:
    """Deterministic equivalent of the in-distribution risk quadratic (our derivation).

    Uses the ridge cross-risk equivalent, for penalties with effective
    regularisations ``a = κ(λ)``, ``b = κ(μ)``::

        C(a, b) = (Σᵢ wᵢdᵢ ab/((dᵢ+a)(dᵢ+b)) + sigma²) / (1 - Σᵢ dᵢ²/((dᵢ+a)(dᵢ+b))/n)

    with ``dᵢ`` the eigenvalues of Σ and ``wᵢ`` the squared coordinates of β in
    Σ's eigenbasis. ``R = C(κ,κ)``, ``R'/2 = ∂_bC·κ'`` and ``‖∂β̂‖² = ∂_a∂_bC·κ'²``
    with ``κ' = 1/(1 - Σ dᵢ²/(dᵢ+κ)²/n)``, all in closed form.

    Parameters
    ----------
    evals, signal
        ``dᵢ`` and ``wᵢ = (uᵢᵀβ)²``.
    """
    d, w = np.asarray(evals, dtype=float), np.asarray(signal, dtype=float)
    k = solve_kappa(lam, d, n)
    g, gp = k / (d + k), d / (d + k) ** 2  # a/(d+a) and its a-derivative
    q, qp = d / (d + k), -d / (d + k) ** 2  # d/(d+a) and its a-derivative
    num = float(np.sum(w * d * g * g)) + noise_var
    num_b, num_ab = float(np.sum(w * d * g * gp)), float(np.sum(w * d * gp * gp))
    den = 1.0 - float(np.sum(q * q)) / n
    den_b, den_ab = -float(np.sum(q * qp)) / n, -float(np.sum(qp * qp)) / n
    c_b = num_b / den - num * den_b / den**2
    c_ab = (
        num_ab / den
        - 2.0 * num_b * den_b / den**2
        - num * den_ab / den**2
        + 2.0 * num * den_b**2 / den**3
    )
    dk = 1.0 / den
    return SDQuadratic(lam, num / den, c_b * dk, c_ab * dk**2)

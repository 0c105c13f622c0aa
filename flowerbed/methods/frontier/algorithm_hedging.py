"""Hedging on the frontier: exponential weights (Gibbs) and Q-aggregation with a prior.

Method: "Hedging on the Frontier: Learning New Tasks with Few Samples" (Wegel, So,
Di Gennaro, Yang; ICML 2026, arXiv 2605.30997), reconstructed in
``docs/methods/frontier.md`` section 1 (algorithm B) from model-selection
aggregation: Q-aggregation (Rigollet & Tsybakov 2012; Dai, Rigollet & Zhang 2012;
Lecue & Rigollet 2014) and Gibbs posteriors with the PAC-Bayes bound (Catoni 2007).

Instead of picking one model, output a convex combination of candidate
predictions with weights theta on the simplex. The prior concentrates on the
frontier (:func:`flowerbed.methods.frontier.algorithm.cell_prior`); the parameter-free
fallback mixes it half and half with the uniform prior on all models and picks the
temperature from a geometric grid by minimising the PAC-Bayes bound.

Losses are assumed to lie in ``[0, loss_range]``; :func:`brier` is the halved
multiclass Brier score, which lies in ``[0, 1]``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def one_hot(y: np.ndarray, num_classes: int) -> np.ndarray:
    """``(n, C)`` one-hot float matrix of integer labels."""
    return np.eye(num_classes)[np.asarray(y, dtype=int)]


def brier(probs: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Per-sample halved Brier score ``0.5 * ||p - y||^2`` (in ``[0, 1]``).

    ``probs`` has shape ``(..., n, C)``, ``targets`` ``(n, C)`` one-hot; the result
    has shape ``(..., n)``.

    Examples
    --------
    >>> brier(np.array([[1.0, 0.0], [0.5, 0.5]]), np.array([[0.0, 1.0], [1.0, 0.0]])).tolist()
    [1.0, 0.25]
    """
    return 0.5 * np.sum((probs - targets) ** 2, axis=-1)


def kl(p: np.ndarray, q: np.ndarray) -> float:
    """KL(p || q) for probability vectors; ``inf`` if p puts mass where q has none."""
    p, q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
    mask = p > 0
    if np.any(q[mask] <= 0):
        return float("inf")
    return float(np.sum(p[mask] * np.log(p[mask] / q[mask])))


def check_prior(prior: np.ndarray) -> np.ndarray:
    """Validate a prior: non-negative, finite, summing to one (within 1e-9)."""
    pi = np.asarray(prior, dtype=np.float64)
    if pi.ndim != 1 or np.any(pi < 0) or not np.all(np.isfinite(pi)):
        raise ValueError("prior must be a finite non-negative vector")
    if abs(pi.sum() - 1.0) > 1e-9:
        raise ValueError(f"prior must sum to 1, sums to {pi.sum()}")
    return pi


def gibbs_weights(risks: np.ndarray, n: int, prior: np.ndarray, lam: float) -> np.ndarray:
    """Gibbs posterior ``rho_j ~ pi_j exp(-lam * n * risk_j)`` (exponential weights).

    ``n = 0`` returns the prior; adding a constant to all risks changes nothing;
    models outside the prior's support get zero weight.
    """
    pi = check_prior(prior)
    r = np.asarray(risks, dtype=np.float64)
    support = pi > 0
    logw = np.full(len(pi), -np.inf)
    shifted = r[support] - r[support].min()
    logw[support] = np.log(pi[support]) - lam * n * shifted
    w = np.exp(logw - logw[support].max())
    return w / w.sum()


def temperature_grid(n: int, top: float = 8.0) -> np.ndarray:
    """Geometric grid ``{top * 2^-i}`` down to about ``1/(2n)``: O(log n) points.

    The PAC-Bayes bound's ``lam * range^2 / 8`` term rules out ``lam`` above a few
    units for losses in ``[0, 1]``, so the grid stops at ``top``.
    """
    steps = int(np.ceil(np.log2(top * 2 * max(n, 1)))) + 1
    return top * 2.0 ** -np.arange(steps)


def pac_bayes_bound(
    weights: np.ndarray,
    risks: np.ndarray,
    n: int,
    prior: np.ndarray,
    lam: float,
    *,
    confidence: float = 0.05,
    grid_size: int = 1,
    loss_range: float = 1.0,
) -> float:
    """Catoni-style PAC-Bayes bound on ``E_rho R``.

    ``E_rho R_hat + (KL(rho || pi) + log(G / gamma)) / (lam n) + lam B^2 / 8``.

    ``grid_size`` G pays for a union bound over a temperature grid.
    """
    w = np.asarray(weights, dtype=np.float64)
    comp = (kl(w, prior) + np.log(grid_size / confidence)) / (lam * max(n, 1))
    return float(w @ np.asarray(risks) + comp + lam * loss_range**2 / 8)


@dataclass(frozen=True)
class Temperature:
    """The bound-minimising temperature, its Gibbs weights and bound value."""

    lam: float
    weights: np.ndarray
    bound: float


def select_temperature(
    risks: np.ndarray,
    n: int,
    prior: np.ndarray,
    *,
    grid: np.ndarray | None = None,
    confidence: float = 0.05,
    loss_range: float = 1.0,
) -> Temperature:
    """Parameter-free Gibbs: the grid temperature whose posterior minimises the bound.

    With ``n = 0`` the prior is returned (no data, nothing to learn).
    """
    pi = check_prior(prior)
    lams = temperature_grid(n) if grid is None else np.asarray(grid, dtype=np.float64)
    if n == 0:
        return Temperature(float(lams[-1]), pi.copy(), float("inf"))
    best: Temperature | None = None
    for lam in lams:
        w = gibbs_weights(risks, n, pi, lam)
        b = pac_bayes_bound(
            w, risks, n, pi, lam, confidence=confidence, grid_size=len(lams),
            loss_range=loss_range,
        )
        if best is None or b < best.bound:
            best = Temperature(float(lam), w, b)
    assert best is not None
    return best


def mixture_prior(frontier_prior: np.ndarray, weight: float = 0.5) -> np.ndarray:
    """Fallback prior ``weight * pi_frontier + (1 - weight) * Uniform(all M)``.

    If weak monotonicity holds this costs ``log(1/weight)`` in the bound; if it
    fails, every model keeps prior mass ``(1 - weight)/M`` (the no-side-information
    rate).
    """
    pi = check_prior(frontier_prior)
    return weight * pi + (1.0 - weight) / len(pi)


def q_objective(
    theta: np.ndarray, preds: np.ndarray, targets: np.ndarray, prior: np.ndarray,
    beta: float, nu: float = 0.5,
) -> float:
    """Q-aggregation objective ``(1-nu) R_hat(f_theta) + nu sum theta_j R_hat(f_j) + beta/n KL``.

    ``preds`` is ``(M, n, C)`` (probabilities), ``targets`` ``(n, C)``; the loss is
    :func:`brier`.
    """
    n = preds.shape[1]
    mix = np.tensordot(theta, preds, axes=1)
    single = brier(preds, targets).mean(axis=1)
    return float(
        (1 - nu) * brier(mix, targets).mean() + nu * theta @ single + beta / n * kl(theta, prior)
    )


def q_aggregate(
    preds: np.ndarray,
    targets: np.ndarray,
    prior: np.ndarray,
    beta: float,
    *,
    nu: float = 0.5,
    steps: int = 300,
    lr: float = 0.5,
) -> np.ndarray:
    """Q-aggregation weights on the simplex by proximal exponentiated gradient.

    Minimises :func:`q_objective` over the prior's support, starting at the prior.
    Each step solves the KL-regularised mirror step in closed form,
    ``log theta' = (log theta - lr g + lr c log pi) / (1 + lr c)`` with ``c = beta/n``,
    which is stable for any ``beta`` (``beta -> inf`` gives the prior).

    Examples
    --------
    >>> p = np.array([[[1.0, 0.0]], [[0.0, 1.0]]])  # two models, one sample
    >>> t = q_aggregate(p, np.array([[1.0, 0.0]]), np.array([0.5, 0.5]), beta=0.01)
    >>> bool(t[0] > 0.99)
    True
    """
    pi = check_prior(prior)
    support = pi > 0
    p, log_pi = preds[support], np.log(pi[support])
    n = p.shape[1]
    if n == 0:
        return pi.copy()
    c = beta / n
    single = brier(p, targets).mean(axis=1)
    log_t = log_pi.copy()
    for _ in range(steps):
        theta = np.exp(log_t)
        resid = np.tensordot(theta, p, axes=1) - targets
        grad = (1 - nu) * np.einsum("mnc,nc->m", p, resid) / n + nu * single
        log_t = (log_t - lr * grad + lr * c * log_pi) / (1 + lr * c)
        log_t -= np.logaddexp.reduce(log_t)
    out = np.zeros(len(pi))
    out[support] = np.exp(log_t)
    return out / out.sum()


def hedge(
    preds: np.ndarray, targets: np.ndarray, prior: np.ndarray, *, nu: float = 0.5,
    steps: int = 300,
) -> tuple[np.ndarray, float]:
    """Parameter-free Q-aggregation: ``beta = 1/lam`` with ``lam`` from :func:`select_temperature`.

    At ``nu = 1`` Q-aggregation's minimiser is the Gibbs posterior at ``lam = 1/beta``,
    so the bound-minimising Gibbs temperature fixes ``beta`` without tuning.
    Returns the weights and the ``beta`` used.
    """
    risks = brier(preds, targets).mean(axis=1)
    lam = select_temperature(risks, preds.shape[1], prior).lam
    beta = 1.0 / lam
    return q_aggregate(preds, targets, prior, beta, nu=nu, steps=steps), beta

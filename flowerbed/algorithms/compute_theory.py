"""Predicted curves for one-shot magnitude pruning and early exit (reconstructed theory).

Method: "Theoretical Guarantees for One-Shot Magnitude Pruning and Compute-Adaptive
Early Exit" (ICML 2026 poster 63550, no arXiv, no code). Only the abstract could be
read; every formula here is the RECONSTRUCTED model of docs/methods/compute_reduction.md §1:

* single neuron (§1.2): the pruned/full alignment ``rho_hat = ||w~|| / ||w||``
  concentrates at ``rho(kappa)`` with RMS error ``O(d^-1/2)``;
* conditional perceptron (§1.3): exit on ``|u| > tau`` with ``sign(u)``, else
  ``sign(v)``; excess error ``E ~ g^(1/(1-rho^2))`` in the compute gap ``g``;
* deep ReLU nets (§1.4): ``c_l = rho * K(c_{l-1})`` with the arc-cosine map ``K``.

The frozen-backbone NNGP early-exit frontier (§1.4, last part) is not here: the
spec itself measures its alignment empirically, so it adds no closed form.

Examples
--------
>>> round(float(rho_limit(0.5)), 5)
0.96368
>>> round(exponent(0.7), 3)
1.961
"""

from __future__ import annotations

import numpy as np
from scipy import integrate, optimize, stats

from flowerbed.algorithms.pruning import magnitude_masks

#: Coefficient of the ReLU fixed-point expansion ``1-c* ~ ((1-rho)/a)^(2/3)``.
FIXED_POINT_A = 2.0 * np.sqrt(2.0) / (3.0 * np.pi)


# --- single neuron ----------------------------------------------------------------


def rho_limit(kappa: float | np.ndarray) -> np.ndarray:
    """Limit alignment ``rho(kappa)`` for N(0,1) weights kept at ratio ``kappa``.

    ``rho^2 = kappa + 2 t phi(t)`` with ``t = Phi^-1(1 - kappa/2)`` (spec §1.2).
    """
    k = np.asarray(kappa, dtype=float)
    t = stats.norm.isf(k / 2.0)
    with np.errstate(invalid="ignore"):
        tphi = np.where(np.isfinite(t), t * stats.norm.pdf(t), 0.0)
    return np.sqrt(np.clip(k + 2.0 * tphi, 0.0, 1.0))


def rho_hat(w: np.ndarray, kappa: float) -> float:
    """Empirical alignment ``<w, w~> / (||w|| ||w~||) = ||w~|| / ||w||`` after pruning.

    Pruning removes ``ceil((1-kappa) d)`` smallest |w_i| (see :mod:`.pruning`).
    """
    keep = magnitude_masks({"w": w}, 1.0 - kappa)["w"]
    return float(np.linalg.norm(w[keep]) / np.linalg.norm(w))


def concentration_rms(d: int, kappa: float, reps: int, rng: np.random.Generator) -> float:
    """Monte-Carlo RMS of ``rho_hat - rho(kappa)`` over ``reps`` draws of N(0, I_d)."""
    errs = [rho_hat(rng.standard_normal(d), kappa) - float(rho_limit(kappa)) for _ in range(reps)]
    return float(np.sqrt(np.mean(np.square(errs))))


# --- conditional perceptron (early exit) ------------------------------------------


def compute_gap(tau: float | np.ndarray) -> np.ndarray:
    """Fraction of inputs that exit early, ``g = P(|u| > tau) = 2 Phi_bar(tau)``."""
    return 2.0 * stats.norm.sf(np.asarray(tau, dtype=float))


def excess_error(tau: float, rho: float) -> float:
    """``E(tau) = P(|u| > tau, sign u != sign v)`` for standard (u, v) with corr ``rho``.

    Exact quadrature of ``2 int_tau^inf phi(u) Phi(-rho u / sqrt(1-rho^2)) du``;
    0 when ``rho = 1`` or ``tau = inf`` (no early exits).
    """
    if rho >= 1.0 or np.isinf(tau):
        return 0.0
    s = np.sqrt(1.0 - rho * rho)

    def integrand(u: float) -> float:
        return float(stats.norm.pdf(u) * stats.norm.cdf(-rho * u / s))

    val, _ = integrate.quad(integrand, tau, np.inf, epsrel=1e-10, epsabs=0.0)
    return 2.0 * val


def exponent(rho: float) -> float:
    """Predicted scaling exponent ``alpha(rho) = 1 / (1 - rho^2)`` of ``E ~ g^alpha``."""
    return 1.0 / (1.0 - rho * rho)


def conditional_perceptron(
    u: np.ndarray, v: np.ndarray, tau: float
) -> tuple[np.ndarray, np.ndarray]:
    """Early-exit predictions: ``sign(u)`` where ``|u| > tau``, else ``sign(v)``.

    Returns
    -------
    tuple of ndarray
        ``(predictions in {-1, 0, 1}, exited mask)``. With ``tau = inf`` nothing
        exits and the predictions equal the full perceptron ``sign(v)``.
    """
    exited = np.abs(u) > tau
    return np.where(exited, np.sign(u), np.sign(v)), exited


# --- deep ReLU networks ------------------------------------------------------------


def arccos_map(c: float | np.ndarray) -> np.ndarray:
    """Normalised ReLU dual ``K(c) = (sqrt(1-c^2) + (pi - arccos c) c) / pi``."""
    c = np.clip(np.asarray(c, dtype=float), -1.0, 1.0)
    return (np.sqrt(1.0 - c * c) + (np.pi - np.arccos(c)) * c) / np.pi


def depth_recursion(rho: float, depth: int) -> np.ndarray:
    """Pruned/full pre-activation cosine per layer: ``c_1 = rho``, ``c_l = rho K(c_{l-1})``."""
    out = np.empty(depth)
    c = 1.0
    for layer in range(depth):
        c = rho * float(arccos_map(c)) if layer else rho
        out[layer] = c
    return out


def fixed_point(rho: float) -> float:
    """Limit cosine ``c*`` solving ``c = rho K(c)`` on ``[0, 1]`` (1 when ``rho = 1``)."""
    if rho >= 1.0:
        return 1.0
    return float(optimize.brentq(lambda c: c - rho * float(arccos_map(c)), 0.0, 1.0))


def fixed_point_small_gap(rho: float) -> float:
    """Leading-order ``1 - c* ~ ((1 - rho) / a)^(2/3)``, ``a = 2 sqrt 2 / (3 pi)``."""
    return float(((1.0 - rho) / FIXED_POINT_A) ** (2.0 / 3.0))


def simulate_depth(
    width: int, depth: int, kappa: float, n_inputs: int, rng: np.random.Generator
) -> np.ndarray:
    """Per-layer pre-activation cosine of a He-initialised ReLU MLP vs its pruned copy.

    Every layer is magnitude-pruned (per layer, keep ratio ``kappa``); the cosine
    is averaged over ``n_inputs`` N(0, I) inputs of dimension ``width``.
    """
    x = rng.standard_normal((width, n_inputs))
    h_full, h_pruned = x, x
    out = np.empty(depth)
    for layer in range(depth):
        w = rng.standard_normal((width, width)) * np.sqrt(2.0 / width)
        w_pruned = np.where(magnitude_masks({"w": w}, 1.0 - kappa)["w"], w, 0.0)
        z, zp = w @ h_full, w_pruned @ h_pruned
        cos = np.sum(z * zp, 0) / (np.linalg.norm(z, axis=0) * np.linalg.norm(zp, axis=0))
        out[layer] = float(np.mean(cos))
        h_full, h_pruned = np.maximum(z, 0.0), np.maximum(zp, 0.0)
    return out

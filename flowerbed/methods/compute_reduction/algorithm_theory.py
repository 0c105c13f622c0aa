"""Predicted curves for one-shot magnitude pruning and early exit (reconstructed theory).

Method: "Theoretical Guarantees for One-Shot Magnitude Pruning and Compute-Adaptive
Early Exit" (ICML 2026 poster 63550, no arXiv, no code). Only the abstract could be
read; every formula here is the RECONSTRUCTED model of docs/methods/compute_reduction.md:

* single neuron: the pruned/full alignment ``rho_hat = ||w~|| / ||w||``
  concentrates at ``rho(kappa)`` with RMS error ``O(d^-1/2)``;
* conditional perceptron: exit on ``|u| > tau`` with ``sign(u)``, else
  ``sign(v)``; excess error ``E ~ g^(1/(1-rho^2))`` in the compute gap ``g``;
* deep ReLU nets: ``c_l = rho * K(c_{l-1})`` with the arc-cosine map ``K``;
* frozen-backbone early exit (NNGP model): an exit head at relative depth
  ``l/L`` whose output has alignment ``rho_l`` with the final score trades mean
  compute ``1 - g (1 - l/L)`` against excess error ``E(tau(g), rho_l)``.
  ``rho_l`` is an input (measured on a probe set), not derived from the
  cross-layer NNGP kernel;
* a multi-class cascade exit rule (confidence or logit margin) that reduces to
  the conditional perceptron for two classes.

Examples
--------
>>> round(float(rho_limit(0.5)), 5)
0.96368
>>> round(exponent(0.7), 3)
1.961
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
from scipy import integrate, optimize, stats

from flowerbed.methods.compute_reduction.algorithm import magnitude_masks

#: Coefficient of the ReLU fixed-point expansion ``1-c* ~ ((1-rho)/a)^(2/3)``.
FIXED_POINT_A = 2.0 * np.sqrt(2.0) / (3.0 * np.pi)


# --- single neuron ----------------------------------------------------------------


def rho_limit(kappa: float | np.ndarray) -> np.ndarray:
    """Limit alignment ``rho(kappa)`` for N(0,1) weights kept at ratio ``kappa``.

    ``rho^2 = kappa + 2 t phi(t)`` with ``t = Phi^-1(1 - kappa/2)`` .
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


# --- frozen-backbone early exit and multi-class exits -----------------------------


def gap_threshold(gap: float | np.ndarray) -> np.ndarray:
    """Inverse of :func:`compute_gap`: the ``tau`` at which a fraction ``gap`` exits."""
    return np.asarray(stats.norm.isf(np.asarray(gap, dtype=float) / 2.0))


def exit_tradeoff(
    rho: float, exit_cost: float, taus: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Predicted compute-accuracy curve of one exit head on a frozen backbone.

    Parameters
    ----------
    rho
        Alignment (correlation) of the standardised head output with the final score.
    exit_cost
        Compute of an exited input relative to the full pass (``l / L`` for a head
        after layer ``l`` of ``L``; the head itself is neglected).
    taus
        Exit thresholds.

    Returns
    -------
    tuple of ndarray
        ``(gap g, mean compute 1 - g (1 - exit_cost), excess error E)`` per ``tau``;
        ``E ~ g^(1/(1-rho^2))`` in the tail.
    """
    taus = np.asarray(taus, dtype=float)
    gap = compute_gap(taus)
    err = np.array([excess_error(float(t), rho) for t in taus])
    return gap, 1.0 - gap * (1.0 - exit_cost), err


def local_exponent(rho: float, tau_lo: float, tau_hi: float) -> float:
    """Slope of ``log E`` against ``log g`` between two thresholds (exact quadrature)."""
    e = np.log([excess_error(tau_lo, rho), excess_error(tau_hi, rho)])
    g = np.log(compute_gap(np.array([tau_lo, tau_hi])))
    return float((e[1] - e[0]) / (g[1] - g[0]))


def cascade_exit(
    logits: Sequence[np.ndarray],
    threshold: float,
    rule: Literal["confidence", "margin"] = "confidence",
) -> tuple[np.ndarray, np.ndarray]:
    """Multi-exit inference: each input leaves at the first head confident enough.

    Parameters
    ----------
    logits
        ``(n, classes)`` logits per exit, shallowest first; the last is the full
        model and always answers what is left.
    threshold
        Exit when the score is strictly above it: the top softmax probability
        (``confidence``; 1 or more means no early exit) or the gap between the
        two largest logits (``margin``; ``inf`` means no early exit).
    rule
        ``confidence`` or ``margin``.

    Returns
    -------
    tuple of ndarray
        ``(predicted class, index of the exit used)``. With two classes, logits
        ``(0, u)`` and ``margin``, this is :func:`conditional_perceptron` with the
        partial score ``u`` (class 1 for ``sign u = +1``).
    """
    if not logits:
        raise ValueError("cascade_exit needs at least one exit")
    n = len(logits[0])
    pred = np.asarray(logits[-1]).argmax(1)
    used = np.full(n, len(logits) - 1)
    open_ = np.ones(n, dtype=bool)
    for k, z in enumerate(logits[:-1]):
        z = np.asarray(z, dtype=float)
        if rule == "confidence":
            p = np.exp(z - z.max(1, keepdims=True))
            score = p.max(1) / p.sum(1)
        elif rule == "margin":
            top2 = np.sort(z, axis=1)[:, -2:]
            score = top2[:, 1] - top2[:, 0]
        else:
            raise ValueError(f"unknown exit rule {rule!r}; known: confidence, margin")
        leave = open_ & (score > threshold)
        pred[leave], used[leave] = z[leave].argmax(1), k
        open_ &= ~leave
    return pred, used

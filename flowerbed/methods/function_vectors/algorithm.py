"""Function vectors and their additive decomposition (Todd et al. 2024; Wang et al. 2026).

Todd, Li, Sharma, Mueller, Wallace, Bau, "Function Vectors in Large Language
Models", ICLR 2024 (arXiv 2310.15213, github.com/ericwtodd/function_vectors);
Wang, Wang, Bakalova, Hahn, "How Few-Shot Examples Add Up: A Causal Decomposition
of Function Vectors in In-Context Learning", ICML 2026 (arXiv 2605.16591).

The maths on activations, independent of any model (numpy / torch tensors in,
the same out):

- Todd's recipe: the average indirect effect of each head (:func:`indirect_effects`),
  the top heads (:func:`top_heads`), and the function vector as the sum of the
  top heads' mean last-token outputs mapped through the output projection
  (:func:`function_vector`);
- sub-FVs, variant A (isolated 1-shot prompts): the per-prompt least-squares fit
  ``v(P) ~ sum_i w_i u_i + b`` with its R² and cosine (:func:`fit_weights`), the
  equal-weight control (:func:`fit_equal_weights`), weights per demonstration
  slot pooled over prompts (:func:`fit_slot_weights`), and the R² expected from
  unrelated vectors (:func:`chance_r2`);
- the federated analogue: the global FV as a combination of client FVs is the
  same fit with clients in place of demonstrations;
- informativeness of a demonstration given the earlier ones, from the set of
  candidate tasks it leaves (:func:`information_gain`).

Variant B (the exact per-demonstration split through the attention weights) and
the QK-vs-V hybrids are in :mod:`flowerbed.methods.function_vectors.algorithm_decomp`.

Examples
--------
>>> import numpy as np
>>> u = np.eye(3)
>>> fit = fit_weights(2 * u[0] - u[2], u, bias=False)
>>> fit.weights.round(6).tolist(), round(fit.r2, 6)
([2.0, 0.0, -1.0], 1.0)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

Head = tuple[int, int]


def indirect_effects(p_patched: np.ndarray, p_corrupt: np.ndarray) -> np.ndarray:
    """Average indirect effect: mean over trials of ``p_patched - p_corrupt``.

    ``p_patched`` is ``(trials, *heads_shape)``: the probability of the correct
    answer with one head's last-token output replaced by its mean clean value;
    ``p_corrupt`` ``(trials,)`` the probability without the patch.
    """
    patched = np.asarray(p_patched, dtype=float)
    base = np.asarray(p_corrupt, dtype=float).reshape((-1,) + (1,) * (patched.ndim - 1))
    if patched.shape[0] != base.shape[0]:
        raise ValueError(f"{patched.shape[0]} patched trials but {base.shape[0]} corrupted")
    return np.asarray((patched - base).mean(axis=0))


def top_heads(aie: np.ndarray, k: int) -> list[Head]:
    """The ``k`` heads ``(layer, head)`` of largest effect in an ``(L, H)`` array, largest first.

    Ties go to the lower layer, then the lower head.
    """
    a = np.asarray(aie, dtype=float)
    if a.ndim != 2:
        raise ValueError(f"aie must be (layers, heads), got shape {a.shape}")
    if not 1 <= k <= a.size:
        raise ValueError(f"k must lie in 1..{a.size}, got {k}")
    order = np.lexsort((np.arange(a.size), -a.ravel()))[:k]
    return [(int(i // a.shape[1]), int(i % a.shape[1])) for i in order]


def function_vector(contributions: np.ndarray) -> np.ndarray:
    """Sum over heads of ``(..., heads, d)`` output-projected head activations."""
    return np.asarray(np.asarray(contributions, dtype=float).sum(axis=-2))


# --- fits ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class LinearFit:
    """``v ~ sum_i weights[i] u_i + bias`` (the bias one scalar added to every coordinate)."""

    weights: np.ndarray
    bias: float
    fitted: np.ndarray
    r2: float
    cosine: float


def r2_score(v: np.ndarray, fitted: np.ndarray) -> float:
    """``1 - |v - fitted|² / |v - mean(v)|²`` over the coordinates of ``v``."""
    v, f = np.asarray(v, dtype=float), np.asarray(fitted, dtype=float)
    total = float(((v - v.mean()) ** 2).sum())
    return 1.0 - float(((v - f) ** 2).sum()) / total if total > 0 else float("nan")


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine of the angle between two vectors (nan when one is zero)."""
    a, b = np.asarray(a, dtype=float).ravel(), np.asarray(b, dtype=float).ravel()
    norm = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(a @ b) / norm if norm > 0 else float("nan")


def _lstsq(design: np.ndarray, v: np.ndarray) -> np.ndarray:
    coef, *_ = np.linalg.lstsq(design, v, rcond=None)
    return np.asarray(coef)


def fit_weights(v: np.ndarray, u: np.ndarray, bias: bool = True) -> LinearFit:
    """Least squares of ``v`` (d,) on the rows of ``u`` (n, d), plus a scalar bias.

    The per-prompt fit of variant A (``u`` the isolated sub-FVs) and of the
    federated decomposition (``u`` the client FVs): ``n (+1)`` unknowns, ``d``
    equations.
    """
    v, u = np.asarray(v, dtype=float), np.atleast_2d(np.asarray(u, dtype=float))
    if u.shape[1] != v.shape[0]:
        raise ValueError(f"u has rows of length {u.shape[1]}, v has {v.shape[0]} coordinates")
    design = np.column_stack([u.T, np.ones(len(v))]) if bias else u.T
    coef = _lstsq(design, v)
    fitted = design @ coef
    w, b = (coef[:-1], float(coef[-1])) if bias else (coef, 0.0)
    return LinearFit(w, b, fitted, r2_score(v, fitted), cosine(v, fitted))


def fit_equal_weights(v: np.ndarray, u: np.ndarray, bias: bool = True) -> LinearFit:
    """The equal-weight control: ``v ~ w * sum_i u_i (+ b)``, one shared weight."""
    u = np.atleast_2d(np.asarray(u, dtype=float))
    one = fit_weights(v, u.sum(axis=0, keepdims=True), bias)
    weights = np.full(u.shape[0], float(one.weights[0]))
    return LinearFit(weights, one.bias, one.fitted, one.r2, one.cosine)


@dataclass(frozen=True)
class SlotFit:
    """Weights per demonstration slot shared by all prompts; R² and cosine per prompt."""

    weights: np.ndarray
    bias: float
    r2: np.ndarray
    cosine: np.ndarray


def fit_slot_weights(v: np.ndarray, u: np.ndarray, bias: bool = True) -> SlotFit:
    """``v[p] ~ sum_i w_i u[p, i] (+ b)`` with one weight per slot ``i`` for all prompts ``p``.

    ``v`` is ``(P, d)``, ``u`` ``(P, n, d)``. A position-only (e.g. recency)
    weighting fits this as well as the per-prompt fit; weights that depend on
    the demonstrations' content do not.
    """
    v, u = np.asarray(v, dtype=float), np.asarray(u, dtype=float)
    if u.ndim != 3 or u.shape[0] != v.shape[0] or u.shape[2] != v.shape[1]:
        raise ValueError(f"need v (P, d) and u (P, n, d); got {v.shape} and {u.shape}")
    design = u.transpose(0, 2, 1).reshape(-1, u.shape[1])
    if bias:
        design = np.column_stack([design, np.ones(len(design))])
    coef = _lstsq(design, v.reshape(-1))
    fitted = (design @ coef).reshape(v.shape)
    w, b = (coef[:-1], float(coef[-1])) if bias else (coef, 0.0)
    r2 = np.array([r2_score(a, f) for a, f in zip(v, fitted, strict=True)])
    cos = np.array([cosine(a, f) for a, f in zip(v, fitted, strict=True)])
    return SlotFit(w, b, r2, cos)


def chance_r2(n: int, d: int) -> float:
    """Expected R² of :func:`fit_weights` (with bias) on ``n`` unrelated random vectors.

    Ordinary least squares with an intercept and ``n`` regressors independent of
    the target in ``d`` observations has ``E[R²] = n / (d - 1)``.
    """
    if d <= n + 1:
        raise ValueError(f"need d > n + 1 coordinates, got n={n}, d={d}")
    return n / (d - 1)


def client_weights_share(num_examples: Sequence[int]) -> np.ndarray:
    """The weights FedAvg would give (data shares), the baseline of the federated fit."""
    n = np.asarray(num_examples, dtype=float)
    if n.sum() <= 0:
        raise ValueError("num_examples must have a positive sum")
    return np.asarray(n / n.sum())


# --- informativeness -------------------------------------------------------------------------


def candidate_counts(consistent: np.ndarray) -> np.ndarray:
    """``(n + 1,)`` sizes of the candidate-task sets after 0..n demonstrations.

    ``consistent[i, t]`` says whether demonstration ``i`` fits task ``t``; the
    candidates after ``i`` demonstrations are the tasks fitting all of them.
    """
    c = np.asarray(consistent, dtype=bool)
    alive = np.logical_and.accumulate(c, axis=0) if len(c) else c
    return np.concatenate([[c.shape[1]], alive.sum(axis=1)]).astype(np.int64)


def information_gain(consistent: np.ndarray) -> np.ndarray:
    """Bits each demonstration removes from the candidate tasks: ``log2 |C_i-1| / |C_i|``.

    A demonstration fitting no candidate left (an inconsistent prompt) counts
    as removing nothing. An ambiguous demonstration given the earlier ones is
    one with gain < its static maximum: it leaves several candidates.
    """
    counts = candidate_counts(consistent).astype(float)
    before, after = counts[:-1], counts[1:]
    gain = np.zeros_like(after)
    ok = after > 0
    gain[ok] = np.log2(before[ok] / after[ok])
    return gain


def rank_correlation(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> float:
    """Spearman's rank correlation of two sequences (nan when either is constant)."""
    from scipy import stats

    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(x) != len(y) or len(x) < 2:
        raise ValueError(f"need two sequences of equal length >= 2, got {len(x)} and {len(y)}")
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan")
    return float(stats.spearmanr(x, y).statistic)

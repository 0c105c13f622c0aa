"""One-shot magnitude pruning (global / per-layer, unstructured / N:M) over named arrays.

Method: the static "partial computation" regime of "Theoretical Guarantees for
One-Shot Magnitude Pruning and Compute-Adaptive Early Exit" (ICML 2026 poster
63550; reconstructed in docs/methods/compute_reduction.md). N:M follows the 2:4 pattern
of Mishra et al., "Accelerating Sparse Deep Neural Networks", arXiv 2104.08378.

Counting rule: sparsity ``s`` over ``n`` weights removes exactly ``ceil(s * n)``
of them (``s * n`` is first rounded to 9 decimals so that ``0.7 * 10`` counts as
7, not 8). Tie rule: weights are ranked by ``(|w|, -position)``, so among equal
magnitudes the one at the *later* position is removed first. Positions are flat
C-order indices; for global pruning the arrays are concatenated in sorted-name
order, so the result never depends on dict insertion order.

Examples
--------
>>> w = {"a": np.array([3.0, -1.0, 1.0, 2.0])}
>>> masks = magnitude_masks(w, 0.5)
>>> masks["a"].tolist()          # ceil(0.5*4)=2 removed; tie |-1|=|1|: later goes first
[True, False, False, True]
>>> nm_mask(np.array([1.0, 4.0, 3.0, 2.0]), 2, 4).tolist()
[False, True, True, False]
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np

Arrays = dict[str, np.ndarray]
Scope = Literal["global", "layer"]
Pattern = Literal["unstructured", "n:m"]


def num_removed(sparsity: float, n: int) -> int:
    """Number of weights pruned at ``sparsity`` out of ``n``: ``ceil(s * n)``.

    Parameters
    ----------
    sparsity
        Fraction to remove, in ``[0, 1]``.
    n
        Number of candidate weights.

    Returns
    -------
    int
        ``ceil(s * n)`` with ``s * n`` rounded to 9 decimals first (float guard).
    """
    if not 0.0 <= sparsity <= 1.0:
        raise ValueError(f"sparsity must be in [0, 1], got {sparsity}")
    return min(n, math.ceil(round(sparsity * n, 9)))


def removal_order(values: np.ndarray) -> np.ndarray:
    """Flat indices of ``values`` from first-to-prune to last (smallest |v| first).

    Ties in magnitude are broken by position: the larger flat index is pruned first.
    """
    flat = np.abs(np.ravel(values))
    position = np.arange(flat.size)
    return np.lexsort((-position, flat))


def unstructured_mask(values: np.ndarray, sparsity: float) -> np.ndarray:
    """Boolean keep-mask (same shape) removing exactly ``ceil(s * n)`` smallest |v|.

    When the k-th and (k+1)-th smallest magnitudes differ, the removed set is
    unique and found in O(n) with a partial sort; otherwise (a tie straddles the
    cut) the full tie-breaking order of :func:`removal_order` decides.
    """
    flat = np.abs(np.ravel(values))
    k = num_removed(sparsity, flat.size)
    if 0 < k < flat.size:
        lo, hi = np.partition(flat, (k - 1, k))[[k - 1, k]]
        if lo < hi:
            return (flat > lo).reshape(np.shape(values))
    keep = np.ones(flat.size, dtype=bool)
    keep[removal_order(values)[:k]] = False
    return keep.reshape(np.shape(values))


def magnitude_masks(arrays: Arrays, sparsity: float, scope: Scope = "global") -> Arrays:
    """Keep-masks for unstructured magnitude pruning of every array.

    Parameters
    ----------
    arrays
        Named arrays (e.g. a model update).
    sparsity
        Fraction to remove: of all weights together (``global``) or of each
        array separately (``layer``).
    scope
        ``global`` ranks all magnitudes jointly; ``layer`` ranks within each array.

    Returns
    -------
    dict
        Boolean masks with the arrays' names and shapes; ``True`` = kept.
    """
    if scope == "layer":
        return {k: unstructured_mask(v, sparsity) for k, v in arrays.items()}
    if scope != "global":
        raise ValueError(f"unknown pruning scope {scope!r}; known: global, layer")
    order = sorted(arrays)
    flat = np.concatenate([np.ravel(arrays[k]) for k in order]) if order else np.zeros(0)
    keep = unstructured_mask(flat, sparsity)
    out, start = {}, 0
    for k in order:
        size = np.size(arrays[k])
        out[k] = keep[start : start + size].reshape(np.shape(arrays[k]))
        start += size
    return {k: out[k] for k in arrays}


def nm_mask(values: np.ndarray, n: int, m: int) -> np.ndarray:
    """N:M keep-mask: in every run of ``m`` consecutive flat entries keep the ``n`` largest.

    A trailing group shorter than ``m`` also keeps at most ``n`` entries, so every
    group of ``m`` consecutive positions starting at a multiple of ``m`` holds at
    most ``n`` nonzeros. Ties follow :func:`removal_order` within the group.
    """
    if not 0 <= n <= m or m < 1:
        raise ValueError(f"N:M needs 0 <= n <= m and m >= 1, got {n}:{m}")
    flat = np.ravel(values)
    keep = np.zeros(flat.size, dtype=bool)
    for start in range(0, flat.size, m):
        group = flat[start : start + m]
        drop = max(group.size - n, 0)
        kept = removal_order(group)[drop:]
        keep[start + kept] = True
    return keep.reshape(np.shape(values))


def prune(
    arrays: Arrays,
    sparsity: float,
    scope: Scope = "global",
    pattern: Pattern = "unstructured",
    nm: tuple[int, int] = (2, 4),
) -> tuple[Arrays, Arrays]:
    """Zero the pruned entries of every array.

    Parameters
    ----------
    arrays
        Named arrays to prune (left untouched).
    sparsity
        Fraction removed for ``unstructured``; ignored for ``n:m``.
    scope
        ``global`` or ``layer`` (unstructured only; N:M is local by nature).
    pattern
        ``unstructured`` or ``n:m``.
    nm
        ``(n, m)`` of the N:M pattern.

    Returns
    -------
    tuple of dict
        ``(pruned arrays, keep masks)``; dtypes and shapes are preserved.
    """
    if pattern == "n:m":
        masks = {k: nm_mask(v, *nm) for k, v in arrays.items()}
    elif pattern == "unstructured":
        masks = magnitude_masks(arrays, sparsity, scope)
    else:
        raise ValueError(f"unknown pruning pattern {pattern!r}; known: unstructured, n:m")
    pruned = {k: np.where(masks[k], v, np.zeros_like(v)) for k, v in arrays.items()}
    return pruned, masks

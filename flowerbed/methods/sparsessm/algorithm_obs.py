"""SparseGPT (Frantar & Alistarh 2023) as SparseSSM (arXiv 2506.09613) uses it: OBS with updates.

Rows of ``W`` are outputs, columns inputs, ``H = Σ x xᵀ`` the input Gram.
Columns are processed left to right in blocks; each column's masked weights
are zeroed and the error ``(w - q) / [U]_jj`` is spread over the remaining
columns with the upper Cholesky factor ``U`` of ``H⁻¹`` (the OBS update).
Unstructured masks choose, per block, the ``round(s · size)`` lowest
``w² / [U]_jj²``; N:M masks choose, per row and group of ``m`` columns, the
``n`` lowest at the group's first column. The SparseGPT-ext baseline applies
this to ``A_log`` (rows: the ``D`` channels, columns: the ``N`` states, ``H``:
the state Gram), exactly as the official ``sparsegpt_ext.py`` (except that it
prunes exactly ``round(s · size)`` per block where ``<=`` at the threshold
could prune one more).
"""

from __future__ import annotations

import numpy as np


def sparsegpt(
    weight: np.ndarray, gram: np.ndarray, sparsity: float, *, prunen: int = 0, prunem: int = 0,
    blocksize: int = 128, percdamp: float = 0.01,
) -> tuple[np.ndarray, np.ndarray]:
    """Pruned and compensated weights ``(rows, cols)`` and the keep-mask."""
    w = np.array(weight, dtype=np.float64)
    h = np.array(gram, dtype=np.float64)
    cols = w.shape[1]
    dead = np.diag(h) == 0
    h[dead, dead] = 1.0
    w[:, dead] = 0.0
    h[np.diag_indices(cols)] += percdamp * np.mean(np.diag(h))
    u = np.linalg.cholesky(np.linalg.inv(h)).T  # upper: H⁻¹ = Uᵀ U
    pruned = np.zeros_like(w, dtype=bool)
    for i1 in range(0, cols, blocksize):
        i2 = min(i1 + blocksize, cols)
        w1, u1 = w[:, i1:i2].copy(), u[i1:i2, i1:i2]
        q1, err1 = np.zeros_like(w1), np.zeros_like(w1)
        m1 = np.zeros_like(w1, dtype=bool)
        if not prunem:
            score = w1**2 / np.diag(u1)[None, :] ** 2
            k = round(sparsity * score.size)
            m1.ravel()[np.argsort(score.ravel(), kind="stable")[:k]] = True
        for j in range(i2 - i1):
            if prunem and j % prunem == 0:
                score = w1[:, j : j + prunem] ** 2 / np.diag(u1)[None, j : j + prunem] ** 2
                low = np.argsort(score, axis=1, kind="stable")[:, :prunen]
                np.put_along_axis(m1[:, j : j + prunem], low, True, axis=1)
            col = w1[:, j]
            q = np.where(m1[:, j], 0.0, col)
            err = (col - q) / u1[j, j]
            w1[:, j:] -= np.outer(err, u1[j, j:])
            q1[:, j], err1[:, j] = q, err
        w[:, i1:i2] = q1
        w[:, i2:] -= err1 @ u[i1:i2, i2:]
        pruned[:, i1:i2] = m1
    return w, ~pruned

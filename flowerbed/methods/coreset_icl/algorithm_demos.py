"""What a coreset is judged by: its peripheral share and redundancy, and per-query demos.

Companions of :mod:`flowerbed.methods.coreset_icl.algorithm`:
the *peripheral* share of a selected set (how much of it lies in the pool's 10%
lowest local densities), its *redundancy* (mean cosine of each selected point to
its most similar selected neighbour), the demonstrations a query gets from an
annotated bank (the ``k`` most cosine-similar ones, or a seeded random draw, or
the most similar ones until the context is full: the selective-annotation
protocol of vote-k and Sub-SA), and the spec's LM-free ICL proxy (a
similarity-weighted label vote of the retrieved demonstrations).

Examples
--------
>>> bank = np.array([[1.0, 0.0], [0.0, 1.0], [0.7, 0.7]])
>>> retrieve(bank, np.array([[1.0, 0.1]]), 2).tolist()   # most similar last
[[2, 0]]
"""

from __future__ import annotations

import numpy as np

from flowerbed.core.seeds import rng as seeded_rng
from flowerbed.methods.coreset_icl.algorithm import PERIPHERAL_SHARE, unit_rows

# --- diagnostics of a selected set -----------------------------------------------------------


def peripheral_fraction(
    density: np.ndarray, selected: np.ndarray, share: float = PERIPHERAL_SHARE
) -> float:
    """Share of ``selected`` among the ``floor(share n)`` lowest-density points of the pool."""
    n = len(density)
    low = np.argsort(np.asarray(density), kind="stable")[: int(share * n)]
    sel = np.asarray(selected, dtype=np.int64)
    return float(np.isin(sel, low).mean()) if len(sel) else float("nan")


def redundancy(emb: np.ndarray, selected: np.ndarray) -> float:
    """Mean over selected points of the largest cosine to another selected point."""
    sel = np.asarray(selected, dtype=np.int64)
    if len(sel) < 2:
        return float("nan")
    e = unit_rows(np.asarray(emb)[sel]).astype(np.float64)
    c = e @ e.T
    np.fill_diagonal(c, -np.inf)
    return float(c.max(axis=1).mean())


# --- demonstrations per query ----------------------------------------------------------------


def retrieve(bank_emb: np.ndarray, query_emb: np.ndarray, k: int) -> np.ndarray:
    """``(q, min(k, bank))`` bank indices per query, most similar *last* (next to the query).

    Ties in similarity go to the lower bank index (counted as more similar).
    """
    b, q = unit_rows(bank_emb).astype(np.float64), unit_rows(query_emb).astype(np.float64)
    k = min(int(k), len(b))
    c = q @ b.T
    idx = np.broadcast_to(np.arange(len(b)), c.shape)
    order = np.lexsort((idx, -c), axis=1)[:, :k]
    return order[:, ::-1].copy()


def fill_context(
    bank_emb: np.ndarray,
    query_emb: np.ndarray,
    demo_tokens: np.ndarray,
    query_tokens: np.ndarray,
    limit: int,
) -> list[np.ndarray]:
    """Per query, the most similar bank items while the prompt fits ``limit`` tokens.

    The selective-annotation protocol (vote-k's ``prompt_retrieval``): starting
    from the query's own ``query_tokens[q]``, bank items are added from the most
    similar down, each costing ``demo_tokens[i]``, until the next one would pass
    ``limit`` (then the rest are dropped, as the reference breaks there). Each
    list is ordered most similar *last*, next to the query; it may be empty.
    """
    ranked = retrieve(bank_emb, query_emb, len(bank_emb))[:, ::-1]  # most similar first
    cost = np.asarray(demo_tokens, dtype=np.int64)
    out = []
    for row, used in zip(ranked, np.asarray(query_tokens, dtype=np.int64), strict=True):
        total = int(used) + np.cumsum(cost[row])
        fits = int(np.argmax(total > limit)) if (total > limit).any() else len(row)
        out.append(row[:fits][::-1].copy())
    return out


def random_demos(bank_size: int, n_queries: int, k: int, seed: int, share: int = 1
                 ) -> np.ndarray:
    """``(q, min(k, bank))`` bank indices per query, drawn without replacement.

    Consecutive blocks of ``share`` queries share one draw (``1``: a draw per
    query), so their demonstration prefix can be computed once.
    """
    gen = seeded_rng(seed, "coreset.random_demos")
    k = min(int(k), bank_size)
    if n_queries == 0:
        return np.zeros((0, k), dtype=np.int64)
    draws = [gen.choice(bank_size, k, replace=False) for _ in range(-(-n_queries // share))]
    return np.stack([draws[i // share] for i in range(n_queries)])


def knn_vote(
    bank_emb: np.ndarray, bank_labels: np.ndarray, query_emb: np.ndarray, k: int,
    num_classes: int,
) -> np.ndarray:
    """Similarity-weighted label vote of the ``k`` most similar bank items (the spec's proxy).

    Ties go to the lower class index.
    """
    idx = retrieve(bank_emb, query_emb, k)
    b, q = unit_rows(bank_emb).astype(np.float64), unit_rows(query_emb).astype(np.float64)
    w = np.einsum("qd,qkd->qk", q, b[idx])
    votes = np.zeros((len(q), num_classes))
    np.add.at(votes, (np.arange(len(q))[:, None], np.asarray(bank_labels)[idx]), w)
    return votes.argmax(axis=1)

"""Pruning by weak monotonicity: Pareto frontier, delta-Pareto cover, ERM over a set.

Method: "Hedging on the Frontier: Learning New Tasks with Few Samples" (Wegel, So,
Di Gennaro, Yang; ICML 2026, arXiv 2605.30997), as reconstructed in
``docs/methods/frontier.md`` section 1. An evaluation matrix ``E`` (M models x K
benchmarks) holds known benchmark risks. If a model is at least as good on every
benchmark, it tends to be at least as good on a new task (weak monotonicity), so
the search for the new task's best model can be restricted to the Pareto frontier
of ``E``, or to a small delta-cover of it.

Orientation is always explicit: every function takes ``lower_is_better`` and
works internally on losses (a score matrix is negated first).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def as_losses(matrix: np.ndarray, lower_is_better: bool) -> np.ndarray:
    """Return ``matrix`` oriented as losses (lower is better), as a 2-D float array.

    Examples
    --------
    >>> as_losses(np.array([[0.9, 0.2]]), lower_is_better=False).tolist()
    [[-0.9, -0.2]]
    """
    e = np.asarray(matrix, dtype=np.float64)
    if e.ndim != 2:
        raise ValueError(f"evaluation matrix must be 2-D (models x benchmarks), got {e.shape}")
    if not np.all(np.isfinite(e)):
        raise ValueError("evaluation matrix has non-finite entries")
    return e if lower_is_better else -e


def dominated_by(e: np.ndarray, eps: float = 0.0) -> np.ndarray:
    """Boolean ``D[g, f]``: model ``g`` eps-dominates model ``f`` (losses ``e``).

    With ``eps = 0``: ``e[g] <= e[f]`` everywhere and ``e[g] != e[f]`` somewhere
    (so identical rows never dominate each other). With ``eps > 0``:
    ``e[g] <= e[f] - eps`` everywhere.
    """
    le = np.all(e[:, None, :] <= e[None, :, :] - eps, axis=2)
    if eps > 0:
        return le
    return le & np.any(e[:, None, :] != e[None, :, :], axis=2)


def pareto_frontier(
    matrix: np.ndarray, *, lower_is_better: bool = True, eps: float = 0.0
) -> np.ndarray:
    """Indices (sorted) of the (eps-relaxed) Pareto frontier of an evaluation matrix.

    Parameters
    ----------
    matrix
        ``(M, K)`` risks (``lower_is_better=True``) or scores of M models on K
        benchmarks.
    lower_is_better
        Orientation of ``matrix``; scores such as accuracy need ``False``.
    eps
        Relaxation: a model is dropped only if another is better by at least
        ``eps`` on every benchmark. ``0`` gives the exact frontier, on which
        duplicates of frontier rows are all kept.

    Examples
    --------
    >>> pareto_frontier(np.array([[.1, .5], [.2, .2], [.3, .3], [.2, .2]])).tolist()
    [0, 1, 3]
    """
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    e = as_losses(matrix, lower_is_better)
    return np.flatnonzero(~dominated_by(e, eps).any(axis=0))


def covers(e: np.ndarray, delta: float) -> np.ndarray:
    """Boolean ``C[c, f]``: ``e[c] <= e[f] + delta`` on every benchmark."""
    return np.all(e[:, None, :] <= e[None, :, :] + delta, axis=2)


@dataclass(frozen=True)
class Cover:
    """A delta-Pareto cover of the frontier and the cell each frontier model falls in.

    Attributes
    ----------
    delta
        Slack of the cover, in loss units.
    frontier
        Indices of the frontier models (into the evaluation matrix).
    centers
        Indices of the cover models, in the order the greedy picked them.
    cell
        For each frontier model, the position in ``centers`` of the centre that
        first covered it.
    """

    delta: float
    frontier: np.ndarray
    centers: np.ndarray
    cell: np.ndarray


def pareto_cover(
    matrix: np.ndarray, delta: float, *, lower_is_better: bool = True
) -> Cover:
    """Greedy delta-Pareto cover of the frontier (spec algorithm A.2).

    Repeatedly add the frontier model that covers the most not-yet-covered
    frontier models (ties: lowest mean loss, then lowest index). Every frontier
    model ``f`` then has a centre ``c`` with ``e[c] <= e[f] + delta``.

    Examples
    --------
    >>> e = np.array([[0.0, 1.0], [0.05, 0.95], [1.0, 0.0]])
    >>> pareto_cover(e, 0.1).centers.tolist()
    [0, 2]
    """
    if delta < 0:
        raise ValueError(f"delta must be >= 0, got {delta}")
    e = as_losses(matrix, lower_is_better)
    front = pareto_frontier(e)
    ef = e[front]
    cov = covers(ef, delta)
    mean = ef.mean(axis=1)
    uncovered = np.ones(len(front), dtype=bool)
    cell = np.full(len(front), -1)
    centers: list[int] = []
    while uncovered.any():
        gain = (cov & uncovered).sum(axis=1)
        best = np.lexsort((np.arange(len(front)), mean, -gain))[0]
        newly = cov[best] & uncovered
        cell[newly] = len(centers)
        uncovered &= ~newly
        centers.append(int(best))
    return Cover(float(delta), front, front[np.array(centers, dtype=int)], cell)


def cover_path(
    matrix: np.ndarray, deltas: np.ndarray | list[float], *, lower_is_better: bool = True
) -> list[Cover]:
    """Covers for increasing ``deltas`` whose sizes never increase.

    Greedy covers are not monotone in delta by themselves; a delta-cover is also a
    delta'-cover for every delta' > delta, so whenever the greedy result at a larger
    delta is bigger than the previous one, the previous cover is kept (relabelled
    with the larger delta).
    """
    out: list[Cover] = []
    for delta in sorted(float(d) for d in deltas):
        cover = pareto_cover(matrix, delta, lower_is_better=lower_is_better)
        if out and len(cover.centers) > len(out[-1].centers):
            prev = out[-1]
            cover = Cover(delta, prev.frontier, prev.centers, prev.cell)
        out.append(cover)
    return out


def cell_prior(cover: Cover, num_models: int) -> np.ndarray:
    """Geometry-aware prior: mass ``1/|C|`` per cover cell, split evenly inside the cell.

    Returns a length-``num_models`` vector supported on the frontier, so a dense
    cluster of near-duplicate frontier models shares one cell's mass.

    Examples
    --------
    >>> c = Cover(0.1, np.array([0, 1, 2]), np.array([0, 2]), np.array([0, 0, 1]))
    >>> cell_prior(c, 4).tolist()
    [0.25, 0.25, 0.5, 0.0]
    """
    prior = np.zeros(num_models)
    cells = len(cover.centers)
    for k in range(cells):
        members = cover.frontier[cover.cell == k]
        prior[members] = 1.0 / (cells * len(members))
    return prior


def uniform_on(indices: np.ndarray, num_models: int) -> np.ndarray:
    """Uniform prior on ``indices`` (zero elsewhere)."""
    prior = np.zeros(num_models)
    prior[np.asarray(indices, dtype=int)] = 1.0 / len(indices)
    return prior


def erm(risks: np.ndarray, subset: np.ndarray | None = None) -> int:
    """Index of the lowest empirical risk within ``subset`` (default: all; ties: lowest index).

    Examples
    --------
    >>> erm(np.array([0.3, 0.1, 0.2]), np.array([0, 2]))
    2
    """
    r = np.asarray(risks, dtype=np.float64)
    idx = np.arange(len(r)) if subset is None else np.asarray(subset, dtype=int)
    return int(idx[np.argmin(r[idx])])


def benchmark_average_pick(matrix: np.ndarray, *, lower_is_better: bool = True) -> int:
    """The model with the best mean over benchmarks (uses no target data)."""
    return int(np.argmin(as_losses(matrix, lower_is_better).mean(axis=1)))


def monotonicity_agreement(matrix: np.ndarray, target: np.ndarray) -> float:
    """Share of strict dominance pairs (losses) whose target losses agree (``<=``).

    ``nan`` when no model dominates another.
    """
    e = as_losses(matrix, True)
    dom = dominated_by(e)
    if not dom.any():
        return float("nan")
    t = np.asarray(target, dtype=np.float64)
    agree = t[:, None] <= t[None, :]
    return float(agree[dom].mean())

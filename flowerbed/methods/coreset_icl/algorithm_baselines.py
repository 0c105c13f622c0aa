"""Coreset baselines for few-shot ICL, each from its own definition, and one dispatcher.

Definitions (read in ``JamesQian11/SubSA/core_method.py``
and ``methods_utils/``; our own implementations, checked against ports of those
lines in ``tests/methods/test_coreset_icl.py``):

- ``random``: ``B`` distinct points, seeded.
- ``kmeans``: k-means with ``B`` clusters (scikit-learn, k-means++, seeded) on
  the unit embeddings; each cluster's member nearest its centroid (medoid).
- ``kcenter``: greedy k-center (Gonzalez 1985; Sener & Savarese 2018): a seeded
  first point, then the point farthest (``1 - cos``) from the selected set.
- ``diversity`` (SubSA's ``diversity``): a seeded first point, then the point
  with the smallest *sum* of cosines to the selected set.
- ``fast_votek`` (Su et al., 2022, arXiv 2209.01975): each point votes for its
  ``k = 150`` nearest neighbours; greedily pick ``argmax_u sum_{v votes u, v not
  in S} 10^-times(v)``, ``times(v)`` = selected points ``v`` voted for. Ties go
  as in the reference: more votes first, then the order of the first vote.
- ``votek``: ``max(1, round(B/10))`` points by fast vote-k; then a confidence
  score of *every* other pool point from the LM prompted with them (a callback);
  least confident first, the first 90% of the pool cut into ``B - B1`` buckets of
  ``int(0.9 n / (B - B1))`` points, the best
  vote score taken from each bucket (the reference's ``iterative_selection``);
  short buckets are filled at random.
- ``subsa`` (Sub-SA, Qian et al., 2024): ``gain(e|S) = lam sum_{i in V} cos_ie -
  2 sum_{s in S} cos_se`` (``lam = 1``), plain greedy.
- ``mfl`` (facility location, as in SubSA's ``mfl``): ``gain(e) = sum_i
  relu(cos_ie - maxsim_i(S))``, ``maxsim`` starting at -1; lazy greedy (exact:
  the gains never increase) refreshing blocks of candidates, so no ``n x n``
  matrix is stored; the first refresh still touches every pair.

IDEAL (influence maximisation with Monte-Carlo cascades) is not implemented:
its ``O(n B R)`` simulations per selection do not fit a CPU budget here.

Examples
--------
>>> rng = np.random.default_rng(0)
>>> emb = rng.standard_normal((40, 6))
>>> sorted(select("kcenter", emb, 4, seed=0).tolist()) == sorted(
...     select("kcenter", emb, 4, seed=0).tolist())
True
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from flowerbed.core.seeds import rng as seeded_rng
from flowerbed.methods.coreset_icl import algorithm as cs
from flowerbed.methods.coreset_icl.algorithm import CoresetError, Graph

#: fast vote-k's neighbour count (Su et al.; SubSA's call).
VOTEK_K = 150
#: Share of the budget vote-k picks before asking the LM (the paper's M/10).
VOTEK_FIRST = 0.1
#: Share of the confidence-sorted pool vote-k's buckets cover (the reference's 0.9).
VOTEK_COVER = 0.9

#: Given the first-stage indices, every pool point's LM confidence (first-stage ones ignored).
Confidence = Callable[[np.ndarray], np.ndarray]


def random_select(n: int, budget: int, seed: int) -> np.ndarray:
    """``budget`` distinct indices of ``range(n)``, seeded."""
    return seeded_rng(seed, "coreset.random").choice(n, budget, replace=False)


def kmeans_medoids(emb: np.ndarray, budget: int, seed: int) -> np.ndarray:
    """The member nearest each k-means centroid (one per cluster; distinct)."""
    from sklearn.cluster import KMeans  # heavy: only when selecting

    e = cs.unit_rows(emb)
    km = KMeans(n_clusters=budget, n_init=1, random_state=seed % 2**32).fit(e)
    out: list[int] = []
    taken = np.zeros(len(e), dtype=bool)
    for c in range(budget):
        members = np.flatnonzero(km.labels_ == c)
        dist = ((e[members] - km.cluster_centers_[c]) ** 2).sum(-1)
        for m in members[np.argsort(dist, kind="stable")]:
            if not taken[m]:
                out.append(int(m))
                taken[m] = True
                break
    if len(out) < budget:  # clusters left without an unused member: the lowest unused indices
        rest = np.flatnonzero(~taken)
        out += rest[: budget - len(out)].tolist()
    return np.asarray(out)


def kcenter_greedy(emb: np.ndarray, budget: int, seed: int) -> np.ndarray:
    """Greedy k-center on ``1 - cos``: repeatedly the point farthest from the set."""
    e = cs.unit_rows(emb)
    first = int(seeded_rng(seed, "coreset.kcenter").integers(len(e)))
    out = [first]
    dist = 1.0 - (e @ e[first]).astype(np.float64)
    dist[first] = -np.inf
    for _ in range(budget - 1):
        j = int(np.argmax(dist))
        out.append(j)
        dist = np.minimum(dist, 1.0 - (e @ e[j]).astype(np.float64))
        dist[out] = -np.inf
    return np.asarray(out)


def diversity_select(emb: np.ndarray, budget: int, seed: int) -> np.ndarray:
    """SubSA's ``diversity``: repeatedly the point with the least summed cosine to the set."""
    e = cs.unit_rows(emb)
    first = int(seeded_rng(seed, "coreset.diversity").integers(len(e)))
    out = [first]
    total = (e @ e[first]).astype(np.float64)
    for _ in range(budget - 1):
        score = total.copy()
        score[out] = np.inf
        j = int(np.argmin(score))
        out.append(j)
        total += e @ e[j]
    return np.asarray(out)


# --- vote-k ----------------------------------------------------------------------------------


class Votes:
    """Who voted for whom in a kNN graph, with the reference's tie order.

    ``matrix[u, v] = 1`` when ``v`` votes for ``u`` (``u`` among ``v``'s ``k``
    nearest); rows hold voters in increasing index, so a row sum adds in the
    reference's order. ``order`` ranks points by votes (more first), then by
    when they first received a vote (voters in index order, each voting from
    its least to its most similar neighbour).
    """

    def __init__(self, graph: Graph, k: int = VOTEK_K) -> None:
        from scipy import sparse  # heavy: only when selecting

        k = min(k, graph.k)
        n = graph.n
        nbr = graph.index[:, :k][:, ::-1]  # least similar first, as voters append them
        voters = np.repeat(np.arange(n), k)
        targets = nbr.ravel()
        self.matrix = sparse.csr_matrix(
            (np.ones(n * k), (targets, voters)), shape=(n, n))
        self.matrix.sort_indices()
        counts = np.bincount(targets, minlength=n)
        first = np.full(n, n * k, dtype=np.int64)
        np.minimum.at(first, targets, np.arange(n * k))
        self.order = np.lexsort((first, -counts))
        self.rank = np.empty(n, dtype=np.int64)
        self.rank[self.order] = np.arange(n)
        self.voted = counts > 0

    def scores(self, times: np.ndarray, taken: np.ndarray) -> np.ndarray:
        """``sum_{v votes u, v not selected} 10^-times(v)`` for every ``u``."""
        w = np.where(taken, 0.0, np.power(10.0, -times.astype(np.float64)))
        out: np.ndarray = self.matrix @ w
        return out

    def voters(self, u: int) -> np.ndarray:
        """Points that vote for ``u``."""
        m = self.matrix
        return m.indices[m.indptr[u] : m.indptr[u + 1]]


def _votek_greedy(votes: Votes, budget: int, taken: np.ndarray, times: np.ndarray,
                  out: list[int]) -> None:
    """Extend ``out`` to ``budget`` points by the discounted vote score (in place)."""
    while len(out) < budget:
        s = votes.scores(times, taken)[votes.order]
        s[taken[votes.order]] = -np.inf
        u = int(votes.order[int(np.argmax(s))])
        out.append(u)
        taken[u] = True
        times[votes.voters(u)] += 1


def _graph(emb: np.ndarray, k: int, graph: Graph | None) -> Graph:
    """``graph`` if it keeps enough neighbours, else a new one with ``k``."""
    if graph is not None and graph.k >= min(k, graph.n - 1):
        return graph
    return cs.knn_graph(emb, k)


def fast_votek(emb: np.ndarray, budget: int, *, k: int = VOTEK_K,
               graph: Graph | None = None) -> np.ndarray:
    """Fast vote-k: greedy on votes discounted by ``10^-times`` (Su et al., 2022)."""
    g = _graph(emb, k, graph)
    votes = Votes(g, k)
    out: list[int] = []
    _votek_greedy(votes, budget, np.zeros(g.n, dtype=bool), np.zeros(g.n, dtype=np.int64), out)
    return np.asarray(out)


def votek(emb: np.ndarray, budget: int, confidence: Confidence, *, seed: int = 0,
          k: int = VOTEK_K, graph: Graph | None = None) -> np.ndarray:
    """Vote-k: fast vote-k for ``B/10`` points, then one per confidence bucket (Su et al., 2022)."""
    g = _graph(emb, k, graph)
    votes = Votes(g, k)
    n = g.n
    first = min(budget, max(1, round(budget * VOTEK_FIRST)))
    taken, times = np.zeros(n, dtype=bool), np.zeros(n, dtype=np.int64)
    out: list[int] = []
    _votek_greedy(votes, first, taken, times, out)
    if len(out) == budget:
        return np.asarray(out)
    conf = np.asarray(confidence(np.asarray(out)), dtype=np.float64)
    if conf.shape != (n,):
        raise CoresetError(f"vote-k confidence must give one value per pool point ({n}), "
                           f"got shape {conf.shape}")
    rest = np.flatnonzero(~taken)
    if not np.isfinite(conf[rest]).all():
        raise CoresetError("vote-k confidence must score every pool point outside the first "
                           f"stage; {int((~np.isfinite(conf[rest])).sum())} are not finite")
    ranked = rest[np.argsort(conf[rest], kind="stable")]  # least confident first
    remaining = budget - len(out)
    # the reference cuts buckets of int(0.9 n / remaining) from the whole pool, its
    # first-stage points sorted last (so never reached)
    size = max(1, int(n * VOTEK_COVER / remaining))
    for c in range(remaining):
        bucket = ranked[c * size : (c + 1) * size]
        if len(bucket) == 0:
            break
        s = votes.scores(times, taken)[bucket]
        s[~votes.voted[bucket]] = 0.0
        u = int(bucket[int(np.argmax(s))])
        out.append(u)
        taken[u] = True
        times[votes.voters(u)] += 1
    if len(out) < budget:
        rest = np.flatnonzero(~taken)
        out += seeded_rng(seed, "coreset.votek.fill").choice(
            rest, budget - len(out), replace=False).tolist()
    return np.asarray(out)


# --- Sub-SA and facility location -----------------------------------------------------------


def subsa(emb: np.ndarray, budget: int, lam: float = 1.0) -> np.ndarray:
    """Sub-SA: ``lam`` x global column sum of cosines minus twice the cosines to the set."""
    e = cs.unit_rows(emb)
    colsum = (e @ e.sum(axis=0, dtype=np.float64).astype(np.float32)).astype(np.float64)
    pen = np.zeros(len(e))
    taken = np.zeros(len(e), dtype=bool)
    out: list[int] = []
    for _ in range(budget):
        g = lam * colsum - 2.0 * pen
        g[taken] = -np.inf
        j = int(np.argmax(g))
        out.append(j)
        taken[j] = True
        pen += e @ e[j]
    return np.asarray(out)


def mfl(emb: np.ndarray, budget: int, block: int = 256) -> np.ndarray:
    """Facility location ``sum_i max_{s in S} cos_is`` (from -1), lazy greedy.

    Stale gains are upper bounds (gains never increase); the highest stale
    candidates are refreshed together with one ``(m, n)`` product, ``m`` starting
    at ``block`` and doubling while a step needs more. No ``n x n`` matrix is
    stored, but the first refresh touches every pair, as the kNN graph does.
    """
    e = cs.unit_rows(emb)
    n = len(e)
    best = np.full(n, -1.0)
    # at S = {} every cos + 1 >= 0, so the first gains are n + e . sum(e); the slack
    # keeps them upper bounds of the relu sums despite rounding
    bound = n + (e @ e.sum(axis=0)).astype(np.float64) + 1e-6 * n
    fresh = np.full(n, -1, dtype=np.int64)  # step at which each bound was made exact
    out: list[int] = []
    size = block
    while len(out) < budget:
        j = int(np.argmax(bound))
        if fresh[j] == len(out):
            out.append(j)
            bound[j] = -np.inf
            best = np.maximum(best, (e @ e[j]).astype(np.float64))
            size = block
            continue
        m = min(size, n - len(out))
        size *= 2
        top = np.union1d(np.argpartition(-bound, m - 1)[:m], [j])
        top = top[fresh[top] != len(out)]
        bound[top] = np.maximum((e[top] @ e.T).astype(np.float64) - best, 0.0).sum(axis=1)
        fresh[top] = len(out)
    return np.asarray(out)


# --- dispatcher ------------------------------------------------------------------------------

#: Selector names the learner and the benchmark accept.
SELECTORS = ("pacs", "pacs_fixed", "pacs_full", "random", "kmeans", "kcenter", "diversity",
             "fast_votek", "votek", "subsa", "mfl")
#: Selectors that use the shared kNN graph (and how many neighbours they need).
GRAPH_K = {"pacs": cs.DENSITY_K, "pacs_fixed": cs.DENSITY_K, "pacs_full": cs.DENSITY_K,
           "fast_votek": VOTEK_K, "votek": VOTEK_K}
#: The PACS variants: (schedule, kernel support).
PACS_VARIANTS: dict[str, tuple[cs.Schedule, cs.KernelSupport]] = {
    "pacs": ("progress", "budget"), "pacs_fixed": ("fixed", "budget"),
    "pacs_full": ("progress", "full")}


def select(
    name: str, emb: np.ndarray, budget: int, *, seed: int = 0, graph: Graph | None = None,
    confidence: Confidence | None = None, **params: Any,
) -> np.ndarray:
    """Indices (selection order) chosen by selector ``name``; ``params`` go to PACS.

    ``pacs`` is the progress-aware schedule with the budget-local kernel,
    ``pacs_fixed`` the fixed ``a``, ``pacs_full`` the kernel on every pair (the
    spec's literal form); see :func:`~flowerbed.methods.coreset_icl.algorithm.pacs_select`.

    ``graph`` (a :func:`~flowerbed.methods.coreset_icl.algorithm.knn_graph` of ``emb`` with
    enough neighbours) is reused when given; ``confidence`` is vote-k's LM callback.
    """
    n = len(emb)
    if not 1 <= budget <= n:
        raise CoresetError(f"budget must be in 1..{n} (the pool size), got {budget}")
    if name in PACS_VARIANTS:
        schedule, support = PACS_VARIANTS[name]
        return cs.pacs_select(emb, budget, graph=graph, schedule=schedule, support=support,
                              **params).indices
    if name == "random":
        return random_select(n, budget, seed)
    if name == "kmeans":
        return kmeans_medoids(emb, budget, seed)
    if name == "kcenter":
        return kcenter_greedy(emb, budget, seed)
    if name == "diversity":
        return diversity_select(emb, budget, seed)
    if name == "fast_votek":
        return fast_votek(emb, budget, graph=graph)
    if name == "votek":
        if confidence is None:
            raise CoresetError("selector votek needs the LM confidence callback")
        return votek(emb, budget, confidence, seed=seed, graph=graph)
    if name == "subsa":
        return subsa(emb, budget)
    if name == "mfl":
        return mfl(emb, budget)
    raise CoresetError(f"unknown selector {name!r}; known: {', '.join(SELECTORS)}")

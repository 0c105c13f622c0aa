"""Coreset selection for few-shot ICL: PACS (reconstructed) and its baselines.

References are independent of the code under test: brute-force kNN, density, kernel
and objective written here from the definitions; ports of the SubSA reference code
(``JamesQian11/SubSA``: ``fast_votek``, the ``mfl`` branch, ``SubSA.calc_gain`` with
its ``Greedy`` optimiser) as oracles; scikit-learn's KMeans and NearestNeighbors;
``icl.evaluate``'s own log-prob scoring for the batched scorer.
"""

from __future__ import annotations

import importlib.util
import itertools
from collections import defaultdict

import numpy as np
import pytest

import flowerbed
from flowerbed.core import registry
from flowerbed.core.registry import Params, register
from flowerbed.data.base import ClientData, Dataset, DatasetMeta
from flowerbed.methods.coreset_icl import algorithm as cs
from flowerbed.methods.coreset_icl import algorithm_baselines as cb
from flowerbed.methods.coreset_icl import algorithm_demos as cd

HAS_LM = importlib.util.find_spec("transformers") is not None
HAS_WORDNET = importlib.util.find_spec("numpy") is not None and __import__("os").path.isfile(
    "/usr/share/wordnet/data.adj"
)


def _emb(n=120, d=12, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, d)) + 0.4 * rng.standard_normal((1, d))).astype(np.float32)


# --- brute-force references ---------------------------------------------------------------


def _cos(emb):
    e = emb / np.linalg.norm(emb, axis=1, keepdims=True)
    return (e @ e.T).astype(np.float64)


def _ref_pieces(emb, k, reach):
    """(rho, K) from the definitions: kNN mean cosine (min-max), tau, masked kernel."""
    s = _cos(emb)
    off = s.copy()
    np.fill_diagonal(off, -np.inf)
    ranked = -np.sort(-off, axis=1)
    raw = ranked[:, :k].mean(axis=1)
    rho = (raw - raw.min()) / (raw.max() - raw.min())
    tau = np.median(1 - ranked[:, 0])
    kern = np.exp(-(1 - s) / tau)
    if reach is not None:
        thr = ranked[:, reach - 1]
        kern[s < np.minimum(thr[:, None], thr[None, :])] = 0.0
    np.fill_diagonal(kern, 0.0)
    return rho, kern, raw


def _f(sel, rho, kern, a, lam=1.0):
    sel = list(sel)
    pairs = sum(kern[i, j] for i, j in itertools.combinations(sel, 2))
    return (1 - a) * rho[sel].sum() - a * lam * pairs


# --- spec test (1): exactly B unique indices, deterministic ------------------------------


def _confidence(n):
    return lambda first: np.linspace(0.0, 1.0, n)[::-1].copy()


@pytest.mark.parametrize("name", cb.SELECTORS)
def test_every_selector_returns_b_unique_indices_deterministically(name):
    emb = _emb()
    graph = cs.knn_graph(emb, cb.VOTEK_K)
    kw = {"confidence": _confidence(len(emb))} if name == "votek" else {}
    a = cb.select(name, emb, 11, seed=5, graph=graph, **kw)
    b = cb.select(name, emb, 11, seed=5, graph=graph, **kw)
    assert len(a) == 11 == len(set(a.tolist()))
    assert a.min() >= 0 and a.max() < len(emb)
    assert np.array_equal(a, b)


# --- spec test (2): no outlier for PACS on the two-cluster toy; k-center takes one ------


def _two_clusters():
    rng = np.random.default_rng(1)
    a = rng.normal([5, 0, 0], 0.3, (60, 3))
    b = rng.normal([0, 5, 0], 0.3, (60, 3))
    outliers = np.array([[0.0, 0.0, 6.0], [-4.0, -4.0, 1.0], [3.0, -5.0, -3.0]])
    return np.vstack([a, b, outliers]), {120, 121, 122}


@pytest.mark.parametrize("name", ["pacs", "pacs_fixed"])
def test_pacs_takes_no_outlier_where_kcenter_takes_one(name):
    x, outliers = _two_clusters()
    pacs = set(cb.select(name, x, 4, seed=0).tolist())
    assert not pacs & outliers
    assert {int(i) // 60 for i in pacs} == {0, 1}  # both clusters represented
    for seed in range(3):
        assert set(cb.select("kcenter", x, 4, seed=seed).tolist()) & outliers


# --- spec tests (3)-(5): gains, submodularity, degenerate cases --------------------------


@pytest.mark.parametrize("support", ["budget", "knn", "full"])
def test_fixed_a_step_gains_are_differences_of_the_objective(support):
    emb, budget, a = _emb(90), 9, 0.4
    reach = None if support == "full" else (10 if support == "budget" else cs.DENSITY_K)
    rho, kern, _ = _ref_pieces(emb, cs.DENSITY_K, reach)
    sel = cs.pacs_select(emb, budget, schedule="fixed", a=a, support=support)
    for t in range(budget):
        before, after = sel.indices[:t], sel.indices[: t + 1]
        expected = _f(after, rho, kern, a) - _f(before, rho, kern, a)
        assert sel.gains[t] == pytest.approx(expected, abs=1e-6)
    # and each step is the greedy argmax of that difference
    for t in range(budget):
        rest = [e for e in range(len(emb)) if e not in sel.indices[:t]]
        deltas = [
            _f([*sel.indices[:t], e], rho, kern, a) - _f(sel.indices[:t], rho, kern, a)
            for e in rest
        ]
        assert rest[int(np.argmax(deltas))] == sel.indices[t]


def test_progress_schedule_uses_t_over_b_and_its_gains_match_the_objective():
    emb, budget = _emb(70, seed=3), 7
    rho, kern, _ = _ref_pieces(emb, cs.DENSITY_K, 10)
    sel = cs.pacs_select(emb, budget)
    assert np.allclose(sel.weights, np.arange(budget) / budget)
    for t in range(budget):
        a = t / budget
        d = _f(sel.indices[: t + 1], rho, kern, a) - _f(sel.indices[:t], rho, kern, a)
        assert sel.gains[t] == pytest.approx(d, abs=1e-6)


def test_submodularity_on_random_nested_sets():
    emb = _emb(80, seed=4)
    graph = cs.knn_graph(emb, cs.DENSITY_K)
    rho = cs.minmax(graph.density())
    rng = np.random.default_rng(0)
    for support in ("budget", "full"):
        kern = cs.build_kernel(graph, 8, support)
        ref_rho, ref_k, _ = _ref_pieces(emb, cs.DENSITY_K, None if support == "full" else 10)
        for _ in range(30):
            big = rng.choice(80, 12, replace=False)
            small = big[: rng.integers(0, 12)]
            e = int(rng.choice(np.setdiff1d(np.arange(80), big)))
            a = float(rng.uniform(0.05, 0.95))
            d_small = cs.gains(rho, cs.penalty(kern, small), a, 1.0)[e]
            d_big = cs.gains(rho, cs.penalty(kern, big), a, 1.0)[e]
            assert d_small >= d_big - 1e-12
            assert d_big == pytest.approx(
                _f([*big, e], ref_rho, ref_k, a) - _f(big, ref_rho, ref_k, a), abs=1e-6
            )


@pytest.mark.parametrize("kw", [{"schedule": "fixed", "a": 0.0}, {"lam": 0.0}])
def test_degenerate_weights_give_the_top_b_local_densities(kw):
    emb = _emb(100, seed=6)
    _, _, raw = _ref_pieces(emb, cs.DENSITY_K, None)
    top = set(np.argsort(-raw, kind="stable")[:10].tolist())
    assert set(cs.pacs_select(emb, 10, **kw).indices.tolist()) == top


@pytest.mark.parametrize("support", ["budget", "full"])
@pytest.mark.parametrize("schedule", ["progress", "fixed"])
def test_lazy_greedy_equals_dense_greedy_with_fewer_evaluations(support, schedule):
    for seed in range(3):
        emb = _emb(400, 16, seed)
        graph = cs.knn_graph(emb, cs.DENSITY_K)
        lazy = cs.pacs_select(emb, 30, graph=graph, support=support, schedule=schedule)
        dense = cs.pacs_select(emb, 30, graph=graph, support=support, schedule=schedule, lazy=False)
        assert np.array_equal(lazy.indices, dense.indices)
        assert np.allclose(lazy.gains, dense.gains, atol=1e-6)  # float32 cosines
        assert lazy.evaluations < dense.evaluations


def test_bad_budget_and_weights_are_one_line_errors():
    emb = _emb(10)
    for kw in ({"budget": 0}, {"budget": 11}):
        with pytest.raises(cs.CoresetError, match=r"budget must be in 1\.\.10"):
            cs.pacs_select(emb, **kw)
    with pytest.raises(cs.CoresetError, match="0 <= a <= 1"):
        cs.pacs_select(emb, 3, a=1.5)
    with pytest.raises(cs.CoresetError, match="unknown selector 'pac'; known: pacs"):
        cb.select("pac", emb, 3)


# --- the graph and the diagnostics -------------------------------------------------------


def test_knn_graph_and_ranks_match_brute_force_and_sklearn():
    from sklearn.neighbors import NearestNeighbors

    emb = _emb(150, seed=7)
    graph = cs.knn_graph(emb, 6, block=32, ranks=(40,))
    nn = NearestNeighbors(n_neighbors=7, metric="cosine").fit(emb)
    dist, idx = nn.kneighbors(emb)
    assert np.array_equal(graph.index, idx[:, 1:])
    assert np.allclose(graph.sim, 1 - dist[:, 1:], atol=1e-5)
    off = _cos(emb)
    np.fill_diagonal(off, -np.inf)
    assert np.allclose(cs.rank_similarity(graph, 40), -np.sort(-off, axis=1)[:, 39], atol=1e-5)
    assert graph.bandwidth() == pytest.approx(
        np.median(1 - (-np.sort(-off, axis=1)[:, 0])), abs=1e-6
    )


def test_peripheral_share_and_redundancy_by_hand():
    density = np.array([0.9, 0.1, 0.5, 0.2, 0.8, 0.7, 0.6, 0.3, 0.4, 0.95])
    # 10% of 10 points: the single lowest density, point 1
    assert cd.peripheral_fraction(density, np.array([1, 2, 3, 4])) == 0.25
    assert cd.peripheral_fraction(density, np.array([0, 2]), share=0.2) == 0.0
    emb = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    # max cosine: 0 -> 2 (0.7071), 1 -> 2 (0.7071), 2 -> 0 or 1 (0.7071)
    assert cd.redundancy(emb, np.array([0, 1, 2])) == pytest.approx(2**-0.5)
    assert cd.redundancy(emb, np.array([0, 1])) == pytest.approx(0.0)


def test_retrieval_puts_the_most_similar_last_and_random_draws_are_shared():
    bank = np.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [-1.0, 0.0]])
    q = np.array([[1.0, 0.1], [0.0, 1.0]])
    assert cd.retrieve(bank, q, 2).tolist() == [[1, 0], [1, 2]]
    draws = cd.random_demos(10, 7, 3, seed=1, share=3)
    assert draws.shape == (7, 3)
    assert all(len(set(r.tolist())) == 3 for r in draws)
    assert (draws[0] == draws[2]).all() and (draws[3] == draws[5]).all()
    assert not (draws[0] == draws[3]).all() or not (draws[3] == draws[6]).all()


def test_knn_vote_weights_labels_by_similarity():
    bank = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    labels = np.array([0, 0, 1, 1])
    q = np.array([[1.0, 0.05], [0.05, 1.0], [0.6, 0.4]])
    assert cd.knn_vote(bank, labels, q, 2, 2).tolist() == [0, 1, 0]


# --- baselines against their reference code ----------------------------------------------


def _ref_fast_votek(embeddings, select_num, k):
    """SubSA core_method.fast_votek (cosine via numpy instead of sklearn)."""
    e = embeddings / np.linalg.norm(embeddings, axis=1, keepdims=True)
    vote_stat = defaultdict(list)
    for i in range(len(e)):
        cur_scores = e @ e[i]
        for idx in np.argsort(cur_scores).tolist()[-k - 1 : -1]:
            if idx != i:
                vote_stat[idx].append(i)
    votes = sorted(vote_stat.items(), key=lambda x: len(x[1]), reverse=True)
    selected, times = [], defaultdict(int)
    while len(selected) < select_num:
        scores = defaultdict(int)
        for idx, candidates in votes:
            if idx in selected:
                scores[idx] = -100
                continue
            for v in candidates:
                if v not in selected:
                    scores[idx] += 10 ** (-times[v])
        best = max(scores.items(), key=lambda x: x[1])[0]
        selected.append(int(best))
        for v in vote_stat[best]:
            times[v] += 1
    return selected


def _ref_mfl(embeds, budget):
    """SubSA selective_annotation, branch 'mfl' (torch), returning sorted indices."""
    import torch

    x = torch.tensor(embeds)
    norm = x / x.norm(dim=1, keepdim=True)
    cosine = torch.einsum("nd,md->nm", norm, norm)
    selected = torch.zeros(len(x), dtype=torch.bool)
    best = torch.zeros(len(x)) - 1
    for _ in range(budget):
        gain = torch.relu(cosine - best).sum(dim=1) * (1 - selected.float())
        node = torch.argmax(gain)
        selected[node] = True
        best = torch.max(best, cosine[node])
    return torch.nonzero(selected).squeeze().tolist()


def _ref_subsa(emb, budget, lam=1.0):
    """SubSA.calc_gain with submodular_optimizer.Greedy, returning sorted indices."""
    n = len(emb)
    sim = _cos(emb).astype(np.float32)
    cols = sim.sum(axis=0)
    selected, gain = np.zeros(n, dtype=bool), np.zeros(n)
    for _ in range(budget):
        gain[~selected] = (
            -2.0 * sim[np.ix_(selected, ~selected)].sum(axis=0) + lam * cols[~selected]
        )
        c = gain.argmax()
        selected[c] = True
        gain[c] = -np.inf
    return np.arange(n)[selected].tolist()


@pytest.mark.parametrize("seed", range(4))
def test_fast_votek_mfl_and_subsa_reproduce_the_reference_choices(seed):
    emb = _emb(80, seed=seed)
    assert cb.fast_votek(emb, 10, k=8).tolist() == _ref_fast_votek(emb, 10, 8)
    assert sorted(cb.mfl(emb, 10).tolist()) == _ref_mfl(emb, 10)
    assert sorted(cb.subsa(emb, 10).tolist()) == _ref_subsa(emb, 10)


def test_votek_first_stage_is_fast_votek_and_one_pick_per_confidence_bucket():
    emb = _emb(100, seed=8)
    conf = np.random.default_rng(0).random(100)
    seen = {}

    def confidence(first):
        seen["first"] = first.copy()
        return conf

    sel = cb.votek(emb, 20, confidence, k=10)
    assert seen["first"].tolist() == cb.fast_votek(emb, 2, k=10).tolist() == sel[:2].tolist()
    ranked = [i for i in np.argsort(conf, kind="stable") if i not in set(sel[:2].tolist())]
    size = int(100 * 0.9 / 18)  # the reference: int(n * 0.9 / remaining)
    buckets = [ranked.index(int(u)) // size for u in sel[2:]]
    assert buckets == list(range(18))


def _ring_graph():
    """Ten points; ``index[i]`` = the two points ``i`` votes for (most similar first)."""
    index = np.array([[1, 2], [0, 2], [1, 3], [2, 4], [3, 5], [4, 6], [5, 7], [6, 8], [7, 9],
                      [8, 7]])
    emb = np.eye(10, dtype=np.float32)
    return cs.Graph(emb, index, np.ones(index.shape, dtype=np.float32))


def test_votek_buckets_the_whole_pool_by_hand():
    """Votes received: 0<-{1}, 1<-{0,2}, 2<-{0,1,3}, 3<-{2,4}, 4<-{3,5}, 5<-{4,6},
    6<-{5,7}, 7<-{6,8,9}, 8<-{7,9}, 9<-{8}. B = 3: one first-stage point, the most
    voted (2 and 7 have 3; 2 got its first vote earlier), and its voters 0, 1, 3 count
    once. Then int(0.9 * 10 / 2) = 4 points per bucket over the whole pool, least
    confident first: [1, 4, 6, 8] then [3, 7, 9, 5]. Bucket 1 scores (10^-times of
    unselected voters): 1: 0.1, 4: 0.1 + 1, 6: 2, 8: 2 -> 6 (first of the tie), whose
    voters 5, 7 now count once. Bucket 2: 3: 1 (voter 2 is selected), 7: 1 + 1 (voter 6
    is), 9: 1, 5: 1 -> 7."""
    graph = _ring_graph()
    conf = np.array([0.9, 0.1, np.nan, 0.5, 0.2, 0.8, 0.3, 0.6, 0.4, 0.7])
    seen = {}

    def confidence(first):
        seen["first"] = first.tolist()
        return conf

    assert cb.votek(graph.emb, 3, confidence, k=2, graph=graph).tolist() == [2, 6, 7]
    assert seen["first"] == [2]


def test_votek_refuses_a_confidence_pass_over_part_of_the_pool():
    graph = _ring_graph()
    conf = np.linspace(0.0, 1.0, 10)
    conf[5] = np.nan  # one pool point left unscored (the old 150-of-1000 shortcut)
    with pytest.raises(cs.CoresetError, match="score every pool point outside the first stage"):
        cb.votek(graph.emb, 3, lambda first: conf, k=2, graph=graph)


def test_fill_context_keeps_the_most_similar_that_fit_most_similar_last():
    bank = np.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [0.6, 0.8]])
    queries = np.array([[1.0, 0.0], [0.0, 1.0]])
    # query 0 ranks 0, 1, 3, 2; query 1 ranks 2, 3, 1, 0
    cost = np.array([5, 3, 4, 2])
    got = cd.fill_context(bank, queries, cost, np.array([2, 2]), 12)
    # q0: 2 + 5 + 3 = 10, + 2 = 12 fits, + 4 = 16 does not
    assert got[0].tolist() == [3, 1, 0]
    # q1: 2 + 4 + 2 + 3 = 11, + 5 = 16 does not
    assert got[1].tolist() == [1, 3, 2]
    # the reference stops at the first demonstration that does not fit
    assert cd.fill_context(bank, queries[:1], np.array([5, 9, 4, 1]), np.array([2]), 12)[
        0].tolist() == [0]
    assert cd.fill_context(bank, queries[:1], cost, np.array([11]), 12)[0].tolist() == []


@pytest.mark.skipif(not HAS_LM, reason="needs the lm extra")
def test_fill_demos_counts_tokens_of_the_written_demonstrations():
    """The tiny LM's tokenizer is bytes, so lengths are counted by hand."""
    from flowerbed.methods.coreset_icl import learner_prompts as pr
    from flowerbed.models import icl
    from flowerbed.models.lm import build_lm

    lm = build_lm(
        registry.get("lm", "tiny").params(name="tiny", hidden=32, layers=2, heads=4, kv_heads=2),
        seed=1,
    )
    t = icl.Template("Q: {x}\nA: {y}\n\n")
    bank_x, words = ["aaaa", "bb", "cccccc"], ["x", "yy", "z"]
    # demos: 'Q: ' + x + '\nA: ' + y + '\n\n' = 3 + len(x) + 4 + len(y) + 2
    cost = [3 + len(x) + 4 + len(w) + 2 for x, w in zip(bank_x, words, strict=True)]
    assert cost == [14, 13, 16]
    bank_emb = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0]])
    q_emb = np.array([[1.0, 0.05]])  # ranks 0, 1, 2
    # the query 'Q: qq\nA:' is 8 bytes, the instruction 'Go\n' 3: 11 + 14 + 13 = 38
    for limit, want in [(38, [1, 0]), (37, [0]), (54, [2, 1, 0]), (24, [])]:
        got = pr.fill_demos(lm, t, "Go\n", bank_x, words, bank_emb, ["qq"], q_emb, limit)
        assert got[0].tolist() == want, limit
        prompt = pr.prompts(t, "Go\n", bank_x, words, got, ["qq"])[0]
        assert len(lm.encode(prompt[0])) + len(lm.encode(prompt[1])) <= limit


def test_kmeans_medoids_are_the_members_nearest_each_sklearn_centroid():
    from sklearn.cluster import KMeans

    emb = _emb(90, seed=9)
    sel = cb.kmeans_medoids(emb, 7, seed=3)
    e = cs.unit_rows(emb)
    km = KMeans(n_clusters=7, n_init=1, random_state=3).fit(e)
    for c in range(7):
        members = np.flatnonzero(km.labels_ == c)
        d = ((e[members] - km.cluster_centers_[c]) ** 2).sum(axis=1)
        assert members[np.argmin(d)] in sel


def test_kcenter_is_farthest_first_by_brute_force():
    emb = _emb(60, seed=10)
    sel = cb.kcenter_greedy(emb, 8, seed=2)
    dist = 1 - _cos(emb)
    chosen = [int(sel[0])]
    for _ in range(7):
        chosen.append(int(np.argmax(dist[:, chosen].min(axis=1))))
    assert sel.tolist() == chosen


# --- text plumbing -----------------------------------------------------------------------


def test_texts_survive_packing_for_messages():
    from flowerbed.methods.coreset_icl import learner_prompts as pr

    texts = ["héllo, wörld", "", "naïve café ☕", "a\nb"]
    assert pr.unpack_texts(*pr.pack_texts(texts)) == texts


@pytest.mark.skipif(not HAS_LM, reason="needs the lm extra")
@pytest.mark.parametrize("template", ["Q: {x}\nA:{y}\n\n", "Q: {x}\nA: {y}\n\n"])
def test_batched_scores_equal_icl_evaluate_per_query(template):
    """Single-byte candidates take the first-token path (shared-prefix and alone rows);
    the spaced template's two-byte candidates take the whole-candidate path."""
    from flowerbed.methods.coreset_icl import learner_prompts as pr
    from flowerbed.models import icl
    from flowerbed.models.lm import build_lm

    lm = build_lm(
        registry.get("lm", "tiny").params(name="tiny", hidden=32, layers=2, heads=4, kv_heads=2),
        seed=1,
    )
    t = icl.Template(template)
    bank_x, bank_w = ["ab", "cd", "ef", "gh"], ["x", "y", "x", "z"]
    demos = np.array([[0, 1], [0, 1], [2, 3], [1, 2]])
    queries = ["ij", "kl", "mn", "op"]
    pairs = pr.prompts(t, "", bank_x, bank_w, demos, queries)
    cands = ["x", "y", "z"]
    got = pr.score(lm, pairs, [t.separator + c for c in cands], batch_size=2)
    for q, row, scores in zip(queries, demos, got, strict=True):
        shown = [icl.Example(bank_x[i], (bank_w[i],)) for i in row]
        ref = icl.evaluate(
            lm,
            shown,
            [icl.Example(q, ("x",))],
            t,
            candidates=cands,
            generate=False,
            cache_prefix=False,
        )
        assert np.allclose(scores, ref.scores[0], atol=1e-4)


@pytest.mark.skipif(not HAS_LM, reason="needs the lm extra")
def test_last_position_logits_equal_the_full_forward():
    from flowerbed.methods.coreset_icl import learner_prompts as pr
    from flowerbed.models.lm import build_lm

    lm = build_lm(
        registry.get("lm", "tiny").params(name="tiny", hidden=32, layers=2, heads=4, kv_heads=2),
        seed=2,
    )
    rows = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14]]
    assert np.allclose(
        pr.last_logprobs(lm, rows).numpy(), lm.next_token_logprobs(rows).numpy(), atol=1e-5
    )


def test_prefix_groups_minimise_fed_tokens_by_hand(monkeypatch):
    from flowerbed.methods.coreset_icl import learner_prompts as pr

    rows = [(1, 2, 3, 4), (1, 2, 3, 5), (1, 2, 6)]
    monkeypatch.setattr(pr, "GROUP_COST", 0)
    # all three share (1, 2): 2 + 2 + 2 + 1 = 7 tokens; the first two alone sharing
    # (1, 2, 3): 3 + 1 + 1 + 3 = 8; no sharing: 11
    assert pr._groups(rows, 0) == [(0, 3, 2)]
    # below (1, 2): the first two share (3,), each keeps its last token
    assert pr._groups(rows[:2], 2) == [(0, 2, 1)]
    # a row that is another's prefix keeps one token of its own
    assert pr._groups([(7, 8), (7, 8, 9)], 0) == [(0, 2, 1)]
    monkeypatch.setattr(pr, "GROUP_COST", 100)
    assert pr._groups(rows, 0) == [(0, 1, 0), (1, 2, 0), (2, 3, 0)]


@pytest.mark.skipif(not HAS_LM, reason="needs the lm extra")
@pytest.mark.parametrize("batch_size", [1, 3, 16])
def test_shared_prefix_scorer_equals_one_unpadded_forward_per_prompt(monkeypatch, batch_size):
    """The fast scorer against the straightforward one: each prompt alone, no padding, no
    cache; prompts share first demonstrations, one repeats, lengths differ."""
    from flowerbed.methods.coreset_icl import learner_prompts as pr
    from flowerbed.models import icl
    from flowerbed.models.lm import build_lm

    lm = build_lm(
        registry.get("lm", "tiny").params(name="tiny", hidden=32, layers=2, heads=4, kv_heads=2),
        seed=3,
    )
    t = icl.Template("Q: {x}\nA:{y}\n\n")
    gen = np.random.default_rng(4)
    bank_x = ["".join(gen.choice(list("abcdefgh"), int(gen.integers(1, 12)))) for _ in range(6)]
    bank_w = ["x", "y", "z", "x", "y", "z"]
    demos = np.array([gen.permutation(6)[:3] for _ in range(14)])
    demos[:5, 0] = demos[0, 0]  # five queries open with the same demonstration
    demos[6:9] = demos[5]  # three share all of theirs
    queries = ["".join(gen.choice(list("ijklmn"), int(gen.integers(1, 7)))) for _ in range(14)]
    queries[3], demos[3] = queries[2], demos[2]  # one prompt twice
    pairs = pr.prompts(t, "Sort:\n", bank_x, bank_w, demos, queries)
    cands = [t.separator + c for c in "xyz"]
    single = [lm.encode(c)[0] for c in cands]
    ref = np.stack(
        [lm.next_token_logprobs([lm.encode(p) + lm.encode(q)])[0, single].numpy() for p, q in pairs]
    )
    prefills: list[int] = []
    real = pr._prefill

    def spy(lm_, prefixes):
        prefills.append(len(prefixes))
        return real(lm_, prefixes)

    monkeypatch.setattr(pr, "_prefill", spy)
    pr.clear_memo()
    got = pr.score_shared(lm, pairs, cands, batch_size=batch_size)
    assert prefills  # prefixes were shared, not a fallback
    assert np.allclose(got, ref, atol=1e-5)
    assert (got.argmax(1) == ref.argmax(1)).all()
    labels_ref, conf_ref = pr.predict(lm, pairs, cands, batch_size, scoring="reference")
    pr.clear_memo()
    labels, conf = pr.predict(lm, pairs, cands, batch_size, scoring="shared")
    assert labels.tolist() == labels_ref.tolist() == ref.argmax(1).tolist()
    assert np.allclose(conf, conf_ref, atol=1e-5)


@pytest.mark.skipif(not HAS_LM, reason="needs the lm extra")
def test_the_shared_prefix_scorer_gives_the_cpu_numbers_on_cuda():
    """A small cell (the prompts above, every scorer path) scored on the GPU equals the CPU."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    from flowerbed.methods.coreset_icl import learner_prompts as pr
    from flowerbed.models import icl
    from flowerbed.models.lm import build_lm

    spec = dict(name="tiny", hidden=32, layers=2, heads=4, kv_heads=2)
    params = registry.get("lm", "tiny").params
    cpu = build_lm(params(**spec), seed=3)
    gpu = build_lm(params(**spec, device="cuda"), seed=3)
    t = icl.Template("Q: {x}\nA:{y}\n\n")
    gen = np.random.default_rng(4)
    bank_x = ["".join(gen.choice(list("abcdefgh"), int(gen.integers(1, 12)))) for _ in range(6)]
    demos = np.array([gen.permutation(6)[:3] for _ in range(14)])
    demos[:5, 0] = demos[0, 0]
    queries = ["".join(gen.choice(list("ijklmn"), int(gen.integers(1, 7)))) for _ in range(14)]
    pairs = pr.prompts(t, "Sort:\n", bank_x, ["x", "y", "z"] * 2, demos, queries)
    cands = [t.separator + c for c in "xyz"]
    for scoring in ("shared", "reference"):
        pr.clear_memo()
        ref = pr.predict(cpu, pairs, cands, 4, scoring=scoring)
        pr.clear_memo()
        got = pr.predict(gpu, pairs, cands, 4, scoring=scoring)
        assert got[0].tolist() == ref[0].tolist()
        assert np.allclose(got[1], ref[1], atol=1e-4)


# --- datasets ----------------------------------------------------------------------------


@pytest.mark.skipif(not HAS_WORDNET, reason="needs the Debian wordnet packages")
def test_sentiment_labels_follow_the_adjective_and_the_negation():
    from flowerbed.data import text_data_readers as rd
    from flowerbed.methods.coreset_icl import data as cd

    wn = rd.load_wordnet(rd.WORDNET_DIR)
    lexicon = cd.polarity_lexicon(wn)
    assert lexicon["pleasant"] == 1 and lexicon["unpleasant"] == 0  # seeds
    assert lexicon["dishonest"] == 0 and lexicon["impolite"] == 0  # WordNet antonyms of seeds
    params = registry.get("dataset", "negation_sentiment").params(
        name="negation_sentiment", n_train=300, n_test=50, n_sentences=400
    )
    ds = cd.negation_sentiment(params, seed=0)
    for text, label in zip(ds.text_train, ds.y_train, strict=True):
        words = text.split()
        adjective = next(w for w in reversed(words) if w in lexicon)
        negated = "not" in words or "never" in words
        assert label == (lexicon[adjective] != negated), text
    assert set(ds.groups_train.tolist()) == set(cd.DOMAINS)


@pytest.mark.skipif(not HAS_WORDNET, reason="needs the Debian wordnet packages")
def test_antonym_synonym_pairs_are_wordnet_relations_and_balanced():
    from flowerbed.data import text_data_readers as rd
    from flowerbed.methods.coreset_icl import data as cd

    wn = rd.load_wordnet(rd.WORDNET_DIR)
    adj_antonyms = rd.antonyms(wn)
    params = registry.get("dataset", "antonym_synonym").params(
        name="antonym_synonym", n_train=400, n_test=100
    )
    ds = cd.antonym_synonym(params, seed=0)
    assert abs(int(np.sum(ds.y_train == 0)) - int(np.sum(ds.y_train == 1))) < 60
    for text, label, pos in zip(ds.text_train, ds.y_train, ds.groups_train, strict=True):
        a, b = text.split(", ")
        if pos == "adj" and label == 0:
            assert b in adj_antonyms.get(a, []) or a in adj_antonyms.get(b, []), text
        if label == 1:  # synonyms share a synset of that part of speech
            letter = dict((n, p) for p, n in cd.POS_NAMES)[pos]
            assert set(wn.index[(letter, a)].offsets) & set(wn.index[(letter, b)].offsets)


@pytest.mark.skipif(not HAS_WORDNET, reason="needs Debian wordnet-base")
def test_word_categories_are_unambiguous_wordnet_lemmas():
    """Each word read back from WordNet's own index.* lines (a separate parse here): every
    sense of it, in every part of speech, lies in its class's lexicographer file."""
    from flowerbed.data import text_data_readers as rd

    entry = registry.get("dataset", "wordnet_word_category")
    ds = entry.target(entry.params.model_validate({"n_train": 200, "n_test": 50}), seed=3)
    names = ds.meta.class_names
    assert len(ds.text_train) == 200 and len(set(ds.text_train) & set(ds.text_test)) == 0
    wanted = set(ds.text_train[:40])
    offsets: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for pos, suffix in [("n", "noun"), ("v", "verb"), ("a", "adj"), ("r", "adv")]:
        with open(f"{rd.WORDNET_DIR}/index.{suffix}") as fh:
            for line in fh:
                parts = line.split()
                if line.startswith(" ") or parts[0] not in wanted:
                    continue
                n_ptr = int(parts[3])
                synsets = int(parts[2])
                offsets[parts[0]] += [(pos, int(o)) for o in parts[6 + n_ptr :][:synsets]]
    for word, label in zip(ds.text_train[:40], ds.y_train[:40], strict=True):
        lexfiles = set()
        for pos, off in offsets[word]:
            suffix = {"n": "noun", "v": "verb", "a": "adj", "r": "adv"}[pos]
            with open(f"{rd.WORDNET_DIR}/data.{suffix}", "rb") as fh:
                fh.seek(off)
                lexfiles.add(rd.LEXNAMES[int(fh.readline().split()[1])])
        assert lexfiles == {names[int(label)]}, word


# --- the learner and the federated strategy ----------------------------------------------

TOPICS = {0: "red blue green pink gold", 1: "cat dog cow hen fox", 2: "run jump swim sit fly"}


@register("dataset", "coreset_test_text")
def coreset_test_text(params: Params, *, seed: int) -> Dataset:
    """Three-topic word lists, two natural clients (a, b) with different topic mixes."""
    rng = np.random.default_rng(seed)
    n = 160
    y = rng.integers(0, 3, n)
    groups = np.where(rng.random(n) < 0.5 + 0.3 * (y == 0), "a", "b")
    text = tuple(" ".join(rng.choice(TOPICS[int(c)].split(), 3)) for c in y)
    meta = DatasetMeta(
        name="coreset_test_text",
        task="classification",
        num_features=1,
        num_classes=3,
        class_names=("topic.colour", "topic.animal", "topic.motion"),
    )
    x = np.arange(n, dtype=np.float32)[:, None]
    return Dataset(x, y, x[:0], y[:0], meta, groups_train=groups, text_train=text, text_test=())


def _scenario(**learner):
    return {
        "name": "coreset_test",
        "seed": 0,
        "num_clients": 2,
        "rounds": 1,
        "dataset": {"name": "coreset_test_text"},
        "partition": {"name": "natural_id"},
        "clients": {"local_test_fraction": 0.1},
        "learner": {
            "name": "coreset_icl",
            "embedding": "lm_mean",
            "budgets": [6],
            "selectors": ["pacs", "kcenter"],
            "k_demos": 2,
            "lm": {"name": "tiny", "hidden": 32, "layers": 2, "heads": 4, "kv_heads": 2},
            **learner,
        },
        "strategy": {"name": "coreset_icl"},
        "engine": "inline",
        "baselines": ["centralized", "local_only"],
    }


@pytest.mark.skipif(not HAS_LM, reason="needs the lm extra")
def test_federated_bank_is_the_union_of_local_banks_and_reselection_keeps_the_budget():
    res = flowerbed.run(_scenario(), save=False)
    fed, local, cen = (res.final(s) for s in ("federated", "local_only", "centralized"))
    for name in ("pacs@6", "kcenter@6"):
        assert fed[f"bank_size.{name}"] == 6  # 3 + 3: each client's share, merged
        for source in (fed, local, cen):
            assert 0 <= source[f"test/acc_retrieved.{name}"] <= 1
    re = flowerbed.run(
        {
            **_scenario(),
            "strategy": {"name": "coreset_icl", "server_reselect": True, "oversample": 2.0},
            "baselines": [],
        },
        save=False,
    )
    assert re.final("federated")["bank_size.pacs@6"] == 6


@pytest.mark.skipif(not HAS_LM, reason="needs the lm extra")
def test_one_client_federation_scores_the_same_bank_three_ways():
    """With one client its share is B, so merged, local and pooled banks coincide."""
    s = {**_scenario(demo_modes=["retrieved"]), "num_clients": 1, "partition": {"name": "iid"}}
    res = flowerbed.run(s, save=False)
    vals = {
        src: res.final(src)["test/acc_retrieved.pacs@6"]
        for src in ("federated", "local_only", "centralized")
    }
    assert len(set(vals.values())) == 1, vals


def test_learner_refuses_unknown_selectors_and_non_text_data_in_one_line():
    from pydantic import ValidationError

    from flowerbed.methods.coreset_icl.learner import CoresetIclLearner, CoresetIclParams, Pool

    with pytest.raises(ValidationError, match=r"unknown selectors \['pac'\]; known: pacs"):
        CoresetIclParams(selectors=("pac",))
    meta = DatasetMeta(name="digits", task="classification", num_features=2, num_classes=2)
    data = ClientData(0, np.zeros((3, 2)), np.zeros(3), np.zeros((1, 2)), np.zeros(1), meta)
    learner = CoresetIclLearner(CoresetIclParams(), scenario=None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs a text dataset; 'digits' has no text"):
        Pool(learner, data)


def test_client_budget_shares_add_up():
    from flowerbed.methods.coreset_icl.learner import client_budget

    for budget, k in [(18, 4), (8, 3), (100, 7), (5, 5)]:
        shares = [client_budget(budget, k, p) for p in range(k)]
        assert sum(shares) == budget and max(shares) - min(shares) <= 1


def test_server_reselection_fetches_each_owners_labels_for_its_picked_rows():
    """_annotate asks each owner for exactly its kept rows and puts the labels in place."""
    from flowerbed.core.messages import Payload, Replies
    from flowerbed.methods.coreset_icl import learner_prompts as pr
    from flowerbed.methods.coreset_icl.strategy import CoresetIclStrategy, _Union

    def upload(rows):
        text, offsets = pr.pack_texts([f"t{r}" for r in rows])
        return Payload(
            arrays={
                "pacs@4.emb": np.eye(len(rows), 3, dtype=np.float32),
                "pacs@4.text": text,
                "pacs@4.offsets": offsets,
                "pacs@4.row": np.asarray(rows),
            }
        )

    union = _Union(Replies(ok={0: upload([5, 7, 9]), 1: upload([2, 4])}), "pacs@4")
    assert union.texts == ["t5", "t7", "t9", "t2", "t4"] and (union.label == -1).all()
    keep = np.array([1, 3, 4])  # row 7 of client 0, rows 2 and 4 of client 1
    asked = {}

    class Fed:
        def ask(self, message_type, payloads, clients, *, server_round):
            asked.update({pid: p.config["picked"] for pid, p in payloads.items()})
            return Replies(
                ok={
                    pid: Payload(
                        arrays={
                            "pacs@4.label": 100 * pid + np.asarray(p.config["picked"]["pacs@4"])
                        }
                    )
                    for pid, p in payloads.items()
                }
            )

    unions = {"pacs@4": (union, keep)}
    CoresetIclStrategy._annotate(None, Fed(), unions)  # type: ignore[arg-type]
    assert asked == {0: {"pacs@4": [7]}, 1: {"pacs@4": [2, 4]}}
    assert union.label[keep].tolist() == [7, 102, 104]

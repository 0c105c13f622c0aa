"""Hedging on the frontier: frontier, cover, Gibbs, Q-aggregation, fallback, end to end."""

from __future__ import annotations

import numpy as np
import pytest

from flowerbed.methods.frontier import algorithm as fr
from flowerbed.methods.frontier import algorithm_hedging as hedging

SPEC_E = np.array([[.1, .5], [.2, .2], [.5, .1], [.3, .3], [.2, .5], [.2, .2]])


def test_frontier_hand_made_keeps_duplicates_drops_dominated():
    """(.2,.2) twice is kept; (.3,.3) is dominated by (.2,.2); (.2,.5) by (.1,.5)."""
    assert fr.pareto_frontier(SPEC_E).tolist() == [0, 1, 2, 5]


def test_frontier_orientation_sign_trap():
    """As accuracies (higher is better) the same numbers give the anti-frontier.

    Scores: row 3 (.3,.3) beats (.2,.2) twice; (.5,.1) and (.1,.5) are incomparable
    with it; (.2,.5) beats (.1,.5); so the frontier is {2, 3, 4}.
    """
    assert fr.pareto_frontier(SPEC_E, lower_is_better=False).tolist() == [2, 3, 4]
    assert fr.pareto_frontier(-SPEC_E, lower_is_better=False).tolist() == [0, 1, 2, 5]


def test_eps_frontier_drops_only_clear_losers():
    """With eps = .05, (.3,.3) is worse than (.2,.2) by .1 > eps everywhere: dropped;
    (.2,.5) is worse than (.1,.5) by 0 on benchmark 2: kept."""
    assert fr.pareto_frontier(SPEC_E, eps=0.05).tolist() == [0, 1, 2, 4, 5]


def test_argmin_of_monotone_target_is_on_frontier():
    gen = np.random.default_rng(0)
    for _ in range(100):
        e = gen.random((30, 3))
        target = e @ gen.uniform(0.1, 1.0, 3)
        assert int(np.argmin(target)) in set(fr.pareto_frontier(e).tolist())


def test_cover_covers_and_shrinks_with_delta():
    gen = np.random.default_rng(1)
    a = gen.uniform(0, np.pi / 2, 60)
    e = np.column_stack([0.45 - 0.25 * np.cos(a), 0.45 - 0.25 * np.sin(a)])
    e = np.vstack([e, e[:20] + gen.uniform(0.01, 0.1, (20, 2))])
    deltas = [0.0, 0.01, 0.03, 0.1, 0.3]
    path = fr.cover_path(e, deltas)
    sizes = [len(c.centers) for c in path]
    assert sizes == sorted(sizes, reverse=True) and sizes[0] == 60
    for cover in path:
        front = e[cover.frontier]
        cent = e[cover.centers]
        ok = np.all(cent[:, None, :] <= front[None, :, :] + cover.delta + 1e-12, axis=2)
        assert ok.any(axis=0).all()
    span = float(np.ptp(e, axis=0).max())
    assert len(fr.pareto_cover(e, span).centers) == 1


def test_cell_prior_splits_cell_mass():
    """Cells {0,1,2} and {3}: 1/2 each; the first split in thirds."""
    e = np.array([[0.0, 1.0], [0.01, 0.99], [0.02, 0.98], [1.0, 0.0]])
    cover = fr.pareto_cover(e, 0.05)
    np.testing.assert_allclose(fr.cell_prior(cover, 4), [1 / 6, 1 / 6, 1 / 6, 1 / 2])


def test_gibbs_limits_and_invariances():
    risks = np.array([0.30, 0.10, 0.35, 0.12])
    prior = np.array([0.4, 0.1, 0.3, 0.2])
    w = hedging.gibbs_weights(risks, 50, prior, 1.0)
    assert w.sum() == pytest.approx(1.0)
    np.testing.assert_allclose(hedging.gibbs_weights(risks, 0, prior, 5.0), prior)
    np.testing.assert_allclose(hedging.gibbs_weights(risks, 50, prior, 1e-9), prior, atol=1e-6)
    np.testing.assert_allclose(hedging.gibbs_weights(risks + 7.0, 50, prior, 1.0), w)
    assert hedging.gibbs_weights(risks, 10**6, prior, 1.0)[1] > 1 - 1e-9
    # weights follow exp(-lam n r) times the prior: ratio of models 1 and 3
    assert w[1] / w[3] == pytest.approx(0.1 / 0.2 * np.exp(-50 * (0.10 - 0.12)))


def test_selected_temperature_returns_prior_without_data():
    prior = np.array([0.5, 0.25, 0.25])
    t = hedging.select_temperature(np.array([0.1, 0.5, 0.9]), 0, prior)
    np.testing.assert_allclose(t.weights, prior)


def _toy_predictions(seed=0, m=5, n=30, c=3):
    gen = np.random.default_rng(seed)
    logits = gen.standard_normal((m, n, c)) * 2
    preds = np.exp(logits) / np.exp(logits).sum(axis=2, keepdims=True)
    y = gen.integers(0, c, n)
    return preds, hedging.one_hot(y, c)


@pytest.mark.parametrize("beta", [0.05, 1.0, 4.0])
def test_q_aggregation_beats_every_vertex(beta):
    preds, targets = _toy_predictions()
    prior = np.array([0.1, 0.2, 0.3, 0.25, 0.15])
    theta = hedging.q_aggregate(preds, targets, prior, beta, steps=2000)
    assert theta.min() >= 0 and theta.sum() == pytest.approx(1.0)
    obj = hedging.q_objective(theta, preds, targets, prior, beta)
    for j in range(5):
        vertex = np.eye(5)[j]
        assert obj <= hedging.q_objective(vertex, preds, targets, prior, beta) + 1e-6


def test_q_aggregation_large_beta_returns_prior():
    preds, targets = _toy_predictions(1)
    prior = np.array([0.1, 0.2, 0.3, 0.25, 0.15])
    np.testing.assert_allclose(hedging.q_aggregate(preds, targets, prior, 1e7), prior, atol=1e-4)


def test_q_aggregation_mixes_complementary_models():
    """Model A is right on the first half, B on the second: the best mix is 1/2-1/2.

    Halved Brier of a model at (1, 0) vs truth (0, 1) is 1, so each model alone
    scores 0.5; the even mixture (.5, .5) scores .25 everywhere.
    """
    y = np.array([[1.0, 0.0]] * 10 + [[0.0, 1.0]] * 10)
    a = np.array([[1.0, 0.0]] * 20)
    preds = np.stack([a, a[:, ::-1]])
    theta = hedging.q_aggregate(preds, y, np.array([0.5, 0.5]), 0.01, nu=0.0)
    np.testing.assert_allclose(theta, [0.5, 0.5], atol=1e-6)


def _synthetic_violation(gen, n):
    """Spec fixture: arc frontier + dominated models; 20 dominated ones best on target."""
    a = np.concatenate([gen.uniform(0, 0.3, 80), gen.uniform(0.3, np.pi / 2, 20)])
    front = np.column_stack([0.45 - 0.25 * np.cos(a), 0.45 - 0.25 * np.sin(a)])
    dom = front[gen.integers(0, 100, 300)] + gen.uniform(0.01, 0.15, (300, 2))
    e = np.vstack([front, dom])
    r0 = e @ np.array([0.2, 0.8]) + gen.normal(0, 0.01, 400)
    r0[100:120] = r0.min() - 0.08
    u, z = gen.random(n), gen.standard_normal((400, n))
    losses = (u[None, :] + 0.05 * z < r0[:, None]).astype(float)
    return e, r0, losses.mean(axis=1)


def test_fallback_recovers_when_monotonicity_fails():
    """Spec test 6: frontier-only stays >= .05 off at n = 320; the fallback <= .01."""
    gen = np.random.default_rng(0)
    gaps_front, gaps_fb = [], []
    for _ in range(20):
        e, r0, emp = _synthetic_violation(gen, 320)
        cover = fr.pareto_cover(e, 0.01)
        pi_front = fr.cell_prior(cover, len(e))
        pi_mix = hedging.mixture_prior(pi_front)
        pick_front = fr.erm(emp, cover.frontier)
        fb = hedging.select_temperature(emp, 320, pi_mix).weights
        gaps_front.append(r0[pick_front] - r0.min())
        gaps_fb.append(fb @ r0 - r0.min())
    assert np.mean(gaps_front) >= 0.05
    assert np.mean(gaps_fb) <= 0.01


def test_monotonicity_agreement_counts_pairs():
    """Pairs (g dominates f): (1,0),(1,2),(0,2)... with target [.2,.1,.3] all agree."""
    e = np.array([[0.2, 0.2], [0.1, 0.1], [0.3, 0.3]])
    assert fr.monotonicity_agreement(e, np.array([0.2, 0.1, 0.3])) == 1.0
    assert fr.monotonicity_agreement(e, np.array([0.2, 0.1, 0.0])) == pytest.approx(1 / 3)


def test_end_to_end_inline_small_zoo(tmp_path):
    import flowerbed

    result = flowerbed.run(
        "scenarios/frontier/digits.yaml",
        ["strategy.zoo=small", "strategy.repeats=5", "strategy.steps=50", "num_clients=4"],
        output_dir=tmp_path,
    )
    res = result.summary["results"]
    diag = res["diagnostics"]
    assert 1 <= diag["frontier/size"] <= diag["frontier/models"] == 8
    assert res["federated"]["comm/models_shipped"] == diag["frontier/size"]
    assert res["erm_all"]["comm/models_shipped"] == 8
    for name in ("erm_frontier", "erm_all", "qagg_fallback", "bench_avg"):
        assert res[name]["test/excess_error"] >= 0 or name.startswith("qagg")
        assert res[name]["test/brier"] >= res["oracle"]["test/brier"] - 0.05
    assert (result.run_dir / "frontier.json").exists()

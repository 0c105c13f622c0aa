"""Tests of one-shot magnitude pruning, the (reconstructed) compute-reduction theory and
the pruned-upload learner ``sgd_pruned`` (docs/methods/compute_reduction.md)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import tiny_sweep_scenario

import flowerbed
from flowerbed.methods.compute_reduction import algorithm_theory as ct
from flowerbed.methods.compute_reduction.algorithm import (
    magnitude_masks,
    nm_mask,
    num_removed,
    prune,
    removal_order,
    unstructured_mask,
)

# --- pruning ----------------------------------------------------------------------


def test_tie_rule_on_hand_made_input():
    """|w| = [2, 1, 1, 1, 3]; s = 0.4 removes ceil(2) = 2: the two *later* 1s go."""
    masks = magnitude_masks({"w": np.array([2.0, -1.0, 1.0, -1.0, 3.0])}, 0.4)
    assert masks["w"].tolist() == [True, True, False, False, True]


@pytest.mark.parametrize("sparsity", [0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 0.99, 1.0])
@pytest.mark.parametrize("scope", ["global", "layer"])
def test_exactly_ceil_sn_smallest_removed_with_ties(sparsity, scope):
    """Heavy ties (values in {0, ±1, ±2}); every removed |w| <= every kept |w| per unit."""
    rng = np.random.default_rng(3)
    arrays = {
        "b": rng.integers(-2, 3, size=(7, 10)).astype(float),
        "a": rng.integers(-2, 3, size=13).astype(np.float32),
    }
    pruned, masks = prune(arrays, sparsity, scope=scope)
    units = [list(arrays)] if scope == "global" else [[k] for k in arrays]
    for unit in units:
        n = sum(arrays[k].size for k in unit)
        keep = np.concatenate([masks[k].ravel() for k in unit])
        mag = np.concatenate([np.abs(arrays[k]).ravel() for k in unit])
        assert (~keep).sum() == math.ceil(round(sparsity * n, 9))
        if keep.any() and (~keep).any():
            assert mag[~keep].max() <= mag[keep].min()
    for k, v in arrays.items():
        assert pruned[k].dtype == v.dtype and pruned[k].shape == v.shape
        np.testing.assert_array_equal(pruned[k], np.where(masks[k], v, 0))


def test_float_guard_and_global_vs_layer():
    """0.7 * 10 is 7.000000000000001 in floats; ceil must still give 7. Global pruning
    removes the small-scale layer entirely, per-layer pruning halves each."""
    assert num_removed(0.7, 10) == 7 and num_removed(0.5, 3) == 2
    arrays = {"big": np.array([10.0, 20.0, 30.0, 40.0]), "small": np.array([1.0, 2.0, 3.0, 4.0])}
    glob = magnitude_masks(arrays, 0.5, "global")
    assert glob["big"].all() and not glob["small"].any()
    layer = magnitude_masks(arrays, 0.5, "layer")
    assert layer["big"].tolist() == layer["small"].tolist() == [False, False, True, True]


def test_partial_sort_path_equals_the_full_ranking():
    """Without a tie at the cut the O(n) partition path is used; with one, the full
    ranking. Both must equal 'remove the first ceil(s n) of removal_order'."""
    rng = np.random.default_rng(7)
    for trial in range(200):
        n = int(rng.integers(1, 50))
        v = rng.standard_normal(n) if trial % 2 else rng.integers(-3, 4, n).astype(float)
        s = float(rng.random())
        ref = np.ones(n, dtype=bool)
        ref[removal_order(v)[: num_removed(s, n)]] = False
        np.testing.assert_array_equal(unstructured_mask(v, s), ref)


@pytest.mark.parametrize(("n", "m"), [(2, 4), (1, 4), (4, 8), (3, 3)])
def test_nm_masks_are_valid(n, m):
    """Every aligned group of m keeps exactly min(n, group size) of its largest entries."""
    rng = np.random.default_rng(0)
    w = np.round(rng.standard_normal((6, 10)), 1)  # 60 entries, ties likely, 60 % 8 != 0
    keep = nm_mask(w, n, m).ravel()
    flat = np.abs(w.ravel())
    for start in range(0, flat.size, m):
        g, k = flat[start : start + m], keep[start : start + m]
        assert k.sum() == min(n, g.size)
        if k.any() and (~k).any():
            assert g[~k].max() <= g[k].min()
    assert nm_mask(np.array([1.0, 4.0, 3.0, 2.0]), 2, 4).tolist() == [False, True, True, False]


# --- single neuron ----------------------------------------------------------------


@pytest.mark.parametrize(("kappa", "closed"), [(0.5, 0.96368), (0.2, 0.80611)])
def test_rho_hat_concentrates_at_closed_form(kappa, closed):
    """At d = 1e5, |rho_hat - rho(kappa)| < 3e-3 (RMS ~ 0.24/sqrt(d));
    <w, w~> = ||w~||^2 exactly and d - ceil((1-kappa) d) entries are kept."""
    assert float(ct.rho_limit(kappa)) == pytest.approx(closed, abs=1e-5)
    w = np.random.default_rng(1).standard_normal(100_000)
    assert abs(ct.rho_hat(w, kappa) - closed) < 3e-3
    keep = magnitude_masks({"w": w}, 1 - kappa)["w"]
    wt = np.where(keep, w, 0.0)
    assert keep.sum() == round(kappa * w.size)
    assert np.dot(w, wt) == np.dot(wt, wt)


# --- conditional perceptron -------------------------------------------------------


def test_conditional_perceptron_reduces_to_full_without_exits():
    """tau = inf (or tau above every |u|): nothing exits, predictions are sign(v)."""
    rng = np.random.default_rng(2)
    u, v = rng.standard_normal(1000), rng.standard_normal(1000)
    for tau in (np.inf, float(np.abs(u).max())):
        pred, exited = ct.conditional_perceptron(u, v, tau)
        assert not exited.any()
        np.testing.assert_array_equal(pred, np.sign(v))
    assert ct.excess_error(np.inf, 0.7) == 0.0 and ct.compute_gap(np.inf) == 0.0
    pred, exited = ct.conditional_perceptron(u, v, 0.0)  # tau = 0: everything exits
    assert exited.all() and np.array_equal(pred, np.sign(u))


def test_excess_error_matches_monte_carlo():
    """Quadrature E(1.5) within 3 sigma of 1e6 Monte-Carlo draws at rho = 0.7."""
    rho, tau, n = 0.7, 1.5, 1_000_000
    rng = np.random.default_rng(4)
    u = rng.standard_normal(n)
    v = rho * u + np.sqrt(1 - rho**2) * rng.standard_normal(n)
    pred, exited = ct.conditional_perceptron(u, v, tau)
    mc = np.mean(pred != np.sign(v))
    assert np.mean(exited) == pytest.approx(float(ct.compute_gap(tau)), abs=3e-3)
    assert abs(mc - ct.excess_error(tau, rho)) < 3 * np.sqrt(mc * (1 - mc) / n)


def test_tail_slope_matches_exponent():
    """d log E / d log g over tau in [5, 6] within 3% of 1/(1-rho^2), rho=0.7."""
    rho = 0.7
    e = [ct.excess_error(t, rho) for t in (5.0, 6.0)]
    g = ct.compute_gap(np.array([5.0, 6.0]))
    slope = np.log(e[1] / e[0]) / np.log(g[1] / g[0])
    assert slope == pytest.approx(ct.exponent(rho), rel=0.03)


# --- deep networks ----------------------------------------------------------------


def test_depth_recursion_matches_simulation_and_fixed_point():
    """At width 1000, the mean of 4 networks is within 0.01 of the
    recursion on layers 1-6 (one network's finite-width noise is ~0.007 at layer 6,
    the mean's ~0.0035); c* = 0.7877 at kappa = 0.5; kappa = 1 keeps cosine 1."""
    rho = float(ct.rho_limit(0.5))
    rec = ct.depth_recursion(rho, 6)
    rng = np.random.default_rng(5)
    sim = np.mean([ct.simulate_depth(1000, 6, 0.5, 32, rng) for _ in range(4)], axis=0)
    np.testing.assert_allclose(sim, rec, atol=0.01)
    assert ct.fixed_point(rho) == pytest.approx(0.7877, abs=1e-4)
    np.testing.assert_allclose(ct.depth_recursion(1.0, 5), 1.0)


# --- frozen-backbone early exit ----------------------------------------------------


def test_exit_tradeoff_curve():
    """gap_threshold inverts compute_gap; compute = 1 - g (1 - l/L); the error is the
    conditional-perceptron quadrature; tau = 0 exits everything with E = arccos(rho)/pi
    (P(sign u != sign v) for correlation rho)."""
    taus = np.array([0.0, 0.5, 1.0, 2.0])
    gap, compute, err = ct.exit_tradeoff(0.8, 0.25, taus)
    np.testing.assert_allclose(ct.gap_threshold(gap), taus, atol=1e-12)
    np.testing.assert_allclose(compute, 1 - gap * 0.75)
    assert gap[0] == 1.0 and compute[0] == 0.25
    assert err[0] == pytest.approx(np.arccos(0.8) / np.pi, rel=1e-8)
    assert err[2] == ct.excess_error(1.0, 0.8)


def test_local_exponent_grows_with_alignment_and_tends_to_alpha():
    """Between tau = 5 and 6 the local exponent is within 3% of 1/(1-rho^2) (rho=0.7);
    deeper (better aligned) exits have steeper curves at every tau range."""
    assert ct.local_exponent(0.7, 5.0, 6.0) == pytest.approx(ct.exponent(0.7), rel=0.03)
    slopes = [ct.local_exponent(r, 0.5, 1.5) for r in (0.6, 0.75, 0.9, 0.96)]
    assert np.all(np.diff(slopes) > 0)


# --- federation -------------------------------------------------------------------


def _learner(**params):
    from flowerbed.core import registry
    from flowerbed.core.plugins import load_plugins
    from flowerbed.core.scenario import from_dict

    load_plugins()
    spec = _tiny_spec(**params)
    scenario = from_dict(spec)
    return registry.build("learner", scenario.learner, scenario=scenario)


def _tiny_spec(**learner):
    return tiny_sweep_scenario(
        name="cr_tiny",
        learner={"name": "sgd_pruned", **learner},
        strategy={"name": "fedavg", "fraction_evaluate": 0.0},
    )


def test_compress_keeps_shapes_dtypes_and_prunes_the_update():
    """Upload = received where pruned, local where kept; ints pass through unpruned."""
    rng = np.random.default_rng(6)
    received = {
        "w": rng.standard_normal((5, 8)).astype(np.float32),
        "b": rng.standard_normal(8).astype(np.float32),
        "steps": np.array(3, dtype=np.int64),
    }
    local = {k: (v + rng.standard_normal(v.shape)).astype(v.dtype) for k, v in received.items()}
    local["steps"] = np.array(4, dtype=np.int64)
    upload, stats = _learner(upload_sparsity=0.75).compress(local, received)
    for k, v in received.items():
        assert upload[k].shape == v.shape and upload[k].dtype == v.dtype
    changed = sum(int(np.count_nonzero(upload[k] != received[k])) for k in ("w", "b"))
    assert changed == 48 - 36 == stats["upload_nonzero"]
    assert upload["steps"] == 4
    same, _ = _learner(upload_sparsity=0.0).compress(local, received)
    for k in local:
        np.testing.assert_array_equal(same[k], local[k])


def test_nm_rejects_a_sparsity():
    """pattern n:m fixes its own sparsity; a second one is a config error."""
    with pytest.raises(ValueError, match="n:m"):
        _learner(pattern="n:m", upload_sparsity=0.5)


def test_tiny_inline_run_uploads_the_requested_sparsity():
    """64-8-10 MLP = 610 weights; s = 0.9 keeps 610 - ceil(549) = 61 update entries."""
    result = flowerbed.run(_tiny_spec(upload_sparsity=0.9, lr=0.1), save=False)
    train = [r for r in result.rows if r.get("phase") == "train"]
    assert train and train[-1]["train/train/upload_nonzero"] == 61
    assert train[-1]["train/train/upload_bytes_dense"] == 610 * 4
    assert train[-1]["train/train/upload_bytes"] == 61 * 4 + math.ceil(610 / 8)
    assert 0.0 <= result.final()["test/accuracy"] <= 1.0

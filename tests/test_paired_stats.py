"""Paired statistics against scipy / statsmodels computed here, on fixed data.

Every reference below is computed in the test from scipy or statsmodels (or a
closed form), never from ``paired_stats`` itself.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from flowerbed.algorithms import paired_stats as ps

pytest.importorskip("statsmodels")

# Two arms on 5 seeds (accuracies) and on 12 cells (losses).
A5 = np.array([0.912, 0.905, 0.921, 0.899, 0.917])
B5 = np.array([0.903, 0.901, 0.909, 0.902, 0.906])
A12 = np.array([1.02, 0.98, 1.10, 0.95, 1.01, 0.99, 1.07, 1.03, 0.97, 1.05, 1.00, 0.96])
B12 = np.array([1.06, 1.01, 1.12, 1.00, 1.00, 1.04, 1.15, 1.02, 1.03, 1.09, 1.07, 0.99])


def test_small_n_uses_the_t_interval_and_paired_t():
    r = ps.paired(A5, B5, "higher")
    ref = stats.ttest_rel(A5, B5)
    low, high = ref.confidence_interval(0.95)
    assert r.n == 5 and r.mean_diff == pytest.approx(np.mean(A5 - B5))
    assert (r.ci_low, r.ci_high) == pytest.approx((low, high))
    assert r.p_value == pytest.approx(ref.pvalue)
    assert r.test == "paired t" and r.ci_method.startswith("t interval")


def test_lower_is_better_flips_the_sign():
    r = ps.paired(B12, A12, "lower")  # B12 has the higher losses: a = B12 is worse
    assert r.mean_diff == pytest.approx(np.mean(A12 - B12))
    assert r.mean_diff < 0


def _expanded(n: int, level: float = 0.95) -> float:
    """Hesterberg's expanded level: Phi^-1 quantile equal to sqrt(n/(n-1)) t_{n-1}."""
    z = math.sqrt(n / (n - 1)) * stats.t.ppf((1 + level) / 2, n - 1)
    return 2 * stats.norm.cdf(z) - 1


def test_large_n_uses_bca_bootstrap_at_the_expanded_level_and_wilcoxon():
    r = ps.paired(A12, B12, "lower", seed=7)
    d = B12 - A12
    ref = stats.bootstrap(
        (d,), np.mean, n_resamples=9999, confidence_level=_expanded(12), method="BCa",
        rng=np.random.default_rng(7),
    ).confidence_interval
    assert r.ci_method == "BCa bootstrap"
    assert (r.ci_low, r.ci_high) == pytest.approx((ref.low, ref.high))
    wil = stats.wilcoxon(B12, A12, method="approx")  # |d| has ties: normal approximation
    assert r.test.startswith("wilcoxon normal approx")
    assert r.p_value == pytest.approx(wil.pvalue)
    assert r.verdict == "a better"


def test_wilcoxon_is_exact_without_ties_or_zeros():
    d = np.array([0.3, -0.1, 0.25, 0.4, 0.05, 0.12, -0.02, 0.33, 0.21])
    r = ps.summarize(d, seed=1)
    assert r.test == "wilcoxon exact"
    assert r.p_value == pytest.approx(stats.wilcoxon(d, method="exact").pvalue)


def test_the_bootstrap_is_seeded_by_argument_only():
    np.random.seed(123)  # a global seed must not matter
    first = ps.paired(A12, B12, "lower", seed=3)
    np.random.seed(999)
    again = ps.paired(A12, B12, "lower", seed=3)
    other = ps.paired(A12, B12, "lower", seed=4)
    assert (first.ci_low, first.ci_high) == (again.ci_low, again.ci_high)
    assert (first.ci_low, first.ci_high) != (other.ci_low, other.ci_high)


def test_holm_against_statsmodels_and_by_hand():
    from statsmodels.stats.multitest import multipletests

    p = [0.01, 0.04, 0.03, 0.2]
    # by hand: sorted 0.01, 0.03, 0.04, 0.2 times 4, 3, 2, 1 -> 0.04, 0.09, 0.08 -> 0.09 (monotone)
    assert ps.holm(p) == pytest.approx([0.04, 0.09, 0.09, 0.2])
    assert ps.holm(p) == pytest.approx(multipletests(p, method="holm")[1])
    assert math.isnan(ps.holm([0.01, math.nan])[1])
    assert ps.holm([0.01, math.nan])[0] == pytest.approx(0.01)


def test_detectable_difference_has_80_percent_power():
    """At the detectable difference, the noncentral t gives the paired t-test 80 % power."""
    r = ps.paired(A5, B5, "higher")
    sd = float(np.std(A5 - B5, ddof=1))
    n = 5
    crit = stats.t.ppf(0.975, n - 1)
    nc = r.detectable_diff / sd * math.sqrt(n)
    power = stats.nct.sf(crit, n - 1, nc) + stats.nct.cdf(-crit, n - 1, nc)
    assert power == pytest.approx(0.8, abs=1e-4)


def test_one_sample_against_scipy():
    x = np.array([0.61, 0.58, 0.66, 0.63, 0.60])
    r = ps.one_sample(x, 0.70, direction="higher")
    ref = stats.ttest_1samp(x, 0.70)
    low, high = ref.confidence_interval(0.95)
    assert r.mean_diff == pytest.approx(x.mean() - 0.70)
    assert (r.ci_low, r.ci_high) == pytest.approx((low - 0.70, high - 0.70))
    assert r.p_value == pytest.approx(ref.pvalue)
    assert ps.one_sample(x, 0.70, direction="lower").mean_diff == pytest.approx(0.70 - x.mean())


def test_tost_against_statsmodels():
    from statsmodels.stats.weightstats import ttost_paired

    a = np.array([0.50, 0.52, 0.49, 0.51, 0.50, 0.53])
    b = np.array([0.505, 0.515, 0.495, 0.50, 0.505, 0.52])
    s, decision = ps.equivalence(a - b, margin=0.02)
    p_ref = ttost_paired(a, b, -0.02, 0.02)[0]
    low, high = stats.ttest_rel(a, b).confidence_interval(0.90)
    assert s.p_value == pytest.approx(p_ref)
    assert (s.ci_low, s.ci_high) == pytest.approx((low, high))
    assert decision == "equivalent"
    assert ps.equivalence(a - b + 0.1, margin=0.02)[1] == "not equivalent"
    assert ps.equivalence(a - b, margin=0.004)[1] == "undecided"


def test_planted_difference_and_none():
    rng = np.random.default_rng(0)
    base = rng.normal(0.9, 0.02, 10)
    better = base + 0.03 + rng.normal(0, 0.005, 10)
    same = base + rng.normal(0, 0.005, 10)
    assert ps.paired(better, base, "higher").verdict == "a better"
    assert ps.paired(base, better, "higher").verdict == "b better"
    assert ps.paired(same, base, "higher").verdict == "no difference shown"


@pytest.mark.parametrize("n", [3, 5, 12])
def test_false_positive_rate_of_null_sweeps_is_near_alpha(n: int):
    """200 sweeps in which both arms draw from one distribution: ~5 % verdicts, not more.

    Seed effects are shared by the arms (as the same seed gives the same data),
    so only the run-to-run noise differs.
    """
    rng = np.random.default_rng(derive := 2024 + n)
    hits = 0
    for k in range(200):
        seed_effect = rng.normal(0.9, 0.05, n)
        a = seed_effect + rng.normal(0, 0.01, n)
        b = seed_effect + rng.normal(0, 0.01, n)
        hits += ps.paired(a, b, "higher", seed=derive + k).verdict != "no difference shown"
    assert 0.02 <= hits / 200 <= 0.09


def test_degenerate_and_bad_input():
    same = ps.paired([1.0, 1.0, 1.0], [1.0, 1.0, 1.0], "higher")
    assert (same.mean_diff, same.ci_low, same.ci_high, same.p_value) == (0, 0, 0, 1.0)
    assert same.verdict == "no difference shown" and same.detectable_diff == 0.0
    shifted = ps.paired([2.0, 3.0, 4.0], [1.0, 2.0, 3.0], "higher")
    assert shifted.verdict == "a better" and shifted.ci_low == shifted.ci_high == 1.0
    with pytest.raises(ValueError, match="at least 2"):
        ps.paired([1.0], [0.0], "higher")
    with pytest.raises(ValueError, match="differ in length"):
        ps.paired([1.0, 2.0], [0.0], "higher")
    with pytest.raises(ValueError, match="direction"):
        ps.paired([1.0, 2.0], [0.0, 1.0], "up")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="finite"):
        ps.paired([1.0, math.nan], [0.0, 1.0], "higher")


@pytest.mark.parametrize("n", [4, 9])
def test_results_are_plain_python_numbers(n: int):
    r = ps.paired(A12[:n], B12[:n], "lower")
    assert all(type(v) in (int, float, str) for v in r.as_dict().values())

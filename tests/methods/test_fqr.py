"""FQR: local estimator, ensemble weights, covariances, client exclusion, end to end."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from flowerbed.methods.fqr import algorithm as fqr
from flowerbed.methods.fqr.algorithm_local import LocalFit, fit_local, quantreg
from flowerbed.methods.fqr.data import (
    SyntheticQuantileParams,
    design_cov,
    simulate,
    true_quantile_coefficients,
)


def make_fit(features, gamma, vcov, n=100, cov=None, taus=(0.5,)):
    features = np.asarray(features)
    d_m = len(features)
    return LocalFit(
        features=features,
        n=n,
        taus=np.asarray(taus),
        gamma=np.atleast_2d(gamma),
        intercept=np.zeros(len(taus)),
        fhat=np.ones(len(taus)),
        vcov=np.asarray(vcov, dtype=float).reshape(len(taus), d_m, d_m),
        xbar=np.zeros(d_m),
        cov=np.eye(d_m) if cov is None else cov,
    )


@pytest.mark.parametrize("tau", [0.25, 0.5, 0.9])
def test_local_quantreg_matches_statsmodels(tau):
    sm = pytest.importorskip("statsmodels.api")
    rng = np.random.default_rng(7)
    x = rng.standard_normal((400, 3))
    y = 1 + x @ np.array([0.5, -1.0, 2.0]) + rng.standard_t(3, 400)
    ours = quantreg(x, y, tau)
    ref = (
        sm.QuantReg(y, np.column_stack([np.ones(400), x]))
        .fit(q=tau, max_iter=5000, p_tol=1e-10)
        .params
    )
    np.testing.assert_allclose(ours, ref, atol=1e-5)


def test_local_vcov_matches_simulated_variance():
    """The iid sandwich tau(1-tau)/(n f^2) S^-1 vs the spread of gamma over 200 draws."""
    rng = np.random.default_rng(11)
    gammas, vcovs = [], []
    for _ in range(200):
        x = rng.standard_normal((400, 2)) @ np.array([[1.0, 0.0], [0.6, 0.8]])
        y = x @ np.array([1.0, -1.0]) + rng.standard_normal(400)
        fit = fit_local(x, y, [0.5], np.arange(2))
        gammas.append(fit.gamma[0])
        vcovs.append(fit.vcov[0])
    ratio = np.var(gammas, axis=0) / np.mean(vcovs, axis=0).diagonal()
    # asymptotic value: pi/2 / 400 * diag(S^-1); 200 draws give ~10% sd on a variance
    assert np.all((ratio > 0.75) & (ratio < 1.33)), ratio


def test_two_client_weights_hand_computed():
    """Two clients, d = 2, Sigma = [[1, .5], [.5, 1]] known, one tau.

    A sees feature 0: T_A = Sigma_00^-1 Sigma_0,: = [1, .5]; V_A = 0.5, so W_A = 2.
    B sees both: T_B = I, V_B = W_B = I.
    H = 2 [1, .5]'[1, .5] + I = [[3, 1], [1, 1.5]], det 3.5, H^-1 = [[1.5, -1], [-1, 3]] / 3.5.
    With gamma_A = 3, gamma_B = (1, 2): rhs = 2 * 3 * [1, .5] + [1, 2] = [7, 5], so
    beta = H^-1 rhs = [(10.5 - 5) / 3.5, (-7 + 15) / 3.5] = [11/7, 16/7], and with
    W = V^-1 the covariance is H^-1. Identity weights instead give
    H_I = [[2, .5], [.5, 1.25]], rhs_I = [4, 3.5], beta_I = [13/9, 20/9].
    """
    sigma = np.array([[1.0, 0.5], [0.5, 1.0]])
    a = make_fit([0], [[3.0]], [[0.5]])
    b = make_fit([0, 1], [[1.0, 2.0]], np.eye(2))
    opt = fqr.ensemble([a, b], 2, "optimal", sigma=sigma)
    np.testing.assert_allclose(opt.beta[0], [11 / 7, 16 / 7], rtol=1e-12)
    np.testing.assert_allclose(opt.cov[0], np.array([[1.5, -1.0], [-1.0, 3.0]]) / 3.5, rtol=1e-12)
    ident = fqr.ensemble([a, b], 2, "identity", sigma=sigma)
    np.testing.assert_allclose(ident.beta[0], [13 / 9, 20 / 9], rtol=1e-12)


def test_sigma_noise_covariance_matches_simulation():
    """Delta-method variance of beta from the estimated Sigma vs 3000 simulated Sigma-hats.

    gamma_m = T_m beta exactly (no QR noise) and fixed V_m, so all the spread of
    beta-hat comes from the agents' sample covariances, drawn as Wishart(n - 1,
    Sigma_SS / (n - 1)) (the law of a Gaussian sample covariance). n is large so
    the first-order formula is accurate (at n = 300 the ratio is ~1.1).
    """
    from scipy import stats

    sigma = 0.6 ** np.abs(np.subtract.outer(np.arange(4), np.arange(4)))
    beta = np.array([1.0, -1.0, 0.5, 2.0])
    subsets = [np.array([0, 1, 2]), np.array([1, 2, 3]), np.array([0, 3])]
    n = 5000
    ts = [np.linalg.solve(sigma[np.ix_(s, s)], sigma[s]) for s in subsets]
    vcovs = [np.linalg.inv(sigma[np.ix_(s, s)]) / n for s in subsets]
    rng = np.random.default_rng(5)
    wisharts = [stats.wishart(n - 1, sigma[np.ix_(s, s)] / (n - 1)) for s in subsets]
    covs = [w.rvs(3000, random_state=rng) for w in wisharts]
    draws = []
    for r in range(3000):
        fits = [
            make_fit(s, t @ beta, v, n=n, cov=c[r])
            for s, t, v, c in zip(subsets, ts, vcovs, covs, strict=True)
        ]
        draws.append(fqr.ensemble(fits, 4, sigma_correction=False).beta[0])
    truth_fits = [
        make_fit(s, t @ beta, v, n=n, cov=sigma[np.ix_(s, s)])
        for s, t, v in zip(subsets, ts, vcovs, strict=True)
    ]
    pred = fqr.ensemble(truth_fits, 4)
    predicted = np.diagonal(pred.cov[0] - pred.cov_qr[0])
    empirical = np.var(draws, axis=0)
    np.testing.assert_allclose(empirical, predicted, rtol=0.1)


def test_uncovered_feature_pair_is_an_error():
    a = make_fit([0, 1], [[1.0, 1.0]], np.eye(2))
    b = make_fit([1, 2], [[1.0, 1.0]], np.eye(2))
    with pytest.raises(fqr.IdentifiabilityError, match=r"\[0, 2\]"):
        fqr.ensemble([a, b], 3)


def test_singular_client_flagged_and_excluded_with_warning(caplog):
    from flowerbed.core.messages import Payload, Replies
    from flowerbed.core.records import Recorder
    from flowerbed.data.base import ClientData, DatasetMeta
    from flowerbed.methods.fqr import learner as K
    from flowerbed.methods.fqr.strategy import collect_fits

    meta = DatasetMeta("t", "regression", 2)
    rng = np.random.default_rng(0)
    x_const = np.column_stack([rng.standard_normal(50), np.ones(50)])  # rank-deficient
    learner = K.FqrLearner(K.FqrLearnerParams(), scenario=None)  # type: ignore[arg-type]
    bad = ClientData(
        1, x_const, rng.standard_normal(50), x_const[:0], np.zeros(0), meta, np.array([0, 1])
    )
    reply_bad = learner.query_fqr_fit(bad, Payload(config={K.TAUS: [0.5]}), None)  # type: ignore[arg-type]
    assert reply_bad.config[K.STATUS] == K.STATUS_SINGULAR and not reply_bad.arrays
    x = rng.standard_normal((60, 2))
    good = ClientData(
        0, x, x.sum(1) + rng.standard_normal(60), x[:0], np.zeros(0), meta, np.array([0, 1])
    )
    reply_good = learner.query_fqr_fit(good, Payload(config={K.TAUS: [0.5]}), None)  # type: ignore[arg-type]

    class Ctx:
        recorder = Recorder(scenario=None)  # type: ignore[arg-type]

    with caplog.at_level(logging.WARNING, logger="flowerbed"):
        pids, fits = collect_fits(Replies(ok={0: reply_good, 1: reply_bad}), Ctx())  # type: ignore[arg-type]
    assert pids == [0] and len(fits) == 1
    assert any(
        "client 1" in r.getMessage() and "singular" in r.getMessage() for r in caplog.records
    )


def test_true_quantile_coefficients_are_conditional_quantiles():
    """P(y <= Q_tau(x) | x in a slice) = tau, in slices where the heteroscedastic scale differs."""
    params = SyntheticQuantileParams(hetero=(0.3, 0.0, 0.0, 0.0, 0.0, 0.0), intercept=0.7)
    x, y = simulate(params, 300_000, np.random.default_rng(3))
    taus = np.array([0.1, 0.5, 0.9])
    coef = true_quantile_coefficients(params, taus)
    for k, tau in enumerate(taus):
        below = y <= coef[k, 0] + x @ coef[k, 1:]
        for mask in (x[:, 0] < -1, np.abs(x[:, 0]) < 0.5, x[:, 0] > 1):
            assert abs(below[mask].mean() - tau) < 0.006, (tau, below[mask].mean())
    # and the homoscedastic model's slopes do not depend on tau
    flat = true_quantile_coefficients(SyntheticQuantileParams(), taus)
    np.testing.assert_allclose(flat[:, 1:], np.tile(flat[1, 1:], (3, 1)))


def test_feature_subsets_gives_each_client_its_columns():
    from flowerbed.core.scenario import validate_scenario
    from flowerbed.data.federated import federated_data

    subsets = [[0, 2, 5], [1, 2, 3], [3, 4, 0]]
    sc = validate_scenario(
        {
            "name": "fs",
            "seed": 1,
            "num_clients": 3,
            "dataset": {"name": "synthetic_quantile", "n_train": 300, "n_test": 50},
            "partition": {"name": "feature_subsets", "subsets": subsets},
            "learner": "fqr_local",
            "strategy": "fqr",
            "engine": "inline",
        }
    )
    data = federated_data(sc)
    rows = np.concatenate(data.partition.indices)
    assert sorted(rows.tolist()) == list(range(300))
    for pid, cols in enumerate(subsets):
        client = data.client(pid)
        assert client.columns.tolist() == sorted(cols)
        np.testing.assert_array_equal(
            client.x_train, data.dataset.x_train[data.local_train[pid]][:, sorted(cols)]
        )


def test_feature_subsets_windows_and_coverage_error():
    from flowerbed.data.feature_partitions import FeatureSubsetParams, client_columns

    cols = client_columns(FeatureSubsetParams(features_per_client=4), 6, 3, seed=0)
    assert [c.tolist() for c in cols] == [[0, 1, 2, 3], [2, 3, 4, 5], [0, 1, 4, 5]]
    with pytest.raises(ValueError, match=r"no client observes features \[5\]"):
        client_columns(FeatureSubsetParams(subsets=((0, 1), (2, 3, 4))), 6, 2, seed=0)


def test_ensemble_beats_naive_on_synthetic_data():
    params = SyntheticQuantileParams()
    rng = np.random.default_rng(0)
    taus = np.array([0.25, 0.75])
    truth = true_quantile_coefficients(params, taus)[:, 1:]
    fits = []
    for s in ([0, 1, 2, 3], [2, 3, 4, 5], [0, 1, 4, 5]):
        x, y = simulate(params, 1500, rng)
        fits.append(fit_local(x[:, s], y, taus, s))
    ens = fqr.ensemble(fits, 6)
    oracle = fqr.ensemble(fits, 6, sigma=design_cov(params))
    err = np.sum((ens.beta - truth) ** 2, axis=1)
    assert np.all(err < 0.1 * np.sum((fqr.naive_average(fits, 6) - truth) ** 2, axis=1))
    assert np.all(np.abs(ens.beta - oracle.beta) < 0.1)


def test_end_to_end_inline_synthetic_scenario(tmp_path):
    import flowerbed

    result = flowerbed.run(
        "scenarios/fqr/synthetic.yaml",
        [
            "engine=inline",
            "dataset.n_train=3000",
            "dataset.n_test=2000",
            "strategy.taus=[0.25,0.5,0.75]",
            "strategy.iterative_rounds=3",
        ],
        output_dir=tmp_path,
    )
    res = result.summary["results"]
    fed, naive = res["federated"], res["naive_average"]
    assert fed["test/coef_rmse"] < 0.5 * naive["test/coef_rmse"]
    assert fed["test/pinball_mean"] < naive["test/pinball_mean"]
    assert fed["test/pinball_mean"] < res["local_alone"]["test/pinball_mean"]
    assert res["pooled_oracle"]["test/coef_rmse"] < fed["test/coef_rmse"]
    assert res["fedavg_pinball"]["comm/bytes_per_client"] > 0
    assert (result.run_dir / "fqr_estimates.json").exists()

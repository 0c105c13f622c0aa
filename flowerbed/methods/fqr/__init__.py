"""FQR: one-shot federated quantile regression with heterogeneous feature sets.

Paper: one-shot federated quantile regression with heterogeneously structured features
(ICML 2026; OpenReview 8dWiSr6G4q).

Files
-----
algorithm.py
    FQR server side: one-shot minimum-variance ensemble of local quantile
    regressions.
algorithm_local.py
    FQR client side: exact linear quantile regression and its asymptotic covariance.
data.py
    Synthetic linear quantile-regression data with known conditional quantiles.
learner.py
    FQR client: local quantile regression on the client's own columns (one-shot FQR
    upload).
strategy.py
    FQR strategy: one query round, then the closed-form minimum-variance ensemble.

Documentation: ``docs/methods/fqr.md``; scenarios: ``scenarios/fqr/real.yaml``,
``scenarios/fqr/synthetic.yaml``, ``scenarios/fqr/synthetic_hetero.yaml``; tests:
``tests/methods/test_fqr.py``; experiments: ``benchmarks/methods/fqr_experiment.py``,
``benchmarks/methods/fqr_solvers.py``.
"""

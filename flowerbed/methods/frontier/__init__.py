"""Hedging on the frontier: model selection for a new client from benchmark risks.

Paper: arXiv 2605.30997 (ICML 2026).

Files
-----
algorithm.py
    Pruning by weak monotonicity: Pareto frontier, delta-Pareto cover, ERM over a
    set.
algorithm_hedging.py
    Hedging on the frontier: exponential weights (Gibbs) and Q-aggregation with a
    prior.
data.py
    Benchmark clients with known corruptions, a newly joining client, and a server
    share.
data_lcdb.py
    LCDB learning-curve database as a real model x task evaluation matrix (optional
    extra).
learner.py
    Frontier client: benchmark risks of candidate models, and hedging on a new
    client.
learner_zoo.py
    Candidate zoo for the weak-monotonicity experiment: seeded scikit-learn models.
strategy.py
    Frontier selection: pick and hedge models for a newly joining client from
    benchmark risks.

Documentation: ``docs/methods/frontier.md``; scenarios:
``scenarios/frontier/digits.yaml``; tests: ``tests/methods/test_frontier.py``;
experiments: ``benchmarks/methods/frontier_experiment.py``.
"""

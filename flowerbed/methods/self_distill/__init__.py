"""Self-distilled ridge with the optimal (possibly negative) mixing weight.

Paper: Dang, Patil, Rinaldo, self-distilled ridge with the optimal mixing weight (ICML
2026, arXiv 2602.17565).

Files
-----
algorithm.py
    Optimal unconstrained self-distillation (SD) in ridge regression (Dang, Patil,
    Rinaldo).
data.py
    Synthetic linear-Gaussian regression with a known anisotropic covariance.
learner.py
    Client learner: ridge teacher + optimally mixed self-distilled student (Dang,
    Patil, Rinaldo).

Documentation: ``docs/methods/self_distill.md``; scenarios:
``scenarios/self_distill/diabetes.yaml``, ``scenarios/self_distill/local.yaml``,
``scenarios/self_distill/synthetic.yaml``; tests:
``tests/methods/test_self_distill.py``; experiments:
``benchmarks/methods/self_distill_experiment.py``.
"""

"""Compute reduction: one-shot magnitude pruning and early exit (reconstructed theory).

Paper: "Theoretical Guarantees for One-Shot Magnitude Pruning and Compute-Adaptive Early
Exit" (ICML 2026 poster 63550; abstract only, theory reconstructed).

Files
-----
algorithm.py
    One-shot magnitude pruning (global / per-layer, unstructured / N:M) over named
    arrays.
algorithm_theory.py
    Predicted curves for one-shot magnitude pruning and early exit (reconstructed
    theory).
model.py
    Early-exit model: an MLP with exit heads and the multi-exit loss it is trained
    with.
model_nets.py
    Torch modules of the early-exit model
    (:mod:`flowerbed.methods.compute_reduction.model`).
learner.py
    Client-side one-shot magnitude pruning of the model update before upload.
learner_early_exit.py
    Learner ``sgd_early_exit``: ``sgd_pruned`` with the multi-exit loss and early-
    exit scoring.

Documentation: ``docs/methods/compute_reduction.md``; scenarios:
``scenarios/compute_reduction/fmnist.yaml``,
``scenarios/compute_reduction/fmnist_early_exit.yaml``; tests:
``tests/methods/test_compute_reduction.py``,
``tests/methods/test_compute_reduction_early_exit.py``; experiments:
``benchmarks/methods/compute_reduction_early_exit.py``,
``benchmarks/methods/compute_reduction_federated.py``,
``benchmarks/methods/compute_reduction_scaling.py``.
"""

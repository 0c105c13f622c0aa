"""SLOT-Align: single-round, learning-free OT feature alignment for one-shot FL.

Paper: SLOT-Align (ICML 2026, arXiv 2606.16655).

Files
-----
algorithm.py
    SLOT-Align: single-round, learning-free Gaussian-OT feature alignment (arXiv
    2606.16655).
algorithm_heads.py
    Heads for one-shot FL on frozen features: O-FedAvg linear head, probability
    ensemble, prototypes.
learner.py
    SLOT-Align client (arXiv 2606.16655): frozen-encoder features, Gaussian
    statistics, heads.
strategy.py
    SLOT-Align server (arXiv 2606.16655, github.com/daniebera/SLOT-Align): one-shot
    OT alignment.

Documentation: ``docs/methods/slot_align.md``; scenarios:
``scenarios/slot_align/fmnist.yaml``, ``scenarios/slot_align/synthetic.yaml``; tests:
``tests/methods/test_slot_align.py``; experiments:
``benchmarks/methods/slot_align_cost.py``.
"""

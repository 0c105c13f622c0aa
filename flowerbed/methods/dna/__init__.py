"""DNA: forgery-discriminative units in a frozen backbone.

Paper: arXiv 2601.22515 (ICML 2026).

Files
-----
algorithm.py
    DNA: forgery-discriminative units of a frozen backbone (Dou et al., arXiv
    2601.22515).
algorithm_probe.py
    DNA's detector: a logistic probe on the forgery-discriminative units alone
    (arXiv 2601.22515).
data.py
    Real-vs-generated images for DNA (arXiv 2601.22515), with fakes made here.
model.py
    Frozen backbones read layer by layer for DNA (arXiv 2601.22515).
model_generator_nets.py
    Torch modules of DNA's local generators
    (:mod:`flowerbed.methods.dna.model_generators`).
model_generators.py
    ``flowerbed pretrain dna_generator``: the local image generators DNA's fakes
    come from.
learner.py
    DNA client (arXiv 2601.22515): unit statistics, FDU probe and baselines on a
    frozen backbone.
strategy.py
    Strategy ``dna``: one statistics round selects the FDUs, then FedAvg of the FDU
    probe.

Documentation: ``docs/methods/dna.md``; scenarios: ``scenarios/dna/fmnist_fakes.yaml``;
tests: ``tests/methods/test_dna.py``; experiments:
``benchmarks/methods/dna_experiment.py``.
"""

"""HIPE: hippocampus-inspired multi-scale positional embedding.

Paper: arXiv 2506.04943 (ICML 2026).

Files
-----
algorithm.py
    HIPE: hippocampus-inspired multi-scale positional embedding (Zhou & Chen, arXiv
    2506.04943).
data.py
    Synthetic token-sequence classification tasks where position matters at several
    scales.
model.py
    Small transformer sequence classifiers with a choice of positional embedding.
model_nets.py
    Torch modules of the ``transformer`` model
    (:mod:`flowerbed.methods.hipe.model`).

Documentation: ``docs/methods/hipe.md``; scenarios:
``scenarios/hipe/data_efficiency.yaml``; tests: ``tests/methods/test_hipe.py``;
experiments: ``benchmarks/methods/hipe_experiment.py``.
"""

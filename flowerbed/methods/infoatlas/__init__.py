"""InfoAtlas: amortized mutual-information estimation in one forward pass.

Paper: arXiv 2606.00241 (ICML 2026).

Files
-----
algorithm.py
    InfoAtlas: amortized mutual-information estimation in one forward pass (arXiv
    2606.00241).
algorithm_prep.py
    InfoAtlas preprocessing: one dataset put in canonical form before the network
    reads it.
algorithm_reference.py
    Ground-truth mutual information and reference estimators (KSG, MINE, InfoNCE,
    Gaussian).
algorithm_training.py
    InfoAtlas pre-training: synthetic episodes with known MI and the training loop.
data.py
    Synthetic feature-screening table whose per-feature MI with the label is known.
model.py
    The pre-trained InfoAtlas network: ``flowerbed pretrain infoatlas`` and loading.
learner.py
    InfoAtlas client: MI between each local feature and the label, sent as scalars.
strategy.py
    InfoAtlas screening: clients send per-feature MI scalars; the server ranks
    features.

Documentation: ``docs/methods/infoatlas.md``; scenarios:
``scenarios/infoatlas/screening.yaml``, ``scenarios/infoatlas/synthetic.yaml``; tests:
``tests/methods/test_infoatlas.py``; experiments:
``benchmarks/methods/infoatlas_experiment.py``.
"""

"""ReAugment: model-zoo-guided RL augmentation for few-shot forecasting.

Paper: arXiv 2409.06282 (ICML 2026).

Files
-----
algorithm.py
    ReAugment: model-zoo-guided RL augmentation for few-shot time-series
    forecasting.
algorithm_arms.py
    ReAugment's pipeline and the comparison arms run beside it on the same windows
    and seeds.
algorithm_names.py
    ReAugment's arm names, in one light module: the scenario schema reads them
    without torch.
algorithm_ops.py
    Forecaster training, forecast metrics and the classic augmentations ReAugment is
    compared with.
algorithm_vmae.py
    ReAugment's augmenter: a variational masked autoencoder (VMAE) over windows (a
    CVAE).
learner.py
    ReAugment client: zoo-guided RL augmentation of few-shot forecasting windows
    (arXiv 2409.06282).
strategy.py
    ReAugment with a federated zoo (arXiv 2409.06282; RECONSTRUCTED).

Documentation: ``docs/methods/reaugment.md``; scenarios:
``scenarios/reaugment/elnino.yaml``, ``scenarios/reaugment/local.yaml``,
``scenarios/reaugment/m3_monthly.yaml``; tests: ``tests/methods/test_reaugment.py``;
experiments: ``benchmarks/methods/reaugment_experiment.py``,
``benchmarks/methods/reaugment_speed.py``, ``benchmarks/methods/reaugment_tuned.py``.
"""

"""Lottery Prior: zero-shot restoration from randomly initialised networks.

Paper: Wu, You, Dragotti, Gündüz, "Lottery Prior: Randomized Neural Compression for
Zero-Shot Inverse Problems" (ICML 2026).

Files
-----
algorithm.py
    Lottery Prior: randomized neural compression for zero-shot inverse problems
    (ICML 2026).
algorithm_baselines.py
    Baselines beside Lottery Prior: scikit-image's classical restorers, BM3D, Deep
    Image Prior, Deep Decoder.
algorithm_net.py
    Lottery Prior's synthesis network (Wu et al., ICML 2026; LotteryCodec, ICML
    2025).
data.py
    Bundled pictures for zero-shot restoration (Lottery Prior), and their seeded
    degradations.
model_deep_decoder.py
    Deep Decoder (Heckel & Hand, ICLR 2019), written from the paper: a zero-shot
    baseline for Lottery Prior.
model_dip.py
    A small untrained U-Net for the Deep Image Prior baseline (Ulyanov, Vedaldi,
    Lempitsky, 2018).
learner.py
    Learner ``lottery_prior``: each client restores its own degraded pictures, zero-
    shot.

Documentation: ``docs/methods/lottery_prior.md``; scenarios:
``scenarios/lottery_prior/restore.yaml``, ``scenarios/lottery_prior/sweep.yaml``; tests:
``tests/methods/test_lottery_prior.py``; experiments:
``benchmarks/methods/lottery_prior_experiment.py`` (32x32 crops, every task),
``benchmarks/methods/lottery_prior_large_experiment.py`` (128² / 256² denoising).
"""

"""XTransfer: modality-agnostic few-shot transfer for human sensing.

Paper: arXiv 2506.22726 (ICML 2026).

Files
-----
algorithm.py
    XTransfer (Zhang et al., arXiv 2506.22726): anchor space, S-score, repair and
    removal.
algorithm_cost.py
    Edge cost of a (recombined) network: parameters, FLOPs per inference, bytes to
    deploy.
algorithm_fedavg.py
    Which clients' XTransfer models can be averaged: same structure, classes and
    shapes.
algorithm_layers.py
    XTransfer network pieces: source layers that can be spliced, repaired and
    pruned.
algorithm_search.py
    XTransfer layer-wise search (LWS): splice-repair-remove candidates, keep the
    best, repeat.
data.py
    Raw multichannel IMU windows for few-shot cross-modal transfer (XTransfer).
model_baselines.py
    One few-shot episode of XTransfer and its baselines, with costs (same shots for
    all).
model_sources.py
    Source models of other modalities for XTransfer, cut into pool layers, with
    anchors.
learner.py
    Learner ``xtransfer``: modality-agnostic few-shot transfer on one client's
    sensor windows.
strategy.py
    Strategy ``xtransfer_fedavg``: local XTransfer per subject, then FedAvg where
    models agree.

Documentation: ``docs/methods/xtransfer.md``; scenarios:
``scenarios/xtransfer/basic_motions.yaml``, ``scenarios/xtransfer/watch.yaml``,
``scenarios/xtransfer/watch_fedavg.yaml``; tests: ``tests/methods/test_xtransfer.py``;
experiments: ``benchmarks/methods/xtransfer_experiment.py``,
``benchmarks/methods/xtransfer_speed.py``.
"""

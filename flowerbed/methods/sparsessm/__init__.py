"""SparseSSM: training-free OBS pruning of Mamba's state-transition matrix.

Paper: arXiv 2506.09613 (ICML 2026).

Files
-----
algorithm.py
    SparseSSM (Tuo & Wang, arXiv 2506.09613, github.com/CFinTech/SparseSSM): OBS
    pruning of A_log.
algorithm_ffn.py
    SparseSSM (arXiv 2506.09613) on the linear layers: SparseGPT with component
    sensitivity.
algorithm_obs.py
    SparseGPT (Frantar & Alistarh 2023) as SparseSSM (arXiv 2506.09613) uses it: OBS
    with updates.
algorithm_scan.py
    SparseSSM (arXiv 2506.09613) scan: the selective scan of a Mamba-1 mixer, with
    masks.
data_typeseg.py
    Mixed-content documents for typeseg's segmenter (the second test bed).
data.py
    ``sparsessm_text``: byte windows of the offline corpora, held-out block fixed
    for all seeds.
model.py
    SparseSSM's Mamba (arXiv 2506.09613): a byte-level Mamba-1 LM, pre-trained here
    or loaded.
model_mamba.py
    SparseSSM's Mamba (arXiv 2506.09613): building, pre-training and loading (torch,
    transformers).
model_typeseg.py
    typeseg's trained bidirectional Mamba-1 (PyPI wheel, extra ``typeseg``) loaded
    into the scan's layout.
learner.py
    SparseSSM client (arXiv 2506.09613): calibration statistics of a Mamba on local
    text.
strategy.py
    SparseSSM server (arXiv 2506.09613): federated calibration, one-shot A_log
    pruning, broadcast.

Documentation: ``docs/methods/sparsessm.md``; scenarios:
``scenarios/sparsessm/federated.yaml``, ``scenarios/sparsessm/prune.yaml``; tests:
``tests/methods/test_sparsessm.py``; experiments:
``benchmarks/methods/sparsessm_experiment.py`` (byte Mamba),
``benchmarks/methods/sparsessm_typeseg_experiment.py`` (typeseg's Mamba).
"""

"""ManiPT: prompt tuning on the pretrained manifold.

Paper: arXiv 2602.19198 (ICML 2026).

Files
-----
algorithm.py
    ManiPT: prompt tuning on the pretrained manifold (Yang et al., arXiv
    2602.19198).
data.py
    Procedurally rendered compositional concepts (shape x colour) for ManiPT's
    settings.
model.py
    Prompted branches of a frozen VLM for ManiPT and its baselines (torch; built on
    use).
model_vlm.py
    ``two_tower_concepts``: the offline two-tower VLM pre-trained on many more
    concepts.
learner.py
    Client learner of ManiPT and its prompt-tuning baselines (CoOp, KgCoOp, MaPLe-
    style).
strategy.py
    Federated prompt learning with ManiPT's local objective (PromptFL-style
    averaging).

Documentation: ``docs/methods/manipt.md``; scenarios:
``scenarios/manipt/base_to_novel.yaml``, ``scenarios/manipt/cross_dataset.yaml``,
``scenarios/manipt/domain_generalisation.yaml``, ``scenarios/manipt/federated.yaml``,
``scenarios/manipt/few_shot.yaml``; tests: ``tests/methods/test_manipt.py``;
experiments: ``benchmarks/methods/manipt_experiment.py``.
"""

"""PACS: progress-aware coreset selection for few-shot in-context learning.

Paper: PACS, progress-aware coreset selection for in-context learning (ICML 2026 poster
64776; abstract only, no code).

Files
-----
algorithm.py
    PACS: progress-aware coreset selection for few-shot in-context learning
    (reconstructed).
algorithm_baselines.py
    Coreset baselines for few-shot ICL, each from its own definition, and one
    dispatcher.
algorithm_demos.py
    What a coreset is judged by: its peripheral share and redundancy, and per-query
    demos.
data.py
    Three offline text-classification tasks for coreset ICL, built from WordNet
    (Debian wordnet-*).
learner.py
    Learner ``coreset_icl``: choose which pool texts to annotate, then few-shot ICL
    with them.
learner_prompts.py
    Coreset ICL plumbing: texts to embeddings, per-query demonstration prompts, LM
    scoring.
strategy.py
    Strategy ``coreset_icl``: a global demonstration bank from locally selected
    coresets.

Documentation: ``docs/methods/coreset_icl.md``; scenarios:
``scenarios/coreset_icl/antonym_synonym_local.yaml``,
``scenarios/coreset_icl/sentiment_reselect.yaml``,
``scenarios/coreset_icl/supersense.yaml``; tests: ``tests/methods/test_coreset_icl.py``;
experiments: ``benchmarks/methods/coreset_icl_experiment.py``,
``benchmarks/methods/coreset_icl_speed.py``.
"""

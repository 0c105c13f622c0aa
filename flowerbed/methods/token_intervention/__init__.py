"""Base-reasoning disagreement and disagreement-guided one-token intervention.

Paper: arXiv 2605.16874 (ICML 2026).

Files
-----
algorithm.py
    Base-reasoning disagreement and disagreement-guided one-token intervention.
algorithm_decode.py
    Disagreement-guided one-token intervention: lock-step decoding, triggers,
    calibration.
algorithm_split.py
    Split inference for token intervention: the client decodes with its base, the
    server hosts R.
data.py
    Tasks of the base-reasoning token-intervention study: prompts and traces.
model.py
    Token intervention on a task: prompts as ids, scoring, calibration and
    analysis.
model_pair.py
    ``ti_pair``: a base and a reasoning model sharing the byte tokenizer, trained
    here.
learner.py
    Learner ``token_intervention``: one-token takeovers by a reasoner over a
    client's base.
strategy.py
    Strategy ``token_intervention_split``: clients decode with their base, the
    server hosts R.

Documentation: ``docs/methods/token_intervention.md``; scenarios:
``scenarios/token_intervention/arith_split.yaml``,
``scenarios/token_intervention/toy_local.yaml``,
``scenarios/token_intervention/toy_split.yaml``; tests:
``tests/methods/test_token_intervention.py``; experiments:
``benchmarks/methods/token_intervention_experiment.py``.
"""

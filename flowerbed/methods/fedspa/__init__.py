"""FedSPA: federated adaptation via semantic-visual prototype alignment.

Paper: FedSPA, semantic-visual prototype alignment (ICML 2026); authors' code
github.com/eejiarong/FedSPA-main.

Files
-----
algorithm.py
    FedSPA: semantic-visual prototype alignment (github.com/eejiarong/FedSPA-main).
learner.py
    FedSPA client (github.com/eejiarong/FedSPA-main): visual prototypes on frozen
    VLM features.
strategy.py
    FedSPA server (github.com/eejiarong/FedSPA-main): semantic alignment of uploaded
    prototypes.

Documentation: ``docs/methods/fedspa.md``; scenarios: ``scenarios/fedspa/fmnist.yaml``,
``scenarios/fedspa/synthetic.yaml``; tests: ``tests/methods/test_fedspa.py``;
experiments: ``benchmarks/methods/fedspa_experiment.py``.
"""

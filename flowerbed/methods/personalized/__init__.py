"""Personalized FL: FedPer, FedRep, FedBN, Ditto and local fine-tuning.

FedPer (Arivazhagan et al., 2019, arXiv 1912.00818), FedRep (Collins et al., ICML 2021,
arXiv 2102.07078), FedBN (Li et al., ICLR 2021, arXiv 2102.07623), Ditto (Li et al.,
ICML 2021, arXiv 2012.04221).

Files
-----
algorithm.py
    Personalized FL: which arrays are shared or private, merging, and Ditto's
    objective.
model.py
    An MLP with BatchNorm after every hidden linear layer, for FedBN (Li et al.,
    2021).
learner.py
    Client side of FedPer, FedRep, FedBN, Ditto and local fine-tuning, on ``sgd``'s
    loop.
strategy.py
    Personalized FL servers: FedPer, FedRep, FedBN, Ditto and local fine-tuning.

Documentation: ``docs/methods/personalized.md``; scenarios:
``scenarios/baselines/personalized_digits.yaml``; tests:
``tests/methods/test_personalized.py``.
"""

"""Drift corrections: SCAFFOLD, FedDyn and MOON on learner ``sgd_drift``.

SCAFFOLD (Karimireddy et al., ICML 2020, arXiv 1910.06378), FedDyn (Acar et al., ICLR
2021, arXiv 2111.04263) and MOON (Li, He, Song, CVPR 2021, arXiv 2103.16257). One
package: the three share one client learner (``sgd_drift``, one handler each) and
SCAFFOLD's and FedDyn's round loop.

Files
-----
algorithm_feddyn.py
    FedDyn (Acar et al., ICLR 2021, arXiv:2111.04263): dynamic regularisation.
algorithm_moon.py
    MOON (Li, He & Song, CVPR 2021, arXiv:2103.16257): model-contrastive federated
    learning.
algorithm_scaffold.py
    SCAFFOLD (Karimireddy et al., ICML 2020, arXiv:1910.06378): control variates
    against drift.
learner.py
    Client halves of SCAFFOLD, FedDyn and MOON on learner ``sgd``'s training loop.
strategy_feddyn.py
    FedDyn (Acar et al., ICLR 2021, arXiv:2111.04263): the server's state ``h`` and
    model.
strategy_moon.py
    MOON (Li, He & Song, CVPR 2021, arXiv:2103.16257): FedAvg's server, a
    contrastive client.
strategy_rounds.py
    The round loop of SCAFFOLD and FedDyn: seeded cohorts, server evaluation,
    records.
strategy_scaffold.py
    SCAFFOLD (Karimireddy et al., ICML 2020, arXiv:1910.06378): the server and its
    control variate.

Documentation: ``docs/methods/drift.md``; scenarios:
``scenarios/baselines/strategies_digits.yaml``; tests:
``tests/methods/test_scaffold.py``, ``tests/methods/test_feddyn.py``,
``tests/methods/test_moon.py``.
"""

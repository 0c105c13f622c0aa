"""Constructors of Flower 1.42.0 message-API strategies (generated; do not edit).

Written by ``scripts/gen_flower_catalog.py`` from ``inspect.signature``;
``tests/test_flower_strategies.py`` checks it against the installed Flower.
Read by :mod:`flowerbed.strategies.flower_strategies`, which must not import
Flower to build the scenario schema.
"""

from __future__ import annotations

FLOWER_VERSION = "1.42.0"
#: The default of a parameter that has none.
REQUIRED = "REQUIRED"

#: registry name -> (Flower class, ((parameter, type, default), ...)).
STRATEGIES: dict[str, tuple[str, tuple[tuple[str, str, object], ...]]] = {
    "fedavg": (
        "FedAvg",
        (
            ("fraction_train", "float", 1.0),
            ("fraction_evaluate", "float", 1.0),
            ("min_train_nodes", "int", 2),
            ("min_evaluate_nodes", "int", 2),
            ("min_available_nodes", "int", 2),
            ("weighted_by_key", "str", "num-examples"),
            ("arrayrecord_key", "str", "arrays"),
            ("configrecord_key", "str", "config"),
            ("train_metrics_aggr_fn", "callable", None),
            ("evaluate_metrics_aggr_fn", "callable", None),
        ),
    ),
    "fedprox": (
        "FedProx",
        (
            ("fraction_train", "float", 1.0),
            ("fraction_evaluate", "float", 1.0),
            ("min_train_nodes", "int", 2),
            ("min_evaluate_nodes", "int", 2),
            ("min_available_nodes", "int", 2),
            ("weighted_by_key", "str", "num-examples"),
            ("arrayrecord_key", "str", "arrays"),
            ("configrecord_key", "str", "config"),
            ("train_metrics_aggr_fn", "callable", None),
            ("evaluate_metrics_aggr_fn", "callable", None),
            ("proximal_mu", "float", 0.0),
        ),
    ),
    "fedavgm": (
        "FedAvgM",
        (
            ("fraction_train", "float", 1.0),
            ("fraction_evaluate", "float", 1.0),
            ("min_train_nodes", "int", 2),
            ("min_evaluate_nodes", "int", 2),
            ("min_available_nodes", "int", 2),
            ("weighted_by_key", "str", "num-examples"),
            ("arrayrecord_key", "str", "arrays"),
            ("configrecord_key", "str", "config"),
            ("train_metrics_aggr_fn", "callable", None),
            ("evaluate_metrics_aggr_fn", "callable", None),
            ("server_learning_rate", "float", 1.0),
            ("server_momentum", "float", 0.0),
        ),
    ),
    "fedadam": (
        "FedAdam",
        (
            ("fraction_train", "float", 1.0),
            ("fraction_evaluate", "float", 1.0),
            ("min_train_nodes", "int", 2),
            ("min_evaluate_nodes", "int", 2),
            ("min_available_nodes", "int", 2),
            ("weighted_by_key", "str", "num-examples"),
            ("arrayrecord_key", "str", "arrays"),
            ("configrecord_key", "str", "config"),
            ("train_metrics_aggr_fn", "callable", None),
            ("evaluate_metrics_aggr_fn", "callable", None),
            ("eta", "float", 0.1),
            ("eta_l", "float", 0.1),
            ("beta_1", "float", 0.9),
            ("beta_2", "float", 0.99),
            ("tau", "float", 0.001),
        ),
    ),
    "fedyogi": (
        "FedYogi",
        (
            ("fraction_train", "float", 1.0),
            ("fraction_evaluate", "float", 1.0),
            ("min_train_nodes", "int", 2),
            ("min_evaluate_nodes", "int", 2),
            ("min_available_nodes", "int", 2),
            ("weighted_by_key", "str", "num-examples"),
            ("arrayrecord_key", "str", "arrays"),
            ("configrecord_key", "str", "config"),
            ("train_metrics_aggr_fn", "callable", None),
            ("evaluate_metrics_aggr_fn", "callable", None),
            ("eta", "float", 0.01),
            ("eta_l", "float", 0.0316),
            ("beta_1", "float", 0.9),
            ("beta_2", "float", 0.99),
            ("tau", "float", 0.001),
        ),
    ),
    "fedadagrad": (
        "FedAdagrad",
        (
            ("fraction_train", "float", 1.0),
            ("fraction_evaluate", "float", 1.0),
            ("min_train_nodes", "int", 2),
            ("min_evaluate_nodes", "int", 2),
            ("min_available_nodes", "int", 2),
            ("weighted_by_key", "str", "num-examples"),
            ("arrayrecord_key", "str", "arrays"),
            ("configrecord_key", "str", "config"),
            ("train_metrics_aggr_fn", "callable", None),
            ("evaluate_metrics_aggr_fn", "callable", None),
            ("eta", "float", 0.1),
            ("eta_l", "float", 0.1),
            ("tau", "float", 0.001),
        ),
    ),
    "qfedavg": (
        "QFedAvg",
        (
            ("client_learning_rate", "float", REQUIRED),
            ("q", "float", 0.1),
            ("train_loss_key", "str", "train_loss"),
            ("fraction_train", "float", 1.0),
            ("fraction_evaluate", "float", 1.0),
            ("min_train_nodes", "int", 2),
            ("min_evaluate_nodes", "int", 2),
            ("min_available_nodes", "int", 2),
            ("weighted_by_key", "str", "num-examples"),
            ("arrayrecord_key", "str", "arrays"),
            ("configrecord_key", "str", "config"),
            ("train_metrics_aggr_fn", "callable", None),
            ("evaluate_metrics_aggr_fn", "callable", None),
        ),
    ),
    "krum": (
        "Krum",
        (
            ("fraction_train", "float", 1.0),
            ("fraction_evaluate", "float", 1.0),
            ("min_train_nodes", "int", 2),
            ("min_evaluate_nodes", "int", 2),
            ("min_available_nodes", "int", 2),
            ("num_malicious_nodes", "int", 0),
            ("weighted_by_key", "str", "num-examples"),
            ("arrayrecord_key", "str", "arrays"),
            ("configrecord_key", "str", "config"),
            ("train_metrics_aggr_fn", "callable", None),
            ("evaluate_metrics_aggr_fn", "callable", None),
        ),
    ),
    "multikrum": (
        "MultiKrum",
        (
            ("fraction_train", "float", 1.0),
            ("fraction_evaluate", "float", 1.0),
            ("min_train_nodes", "int", 2),
            ("min_evaluate_nodes", "int", 2),
            ("min_available_nodes", "int", 2),
            ("num_malicious_nodes", "int", 0),
            ("num_nodes_to_select", "int", 1),
            ("weighted_by_key", "str", "num-examples"),
            ("arrayrecord_key", "str", "arrays"),
            ("configrecord_key", "str", "config"),
            ("train_metrics_aggr_fn", "callable", None),
            ("evaluate_metrics_aggr_fn", "callable", None),
        ),
    ),
    "bulyan": (
        "Bulyan",
        (
            ("fraction_train", "float", 1.0),
            ("fraction_evaluate", "float", 1.0),
            ("min_train_nodes", "int", 2),
            ("min_evaluate_nodes", "int", 2),
            ("min_available_nodes", "int", 2),
            ("num_malicious_nodes", "int", 0),
            ("weighted_by_key", "str", "num-examples"),
            ("arrayrecord_key", "str", "arrays"),
            ("configrecord_key", "str", "config"),
            ("train_metrics_aggr_fn", "callable", None),
            ("evaluate_metrics_aggr_fn", "callable", None),
            ("selection_rule", "callable", None),
        ),
    ),
    "fedmedian": (
        "FedMedian",
        (
            ("fraction_train", "float", 1.0),
            ("fraction_evaluate", "float", 1.0),
            ("min_train_nodes", "int", 2),
            ("min_evaluate_nodes", "int", 2),
            ("min_available_nodes", "int", 2),
            ("weighted_by_key", "str", "num-examples"),
            ("arrayrecord_key", "str", "arrays"),
            ("configrecord_key", "str", "config"),
            ("train_metrics_aggr_fn", "callable", None),
            ("evaluate_metrics_aggr_fn", "callable", None),
        ),
    ),
    "fedtrimmedavg": (
        "FedTrimmedAvg",
        (
            ("fraction_train", "float", 1.0),
            ("fraction_evaluate", "float", 1.0),
            ("min_train_nodes", "int", 2),
            ("min_evaluate_nodes", "int", 2),
            ("min_available_nodes", "int", 2),
            ("weighted_by_key", "str", "num-examples"),
            ("arrayrecord_key", "str", "arrays"),
            ("configrecord_key", "str", "config"),
            ("train_metrics_aggr_fn", "callable", None),
            ("evaluate_metrics_aggr_fn", "callable", None),
            ("beta", "float", 0.2),
        ),
    ),
}
#: The differential-privacy wrappers, same layout (their first parameter is the
#: inner strategy).
WRAPPERS: dict[str, tuple[str, tuple[tuple[str, str, object], ...]]] = {
    "dp_server_fixed": (
        "DifferentialPrivacyServerSideFixedClipping",
        (
            ("strategy", "flwr.serverapp.strategy.strategy.Strategy", REQUIRED),
            ("noise_multiplier", "float", REQUIRED),
            ("clipping_norm", "float", REQUIRED),
            ("num_sampled_clients", "int", REQUIRED),
            ("accountant", "flwr.supercore.privacy_accounting.PrivacyAccountant | None", None),
        ),
    ),
    "dp_server_adaptive": (
        "DifferentialPrivacyServerSideAdaptiveClipping",
        (
            ("strategy", "flwr.serverapp.strategy.strategy.Strategy", REQUIRED),
            ("noise_multiplier", "float", REQUIRED),
            ("num_sampled_clients", "int", REQUIRED),
            ("initial_clipping_norm", "float", 0.1),
            ("target_clipped_quantile", "float", 0.5),
            ("clip_norm_lr", "float", 0.2),
            ("clipped_count_stddev", "float | None", None),
        ),
    ),
    "dp_client_fixed": (
        "DifferentialPrivacyClientSideFixedClipping",
        (
            ("strategy", "flwr.serverapp.strategy.strategy.Strategy", REQUIRED),
            ("noise_multiplier", "float", REQUIRED),
            ("clipping_norm", "float", REQUIRED),
            ("num_sampled_clients", "int", REQUIRED),
            ("accountant", "flwr.supercore.privacy_accounting.PrivacyAccountant | None", None),
        ),
    ),
    "dp_client_adaptive": (
        "DifferentialPrivacyClientSideAdaptiveClipping",
        (
            ("strategy", "flwr.serverapp.strategy.strategy.Strategy", REQUIRED),
            ("noise_multiplier", "float", REQUIRED),
            ("num_sampled_clients", "int", REQUIRED),
            ("initial_clipping_norm", "float", 0.1),
            ("target_clipped_quantile", "float", 0.5),
            ("clip_norm_lr", "float", 0.2),
            ("clipped_count_stddev", "float | None", None),
        ),
    ),
}
#: Strategies whose Flower class aggregates with ``FedAvg.aggregate_train`` itself
#: (a plain weighted mean of the replies).
MEAN_AGGREGATING = ("fedavg", "fedprox")

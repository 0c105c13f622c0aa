"""Import every module that registers components (explicit, no filename magic)."""

from __future__ import annotations

import functools
import importlib

#: Modules whose import registers datasets, partitioners, models, learners,
#: strategies and baselines. Add a method's modules here.
PLUGIN_MODULES = (
    # data: datasets and partitioners
    "flowerbed.data.sklearn_data",
    "flowerbed.data.partitioners",
    "flowerbed.data.synthetic_regression",
    "flowerbed.data.feature_partitions",
    "flowerbed.data.domain_shift",
    "flowerbed.data.statsmodels_data",
    "flowerbed.data.image_data",
    "flowerbed.data.table_data",
    "flowerbed.data.har_data",
    "flowerbed.data.gaussian_mixture",
    "flowerbed.data.synthetic_ridge",
    "flowerbed.data.frontier_tasks",
    "flowerbed.data.sequence_tasks",
    "flowerbed.data.mi_synthetic",
    # models and learners
    "flowerbed.clients.models",
    "flowerbed.clients.vlm_two_tower",
    "flowerbed.clients.vlm_open_clip",
    "flowerbed.clients.torch_learner",
    "flowerbed.clients.self_distill_learner",
    "flowerbed.clients.fault_injection",
    "flowerbed.clients.fqr_learner",
    "flowerbed.clients.slot_align_learner",
    "flowerbed.clients.frontier_learner",
    "flowerbed.clients.pruned_learner",
    "flowerbed.clients.early_exit",
    "flowerbed.clients.sequence_models",
    "flowerbed.clients.infoatlas_learner",
    # strategies
    "flowerbed.strategies.fedavg",
    "flowerbed.strategies.fqr",
    "flowerbed.strategies.oneshot_average",
    "flowerbed.strategies.slot_align",
    "flowerbed.strategies.frontier",
    "flowerbed.strategies.infoatlas",
    # baselines
    "flowerbed.platform.baselines",
)


@functools.cache
def load_plugins() -> None:
    """Import all plugin modules once."""
    for name in PLUGIN_MODULES:
        importlib.import_module(name)

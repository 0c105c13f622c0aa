"""Shared fixtures: tiny scenarios that run in seconds."""

from __future__ import annotations

import os
from typing import Any

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")


def tiny_scenario(**changes: Any) -> dict[str, Any]:
    """A 4-client FedAvg scenario on digits small enough for unit tests."""
    base: dict[str, Any] = {
        "name": "tiny",
        "seed": 3,
        "num_clients": 4,
        "rounds": 2,
        "dataset": {"name": "digits"},
        "partition": {"name": "dirichlet", "alpha": 1.0},
        "model": {"name": "mlp", "hidden": [16]},
        "learner": {"name": "sgd", "lr": 0.1, "batch_size": 32, "local_epochs": 1},
        "strategy": {"name": "fedavg"},
        "engine": {"name": "inline"},
        "baselines": ["centralized"],
    }
    base.update(changes)
    return base


def tiny_sweep_scenario(**changes: Any) -> dict[str, Any]:
    """A 2-client, 1-round inline FedAvg scenario for sweep and report tests."""
    small: dict[str, Any] = {
        "num_clients": 2,
        "rounds": 1,
        "seed": 0,
        "partition": {"name": "iid"},
        "model": {"name": "mlp", "hidden": [8]},
        "learner": {"name": "sgd", "local_epochs": 1},
        "engine": "inline",
        "baselines": [],
    }
    return tiny_scenario(**{**small, **changes})


@pytest.fixture
def tiny() -> dict[str, Any]:
    return tiny_scenario()

"""Shared builders for the data tests."""

from __future__ import annotations

import numpy as np

from flowerbed.core import registry
from flowerbed.core.plugins import load_plugins
from flowerbed.data.base import Dataset, DatasetMeta, Partition

load_plugins()


def build_dataset(name: str, seed: int = 0, **params: object) -> Dataset:
    """Build a registered dataset with validated params."""
    spec = registry.get("dataset", name).params(name=name, **params)
    return registry.build("dataset", spec, seed=seed)


def build_partition(
    name: str, data: Dataset, num_clients: int, seed: int = 0, **params: object
) -> Partition:
    """Run a registered partitioner with validated params."""
    spec = registry.get("partition", name).params(name=name, **params)
    return registry.build("partition", spec, data=data, num_clients=num_clients, seed=seed)


def toy_labels(n: int, num_classes: int, seed: int = 0) -> Dataset:
    """A classification dataset of ``n`` rows with random labels and 3 features."""
    gen = np.random.default_rng(seed)
    y = gen.integers(0, num_classes, size=n).astype(np.int64)
    x = gen.standard_normal((n, 3)).astype(np.float32)
    meta = DatasetMeta(name="toy", task="classification", num_features=3, num_classes=num_classes)
    return Dataset(x, y, x[:10], y[:10], meta)


def assert_disjoint_cover(partition: Partition, n: int, complete: bool = True) -> None:
    """Client index sets are disjoint, in range, and (if ``complete``) cover every row."""
    allidx = np.concatenate(partition.indices)
    assert len(np.unique(allidx)) == len(allidx), "a row is given to two clients"
    assert allidx.min() >= 0 and allidx.max() < n
    if complete:
        assert len(allidx) == n

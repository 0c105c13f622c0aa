"""Materialise a scenario's dataset and partition once per process, and slice clients."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from flowerbed.core import registry
from flowerbed.core.scenario import Scenario
from flowerbed.core.seeds import derive_seed
from flowerbed.data import federated_cache
from flowerbed.data.base import ClientData, Dataset, Partition
from flowerbed.data.partitioners import check_clients

T = TypeVar("T")


@dataclass(frozen=True)
class FederatedData:
    """The dataset, its partition, and each client's local train/test split."""

    dataset: Dataset
    partition: Partition
    local_train: list[np.ndarray]
    local_test: list[np.ndarray]

    def client(self, pid: int) -> ClientData:
        """Client ``pid``'s local data (its domain transform applied, its columns only)."""
        ds = self.dataset
        cols = None if self.partition.columns is None else self.partition.columns[pid]
        tr, te = self.local_train[pid], self.local_test[pid]

        def view(x: np.ndarray) -> np.ndarray:
            x = self._shift(pid, x)
            return x if cols is None else x[:, cols]

        domains = self.partition.domains
        return ClientData(
            partition_id=pid,
            x_train=view(ds.x_train[tr]),
            y_train=ds.y_train[tr],
            x_test=view(ds.x_train[te]),
            y_test=ds.y_train[te],
            meta=ds.meta,
            columns=cols,
            extra={} if domains is None else {"domain": domains[pid]},
            **_text_rows(ds, tr, te),
        )

    def pooled_train(self) -> tuple[np.ndarray, np.ndarray]:
        """Union of all clients' local training examples (the centralized baseline's data).

        With per-client domain transforms the pooled rows are the transformed
        ones, client after client, so the baseline sees what the clients see.
        """
        x, y = self.dataset.x_train, self.dataset.y_train
        if self.partition.transforms is None:
            idx = np.sort(np.concatenate(self.local_train)) if self.local_train else np.array([])
            return x[idx], y[idx]
        xs = [self._shift(pid, x[ix]) for pid, ix in enumerate(self.local_train)]
        ys = [y[ix] for ix in self.local_train]
        return np.concatenate(xs), np.concatenate(ys)

    def pooled_client(self) -> ClientData:
        """One virtual client holding every client's local train and test rows.

        What the ``centralized`` baseline of a local task runs on: the union of
        the clients' training rows and of their held-out rows, each with its
        client's domain transform, at full width (no column restriction), so
        it is scored on exactly the rows the clients are scored on.
        """
        x, y = self.dataset.x_train, self.dataset.y_train

        def stack(splits: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
            parts = [(self._shift(pid, x[ix]), y[ix]) for pid, ix in enumerate(splits)]
            parts = [p for p in parts if len(p[1])] or [(x[:0], y[:0])]
            return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])

        x_train, y_train = stack(self.local_train)
        x_test, y_test = stack(self.local_test)
        text = _text_rows(self.dataset, _joined(self.local_train), _joined(self.local_test))
        return ClientData(-1, x_train, y_train, x_test, y_test, self.dataset.meta, **text)

    def _shift(self, pid: int, x: np.ndarray) -> np.ndarray:
        """Apply client ``pid``'s domain transform (if any) to full-width rows."""
        transform = self.partition.transform(pid)
        return x if transform is None or len(x) == 0 else transform(x)


def _take(table: tuple[T, ...] | None, rows: Sequence[int] | np.ndarray) -> tuple[T, ...] | None:
    """Rows ``rows`` of a text side table, in that order (``None`` stays ``None``)."""
    return None if table is None else tuple(table[int(i)] for i in rows)


def _joined(splits: list[np.ndarray]) -> np.ndarray:
    """Every client's rows, client after client (the order ``pooled_client`` stacks them)."""
    return np.concatenate(splits) if splits else np.zeros(0, dtype=np.int64)


def _text_rows(ds: Dataset, train: np.ndarray, test: np.ndarray) -> dict[str, Any]:
    """``ClientData`` text fields for local train and test rows (both index ``x_train``)."""
    return {
        "text_train": _take(ds.text_train, train),
        "text_test": _take(ds.text_train, test),
        "refs_train": _take(ds.refs_train, train),
        "refs_test": _take(ds.refs_train, test),
    }


def _local_split(
    indices: np.ndarray, fraction: float, seed: int, pid: int
) -> tuple[np.ndarray, np.ndarray]:
    """Hold out ``fraction`` of a client's examples for its own evaluation."""
    order = np.random.default_rng(derive_seed(seed, "local-test", pid)).permutation(indices)
    n_test = round(fraction * len(order))
    if len(order) - n_test < 1:
        n_test = 0
    return np.sort(order[n_test:]), np.sort(order[:n_test])


def _key(scenario: Scenario) -> str:
    parts = {
        "dataset": scenario.component("dataset").model_dump(mode="json"),
        "partition": scenario.component("partition").model_dump(mode="json"),
        "num_clients": scenario.num_clients,
        "seed": scenario.seed,
        "clients": scenario.clients.model_dump(mode="json"),
    }
    return json.dumps(parts, sort_keys=True)


def federated_data(scenario: Scenario) -> FederatedData:
    """Build (or fetch from this process's cache) the scenario's federated data.

    A lazy partition (``iid_draw``, ``devices``, ...) gives data whose clients
    are built on demand (:mod:`flowerbed.data.population`).
    """
    from flowerbed.data.population import is_lazy, population_data

    if is_lazy(scenario):
        return population_data(scenario)
    return _build(_key(scenario), scenario)


_CACHE: dict[str, FederatedData] = {}


def _build(key: str, scenario: Scenario) -> FederatedData:
    if key in _CACHE:
        return _CACHE[key]
    use_disk = federated_cache.discovered(scenario)
    disk_key = federated_cache.cache_key(scenario, key) if use_disk else ""
    stored = federated_cache.read(disk_key) if use_disk else None
    data = FederatedData(*stored) if stored is not None else _compute(scenario)
    if use_disk and stored is None and federated_cache.cacheable(data.dataset, data.partition):
        federated_cache.write(
            disk_key, data.dataset, data.partition, data.local_train, data.local_test
        )
    if len(_CACHE) >= 4:
        _CACHE.pop(next(iter(_CACHE)))
    _CACHE[key] = data
    return data


def _compute(scenario: Scenario) -> FederatedData:
    """Build the dataset, partition it and hold out each client's local test rows."""
    seed = scenario.seed
    dataset = registry.build("dataset", scenario.component("dataset"), seed=seed)
    # Every partitioner needs a row per client; checked here too for those that do not say.
    check_clients(dataset, scenario.num_clients)
    partition = registry.build(
        "partition", scenario.component("partition"), data=dataset,
        num_clients=scenario.num_clients, seed=seed,
    )
    if len(partition.indices) != scenario.num_clients:
        raise ValueError(
            f"partition produced {len(partition.indices)} clients, "
            f"expected num_clients={scenario.num_clients}"
        )
    frac = scenario.clients.local_test_fraction
    splits = [_local_split(ix, frac, seed, pid) for pid, ix in enumerate(partition.indices)]
    return FederatedData(dataset, partition, [s[0] for s in splits], [s[1] for s in splits])

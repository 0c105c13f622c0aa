"""Federated data for large populations: each client's rows computed on demand.

A regular partitioner (:mod:`flowerbed.data.partitioners`) splits the training
set among all clients at once and every process keeps the whole split: fine
for thousands of clients, not for a million. A *lazy* partition (its params
derive from :class:`LazyPartitionParams`) instead answers "which rows does
client ``pid`` hold" from ``(seed, pid)`` alone, on demand, with per-client
seeded draws or from an index built once (O(rows), never O(clients)); a
*device dataset* (:class:`DeviceDataset`, such as FedProx's Synthetic(alpha, beta))
generates each client's data from its own seed, and partition ``devices``
hands every client its own device.

:func:`population_data` gives a :class:`LazyFederatedData`, used wherever a
:class:`~flowerbed.data.federated.FederatedData` is: ``client(pid)`` builds
one client's local train/test split (the same held-out rule as every other
partition) and keeps the most recent clients in a bounded cache. Nothing here
changes the existing partitioners or their numbers: lazy partitions are new
names (``iid_draw``, ``dirichlet_draw``, ``natural_id_index``, ``devices``).
"""

from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from flowerbed.core import registry
from flowerbed.core.registry import Params
from flowerbed.data.base import ClientData, Dataset, Partition
from flowerbed.data.federated import FederatedData, _local_split
from flowerbed.data.partitioners import PartitionError

if TYPE_CHECKING:
    from flowerbed.core.scenario import Scenario

#: Clients whose local data a process keeps at once (most recently used).
CLIENT_CACHE = 64
#: Above this many clients the pooled (centralized) data is refused: it means every client.
POOL_LIMIT = 100_000


class LazyPartitionParams(Params):
    """Base of a lazy partition's params: what marks a partition as computed per client."""


class LazyPartition:
    """One client's training rows on demand (indices into ``Dataset.x_train``).

    Subclasses implement :meth:`rows` as a pure function of the partition's
    parameters, the root seed and ``pid``; the rows come back sorted, without
    repeats.
    """

    def rows(self, pid: int) -> np.ndarray:
        """Client ``pid``'s training rows, sorted."""
        raise NotImplementedError

    def domain(self, pid: int) -> str | None:
        """A one-line description of client ``pid``'s data (natural id), if any."""
        del pid
        return None

    def arrays(self, pid: int, dataset: Dataset) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(x, y, rows)``: arrays the client's ``rows`` index (the dataset's training split)."""
        return dataset.x_train, dataset.y_train, self.rows(pid)


@dataclass(frozen=True)
class DeviceDataset(Dataset):
    """A dataset whose every client is a device generating its own rows from its seed.

    ``x_train``/``y_train`` are empty: there is no shared training pool. The
    test split is the server's (``x_test``/``y_test``). Subclasses implement
    :meth:`device`.
    """

    def device(self, pid: int) -> tuple[np.ndarray, np.ndarray]:
        """Device ``pid``'s ``(x, y)`` rows, a pure function of the dataset and ``pid``."""
        raise NotImplementedError


class DevicePartition(LazyPartition):
    """Partition ``devices``: client ``pid`` holds all of device ``pid``'s rows."""

    def __init__(self, dataset: DeviceDataset) -> None:
        self.dataset = dataset

    def arrays(self, pid: int, dataset: Dataset) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The device's own rows (``rows`` index them)."""
        del dataset
        x, y = self.dataset.device(pid)
        return x, y, np.arange(len(y))

    def rows(self, pid: int) -> np.ndarray:
        """Positions ``0..n-1`` of the device's own rows."""
        return np.arange(len(self.dataset.device(pid)[1]))


@dataclass(frozen=True)
class LazyFederatedData(FederatedData):
    """:class:`FederatedData` whose clients are built when first asked for.

    ``partition``, ``local_train`` and ``local_test`` are empty: there is no
    list of every client. ``client(pid)`` applies the same local held-out
    split (``clients.local_test_fraction``, seeded per client) as the
    eager path.
    """

    source: LazyPartition = field(default_factory=LazyPartition)
    num_clients: int = 0
    seed: int = 0
    local_test_fraction: float = 0.0
    _cache: OrderedDict[int, ClientData] = field(
        default_factory=OrderedDict, compare=False, repr=False
    )

    def client(self, pid: int) -> ClientData:
        """Client ``pid``'s local data (built now, or from the bounded cache)."""
        if not 0 <= pid < self.num_clients:
            raise IndexError(f"client {pid} is not in 0..{self.num_clients - 1}")
        found = self._cache.get(pid)
        if found is not None:
            self._cache.move_to_end(pid)
            return found
        data = self._build(pid)
        self._cache[pid] = data
        if len(self._cache) > CLIENT_CACHE:
            self._cache.popitem(last=False)
        return data

    def _build(self, pid: int) -> ClientData:
        x, y, rows = self.source.arrays(pid, self.dataset)
        train, test = _local_split(rows, self.local_test_fraction, self.seed, pid)
        domain = self.source.domain(pid)
        return ClientData(
            partition_id=pid,
            x_train=x[train],
            y_train=y[train],
            x_test=x[test],
            y_test=y[test],
            meta=self.dataset.meta,
            extra={} if domain is None else {"domain": domain},
        )

    def _check_pool(self) -> None:
        if self.num_clients > POOL_LIMIT:
            raise PartitionError(
                f"num_clients={self.num_clients}: pooling every client's rows (the centralized "
                f"baseline) is refused above {POOL_LIMIT:,} clients; drop it from baselines"
            )

    def pooled_train(self) -> tuple[np.ndarray, np.ndarray]:
        """Every client's local training rows: sorted row ids of a shared pool, else stacked."""
        self._check_pool()
        if isinstance(self.source, DevicePartition):
            parts = [self.client(pid) for pid in range(self.num_clients)]
            return np.concatenate([c.x_train for c in parts]), np.concatenate(
                [c.y_train for c in parts]
            )
        idx = np.sort(np.concatenate([self._train_rows(pid) for pid in range(self.num_clients)]))
        return self.dataset.x_train[idx], self.dataset.y_train[idx]

    def _train_rows(self, pid: int) -> np.ndarray:
        rows = self.source.rows(pid)
        return _local_split(rows, self.local_test_fraction, self.seed, pid)[0]

    def pooled_client(self) -> ClientData:
        """One virtual client holding every client's local train and test rows, client by client."""
        self._check_pool()
        parts = [self.client(pid) for pid in range(self.num_clients)]

        def stack(name: str) -> np.ndarray:
            return np.concatenate([getattr(c, name) for c in parts])

        return ClientData(
            -1, stack("x_train"), stack("y_train"), stack("x_test"), stack("y_test"),
            self.dataset.meta,
        )


def is_lazy(scenario: Scenario) -> bool:
    """Whether the scenario's partition is computed per client (see the module docstring)."""
    return isinstance(scenario.component("partition"), LazyPartitionParams)


def _key(scenario: Scenario) -> str:
    parts = {
        "dataset": scenario.component("dataset").model_dump(mode="json"),
        "partition": scenario.component("partition").model_dump(mode="json"),
        "num_clients": scenario.num_clients,
        "seed": scenario.seed,
        "local_test_fraction": scenario.clients.local_test_fraction,
    }
    return json.dumps(parts, sort_keys=True)


_CACHE: dict[str, LazyFederatedData] = {}


def population_data(scenario: Scenario) -> LazyFederatedData:
    """The scenario's lazily partitioned data (one instance per process and scenario data)."""
    key = _key(scenario)
    if key not in _CACHE:
        if len(_CACHE) >= 4:
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[key] = _compute(scenario)
    return _CACHE[key]


def shared_pool(scenario: Scenario) -> Dataset:
    """The scenario's dataset, through the artefact cache when it is a plain shared pool.

    Every process of a run needs the pool the clients draw from; the first
    writes it to the cache (:mod:`flowerbed.data.federated_cache`, with an
    empty partition) and the others memory-map it instead of decoding it
    again. A device dataset is only its test split: built in each process.
    """
    from flowerbed.data import federated_cache

    use_disk = federated_cache.discovered(scenario)
    key = ""
    if use_disk:
        key = federated_cache.cache_key(scenario, "pool:" + _pool_key(scenario))
        stored = federated_cache.read(key)
        if stored is not None:
            return stored[0]
    dataset: Dataset = registry.build(
        "dataset", scenario.component("dataset"), seed=scenario.seed
    )
    if use_disk and federated_cache.cacheable(dataset, Partition([])):
        federated_cache.write(key, dataset, Partition([]), [], [])
    return dataset


def _pool_key(scenario: Scenario) -> str:
    return json.dumps(
        {"dataset": scenario.component("dataset").model_dump(mode="json"), "seed": scenario.seed},
        sort_keys=True,
    )


def _compute(scenario: Scenario) -> LazyFederatedData:
    seed = scenario.seed
    dataset = shared_pool(scenario)
    if dataset.text_train is not None:
        name = registry.name_of(scenario.component("partition"))
        raise PartitionError(
            f"partition {name} does not carry text rows ({dataset.meta.name} has text); "
            f"use a partition without a per-client draw"
        )
    source = registry.build(
        "partition", scenario.component("partition"), data=dataset,
        num_clients=scenario.num_clients, seed=seed,
    )
    return LazyFederatedData(
        dataset=dataset,
        partition=Partition([]),
        local_train=[],
        local_test=[],
        source=source,
        num_clients=scenario.num_clients,
        seed=seed,
        local_test_fraction=scenario.clients.local_test_fraction,
    )

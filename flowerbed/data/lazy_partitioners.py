"""Lazy partitions: a client's rows from (seed, client id), for populations up to millions.

Each returns a :class:`~flowerbed.data.population.LazyPartition`; nothing is
computed per client until the client is asked for. ``iid_draw`` and
``dirichlet_draw`` give every client its own seeded draw of rows from the
whole training set, so clients may share rows with each other (a million
clients over 60,000 images could not have disjoint shares) but never hold a
row twice. ``natural_id_index`` gives one client per natural id, from an
index of the rows built once. ``devices`` gives each client its own device of
a :class:`~flowerbed.data.population.DeviceDataset`.

Examples
--------
>>> from flowerbed.data.base import DatasetMeta
>>> data = Dataset(np.zeros((100, 2), np.float32), np.arange(100) % 4, np.zeros((1, 2)),
...                np.zeros(1, np.int64), DatasetMeta("toy", "classification", 2, 4))
>>> part = iid_draw(IidDrawParams(rows_per_client=5), data, num_clients=10**6, seed=0)
>>> rows = part.rows(999_999)
>>> len(rows), bool(np.all(np.diff(rows) > 0))
(5, True)
"""

from __future__ import annotations

import math

import numpy as np
from pydantic import Field

from flowerbed.core.registry import register
from flowerbed.core.seeds import rng
from flowerbed.data.base import Dataset
from flowerbed.data.partitioners import PartitionError
from flowerbed.data.population import (
    DeviceDataset,
    DevicePartition,
    LazyPartition,
    LazyPartitionParams,
)


class DrawParams(LazyPartitionParams):
    """How many rows a client draws.

    ``rows_per_client`` is every client's size when ``size_sigma`` is 0, else
    the median of log-normal sizes ``rows_per_client * exp(size_sigma * z)``
    (``z ~ N(0, 1)`` per client, rounded, at least 1, at most the rows a
    client can draw).
    """

    rows_per_client: int = Field(60, ge=1, description="rows per client (the median size)")
    size_sigma: float = Field(0.0, ge=0, description="log-spread of client sizes; 0: all equal")


def client_size(params: DrawParams, gen: np.random.Generator, cap: int) -> int:
    """One client's number of rows, drawn from ``gen`` (see :class:`DrawParams`)."""
    if params.size_sigma == 0:
        return min(params.rows_per_client, cap)
    size = round(params.rows_per_client * math.exp(params.size_sigma * gen.standard_normal()))
    return int(min(max(size, 1), cap))


class IidDrawParams(DrawParams):
    """IID per-client draws: each client's rows uniformly from the training set."""


class IidDraw(LazyPartition):
    """Client ``pid`` draws its rows uniformly, without repeats, from its own seed."""

    def __init__(self, params: IidDrawParams, num_rows: int, seed: int) -> None:
        self.params, self.num_rows, self.seed = params, num_rows, seed

    def rows(self, pid: int) -> np.ndarray:
        """Sorted rows of client ``pid``."""
        gen = rng(self.seed, "iid_draw", pid)
        size = client_size(self.params, gen, self.num_rows)
        return np.sort(gen.choice(self.num_rows, size=size, replace=False))


def _check_size(params: DrawParams, data: Dataset, field: str, available: int) -> None:
    if params.rows_per_client > available:
        raise PartitionError(
            f"partition.rows_per_client={params.rows_per_client} exceeds the {available} "
            f"{field} of {data.meta.name}"
        )


@register("partition", "iid_draw", params=IidDrawParams)
def iid_draw(params: IidDrawParams, data: Dataset, num_clients: int, *, seed: int) -> IidDraw:
    """IID at any population: each client a seeded draw of ``rows_per_client`` rows."""
    del num_clients
    _check_size(params, data, "training rows", len(data.y_train))
    return IidDraw(params, len(data.y_train), seed)


class DirichletDrawParams(DrawParams):
    """Label skew per client: class shares from Dirichlet(alpha), then rows of those classes."""

    alpha: float = Field(0.5, gt=0, description="concentration; small = more skew")


class DirichletDraw(LazyPartition):
    """Client ``pid``: shares ``p ~ Dir(alpha)``, counts ``~ Multinomial(size, p)``, rows per class.

    A class index (rows grouped by label) is built once, O(rows); a client's
    draw touches only its own rows. A client's size is capped by the
    smallest class, so any class share can be met without repeats.
    """

    def __init__(self, params: DirichletDrawParams, labels: np.ndarray, seed: int) -> None:
        self.params, self.seed = params, seed
        classes, counts = np.unique(labels, return_counts=True)
        self.classes = classes
        self.order = np.argsort(np.searchsorted(classes, labels), kind="stable")
        self.offsets = np.concatenate([[0], np.cumsum(counts)])
        self.cap = int(counts.min())

    def rows(self, pid: int) -> np.ndarray:
        """Sorted rows of client ``pid``."""
        gen = rng(self.seed, "dirichlet_draw", pid)
        size = client_size(self.params, gen, self.cap)
        shares = gen.dirichlet(np.full(len(self.classes), self.params.alpha))
        counts = gen.multinomial(size, shares / shares.sum())
        picked = []
        for c in np.flatnonzero(counts):
            start, stop = self.offsets[c], self.offsets[c + 1]
            picked.append(self.order[start + gen.choice(stop - start, counts[c], replace=False)])
        return np.sort(np.concatenate(picked)) if picked else np.zeros(0, np.int64)


@register("partition", "dirichlet_draw", params=DirichletDrawParams)
def dirichlet_draw(
    params: DirichletDrawParams, data: Dataset, num_clients: int, *, seed: int
) -> DirichletDraw:
    """Dirichlet label skew at any population: each client's class shares and rows drawn alone."""
    del num_clients
    if data.meta.task != "classification":
        raise PartitionError("partition dirichlet_draw needs class labels; use iid_draw")
    part = DirichletDraw(params, np.asarray(data.y_train), seed)
    _check_size(params, data, "rows of its smallest class", part.cap)
    return part


class NaturalIdIndexParams(LazyPartitionParams):
    """No parameters: one client per distinct ``Dataset.groups_train`` value, from an index."""


class NaturalIdIndex(LazyPartition):
    """Client ``pid`` holds the rows of the ``pid``-th natural id in sorted order.

    The same clients and rows as partition ``natural_id``; the index (rows
    grouped by id) is built once instead of one table per client.
    """

    def __init__(self, groups: np.ndarray) -> None:
        self.ids, inverse = np.unique(groups, return_inverse=True)
        self.order = np.argsort(inverse, kind="stable")
        self.offsets = np.concatenate([[0], np.cumsum(np.bincount(inverse))])

    def rows(self, pid: int) -> np.ndarray:
        """Rows of natural id ``pid`` (ascending)."""
        return self.order[self.offsets[pid] : self.offsets[pid + 1]].astype(np.int64)

    def domain(self, pid: int) -> str:
        """``id <natural id>``, as partition ``natural_id`` names it."""
        return f"id {self.ids[pid]}"


@register("partition", "natural_id_index", params=NaturalIdIndexParams)
def natural_id_index(
    params: NaturalIdIndexParams, data: Dataset, num_clients: int, *, seed: int
) -> NaturalIdIndex:
    """One client per natural id (subject, site, user...), rows found through an index."""
    del params, seed
    if data.groups_train is None:
        raise PartitionError(
            f"natural_id_index partitioning needs a dataset with natural client ids; "
            f"{data.meta.name!r} has none (e.g. use watch, or csv/parquet with group)"
        )
    part = NaturalIdIndex(np.asarray([str(g) for g in data.groups_train]))
    if len(part.ids) != num_clients:
        raise PartitionError(
            f"num_clients={num_clients} but dataset {data.meta.name!r} has {len(part.ids)} "
            f"natural ids (one client each); set num_clients: {len(part.ids)}"
        )
    return part


class DevicesParams(LazyPartitionParams):
    """No parameters: client ``pid`` is device ``pid`` of a dataset that generates devices."""


@register("partition", "devices", params=DevicesParams)
def devices(
    params: DevicesParams, data: Dataset, num_clients: int, *, seed: int
) -> DevicePartition:
    """Each client its own generated device (e.g. dataset ``synthetic_fedprox``)."""
    del params, num_clients, seed
    if not isinstance(data, DeviceDataset):
        raise PartitionError(
            f"partition devices needs a dataset that generates each client's data "
            f"(synthetic_fedprox, synthetic_images); {data.meta.name!r} is one shared pool: "
            f"use iid_draw or dirichlet_draw"
        )
    return DevicePartition(data)

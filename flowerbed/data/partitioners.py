"""Partitioners: split a training set among clients, a pure function of (data, params, seed)."""

from __future__ import annotations

import numpy as np
from pydantic import Field

from flowerbed.data.base import Dataset, Partition
from flowerbed.platform.registry import Params, register
from flowerbed.platform.seeds import derive_seed


def _flwr_partition(partitioner: object, labels: np.ndarray, num_clients: int) -> Partition:
    """Run a ``flwr_datasets`` partitioner on an in-memory table of labels."""
    from datasets import Dataset as HFDataset  # heavy import, only when partitioning

    table = HFDataset.from_dict({"label": labels, "row": np.arange(len(labels))})
    partitioner.dataset = table  # type: ignore[attr-defined]
    parts = [
        np.sort(np.asarray(partitioner.load_partition(i)["row"], dtype=np.int64))  # type: ignore[attr-defined]
        for i in range(num_clients)
    ]
    return Partition(parts)


class IidParams(Params):
    """No parameters: equal-sized uniformly random shards."""


@register("partition", "iid", params=IidParams)
def iid(params: IidParams, data: Dataset, num_clients: int, *, seed: int) -> Partition:
    """IID: a seeded shuffle cut into equal shards (flwr_datasets IidPartitioner)."""
    from flwr_datasets.partitioner import IidPartitioner

    del params
    # IidPartitioner cuts contiguous shards, so shuffle first with our own seed.
    order = np.random.default_rng(derive_seed(seed, "iid")).permutation(len(data.y_train))
    part = _flwr_partition(IidPartitioner(num_partitions=num_clients), order, num_clients)
    return Partition([np.sort(order[i]) for i in part.indices])


class DirichletParams(Params):
    """Label skew: client label shares drawn from Dirichlet(alpha)."""

    alpha: float = Field(0.5, gt=0, description="concentration; small = more skew")
    min_partition_size: int = Field(10, ge=0)
    self_balancing: bool = False


@register("partition", "dirichlet", params=DirichletParams)
def dirichlet(
    params: DirichletParams, data: Dataset, num_clients: int, *, seed: int
) -> Partition:
    """Dirichlet label skew (flwr_datasets DirichletPartitioner, seeded)."""
    from flwr_datasets.partitioner import DirichletPartitioner

    if data.meta.task != "classification":
        raise ValueError("dirichlet partitioning needs class labels; use iid for regression")
    partitioner = DirichletPartitioner(
        num_partitions=num_clients,
        partition_by="label",
        alpha=params.alpha,
        min_partition_size=params.min_partition_size,
        self_balancing=params.self_balancing,
        seed=derive_seed(seed, "dirichlet") % 2**32,
    )
    return _flwr_partition(partitioner, data.y_train, num_clients)

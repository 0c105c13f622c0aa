"""Partitioners: split a training set among clients, a pure function of (data, params, seed)."""

from __future__ import annotations

import contextlib
import io
import re
from typing import Literal

import numpy as np
from pydantic import Field

from flowerbed.core.registry import Params, register
from flowerbed.core.seeds import derive_seed
from flowerbed.data.base import Dataset, Partition


class PartitionError(ValueError):
    """A partition the data cannot give: one line naming the scenario field and the limit."""


def check_clients(data: Dataset, num_clients: int) -> None:
    """Refuse more clients than training rows (each client needs one).

    Examples
    --------
    >>> from flowerbed.data.base import DatasetMeta
    >>> tiny = Dataset(np.zeros((3, 1)), np.zeros(3), np.zeros((1, 1)), np.zeros(1),
    ...                DatasetMeta("tiny", "regression", 1))
    >>> check_clients(tiny, 4)
    Traceback (most recent call last):
    ...
    flowerbed.data.partitioners.PartitionError: num_clients=4 exceeds the 3 training rows of tiny
    """
    n = len(data.y_train)
    if num_clients > n:
        raise PartitionError(
            f"num_clients={num_clients} exceeds the {n} training rows of {data.meta.name}"
        )


def check_budget(data: Dataset, num_clients: int, field: str, per_client: int) -> None:
    """Refuse ``per_client`` rows for each client (``partition.<field>``) beyond the data's rows."""
    need, n = per_client * num_clients, len(data.y_train)
    if need > n:
        raise PartitionError(
            f"partition.{field}={per_client} x num_clients={num_clients} needs {need} "
            f"training rows; {data.meta.name} has {n}"
        )


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
    check_clients(data, num_clients)
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
    check_clients(data, num_clients)
    check_budget(data, num_clients, "min_partition_size", params.min_partition_size)
    partitioner = DirichletPartitioner(
        num_partitions=num_clients,
        partition_by="label",
        alpha=params.alpha,
        min_partition_size=params.min_partition_size,
        self_balancing=params.self_balancing,
        seed=derive_seed(seed, "dirichlet") % 2**32,
    )
    try:
        return _flwr_partition(partitioner, data.y_train, num_clients)
    except ValueError as exc:
        if "max number of attempts" not in str(exc):
            raise PartitionError(f"partition dirichlet, num_clients={num_clients}: {exc}") from None
        # Possible in total, but flwr-datasets' 10 draws all left a client short.
        raise PartitionError(
            f"partition.min_partition_size={params.min_partition_size} not met: in each of 10 "
            f"draws of Dirichlet(partition.alpha={params.alpha:g}) some of the "
            f"num_clients={num_clients} clients got fewer of the {len(data.y_train)} training "
            f"rows of {data.meta.name} (the first draw's smallest clients: "
            f"{_smallest(params, data, num_clients, seed)} rows); lower min_partition_size or "
            f"num_clients, or raise alpha"
        ) from None


def _smallest(params: DirichletParams, data: Dataset, num_clients: int, seed: int) -> str:
    """The three smallest client sizes of the first Dirichlet draw, ``"0, 2, 3"``.

    With no minimum the partitioner keeps its first draw, the same one the
    refused attempt started from (same seed), so these are sizes it got.
    """
    from flwr_datasets.partitioner import DirichletPartitioner

    first = DirichletPartitioner(
        num_partitions=num_clients, partition_by="label", alpha=params.alpha,
        min_partition_size=0, self_balancing=params.self_balancing,
        seed=derive_seed(seed, "dirichlet") % 2**32,
    )
    sizes = sorted(_flwr_partition(first, data.y_train, num_clients).sizes)
    return ", ".join(str(n) for n in sizes[:3])


def _needs_labels(data: Dataset, name: str) -> None:
    if data.meta.task != "classification":
        raise ValueError(f"{name} partitioning needs class labels; use iid for regression")


def _shuffled(partitioner: object, n: int, num_clients: int, seed: int, label: str) -> Partition:
    """Run a contiguous-cut ``flwr_datasets`` partitioner on a seeded permutation of rows."""
    order = np.random.default_rng(derive_seed(seed, label)).permutation(n)
    part = _flwr_partition(partitioner, order, num_clients)
    return Partition([np.sort(order[i]) for i in part.indices])


class PathologicalParams(Params):
    """Each client holds examples of only ``num_classes_per_partition`` classes."""

    num_classes_per_partition: int = Field(2, ge=1)
    class_assignment_mode: Literal["random", "deterministic", "first-deterministic"] = "random"


@register("partition", "pathological", params=PathologicalParams)
def pathological(
    params: PathologicalParams, data: Dataset, num_clients: int, *, seed: int
) -> Partition:
    """Pathological k-classes-per-client label skew (flwr_datasets PathologicalPartitioner)."""
    from flwr_datasets.partitioner import PathologicalPartitioner

    _needs_labels(data, "pathological")
    check_clients(data, num_clients)
    k, present = params.num_classes_per_partition, np.unique(data.y_train)
    if k > len(present):
        where = "" if len(present) == data.meta.num_classes else " present in its training rows"
        raise PartitionError(
            f"partition.num_classes_per_partition={k} exceeds the {len(present)} classes "
            f"of {data.meta.name}{where}"
        )
    partitioner = PathologicalPartitioner(
        num_partitions=num_clients,
        partition_by="label",
        num_classes_per_partition=k,
        class_assignment_mode=params.class_assignment_mode,
        seed=derive_seed(seed, "pathological") % 2**32,
    )
    try:
        return _flwr_partition(partitioner, data.y_train, num_clients)
    except ValueError as exc:
        raise _pathological_error(params, data, num_clients, exc) from None


#: flwr-datasets' words for a class given to more clients than it has rows.
_OVERUSED = re.compile(r"Label: (\S+) is needed to be assigned to more partitions \((\d+)\)"
                       r".*in the dataset \((\d+)\)", re.DOTALL)


def _pathological_error(
    params: PathologicalParams, data: Dataset, num_clients: int, exc: ValueError
) -> PartitionError:
    """flwr-datasets' refusal in the scenario's terms (its fields, the class's name)."""
    found = _OVERUSED.search(str(exc))
    if found is None:
        return PartitionError(f"partition pathological, num_clients={num_clients}: {exc}")
    label, clients, rows = found.groups()
    names = data.meta.class_names
    name = names[int(label)] if label.isdigit() and int(label) < len(names) else label
    return PartitionError(
        f"partition.num_classes_per_partition={params.num_classes_per_partition} with "
        f"num_clients={num_clients}: class {name} would go to {clients} clients but has "
        f"{rows} training rows; lower num_clients or num_classes_per_partition "
        f"(class_assignment_mode: deterministic spreads classes evenly)"
    )


class ShardParams(Params):
    """Sort by label, cut into shards, give each client ``num_shards_per_partition``."""

    num_shards_per_partition: int = Field(2, ge=1)
    shard_size: int | None = Field(None, ge=1, description="default: as large as possible")


@register("partition", "shard", params=ShardParams)
def shard(params: ShardParams, data: Dataset, num_clients: int, *, seed: int) -> Partition:
    """FedAvg-paper shards of label-sorted data (flwr_datasets ShardPartitioner)."""
    from flwr_datasets.partitioner import ShardPartitioner

    _needs_labels(data, "shard")
    check_clients(data, num_clients)
    _check_shards(params, data, num_clients)
    partitioner = ShardPartitioner(
        num_partitions=num_clients,
        partition_by="label",
        num_shards_per_partition=params.num_shards_per_partition,
        shard_size=params.shard_size,
        seed=derive_seed(seed, "shard") % 2**32,
    )
    return _flwr_partition(partitioner, data.y_train, num_clients)


def _check_shards(params: ShardParams, data: Dataset, num_clients: int) -> None:
    """Every client's shards must exist: at least one row each, ``shard_size`` if given."""
    shards, n = params.num_shards_per_partition * num_clients, len(data.y_train)
    s = params.num_shards_per_partition
    if params.shard_size is None and shards > n:
        raise PartitionError(
            f"partition.num_shards_per_partition={s} x num_clients={num_clients} = {shards} "
            f"shards, more than the {n} training rows of {data.meta.name}; lower either"
        )
    if params.shard_size is not None and shards * params.shard_size > n:
        raise PartitionError(
            f"partition.shard_size={params.shard_size} x num_shards_per_partition={s} x "
            f"num_clients={num_clients} needs {shards * params.shard_size} training rows; "
            f"{data.meta.name} has {n}"
        )


class NaturalIdParams(Params):
    """No parameters: one client per distinct ``Dataset.groups_train`` value."""


@register("partition", "natural_id", params=NaturalIdParams)
def natural_id(
    params: NaturalIdParams, data: Dataset, num_clients: int, *, seed: int
) -> Partition:
    """One client per natural id (subject, site...) from groups_train (NaturalIdPartitioner)."""
    from datasets import Dataset as HFDataset
    from flwr_datasets.partitioner import NaturalIdPartitioner

    del params, seed
    if data.groups_train is None:
        raise ValueError(
            f"natural_id partitioning needs a dataset with natural client ids; "
            f"{data.meta.name!r} has none (e.g. use watch, or csv/parquet with group)"
        )
    groups = np.asarray([str(g) for g in data.groups_train])
    ids = sorted(set(groups.tolist()))
    if len(ids) != num_clients:
        raise PartitionError(
            f"num_clients={num_clients} but dataset {data.meta.name!r} has {len(ids)} natural "
            f"ids (one client each); set num_clients: {len(ids)}"
        )
    partitioner = NaturalIdPartitioner(partition_by="group")
    partitioner.dataset = HFDataset.from_dict({"group": groups, "row": np.arange(len(groups))})
    with contextlib.redirect_stderr(io.StringIO()):  # flwr-datasets' tqdm bar, one per run
        rows = [partitioner.load_partition(pid)["row"] for pid in range(num_clients)]
    mapping = partitioner.partition_id_to_natural_id  # filled by the first load
    by_id = {mapping[pid]: np.sort(np.asarray(r, dtype=np.int64)) for pid, r in enumerate(rows)}
    return Partition([by_id[i] for i in ids], domains=[f"id {i}" for i in ids])


class SizeSkewParams(Params):
    """Client sizes proportional to ``i``, ``i**2`` or ``exp(i)`` for client ``i = 1..N``."""

    law: Literal["linear", "square", "exponential"] = "linear"


@register("partition", "size_skew", params=SizeSkewParams)
def size_skew(params: SizeSkewParams, data: Dataset, num_clients: int, *, seed: int) -> Partition:
    """Deterministic size skew, rows at random (flwr_datasets Linear/Square/Exponential)."""
    from flwr_datasets import partitioner as fp

    cls = {
        "linear": fp.LinearPartitioner,
        "square": fp.SquarePartitioner,
        "exponential": fp.ExponentialPartitioner,
    }[params.law]
    check_clients(data, num_clients)
    try:
        return _shuffled(cls(num_partitions=num_clients), len(data.y_train), num_clients,
                         seed, "size_skew")
    except ValueError:
        raise PartitionError(
            f"partition.law={params.law} with num_clients={num_clients}: the smallest "
            f"client's share of the {len(data.y_train)} training rows of {data.meta.name} "
            f"rounds to no row; lower num_clients or use a flatter law"
        ) from None


class QuantitySkewParams(Params):
    """Random client sizes from a log-normal or a power (Zipf-like) law.

    ``lognormal``: size weights ``exp(sigma * z)`` with ``z ~ N(0, 1)``, so the
    log-sizes have standard deviation ``sigma``. ``powerlaw``: the client of
    (random) rank ``r = 1..N`` gets weight ``r ** -exponent``. Sizes are the
    weights scaled to the data (largest remainders), after ``min_size`` each.
    """

    law: Literal["lognormal", "powerlaw"] = "lognormal"
    sigma: float = Field(1.0, gt=0, description="lognormal: std of log-sizes")
    exponent: float = Field(1.0, gt=0, description="powerlaw: size ~ rank ** -exponent")
    min_size: int = Field(2, ge=0, description="examples every client gets first")


def allocate(total: int, weights: np.ndarray, min_size: int) -> np.ndarray:
    """Integer sizes summing to ``total``: ``min_size`` each, the rest by largest remainder.

    Examples
    --------
    >>> allocate(10, np.array([1.0, 1.0, 2.0]), min_size=1).tolist()
    [3, 3, 4]
    """
    spare = total - min_size * len(weights)
    if spare < 0:
        raise ValueError(f"{total} rows cannot give {len(weights)} clients {min_size} each")
    share = spare * weights / weights.sum()
    sizes = np.floor(share).astype(np.int64)
    order = np.argsort(-(share - sizes), kind="stable")
    sizes[order[: spare - sizes.sum()]] += 1
    return sizes + min_size


def quantity_weights(params: QuantitySkewParams, num_clients: int, seed: int) -> np.ndarray:
    """Relative client sizes drawn from the configured law."""
    gen = np.random.default_rng(derive_seed(seed, "quantity_skew", "sizes"))
    if params.law == "lognormal":
        return np.exp(params.sigma * gen.standard_normal(num_clients))
    ranks = gen.permutation(num_clients) + 1
    return ranks.astype(np.float64) ** -params.exponent


@register("partition", "quantity_skew", params=QuantitySkewParams)
def quantity_skew(
    params: QuantitySkewParams, data: Dataset, num_clients: int, *, seed: int
) -> Partition:
    """Quantity skew: log-normal or power-law client sizes, rows assigned at random."""
    check_clients(data, num_clients)
    check_budget(data, num_clients, "min_size", params.min_size)
    n = len(data.y_train)
    sizes = allocate(n, quantity_weights(params, num_clients, seed), params.min_size)
    order = np.random.default_rng(derive_seed(seed, "quantity_skew", "rows")).permutation(n)
    bounds = np.cumsum(sizes)[:-1]
    return Partition([np.sort(part) for part in np.split(order, bounds)])

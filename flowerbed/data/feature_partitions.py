"""Feature-subset partitioner: every client sees its own, possibly overlapping, columns.

Rows are split iid (a seeded shuffle cut into near-equal shards); the columns of
client ``m`` are either given explicitly or form a cyclic window of
``features_per_client`` columns starting at ``round(m * d / M)`` (so consecutive
clients overlap by ``features_per_client - d / M`` columns), optionally after a
seeded permutation of the column ids. The union must cover every feature.
"""

from __future__ import annotations

from typing import Annotated, Any

import numpy as np
from pydantic import Field, NonNegativeInt

from flowerbed.core.registry import Params, register
from flowerbed.core.seeds import derive_seed
from flowerbed.data.base import Dataset, Partition
from flowerbed.data.partitioners import PartitionError, check_clients

#: One client's column ids: at least one, none negative.
Columns = Annotated[tuple[NonNegativeInt, ...], Field(min_length=1)]


class FeatureSubsetParams(Params):
    """Which columns each client observes."""

    subsets: tuple[Columns, ...] | None = Field(
        None, description="explicit column ids per client (one list per client)"
    )
    features_per_client: int | None = Field(
        None, ge=1, description="window width (default: ceil(2 d / M), capped at d)"
    )
    shuffle_features: bool = Field(False, description="permute column ids before windowing")

    def scenario_problems(self, scenario: Any) -> list[str]:
        """Explicit subsets must list one entry per client (known before any data)."""
        if self.subsets is not None and len(self.subsets) != scenario.num_clients:
            return [f"subsets: lists {len(self.subsets)} clients; "
                    f"num_clients={scenario.num_clients}"]
        return []


def window_subsets(
    num_features: int, num_clients: int, width: int, perm: np.ndarray | None = None
) -> list[np.ndarray]:
    """Cyclic windows of ``width`` columns with evenly spaced starts.

    Examples
    --------
    >>> [w.tolist() for w in window_subsets(6, 3, 4)]
    [[0, 1, 2, 3], [2, 3, 4, 5], [0, 1, 4, 5]]
    """
    order = np.arange(num_features) if perm is None else np.asarray(perm)
    out = []
    for m in range(num_clients):
        start = round(m * num_features / num_clients)
        cols = order[(start + np.arange(width)) % num_features]
        out.append(np.unique(cols).astype(np.int64))
    return out


def client_columns(
    params: FeatureSubsetParams, num_features: int, num_clients: int, seed: int,
    name: str = "the dataset",
) -> list[np.ndarray]:
    """Each client's sorted column ids; raises when the union misses a feature.

    ``name`` is the dataset's, for the error messages.
    """
    if params.subsets is not None:
        cols = _explicit_columns(params.subsets, num_features, num_clients, name)
    else:
        width = params.features_per_client or min(num_features, -(-2 * num_features // num_clients))
        width = min(width, num_features)
        perm = None
        if params.shuffle_features:
            perm = np.random.default_rng(derive_seed(seed, "feature_subsets")).permutation(
                num_features
            )
        cols = window_subsets(num_features, num_clients, width, perm)
    missed = sorted(set(range(num_features)) - set(np.concatenate(cols).tolist()))
    if missed and params.subsets is not None:
        raise PartitionError(
            f"partition.subsets: no client observes features {missed} of {name}; "
            f"add them to some client's subset"
        )
    if missed:
        raise PartitionError(
            f"partition.features_per_client={width} with num_clients={num_clients}: no client "
            f"observes features {missed} of {name}; widen the windows"
        )
    return cols


def _explicit_columns(
    subsets: tuple[tuple[int, ...], ...], num_features: int, num_clients: int, name: str
) -> list[np.ndarray]:
    """The ``subsets`` as sorted arrays, each checked against the dataset's width."""
    if len(subsets) != num_clients:
        raise PartitionError(f"partition.subsets lists {len(subsets)} clients; "
                             f"num_clients={num_clients}")
    cols = [np.unique(np.array(s, dtype=np.int64)) for s in subsets]
    for i, c in enumerate(cols):
        if len(c) == 0:
            raise PartitionError(f"partition.subsets[{i}]: empty; every client needs a column")
        bad = [int(v) for v in c if not 0 <= v < num_features]
        if bad:
            raise PartitionError(
                f"partition.subsets[{i}]: column {bad[0]} is not one of the {num_features} "
                f"features of {name} (ids 0..{num_features - 1})"
            )
    return cols


@register("partition", "feature_subsets", params=FeatureSubsetParams)
def feature_subsets(
    params: FeatureSubsetParams, data: Dataset, num_clients: int, *, seed: int
) -> Partition:
    """IID rows; each client observes its own (overlapping) subset of feature columns."""
    check_clients(data, num_clients)
    cols = client_columns(params, data.meta.num_features, num_clients, seed, data.meta.name)
    order = np.random.default_rng(derive_seed(seed, "feature_subsets", "rows")).permutation(
        len(data.y_train)
    )
    rows = [np.sort(part).astype(np.int64) for part in np.array_split(order, num_clients)]
    return Partition(rows, cols)

"""Feature-subset partitioner: every client sees its own, possibly overlapping, columns.

Rows are split iid (a seeded shuffle cut into near-equal shards); the columns of
client ``m`` are either given explicitly or form a cyclic window of
``features_per_client`` columns starting at ``round(m * d / M)`` (so consecutive
clients overlap by ``features_per_client - d / M`` columns), optionally after a
seeded permutation of the column ids. The union must cover every feature.
"""

from __future__ import annotations

import numpy as np
from pydantic import Field

from flowerbed.core.registry import Params, register
from flowerbed.core.seeds import derive_seed
from flowerbed.data.base import Dataset, Partition


class FeatureSubsetParams(Params):
    """Which columns each client observes."""

    subsets: tuple[tuple[int, ...], ...] | None = Field(
        None, description="explicit column ids per client (one list per client)"
    )
    features_per_client: int | None = Field(
        None, ge=1, description="window width (default: ceil(2 d / M), capped at d)"
    )
    shuffle_features: bool = Field(False, description="permute column ids before windowing")


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
    params: FeatureSubsetParams, num_features: int, num_clients: int, seed: int
) -> list[np.ndarray]:
    """Each client's sorted column ids; raises when the union misses a feature."""
    if params.subsets is not None:
        if len(params.subsets) != num_clients:
            raise ValueError(
                f"subsets lists {len(params.subsets)} clients, num_clients={num_clients}"
            )
        cols = [np.unique(np.array(s, dtype=np.int64)) for s in params.subsets]
        bad = [c for s in cols for c in s if not 0 <= c < num_features]
        if bad or any(len(s) == 0 for s in cols):
            raise ValueError(
                f"subsets must be non-empty column ids in [0, {num_features}); got {bad}"
            )
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
    if missed:
        raise ValueError(f"no client observes features {missed}; widen the subsets")
    return cols


@register("partition", "feature_subsets", params=FeatureSubsetParams)
def feature_subsets(
    params: FeatureSubsetParams, data: Dataset, num_clients: int, *, seed: int
) -> Partition:
    """IID rows; each client observes its own (overlapping) subset of feature columns."""
    cols = client_columns(params, data.meta.num_features, num_clients, seed)
    order = np.random.default_rng(derive_seed(seed, "feature_subsets", "rows")).permutation(
        len(data.y_train)
    )
    rows = [np.sort(part).astype(np.int64) for part in np.array_split(order, num_clients)]
    return Partition(rows, cols)

"""Partitioners: coverage, the law each one promises, determinism, quickstart switching."""

from __future__ import annotations

import numpy as np
import pytest
from data_helpers import assert_disjoint_cover, build_dataset, build_partition, toy_labels

from flowerbed.core import registry
from flowerbed.core.scenario import load_scenario
from flowerbed.data.federated import federated_data
from flowerbed.data.partitioners import allocate

LABEL_PARTITIONERS = ["iid", "dirichlet", "pathological", "shard", "size_skew",
                      "quantity_skew", "domain_shift", "label_and_domain_shift"]


@pytest.fixture(scope="module")
def digits():
    return build_dataset("digits")


@pytest.mark.parametrize("name", LABEL_PARTITIONERS)
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_disjoint_cover_and_determinism(name, digits):
    n = len(digits.y_train)
    first = build_partition(name, digits, 10, seed=1)
    again = build_partition(name, digits, 10, seed=1)
    other = build_partition(name, digits, 10, seed=2)
    # Shards leave the label-sorted remainder unassigned; random pathological
    # class assignment may leave a class unused (flwr_datasets documents both).
    assert_disjoint_cover(first, n, complete=name not in ("shard", "pathological"))
    assert len(first.indices) == 10 and min(first.sizes) > 0
    assert all(np.array_equal(a, b) for a, b in zip(first.indices, again.indices, strict=True))
    assert any(not np.array_equal(a, b) for a, b in zip(first.indices, other.indices, strict=True))


@pytest.mark.parametrize("name", LABEL_PARTITIONERS)
def test_quickstart_switches_partitioner_by_one_line(name):
    """One override line switches the quickstart's partitioner (block replaced, defaults)."""
    overrides = [f"partition={name}"]
    if "alpha" in registry.get("partition", name).params.model_fields:
        overrides = [f"partition.name={name}"]  # keeps the quickstart's alpha
    scenario = load_scenario("scenarios/quickstart.yaml", overrides)
    assert scenario.partition.name == name
    data = federated_data(scenario)
    assert len(data.local_train) == scenario.num_clients
    x, y = data.pooled_train()
    assert len(x) == len(y) == sum(len(t) for t in data.local_train)
    assert data.client(0).x_train.shape[1] == 64


def label_shares(partition, y, num_classes):
    return np.stack([np.bincount(y[ix], minlength=num_classes) / len(ix)
                     for ix in partition.indices])


def test_dirichlet_large_alpha_approaches_iid_shares():
    data = toy_labels(4000, 5)
    overall = np.bincount(data.y_train) / len(data.y_train)
    gaps = {}
    for alpha in (0.1, 1.0, 1000.0):
        part = build_partition("dirichlet", data, 10, alpha=alpha, min_partition_size=0)
        gaps[alpha] = np.abs(label_shares(part, data.y_train, 5) - overall).max()
    assert gaps[1000.0] < 0.03 < gaps[1.0] < gaps[0.1]


def test_pathological_gives_k_classes_per_client(digits):
    part = build_partition("pathological", digits, 10, num_classes_per_partition=2)
    for ix in part.indices:
        assert len(np.unique(digits.y_train[ix])) <= 2


def test_shard_clients_hold_few_labels(digits):
    part = build_partition("shard", digits, 10, num_shards_per_partition=2)
    assert len(set(part.sizes)) == 1
    assert max(len(np.unique(digits.y_train[ix])) for ix in part.indices) <= 4


def test_size_skew_linear_and_square_laws():
    data = toy_labels(5500, 3)
    linear = build_partition("size_skew", data, 10, law="linear")
    assert np.allclose(linear.sizes, 100 * np.arange(1, 11), atol=1)
    square = build_partition("size_skew", data, 10, law="square")
    squares = np.arange(1, 11) ** 2
    # Truncated shares; the last client takes the few leftover rows.
    assert np.allclose(square.sizes, 5500 * squares / squares.sum(), atol=10)
    with pytest.raises(ValueError, match="exponential"):
        build_partition("size_skew", toy_labels(300, 3), 20, law="exponential")


def test_allocate_is_exact():
    sizes = allocate(103, np.array([1.0, 2.0, 3.0, 4.0]), min_size=3)
    assert sizes.sum() == 103 and sizes.min() >= 3
    assert np.abs(sizes - 3 - 91 * np.arange(1, 5) / 10).max() < 1


@pytest.mark.parametrize("sigma", [0.5, 1.0])
def test_quantity_skew_lognormal_log_sizes(sigma):
    data = toy_labels(60_000, 2)
    stds, means = [], []
    for seed in range(3):
        part = build_partition("quantity_skew", data, 200, seed=seed, sigma=sigma, min_size=0)
        logs = np.log(part.sizes)
        stds.append(logs.std(ddof=1))
        means.append(logs.mean())
        assert_disjoint_cover(part, len(data.y_train))
    assert abs(np.mean(stds) - sigma) < 0.1 * sigma
    # Sizes are exp(sigma z) scaled to n / N on average:
    # E[log size] = log(n/N) - sigma^2/2 (approximately).
    assert abs(np.mean(means) - (np.log(300) - sigma**2 / 2)) < 0.15


def test_quantity_skew_powerlaw_rank_sizes():
    data = toy_labels(50_000, 2)
    part = build_partition("quantity_skew", data, 20, law="powerlaw", exponent=1.5, min_size=0)
    ranked = np.sort(part.sizes)[::-1]
    expected = np.arange(1, 21) ** -1.5
    assert np.allclose(ranked / ranked[0], expected / expected[0], atol=2e-3)


def test_natural_id_gives_one_client_per_subject():
    watch = build_dataset("watch")
    part = build_partition("natural_id", watch, 10)
    assert_disjoint_cover(part, len(watch.y_train))
    subjects = [np.unique(watch.groups_train[ix]) for ix in part.indices]
    assert all(len(s) == 1 for s in subjects)
    assert sorted(int(s[0]) for s in subjects) == list(range(1, 11))
    assert part.domains == [f"id {s}" for s in sorted(str(i) for i in range(1, 11))]


def test_natural_id_errors_are_clear(digits):
    with pytest.raises(ValueError, match="has none"):
        build_partition("natural_id", digits, 10)
    with pytest.raises(ValueError, match="set num_clients: 10"):
        build_partition("natural_id", build_dataset("watch"), 4)


def test_label_partitioners_refuse_regression():
    diabetes = build_dataset("diabetes")
    for name in ("dirichlet", "pathological", "shard"):
        with pytest.raises(ValueError, match="class labels"):
            build_partition(name, diabetes, 4)
    part = build_partition("quantity_skew", diabetes, 4)
    assert_disjoint_cover(part, len(diabetes.y_train))

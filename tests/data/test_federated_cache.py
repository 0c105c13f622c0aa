"""The federated data cache: written once, memory-mapped, equal to a fresh build, invalidated."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import tiny_scenario

from flowerbed.core import registry
from flowerbed.core.scenario import from_dict
from flowerbed.data import federated, federated_cache


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FLOWERBED_CACHE", str(tmp_path))
    federated._CACHE.clear()
    yield tmp_path / "federated"
    federated._CACHE.clear()


def _fresh(scenario):
    federated._CACHE.clear()
    return federated.federated_data(scenario)


def test_second_process_reads_the_same_data_without_building_it(cache, monkeypatch):
    scenario = from_dict(tiny_scenario())
    built = federated._compute(scenario)  # no cache involved: the reference
    first = _fresh(scenario)
    assert len(list(cache.iterdir())) == 1

    def no_build(*args, **kwargs):
        raise AssertionError("the dataset was built again")

    monkeypatch.setattr(registry, "build", no_build)
    again = _fresh(scenario)
    assert isinstance(again.dataset.x_train, np.memmap)
    for pid in range(scenario.num_clients):
        for field in ("x_train", "y_train", "x_test", "y_test"):
            ref = getattr(built.client(pid), field)
            np.testing.assert_array_equal(getattr(again.client(pid), field), ref)
            np.testing.assert_array_equal(getattr(first.client(pid), field), ref)
    np.testing.assert_array_equal(again.dataset.x_test, built.dataset.x_test)
    assert again.dataset.meta == built.dataset.meta
    original = float(built.dataset.x_train[0, 0])
    again.dataset.x_train[0, 0] = original + 123.0  # copy-on-write: the file never changes
    assert float(_fresh(scenario).dataset.x_train[0, 0]) == original


def test_key_changes_with_settings_code_and_libraries(cache, monkeypatch):
    base = from_dict(tiny_scenario())
    key = federated_cache.cache_key(base, federated._key(base))
    other = from_dict(tiny_scenario(seed=4))
    assert federated_cache.cache_key(other, federated._key(other)) != key
    monkeypatch.setattr(federated_cache, "_versions", lambda: ["numpy=0"])
    assert federated_cache.cache_key(base, federated._key(base)) != key
    monkeypatch.undo()
    monkeypatch.setattr(federated_cache, "_source_hash", lambda obj: "edited")
    assert federated_cache.cache_key(base, federated._key(base)) != key


def test_transform_partitions_and_unregistered_components_are_not_cached(cache):
    from flowerbed.core.scenario import scenario_model

    shifted = from_dict(tiny_scenario(partition={"name": "domain_shift"}))
    _fresh(shifted)
    assert not cache.exists() or not list(cache.iterdir())

    @registry.register("dataset", "test_cache_local")
    def test_cache_local(params, *, seed):
        """A dataset defined in a test (its source may change under the same name)."""
        from flowerbed.data.base import Dataset, DatasetMeta

        rng = np.random.default_rng(seed)
        x = rng.normal(size=(40, 3)).astype(np.float32)
        y = (x[:, 0] > 0).astype(np.int64)
        return Dataset(x, y, x[:8], y[:8], DatasetMeta("test_cache_local", "classification", 3, 2))

    scenario_model.cache_clear()
    try:
        local = from_dict(tiny_scenario(dataset={"name": "test_cache_local"},
                                        partition={"name": "iid"}))
        _fresh(local)
        assert not cache.exists() or not list(cache.iterdir())
    finally:
        registry.unregister("dataset", "test_cache_local")
        scenario_model.cache_clear()


def test_an_edited_user_table_is_read_again(cache, tmp_path):
    import os

    table = tmp_path / "t.csv"
    rows = "\n".join(f"{i % 7},{(i * 3) % 5},{i % 2}" for i in range(60))
    table.write_text("a,b,label\n" + rows + "\n")
    scenario = from_dict(tiny_scenario(
        dataset={"name": "csv", "path": str(table), "target": "label"},
        partition={"name": "iid"}, model={"name": "linear"},
    ))
    first = _fresh(scenario)
    edited = rows.replace("0,0,0", "6,4,0", 1)
    assert edited != rows
    table.write_text("a,b,label\n" + edited + "\n")
    stat = table.stat()
    os.utime(table, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    again = _fresh(scenario)
    assert len(list(cache.iterdir())) == 2
    assert not np.array_equal(
        np.sort(first.dataset.x_train, axis=0), np.sort(again.dataset.x_train, axis=0)
    ) or not np.array_equal(np.sort(first.dataset.x_test, axis=0),
                            np.sort(again.dataset.x_test, axis=0))


def test_a_few_shot_partition_keeps_its_test_split_in_every_process(cache):
    """A partition subclass carries fields the cache does not store: rebuilt, never truncated."""
    from flowerbed.core.scenario import load_scenario
    from flowerbed.data.fewshot import FewShotPartition

    scenario = load_scenario("scenarios/fedspa/synthetic.yaml")
    built = federated._compute(scenario)
    assert isinstance(built.partition, FewShotPartition)
    for _ in range(2):  # the second call would read a stored copy, if one were written
        again = _fresh(scenario)
        assert isinstance(again.partition, FewShotPartition)
        for mine, ref in zip(again.partition.test_indices, built.partition.test_indices,
                             strict=True):
            np.testing.assert_array_equal(mine, ref)

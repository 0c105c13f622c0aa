"""Population scale: virtual clients give today's numbers; lazy data and sampling stay O(client).

References are independent of the code under test: the per-node mode as it
ran before virtual clients existed, numpy's own draw over an explicit list of
ids, partition ``natural_id``, and closed-form moments (Dirichlet shares,
the Synthetic(alpha, beta) generative model).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import tiny_scenario

import flowerbed
from flowerbed.core.scenario import ScenarioError, from_dict

GMM = {"name": "gaussian_mixture", "n_train": 6000, "n_test": 300, "dim": 8}


def population_scenario(n: int, engine: str, clients: str, **changes: Any) -> dict[str, Any]:
    """FedAvg with sampled cohorts, client evaluation and dropout: every per-client path."""
    return tiny_scenario(
        num_clients=n,
        rounds=2,
        dataset=GMM,
        partition={"name": "iid"},
        model={"name": "mlp", "hidden": [8]},
        strategy={"name": "fedavg", "fraction_train": min(1.0, 10 / n),
                  "fraction_evaluate": min(1.0, 5 / n)},
        engine={"name": engine, "clients": clients},
        clients={"local_test_fraction": 0.2, "availability": {"dropout": 0.2}},
        baselines=[],
        **changes,
    )


def comparable(result: Any) -> tuple[Any, list[dict[str, Any]]]:
    """Results and metric rows, without wall times and the connection event (which differ)."""
    rows = [
        {k: v for k, v in row.items() if k != "time_s"}
        for row in result.rows
        if row.get("event") not in ("connected", "client_table")
    ]
    return result.summary["results"], rows


def run_both(scenario: dict[str, Any], tmp_path: Path) -> tuple[Any, Any]:
    nodes = flowerbed.run({**scenario, "engine": {**scenario["engine"], "clients": "nodes"}},
                          output_dir=tmp_path / "nodes")
    virtual = flowerbed.run({**scenario, "engine": {**scenario["engine"], "clients": "virtual"}},
                            output_dir=tmp_path / "virtual")
    return nodes, virtual


def same_outputs(nodes: Any, virtual: Any) -> None:
    assert comparable(virtual) == comparable(nodes)
    for name in ("clients.json", "client_metrics.jsonl"):
        assert (virtual.run_dir / name).read_text() == (nodes.run_dir / name).read_text(), name


@pytest.mark.parametrize("n", [10, 100, 1000])
def test_virtual_clients_give_the_per_node_numbers_inline(n: int, tmp_path: Path) -> None:
    nodes, virtual = run_both(population_scenario(n, "inline", "nodes"), tmp_path)
    same_outputs(nodes, virtual)
    connected = [r for r in virtual.rows if r.get("event") == "connected"]
    assert connected[0]["worker_nodes"] == 1 and connected[0]["clients"] == n


@pytest.mark.parametrize("n", [10, 100])
def test_virtual_clients_give_the_per_node_numbers_in_simulation(n: int, tmp_path: Path) -> None:
    nodes, virtual = run_both(population_scenario(n, "simulation", "nodes"), tmp_path)
    same_outputs(nodes, virtual)


@pytest.mark.slow
def test_virtual_clients_give_the_per_node_numbers_in_simulation_at_1000(tmp_path: Path) -> None:
    nodes, virtual = run_both(population_scenario(1000, "simulation", "nodes"), tmp_path)
    same_outputs(nodes, virtual)


def test_one_shot_asks_match_per_node(tmp_path: Path) -> None:
    """``Federation.ask`` to a sampled cohort (strategy ``local``), both modes, inline."""
    scenario = tiny_scenario(
        num_clients=12, dataset=GMM, partition={"name": "iid"},
        learner={"name": "sklearn", "estimator": "linear"},
        strategy={"name": "local", "fraction": 0.5}, engine={"name": "inline"},
        baselines=["local_only"],
    )
    scenario.pop("model")
    nodes, virtual = run_both(scenario, tmp_path)
    assert comparable(virtual) == comparable(nodes)


def test_client_state_matches_per_node(tmp_path: Path) -> None:
    """SCAFFOLD's control variates (client-state folders keyed by partition id), both modes."""
    overrides = ["rounds=3", "learner.name=sgd_drift", "strategy={name: scaffold}",
                 "learner.momentum=0.0", "engine=inline"]
    path = "scenarios/baselines/strategies_digits.yaml"
    nodes = flowerbed.run(path, [*overrides, "engine.clients=nodes"], output_dir=tmp_path / "a")
    virtual = flowerbed.run(path, [*overrides, "engine.clients=virtual"], output_dir=tmp_path / "b")
    assert comparable(virtual) == comparable(nodes)
    states = [sorted(p.relative_to(r.run_dir) for p in (r.run_dir / "client_state").rglob("*"))
              for r in (nodes, virtual)]
    assert states[0] == states[1] and states[0]


def test_auto_picks_virtual_clients_above_1000_and_deployment_refuses_them() -> None:
    from flowerbed.core.population import flower_nodes, virtual_clients

    small = from_dict(population_scenario(1000, "inline", "auto"))
    large = from_dict(population_scenario(1001, "inline", "auto"))
    assert not virtual_clients(small) and flower_nodes(small) == 1000
    assert virtual_clients(large) and flower_nodes(large) == 1
    with pytest.raises(ScenarioError, match=r"engine\.clients=virtual"):
        from_dict(population_scenario(10, "deployment", "virtual"))


def test_a_million_clients_start_without_touching_them(tmp_path: Path) -> None:
    """One round of 10 clients of a million: only those are built; clients.json lists 100."""
    scenario = tiny_scenario(
        num_clients=10**6, rounds=1, dataset={"name": "synthetic_fedprox", "test_devices": 5},
        partition={"name": "devices"}, model={"name": "linear"},
        strategy={"name": "fedavg", "fraction_train": 1e-5, "fraction_evaluate": 0},
        learner={"name": "sgd", "lr": 0.01, "batch_size": 10, "local_epochs": 1},
        clients={"local_test_fraction": 0.0}, baselines=[],
    )
    started = time.perf_counter()
    result = flowerbed.run(scenario, output_dir=tmp_path)
    assert time.perf_counter() - started < 120
    assert len(json.loads((result.run_dir / "clients.json").read_text())) == 100
    replies = [r for r in result.rows if r.get("event") == "replies"]
    assert replies[0]["ok"] == 10


def test_sample_draws_the_cohort_numpy_draws_from_the_list_of_ids() -> None:
    """Same cohorts as ``choice(list_of_ids)`` (the former code), at any population."""
    from flowerbed.core.records import Recorder
    from flowerbed.core.seeds import derive_seed
    from flowerbed.strategies.federation import Federation

    for n in (10, 100, 1000, 20_000):
        scenario = from_dict(population_scenario(n, "inline", "virtual"))
        fed = Federation(None, scenario, Recorder(scenario, None))  # type: ignore[arg-type]
        fed.node_of = dict.fromkeys(range(n), 0)
        fed.virtual = False
        for r in (1, 2):
            gen = np.random.default_rng(derive_seed(scenario.seed, "sample", "train", r))
            k = max(1, round(0.05 * n))
            expected = sorted(int(p) for p in gen.choice(list(range(n)), size=k, replace=False))
            assert fed.sample(0.05, r) == expected


def test_sample_from_a_billion_clients_is_o_cohort() -> None:
    """No list of ids: a billion-client draw of 100 takes well under a second and 8 GB less."""
    from flowerbed.core.population import VIRTUAL_NODE_BASE
    from flowerbed.core.records import Recorder
    from flowerbed.strategies.federation import Federation, ShiftedIds

    scenario = from_dict(population_scenario(10**9, "inline", "virtual"))
    fed = Federation(None, scenario, Recorder(scenario, None))  # type: ignore[arg-type]
    fed.node_of = ShiftedIds(10**9, start=0, shift=VIRTUAL_NODE_BASE)
    started = time.perf_counter()
    cohort = fed.sample(1e-7, 1)
    assert time.perf_counter() - started < 1.0
    assert len(cohort) == 100 and len(set(cohort)) == 100 and max(cohort) < 10**9


def _labelled(n: int, classes: int, seed: int = 0) -> Any:
    from flowerbed.data.base import Dataset, DatasetMeta

    y = np.random.default_rng(seed).integers(0, classes, n)
    x = np.arange(n, dtype=np.float32)[:, None]
    return Dataset(x, y, x[:1], y[:1], DatasetMeta("toy", "classification", 1, classes))


def test_iid_draw_rows_are_uniform_distinct_and_do_not_depend_on_the_population() -> None:
    from scipy.stats import chisquare

    from flowerbed.data.lazy_partitioners import IidDrawParams, iid_draw

    data = _labelled(500, 5)
    params = IidDrawParams(rows_per_client=20)
    small = iid_draw(params, data, num_clients=10, seed=4)
    huge = iid_draw(params, data, num_clients=10**7, seed=4)
    assert np.array_equal(small.rows(7), huge.rows(7))
    counts = np.zeros(500)
    for pid in range(2000):
        rows = huge.rows(pid)
        assert len(rows) == 20 and len(np.unique(rows)) == 20
        counts[rows] += 1
    assert chisquare(counts).pvalue > 1e-3


def test_iid_draw_sizes_are_log_normal_around_rows_per_client() -> None:
    from flowerbed.data.lazy_partitioners import IidDrawParams, iid_draw

    part = iid_draw(IidDrawParams(rows_per_client=50, size_sigma=0.5), _labelled(10_000, 3),
                    num_clients=10**6, seed=1)
    logs = np.log([len(part.rows(p)) for p in range(3000)])
    assert abs(np.median(logs) - np.log(50)) < 0.05
    assert abs(np.std(logs) - 0.5) < 0.05


def test_dirichlet_draw_shares_have_the_dirichlet_multinomial_variance() -> None:
    """Var(count_c / n) = Var(p_c) + E[p_c (1 - p_c)] / n, with p ~ Dir(alpha 1_C)."""
    from flowerbed.data.lazy_partitioners import DirichletDrawParams, dirichlet_draw

    classes, alpha, n = 10, 0.5, 60
    data = _labelled(20_000, classes)
    part = dirichlet_draw(DirichletDrawParams(alpha=alpha, rows_per_client=n), data,
                          num_clients=10**6, seed=2)
    shares = np.array([np.bincount(data.y_train[part.rows(p)], minlength=classes) / n
                       for p in range(3000)])
    mean = 1 / classes
    var_p = mean * (1 - mean) / (classes * alpha + 1)
    expected = var_p + (mean - (var_p + mean**2)) / n
    assert np.allclose(shares.mean(axis=0), mean, atol=0.01)
    assert abs(shares.var(axis=0).mean() / expected - 1) < 0.08


def test_natural_id_index_gives_natural_id_clients(tmp_path: Path) -> None:
    """Same rows, local splits and domain names as partition ``natural_id``."""
    from flowerbed.data.base import Dataset
    from flowerbed.data.federated import FederatedData, _local_split
    from flowerbed.data.lazy_partitioners import NaturalIdIndexParams, natural_id_index
    from flowerbed.data.partitioners import NaturalIdParams, natural_id
    from flowerbed.data.population import LazyFederatedData

    base = _labelled(300, 3)
    groups = np.random.default_rng(5).choice(["b", "a", "c10", "c9", "z"], 300)
    data = Dataset(base.x_train, base.y_train, base.x_test, base.y_test, base.meta, groups)
    eager = natural_id(NaturalIdParams(), data, 5, seed=0)
    splits = [_local_split(ix, 0.25, 0, pid) for pid, ix in enumerate(eager.indices)]
    want = FederatedData(data, eager, [s[0] for s in splits], [s[1] for s in splits])
    lazy = natural_id_index(NaturalIdIndexParams(), data, 5, seed=0)
    got = LazyFederatedData(data, eager, [], [], source=lazy, num_clients=5, seed=0,
                            local_test_fraction=0.25)
    for pid in range(5):
        a, b = want.client(pid), got.client(pid)
        assert np.array_equal(a.x_train, b.x_train) and np.array_equal(a.y_test, b.y_test)
        assert a.extra == b.extra


def test_synthetic_fedprox_follows_its_generative_model() -> None:
    """Within a device x ~ N(v_k, diag(j^-1.2)); across devices v_kj ~ N(0, beta + 1)."""
    from flowerbed.data.synthetic_devices import SyntheticFedProxParams, synthetic_fedprox

    params = SyntheticFedProxParams(beta=4.0, size_sigma=0.0, size_mu=np.log(1999.5),
                                    min_size=1, test_devices=1)
    data = synthetic_fedprox(params, seed=0)
    x, y = data.device(3)
    assert len(y) == 2000  # floor(exp(size_mu)) + min_size with size_sigma = 0
    j = np.arange(1, 61)
    assert np.allclose(x.var(axis=0) / j**-1.2, 1, atol=0.12)
    means = np.array([data.device(k)[0][:, 0].mean() for k in range(400)])
    assert abs(means.var() / (4.0 + 1.0) - 1) < 0.2
    assert set(np.unique(y)) <= set(range(10))


def test_synthetic_fedprox_sizes_are_floor_exp_plus_min_size() -> None:
    from flowerbed.data.synthetic_devices import SyntheticFedProxParams, synthetic_fedprox

    data = synthetic_fedprox(SyntheticFedProxParams(test_devices=1), seed=1)
    sizes = np.array([len(data.device(k)[1]) for k in range(3000)])
    assert sizes.min() >= 50
    logs = np.log(sizes - 50 + 0.5)  # floor() loses at most 1: the half keeps logs finite
    assert abs(np.median(logs) - 4.0) < 0.15 and abs(logs.std() - 2.0) < 0.15


def test_a_device_dataset_needs_partition_devices() -> None:
    scenario = population_scenario(10, "inline", "auto")
    scenario["dataset"] = {"name": "synthetic_fedprox"}
    with pytest.raises(ScenarioError, match=r"partition: \{name: devices\}"):
        from_dict(scenario)


def test_as_client_names_the_partition_and_leaves_the_message_alone() -> None:
    from flwr.app import ConfigRecord, Context, Message, RecordDict
    from flwr.supercore.task_identity import TaskIdentity

    from flowerbed.clients.virtual import as_client
    from flowerbed.core import keys

    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, 1
    content = RecordDict({
        keys.CONFIG: ConfigRecord({"a": 1}),
        keys.VIRTUAL_CLIENT: ConfigRecord({keys.PARTITION_ID: 41, keys.NUM_PARTITIONS: 10**6}),
    })
    msg = Message(content, dst_node_id=7, message_type="train")
    node = Context(run_id=1, node_id=7, node_config={keys.PARTITION_ID: 0}, state=RecordDict(),
                   run_config={})
    client_msg, ctx = as_client(msg, node)
    assert ctx.node_config[keys.PARTITION_ID] == 41 and ctx.state is node.state
    assert list(client_msg.content) == [keys.CONFIG]
    assert keys.VIRTUAL_CLIENT in msg.content
    assert client_msg.metadata is msg.metadata

"""The trunk for client-local and centralized methods.

Strategy ``local``, capability-checked baselines, the pooled virtual client and
per-client persistent state. References are independent of the code under
test: scikit-learn fitted directly on each client's rows, means and standard
deviations computed here with numpy, and hand-written state files.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import tiny_scenario

import flowerbed
from flowerbed.clients.learner import Learner, TaskContext
from flowerbed.clients.state import ClientState
from flowerbed.core import keys, registry
from flowerbed.core.messages import Payload
from flowerbed.core.scenario import ScenarioError, from_dict
from flowerbed.data.base import ClientData
from flowerbed.data.federated import federated_data
from flowerbed.platform.cli import main


def _local(**changes):
    """Per-client logistic regression on digits as a local task, 4 clients."""
    base = {
        "name": "tiny_local",
        "learner": {"name": "sklearn", "estimator": "linear"},
        "strategy": {"name": "local"},
        "baselines": ["centralized", "local_only"],
        "partition": {"name": "dirichlet", "alpha": 0.5},
    }
    base.update(changes)
    scenario = tiny_scenario(**base)
    scenario.pop("model")
    return scenario


def _sklearn_reference(x_train, y_train, x_test, y_test) -> float:
    from sklearn.linear_model import LogisticRegression

    model = LogisticRegression(C=1.0, max_iter=1000).fit(x_train, y_train)
    return float(np.mean(model.predict(x_test) == y_test))


def test_local_strategy_and_baselines_match_sklearn_on_each_client(tmp_path):
    result = flowerbed.run(_local(), output_dir=tmp_path)
    scenario = from_dict(_local())
    fed = federated_data(scenario)
    accs, sizes = [], []
    for pid in range(scenario.num_clients):
        c = fed.client(pid)
        accs.append(_sklearn_reference(c.x_train, c.y_train, c.x_test, c.y_test))
        sizes.append(len(c.y_test))
    res = result.summary["results"]
    local = res["federated"]
    assert local["test/accuracy"] == pytest.approx(np.average(accs, weights=sizes), abs=1e-12)
    assert local["test/accuracy_mean"] == pytest.approx(np.mean(accs), abs=1e-12)
    assert local["test/accuracy_std"] == pytest.approx(np.std(accs), abs=1e-12)
    assert local["test/accuracy_min"] == min(accs) and local["test/accuracy_max"] == max(accs)
    # local_only is the local strategy's per-client results, computed once
    assert res["local_only"] == local
    assert sum(1 for r in result.rows if r.get("event") == "replies") == 1
    # centralized: one virtual client holding every client's train and test rows
    x_tr = np.concatenate([fed.client(p).x_train for p in range(4)])
    y_tr = np.concatenate([fed.client(p).y_train for p in range(4)])
    x_te = np.concatenate([fed.client(p).x_test for p in range(4)])
    y_te = np.concatenate([fed.client(p).y_test for p in range(4)])
    central = _sklearn_reference(x_tr, y_tr, x_te, y_te)
    assert res["centralized"]["test/accuracy"] == pytest.approx(central, abs=1e-12)
    rows = [r for r in _jsonl(result.run_dir / "client_metrics.jsonl")]
    assert [r["client"] for r in rows] == [0, 1, 2, 3]
    assert all(r["phase"] == keys.LOCAL_TASK for r in rows)
    assert [r["metrics"]["accuracy"] for r in rows] == pytest.approx(accs, abs=1e-12)


def _jsonl(path: Path) -> list[dict]:
    import json

    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_fraction_runs_a_seeded_cohort(tmp_path):
    one = flowerbed.run(_local(strategy={"name": "local", "fraction": 0.5}, baselines=[]),
                        save=False)
    two = flowerbed.run(_local(strategy={"name": "local", "fraction": 0.5}, baselines=[]),
                        save=False)
    rows = [r for r in one.rows if r.get("event") == "replies"]
    assert rows[0]["ok"] == 2
    assert one.final() == two.final()


def test_pooled_client_holds_every_clients_rows():
    fed = federated_data(from_dict(_local()))
    pooled = fed.pooled_client()
    n_train = sum(fed.client(p).num_train for p in range(4))
    n_test = sum(len(fed.client(p).y_test) for p in range(4))
    assert pooled.partition_id == -1
    assert (pooled.num_train, len(pooled.y_test)) == (n_train, n_test)
    assert sorted(pooled.y_test.tolist()) == sorted(
        np.concatenate([fed.client(p).y_test for p in range(4)]).tolist()
    )


def test_dual_learner_is_a_local_task_only_under_the_local_strategy(tmp_path):
    """self_distill_ridge has weights and run_local: baselines follow the strategy."""
    from flowerbed.methods.self_distill.learner import SelfDistillRidgeLearner

    common = {
        "name": "sd_local",
        "dataset": {"name": "synthetic_ridge", "n_train": 400, "n_test": 200,
                    "num_features": 20},
        "partition": {"name": "iid"},
        "learner": {"name": "self_distill_ridge", "lambdas": [0.1]},
        "baselines": ["centralized", "local_only"],
        "rounds": 1,
    }
    local = flowerbed.run(_strip_model(tiny_scenario(**common, strategy={"name": "local"})),
                          save=False).summary["results"]
    scenario = from_dict(_strip_model(tiny_scenario(**common, strategy={"name": "local"})))
    fed = federated_data(scenario)
    learner = SelfDistillRidgeLearner(scenario.component("learner"), scenario=scenario)
    pooled = fed.pooled_client()
    arrays, _ = learner.fit({}, pooled.x_train, pooled.y_train, pooled.meta, 0)
    ref = learner.score(arrays, pooled.x_test, pooled.y_test, pooled.meta)
    assert local["centralized"]["test/sd_mse@0.1"] == pytest.approx(ref["sd_mse@0.1"])
    assert local["local_only"] == local["federated"]
    averaged = flowerbed.run(
        _strip_model(tiny_scenario(**common, strategy={"name": "oneshot_average"})), save=False
    ).summary["results"]
    # under a weight-averaging strategy, centralized is scored on the global test split
    x, y = fed.pooled_train()
    arrays, _ = learner.fit({}, x, y, fed.dataset.meta, 0)
    glob = learner.score(arrays, fed.dataset.x_test, fed.dataset.y_test, fed.dataset.meta)
    assert averaged["centralized"]["test/sd_mse@0.1"] == pytest.approx(glob["sd_mse@0.1"])


def _strip_model(scenario: dict) -> dict:
    scenario.pop("model", None)
    return scenario


# --- validation by capability -------------------------------------------------


def test_baseline_without_the_capability_is_refused_at_validation(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    import yaml

    bad = tiny_scenario(
        learner={"name": "fqr_local"}, strategy={"name": "fqr"}, baselines=["local_only"],
        dataset={"name": "synthetic_quantile", "num_features": 4}, partition={"name": "iid"},
    )
    bad.pop("model")
    path.write_text(yaml.safe_dump(bad))
    assert main(["validate", str(path)]) == 1
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if "baselines[0]" in ln]
    assert len(lines) == 1
    assert "'local_only'" in lines[0] and "'fqr_local'" in lines[0]


def test_local_strategy_needs_a_local_task():
    with pytest.raises(ScenarioError) as info:
        from_dict(tiny_scenario(strategy={"name": "local"}, baselines=[]))
    assert info.value.problems == [
        "strategy: strategy 'local' needs a learner with a local task (run_local); "
        "learner 'sgd' has none of them"
    ]


def test_capabilities_follow_the_methods_a_learner_defines():
    class Weights(Learner):
        def train(self, data, payload, ctx):  # pragma: no cover - never called
            raise NotImplementedError

    class Task(Learner):
        def run_local(self, data, ctx):  # pragma: no cover - never called
            raise NotImplementedError

    assert registry.LOCAL_TASK not in Weights.capabilities()
    assert "train.default" in Weights.capabilities()
    assert {registry.LOCAL_TASK, keys.LOCAL_TASK} <= Task.capabilities()
    assert registry.SUPERVISED not in Task.capabilities()


# --- per-client state ---------------------------------------------------------


def test_state_is_atomic_and_named_per_client(tmp_path):
    state = ClientState(tmp_path / "client_3" / "m")
    assert state.load_array("w") is None and state.get("k", 7) == 7
    state.save_array("w", np.arange(4.0))
    state.put("k", {"round": 2})
    assert sorted(p.name for p in state.path.iterdir()) == ["k.json", "w.npy"]
    np.testing.assert_array_equal(np.load(state.path / "w.npy"), np.arange(4.0))
    with pytest.raises(ValueError, match="client state"):
        state.save_array("../escape", np.zeros(1))
    ctx = TaskContext(from_dict(tiny_scenario()), 3, 1, 0, state_root=tmp_path)
    assert ctx.client_state("m").path == state.path
    with pytest.raises(RuntimeError, match="no client state folder"):
        TaskContext(from_dict(tiny_scenario()), 3, 1, 0).client_state("m")


class _Counter(Learner):
    """A local task counting its own runs in its client state (a test double)."""

    def run_local(self, data: ClientData, ctx: TaskContext) -> Payload:
        state = ctx.client_state("counter")
        runs = int(state.get("runs", 0)) + 1
        state.put("runs", runs)
        return Payload(metrics={"runs": float(runs)}, num_examples=data.num_train)


@pytest.fixture
def counter():
    from flowerbed.core.scenario import scenario_model

    registry.register("learner", "test_counter")(_Counter)
    scenario_model.cache_clear()  # the schema's unions are built from the registry
    yield
    registry.unregister("learner", "test_counter")
    scenario_model.cache_clear()


def test_state_lives_in_the_run_folder_and_survives_a_new_worker(tmp_path, counter):
    from flowerbed.clients import client_app

    result = flowerbed.run(_local(learner={"name": "test_counter"}, baselines=[]),
                           output_dir=tmp_path)
    root = result.run_dir / "client_state"
    assert sorted(p.name for p in root.iterdir()) == [f"client_{i}" for i in range(4)]
    assert (root / "client_2" / "counter" / "runs.json").read_text() == "1"
    # a new process (cleared caches) finds the state and continues from it
    client_app._learner.cache_clear()
    scenario = from_dict(_local(learner={"name": "test_counter"}, baselines=[]))
    ctx = TaskContext(scenario, 2, 2, 0, state_root=root)
    reply = _Counter(scenario.component("learner"), scenario=scenario).run_local(
        federated_data(scenario).client(2), ctx)
    assert reply.metrics["runs"] == 2.0


def test_keep_state_false_deletes_it_and_memory_runs_leave_nothing(tmp_path, counter,
                                                                   monkeypatch):
    import tempfile

    result = flowerbed.run(
        _local(learner={"name": "test_counter"}, baselines=[]),
        ["clients.keep_state=false"], output_dir=tmp_path,
    )
    assert not (result.run_dir / "client_state").exists()
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    flowerbed.run(_local(learner={"name": "test_counter"}, baselines=[]), save=False)
    assert list(scratch.iterdir()) == []


def test_node_state_dir_wins_and_deployment_defaults_to_the_cache(tmp_path, monkeypatch):
    from flowerbed.clients.client_app import state_root

    config = {keys.STATE_DIR: "/server/run/client_state", keys.RUN_NAME: "s/r1"}
    assert state_root(config, {}, "simulation") == "/server/run/client_state"
    assert state_root(config, {keys.NODE_STATE_DIR: str(tmp_path)}, "deployment") == str(
        tmp_path / "s" / "r1"
    )
    monkeypatch.setenv("FLOWERBED_CACHE", str(tmp_path / "cache"))
    assert state_root(config, {}, "deployment") == str(tmp_path / "cache/client_state/s/r1")


@pytest.mark.slow
@pytest.mark.ray
def test_local_task_simulation_matches_inline(tmp_path):
    ray = ["engine.name=simulation", "engine.ray_num_cpus=2", "engine.client_resources.num_cpus=1"]
    inline = flowerbed.run(_local(), save=False).summary["results"]
    sim = flowerbed.run(_local(), ray, save=False).summary["results"]
    assert sim == inline

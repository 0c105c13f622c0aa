"""Flower's FedXgbBagging / FedXgbCyclic on learner ``xgboost`` (federated XGBoost)."""

from __future__ import annotations

import importlib.util
import json
import random
from typing import Any

import numpy as np
import pytest

xgb = pytest.importorskip(
    "xgboost", reason="needs the xgboost extra: pip install 'flowerbed[xgboost]'"
)

import flowerbed  # noqa: E402
from flowerbed.clients.xgboost_learner import XGBoostLearner  # noqa: E402
from flowerbed.core.scenario import ScenarioError, validate_scenario  # noqa: E402
from flowerbed.core.seeds import derive_seed  # noqa: E402
from flowerbed.data.sklearn_data import SplitParams, breast_cancer, diabetes, iris  # noqa: E402


def xgb_scenario(**changes: Any) -> dict[str, Any]:
    """Breast cancer over 3 IID clients, 2 rounds of bagging, no baselines."""
    base: dict[str, Any] = {
        "name": "tiny_xgb", "seed": 3, "num_clients": 3, "rounds": 2,
        "dataset": {"name": "breast_cancer"}, "partition": {"name": "iid"},
        "learner": {"name": "xgboost", "max_depth": 3},
        "strategy": {"name": "fedxgb_bagging", "fraction_evaluate": 0.0},
        "engine": {"name": "inline"}, "baselines": [],
    }  # fmt: skip
    base.update(changes)
    return base


def trees(arrays: dict[str, np.ndarray]) -> list[dict[str, Any]]:
    """The tree dicts of a booster's JSON bytes, without their position ``id``."""
    if arrays["0"].size == 0:
        return []
    model = json.loads(arrays["0"].tobytes())["learner"]["gradient_booster"]["model"]
    assert int(model["gbtree_model_param"]["num_trees"]) == len(model["trees"])
    return [{k: v for k, v in t.items() if k != "id"} for t in model["trees"]]


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[Any]]:
    """Records every train message (round, client, model in, reply) and every server score."""
    seen: dict[str, list[Any]] = {"train": [], "score": []}
    train, score = XGBoostLearner.train, XGBoostLearner.score

    def spy_train(self, data, payload, ctx):
        reply = train(self, data, payload, ctx)
        seen["train"].append((ctx.server_round, ctx.partition_id, payload.arrays, reply.arrays))
        return reply

    def spy_score(self, arrays, x, y, meta):
        seen["score"].append(arrays)
        return score(self, arrays, x, y, meta)

    monkeypatch.setattr(XGBoostLearner, "train", spy_train)
    monkeypatch.setattr(XGBoostLearner, "score", spy_score)
    return seen


# --- the strategies ---------------------------------------------------------------------


def test_bagging_aggregate_is_the_global_trees_then_every_clients_new_tree(spy):
    """Each round the global booster is last round's trees plus each reply's, in client order."""
    flowerbed.run(xgb_scenario(), save=False)
    # Server scores: round 0 (empty), 1, 2 (fraction_evaluate 0: no client scores).
    assert len(spy["score"]) == 3 and trees(spy["score"][0]) == []
    for r in (1, 2):
        replies = sorted((pid, out) for rnd, pid, _, out in spy["train"] if rnd == r)
        assert [pid for pid, _ in replies] == [0, 1, 2]
        new = [t for _, out in replies for t in trees(out)]
        assert len(new) == 3  # one boosting round, one tree, per client
        glob = trees(spy["score"][r])
        assert glob == trees(spy["score"][r - 1]) + new
        assert len(glob) == 3 * r
        # Every client of the round was sent the previous global booster.
        assert all(trees(sent) == trees(spy["score"][r - 1])
                   for rnd, _, sent, _ in spy["train"] if rnd == r)  # fmt: skip


def test_cyclic_passes_the_booster_round_robin_in_flowers_sampling_order(spy):
    """Round r trains ``order[(r-1) % n]``, ``order`` being Flower's seeded first sample."""
    scenario = xgb_scenario(rounds=6, strategy={"name": "fedxgb_cyclic"})
    flowerbed.run(scenario, save=False)
    seed = validate_scenario(scenario).seed
    with_seed = random.Random(derive_seed(seed, "sample", "train", 1))
    order = with_seed.sample(range(3), 3)  # sample_nodes: random.sample(all nodes, n)
    assert [(rnd, pid) for rnd, pid, _, _ in spy["train"]] == [
        (r, order[(r - 1) % 3]) for r in range(1, 7)
    ]
    for (_, _, sent, out), previous in zip(spy["train"], [None, *spy["train"]], strict=False):
        # The client gets the last client's whole booster and adds one tree to it.
        before = [] if previous is None else trees(previous[3])
        assert (
            trees(sent) == before
            and trees(out)[:-1] == before
            and len(trees(out)) == len(before) + 1
        )


def test_the_learner_predicts_as_xgboost_itself():
    """``fit``/``score`` against ``xgb.train`` + ``Booster.predict`` with the same parameters."""
    from sklearn import metrics

    for build, objective in ((breast_cancer, "binary:logistic"), (iris, "multi:softprob"),
                             (diabetes, "reg:squarederror")):  # fmt: skip
        data = build(SplitParams(), seed=0)
        meta = data.meta
        scenario = validate_scenario(xgb_scenario(dataset={"name": meta.name}))
        learner = XGBoostLearner(scenario.learner, scenario=scenario)
        arrays, _ = learner.fit(learner.init_arrays(meta, 0), data.x_train, data.y_train,
                                meta, seed=11, epochs=4)  # fmt: skip
        got = learner.score(arrays, data.x_test, data.y_test, meta)
        params = {"objective": objective, "eta": 0.1, "max_depth": 3, "subsample": 1.0,
                  "tree_method": "hist", "nthread": 1, "seed": 11}  # fmt: skip
        if objective.startswith("multi"):
            params["num_class"] = 3
        ref = xgb.train(params, xgb.DMatrix(data.x_train, label=data.y_train), 4)
        pred = ref.predict(xgb.DMatrix(data.x_test))
        mine = xgb.Booster(model_file=bytearray(arrays["0"].tobytes()))
        np.testing.assert_array_equal(mine.predict(xgb.DMatrix(data.x_test)), pred)
        if objective == "reg:squarederror":
            assert got["loss"] == pytest.approx(metrics.mean_squared_error(data.y_test, pred))
            continue
        proba = pred if pred.ndim == 2 else np.stack([1 - pred, pred], axis=1)
        assert got["accuracy"] == pytest.approx(np.mean(proba.argmax(1) == data.y_test))
        assert got["loss"] == pytest.approx(metrics.log_loss(data.y_test, proba))
        if objective == "binary:logistic":
            assert got["auc"] == pytest.approx(metrics.roc_auc_score(data.y_test, pred))


def test_boosting_on_a_received_booster_is_xgboosts_continued_training_seeded():
    """Two more rounds on a received booster = Flower's example client; the seed decides rows."""
    data = breast_cancer(SplitParams(), seed=0)
    scenario = validate_scenario(
        xgb_scenario(learner={"name": "xgboost", "max_depth": 3, "subsample": 0.5})
    )
    learner = XGBoostLearner(scenario.learner, scenario=scenario)
    start, _ = learner.fit(learner.init_arrays(data.meta, 0), data.x_train, data.y_train,
                           data.meta, seed=5, epochs=2)  # fmt: skip
    more, _ = learner.fit(start, data.x_train, data.y_train, data.meta, seed=7, epochs=2)
    params = {"objective": "binary:logistic", "eta": 0.1, "max_depth": 3, "subsample": 0.5,
              "tree_method": "hist", "nthread": 1}  # fmt: skip
    dtrain = xgb.DMatrix(data.x_train, label=data.y_train)
    first = xgb.train({**params, "seed": 5}, dtrain, 2)
    assert trees(start) == trees({"0": np.frombuffer(first.save_raw("json"), np.uint8)})
    # Flower's XGBoost examples' client: load the global booster, then ``update`` per round.
    ref = xgb.Booster(params={**params, "seed": 7})
    ref.load_model(bytearray(start["0"].tobytes()))
    for _ in range(2):
        ref.update(dtrain, ref.num_boosted_rounds())
    got = xgb.Booster(model_file=bytearray(more["0"].tobytes()))
    assert got.num_boosted_rounds() == 4 and trees(more)[:2] == trees(start)
    dtest = xgb.DMatrix(data.x_test)
    np.testing.assert_allclose(got.predict(dtest), ref.predict(dtest), rtol=1e-6)
    again, _ = learner.fit(start, data.x_train, data.y_train, data.meta, seed=7, epochs=2)
    other, _ = learner.fit(start, data.x_train, data.y_train, data.meta, seed=8, epochs=2)
    assert trees(again) == trees(more) and trees(other) != trees(more)


@pytest.mark.parametrize("strategy", ["fedxgb_bagging", "fedxgb_cyclic"])
def test_a_short_run_beats_the_majority_class(strategy):
    """Five rounds on breast cancer against always predicting the commoner test class."""
    scenario = xgb_scenario(rounds=5, strategy={"name": strategy})
    result = flowerbed.run(scenario, save=False)
    y = breast_cancer(SplitParams(), seed=3).y_test
    majority = max(np.mean(y == 0), np.mean(y == 1))
    final = result.final("federated")
    assert final["test/accuracy"] > majority + 0.15, (final, majority)
    assert final["test/auc"] > 0.9
    seen = [r["round"] for r in result.rows if "server_eval/test/accuracy" in r]
    assert seen == [1, 2, 3, 4, 5]


@pytest.mark.slow
@pytest.mark.ray
def test_inline_and_simulation_give_identical_numbers(tmp_path):
    """Both strategies in one Flower simulation sweep, against the same runs inline."""
    from flowerbed.platform import sweep as sw

    blocks = [{"name": "fedxgb_bagging"}, {"name": "fedxgb_cyclic"}]
    engine = {"name": "simulation", "ray_num_cpus": 1, "client_resources": {"num_cpus": 1}}
    base = xgb_scenario(rounds=3, engine=engine, baselines=["centralized"])
    plan = sw.expand({**base, "sweep": {"name": "xgb", "strategy": blocks}})
    swept = sw.run_sweep(plan, tmp_path)
    assert swept.count("failed") == 0
    for point, block in zip(swept.points, blocks, strict=True):
        inline = flowerbed.run(xgb_scenario(rounds=3, strategy=block,
                                            baselines=["centralized"]), save=False)  # fmt: skip
        assert point.summary is not None
        assert point.summary["results"] == inline.summary["results"], block["name"]


# --- validation -----------------------------------------------------------------------------


def problems(**changes: Any) -> list[str]:
    with pytest.raises(ScenarioError) as info:
        validate_scenario(xgb_scenario(**changes))
    return list(info.value.problems)


def test_without_xgboost_validation_is_one_line_naming_the_extra(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "xgboost" else real(name, *a)
    )
    (line,) = problems()
    assert line.startswith("learner.name: learner 'xgboost' needs the xgboost package")
    assert line.endswith("pip install 'flowerbed[xgboost]'") and "\n" not in line


def test_mismatched_learner_rounds_and_cohorts_are_named():
    found = problems(learner={"name": "sklearn"})
    assert (
        "strategy.name: fedxgb_bagging aggregates XGBoost boosters; it needs learner "
        "xgboost, not 'sklearn'" in found
    )
    (line,) = problems(learner={"name": "xgboost", "num_local_round": 2})
    assert "learner.num_local_round=2" in line and line.startswith("strategy.name:")
    (line,) = problems(strategy={"name": "fedxgb_cyclic", "fraction_evaluate": 0.5})
    assert line.startswith("strategy.fraction_evaluate") and "0 or 1" in line
    found = problems(num_clients=1, strategy={"name": "fedxgb_cyclic"})
    assert any("samples 2 clients or more" in p for p in found)


def test_bagging_refuses_more_than_two_classes():
    """Flower's ``aggregate_bagging`` appends one tree per reply, for class 0; cyclic is fine."""
    from flowerbed.platform.runner import RunError

    with pytest.raises(RunError, match="cannot aggregate a booster of one tree per class"):
        flowerbed.run(xgb_scenario(dataset={"name": "iris"}), save=False)
    cyclic = flowerbed.run(
        xgb_scenario(dataset={"name": "iris"}, rounds=3, strategy={"name": "fedxgb_cyclic"}),
        save=False,
    )
    assert cyclic.final("federated")["test/accuracy"] > 0.5


def test_label_skew_leaves_client_metrics_aggregatable(tmp_path):
    """A client holding one class has no AUC: client replies leave it out, the server keeps it."""
    import flowerbed

    scenario = {
        "name": "xgb_skew", "seed": 3, "num_clients": 4, "rounds": 2,
        "dataset": {"name": "breast_cancer"}, "partition": {"name": "dirichlet", "alpha": 0.1},
        "learner": {"name": "xgboost"}, "strategy": {"name": "fedxgb_bagging"},
        "engine": "inline",
    }
    result = flowerbed.run(scenario, save=False)
    assert "test/auc" in result.final()
    assert not [r for r in result.rows if r.get("failed", 0)]

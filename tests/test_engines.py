"""End-to-end runs on the inline engine: results, determinism, faults, baselines."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import tiny_scenario

import flowerbed
from flowerbed.platform.results import load_result
from flowerbed.platform.runner import RunError

RUN_FILES = {
    "scenario.resolved.yaml",
    "metrics.jsonl",
    "client_metrics.jsonl",
    "summary.json",
    "clients.json",
    "run.log",
}


def test_inline_run_writes_every_result_file(tmp_path):
    result = flowerbed.run(tiny_scenario(), output_dir=tmp_path)
    assert result.run_dir is not None and result.run_dir.parent == tmp_path / "tiny"
    assert RUN_FILES <= {p.name for p in result.run_dir.iterdir()}
    summary = json.loads((result.run_dir / "summary.json").read_text())
    assert set(summary["results"]) == {"federated", "centralized"}
    assert summary["seed"] == 3 and summary["versions"]["flwr"].startswith("1.42")
    rows = [json.loads(x) for x in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    names = {k for r in rows for k in r if k.count("/") == 2}
    assert {
        "train/train/loss",
        "server_eval/test/accuracy",
        "evaluate/local_test/accuracy",
    } <= names
    assert {r["round"] for r in rows if r.get("phase") == "server_eval"} == {0, 1, 2}
    clients = json.loads((result.run_dir / "clients.json").read_text())
    assert sum(c["num_train"] + c["num_test"] for c in clients) == 1347  # digits train split
    assert load_result(result.run_dir).summary == result.summary


def test_learning_happens_and_beats_chance(tmp_path):
    result = flowerbed.run(tiny_scenario(rounds=3), save=False)
    assert result.final()["test/accuracy"] > 0.6  # 10 classes: chance is 0.1


def test_same_scenario_twice_gives_identical_metrics():
    a = flowerbed.run(tiny_scenario(), save=False).summary["results"]
    b = flowerbed.run(tiny_scenario(), save=False).summary["results"]
    assert a == b
    c = flowerbed.run(tiny_scenario(seed=4), save=False).summary["results"]
    assert c != a


def test_client_that_raises_is_named_and_round_completes():
    learner = {"name": "faulty_sgd", "fail_clients": [2], "fault": "raise"}
    result = flowerbed.run(tiny_scenario(learner=learner), save=False)
    reply_rows = [r for r in result.rows if r.get("event") == "replies" and r["phase"] == "train"]
    assert len(reply_rows) == 2  # both rounds ran
    for row in reply_rows:
        assert row["ok"] == 3 and row["failed"] == 1
        assert "injected fault on client 2" in row["failed_clients"]["2"]
    start = next(r for r in result.rows if r.get("phase") == "server_eval" and r["round"] == 0)
    assert result.final()["test/accuracy"] > start["server_eval/test/accuracy"]


@pytest.mark.parametrize("fault", ["nan", "inf", "wrong_shape", "wrong_dtype", "none"])
def test_bad_replies_are_rejected_with_reason(fault):
    learner = {"name": "faulty_sgd", "fail_clients": [0], "fault": fault, "fail_rounds": [1]}
    result = flowerbed.run(tiny_scenario(learner=learner), save=False)
    row = next(r for r in result.rows if r.get("event") == "replies" and r["phase"] == "train")
    assert row["failed"] == 1 and set(row["failed_clients"]) == {"0"}
    assert np.isfinite(result.final()["test/loss"])


def test_too_few_replies_stops_the_run_and_keeps_finished_rounds(tmp_path):
    learner = {
        "name": "faulty_sgd",
        "fail_clients": [0, 1, 2],
        "fault": "raise",
        "fail_rounds": [2],
    }
    data = tiny_scenario(learner=learner, federation={"min_replies": 0.5})
    with pytest.raises(RunError, match="need 2") as info:
        flowerbed.run(data, output_dir=tmp_path)
    run_dir = info.value.run_dir
    assert run_dir is not None and not (run_dir / "summary.json").exists()
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert any(r.get("phase") == "server_eval" and r["round"] == 1 for r in rows)
    assert rows[-1]["event"] == "run_failed"


def test_centralized_baseline_matches_scikit_learn_logistic_regression():
    """Centralized = logistic regression on pooled client data, checked against scikit-learn.

    SGD with weight decay ``wd`` on the mean cross-entropy minimises
    ``CE_mean + wd/2 ||W||^2``; scikit-learn's ``C`` gives ``CE_mean + ||W||^2 / (2 C n)``,
    so ``C = 1 / (wd n)`` is the same objective (up to torch also shrinking the bias).
    """
    from sklearn.linear_model import LogisticRegression

    from flowerbed.core.scenario import from_dict
    from flowerbed.data.federated import federated_data

    wd = 1e-3
    data = tiny_scenario(
        model="linear",
        learner={"name": "sgd", "lr": 0.05, "batch_size": 64, "momentum": 0.9, "weight_decay": wd},
        baselines=[{"name": "centralized", "epochs": 150}],
        rounds=1,
    )
    result = flowerbed.run(data, save=False)
    fd = federated_data(from_dict(data))
    x, y = fd.pooled_train()
    ref = LogisticRegression(C=1 / (wd * len(y)), max_iter=5000).fit(x, y)
    ref_acc = ref.score(fd.dataset.x_test, fd.dataset.y_test)
    ours = result.final("centralized")["test/accuracy"]
    assert abs(ours - ref_acc) < 0.02, (ours, ref_acc)


def test_local_only_is_worse_than_centralized_under_label_skew():
    data = tiny_scenario(
        partition={"name": "dirichlet", "alpha": 0.1}, baselines=["centralized", "local_only"]
    )
    res = flowerbed.run(data, save=False).summary["results"]
    assert res["local_only"]["test/accuracy"] < res["centralized"]["test/accuracy"]
    assert res["local_only"]["test/accuracy_min"] <= res["local_only"]["test/accuracy"]


def test_availability_profile_drops_clients_in_virtual_time():
    """Dropped clients are never asked; the same (seed, round) drops the same clients."""
    from flowerbed.core.availability import AvailabilityParams, round_availability

    profile = {"dropout": 0.5}
    data = tiny_scenario(clients={"availability": profile}, federation={"min_replies": 0.25})
    result = flowerbed.run(data, save=False)
    rows = [r for r in result.rows if r.get("event") == "replies" and r["phase"] == "train"]
    params = AvailabilityParams(**profile)
    for row in rows:
        expected = round_availability(params, 3, row["round"], range(4))
        assert row["dropped_clients"] == list(expected.dropped)
        assert row["ok"] == len(expected.on_time)
        assert sorted(row["missing_clients"]) == sorted(expected.dropped)
    assert any(r["dropped_clients"] for r in rows)


def test_sgd_learner_uses_cpu_unless_gpus_are_reserved_and_visible(monkeypatch):
    import torch

    from flowerbed.core import registry
    from flowerbed.core.scenario import from_dict

    def learner(num_gpus):
        s = from_dict(
            tiny_scenario(engine={"name": "inline", "client_resources": {"num_gpus": num_gpus}})
        )
        return registry.build("learner", s.learner, scenario=s)

    assert learner(0).device().type == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert learner(0.5).device().type == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert learner(0.5).device().type == "cuda"
    assert learner(0).device().type == "cpu"


def test_each_clients_metrics_are_kept_and_match_the_aggregate(tmp_path):
    """``client_metrics.jsonl``: one row per client and phase; the example-weighted mean of
    the clients' evaluate accuracies is the aggregate ``metrics.jsonl`` reports."""
    result = flowerbed.run(tiny_scenario(baselines=[]), output_dir=tmp_path)
    assert result.run_dir is not None
    per_client = [
        json.loads(x) for x in (result.run_dir / "client_metrics.jsonl").read_text().splitlines()
    ]
    rows = [json.loads(x) for x in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    for rnd in (1, 2):
        train = [r for r in per_client if r["round"] == rnd and r["phase"] == "train"]
        assert sorted(r["client"] for r in train) == [0, 1, 2, 3]
        assert all(r["num_examples"] > 0 and "loss" in r["metrics"] for r in train)
        ev = [r for r in per_client if r["round"] == rnd and r["phase"] == "evaluate"]
        weights = np.array([r["num_examples"] for r in ev], dtype=float)
        accs = np.array([r["metrics"]["accuracy"] for r in ev])
        (agg,) = [
            r["evaluate/local_test/accuracy"]
            for r in rows
            if r.get("round") == rnd and "evaluate/local_test/accuracy" in r
        ]
        assert agg == pytest.approx(float(weights @ accs / weights.sum()), abs=1e-9)

"""Sinks: TensorBoard event files and MLflow runs, read back with the libraries' own readers.

One tiny inline run (2 clients, 3 rounds) with both tracking sinks feeds the
TensorBoard and MLflow checks; what they read back must equal
``metrics.jsonl`` and ``summary.json`` value for value (TensorBoard stores
scalars as float32, so its values are compared with the float32 of each row).
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import tiny_sweep_scenario

import flowerbed
from flowerbed.core.records import METRICS_FILE, SUMMARY_FILE, TENSORBOARD_DIR, Recorder
from flowerbed.core.scenario import ScenarioError, from_dict
from flowerbed.core.sinks import SinkUnavailableError
from flowerbed.platform.cli import main as cli_main
from flowerbed.platform.sweep import expand, run_sweep

HINT = "pip install 'flowerbed[tracking]'"
ACCURACY = "server_eval/test/accuracy"


def _tracked(mlruns: Path, **changes: Any) -> dict[str, Any]:
    sinks = ["tensorboard", {"name": "mlflow", "mlflow_uri": str(mlruns)}]
    return tiny_sweep_scenario(**{"rounds": 3, "sinks": sinks, **changes})


def _rows(run_dir: Path) -> list[dict[str, Any]]:
    lines = (run_dir / METRICS_FILE).read_text().splitlines()
    return [r for r in map(json.loads, lines) if "event" not in r and "round" in r]


@pytest.fixture(scope="module")
def tracked(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """``(run_dir, mlruns)`` of one finished run with every sink."""
    root = tmp_path_factory.mktemp("tracked")
    result = flowerbed.run(_tracked(root / "mlruns"), output_dir=root / "runs")
    assert result.run_dir is not None
    return result.run_dir, root / "mlruns"


@pytest.fixture
def mlflow_at(monkeypatch: pytest.MonkeyPatch) -> Any:
    """``mlflow`` reading the local store at the given folder, as a user would."""
    import mlflow

    def point(mlruns: Path) -> Any:
        # MLflow 3 opens a plain-folder store only when asked to.
        monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
        monkeypatch.setenv("MLFLOW_TRACKING_URI", mlruns.resolve().as_uri())
        return mlflow

    return point


def test_tensorboard_has_every_rounds_metrics_as_in_metrics_jsonl(tracked):
    from tensorboard.backend.event_processing import event_accumulator

    run_dir, _ = tracked
    acc = event_accumulator.EventAccumulator(
        str(run_dir / TENSORBOARD_DIR), size_guidance={event_accumulator.SCALARS: 0}
    )
    acc.Reload()
    expected: dict[str, dict[int, float]] = {}
    for row in _rows(run_dir):
        for key, value in row.items():
            if key.count("/") == 2:
                expected.setdefault(key, {})[row["round"]] = float(np.float32(value))
    assert set(acc.Tags()["scalars"]) == set(expected)
    for tag, by_round in expected.items():
        assert {e.step: e.value for e in acc.Scalars(tag)} == by_round, tag
    assert sorted(expected[ACCURACY]) == [0, 1, 2, 3]  # the initial model, then every round


def test_mlflow_run_has_the_scenario_params_round_metrics_and_summary(tracked, mlflow_at):
    run_dir, mlruns = tracked
    mlflow = mlflow_at(mlruns)
    runs = mlflow.search_runs(experiment_names=["tiny"], output_format="list")
    assert len(runs) == 1
    run = runs[0]
    assert run.info.status == "FINISHED"
    assert run.info.run_name == run_dir.name
    assert run.data.tags["flowerbed.run_dir"] == str(run_dir.resolve())
    params = run.data.params
    assert params["rounds"] == "3" and params["num_clients"] == "2"
    assert params["learner.name"] == "sgd" and params["learner.local_epochs"] == "1"
    assert params["partition.name"] == "iid" and params["model.hidden"] == "[8]"

    history = mlflow.MlflowClient().get_metric_history(run.info.run_id, ACCURACY)
    by_round = {r["round"]: r[ACCURACY] for r in _rows(run_dir) if ACCURACY in r}
    assert {m.step: m.value for m in history} == by_round
    summary = json.loads((run_dir / SUMMARY_FILE).read_text())
    final = run.data.metrics["final/federated/test/accuracy"]
    assert final == summary["results"]["federated"]["test/accuracy"] == by_round[3]


@pytest.mark.parametrize("sink", ["tensorboard", "mlflow"])
def test_a_missing_package_is_one_line_at_validation(sink, monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, sink, None)  # `import <sink>` now fails
    line = f"sinks[0].name: sink {sink!r} needs the {sink} package; install it with: {HINT}"
    with pytest.raises(ScenarioError) as err:
        from_dict(tiny_sweep_scenario(sinks=[sink]))
    assert err.value.problems == [line]

    path = tmp_path / "scenario.json"  # JSON is YAML
    path.write_text(json.dumps(tiny_sweep_scenario(sinks=[sink])))
    assert cli_main(["validate", str(path)]) == 1
    assert line in capsys.readouterr().err.splitlines()[1]


def test_a_package_gone_after_validation_stops_the_run_before_it_starts(monkeypatch, tmp_path):
    scenario = from_dict(tiny_sweep_scenario(sinks=["mlflow"]))
    monkeypatch.setitem(sys.modules, "mlflow", None)
    recorder = Recorder(scenario, tmp_path)
    with pytest.raises(SinkUnavailableError) as err:
        recorder.start()
    assert str(err.value) == f"sink 'mlflow' needs the mlflow package; install it with: {HINT}"
    assert not (tmp_path / METRICS_FILE).exists()
    assert recorder._handler is None  # the run log is detached again


def test_unknown_repeated_or_misspelt_sinks_are_one_line_each():
    with pytest.raises(ScenarioError) as err:
        from_dict(tiny_sweep_scenario(sinks=["tensorbord"]))
    assert err.value.problems == [
        "sinks[0].name: unknown sink 'tensorbord' (did you mean 'tensorboard'?); "
        "known: jsonl, mlflow, tensorboard"
    ]
    with pytest.raises(ScenarioError) as err:
        from_dict(tiny_sweep_scenario(sinks=["tensorboard", "tensorboard"]))
    assert err.value.problems == [
        "sinks[1]: sink 'tensorboard' is listed twice (first at sinks[0])"
    ]
    with pytest.raises(ScenarioError) as err:
        from_dict(tiny_sweep_scenario(sinks=[{"name": "mlflow", "mlflow_url": "x"}]))
    assert err.value.problems == [
        "sinks[0].mlflow_url: unknown field (did you mean 'mlflow_uri'?); allowed: mlflow_uri"
    ]


def test_jsonl_is_always_on_and_sinks_never_change_the_digest():
    plain = from_dict(tiny_sweep_scenario())
    tracked = from_dict(tiny_sweep_scenario(sinks=["tensorboard"]))
    assert [s.name for s in plain.sinks] == ["jsonl"]
    assert [s.name for s in tracked.sinks] == ["tensorboard", "jsonl"]
    assert tracked.digest() == plain.digest()
    assert from_dict(tracked.to_dict()).to_dict() == tracked.to_dict()  # resolved = stable


def test_a_failing_sink_is_dropped_and_metrics_jsonl_keeps_every_row(tmp_path, caplog):
    class Broken:
        closed: list[Any] = []

        def row(self, row: dict[str, Any]) -> None:
            raise OSError("disk full")

        def close(self, summary: dict[str, Any] | None) -> None:
            self.closed.append(summary)

    recorder = Recorder(from_dict(tiny_sweep_scenario()), tmp_path)
    recorder.start()
    broken = Broken()
    recorder.sinks.append(broken)
    with caplog.at_level(logging.WARNING, logger="flowerbed"):
        recorder.metrics(1, "server_eval", {"accuracy": 0.5})
        recorder.metrics(2, "server_eval", {"accuracy": 0.75})
    recorder.close()
    assert [r[ACCURACY] for r in _rows(tmp_path)] == [0.5, 0.75]
    assert recorder.sinks == [] and broken.closed == []  # dropped at its first failure
    assert sum("failed and is off" in r.message for r in caplog.records) == 1


@pytest.mark.parametrize(("event", "status"), [("interrupted", "KILLED"), ("run_failed", "FAILED")])
def test_a_run_that_stops_early_keeps_its_rounds_and_says_how_it_ended(
    event, status, tmp_path, mlflow_at
):
    name = f"early_{event}"
    scenario = from_dict(_tracked(tmp_path / "mlruns", name=name))
    recorder = Recorder(scenario, tmp_path / "run")
    recorder.start()
    recorder.metrics(1, "server_eval", {"accuracy": 0.5})
    recorder.event(event, rounds_done=1)
    recorder.close()  # no summary: the run did not finish

    mlflow = mlflow_at(tmp_path / "mlruns")
    (run,) = mlflow.search_runs(experiment_names=[name], output_format="list")
    assert run.info.status == status
    assert run.data.metrics == {ACCURACY: 0.5}


def test_sweep_points_are_runs_of_one_experiment_named_after_the_sweep(tmp_path, mlflow_at):
    data = _tracked(tmp_path / "mlruns", rounds=1)
    data["sweep"] = {"name": "tiny_lr", "learner.lr": [0.05, 0.1]}
    plan = expand(data)
    result = run_sweep(plan, output_dir=tmp_path / "runs")
    assert result.count("ok") == 2
    run_sweep(plan, output_dir=tmp_path / "runs")  # done points are skipped: no new runs

    mlflow = mlflow_at(tmp_path / "mlruns")
    runs = mlflow.search_runs(experiment_names=["tiny_lr"], output_format="list")
    folders = {p.folder.name: p for p in result.points}
    assert sorted(r.info.run_name for r in runs) == sorted(folders)
    for run in runs:
        point = folders[run.info.run_name]
        assert run.info.status == "FINISHED"
        assert run.data.tags["flowerbed.sweep"] == "tiny_lr"
        assert float(run.data.params["learner.lr"]) == point.point.overrides["learner.lr"]
        assert point.summary is not None
        expected = point.summary["results"]["federated"]["test/accuracy"]
        assert run.data.metrics["final/federated/test/accuracy"] == expected
    for point in result.points:  # and each point has its own event file
        assert list((point.folder / TENSORBOARD_DIR).glob("events.out.tfevents.*"))


def test_list_sink_names_every_sink(capsys):
    assert cli_main(["list", "sink"]) == 0
    out = capsys.readouterr().out
    for name in ("jsonl", "tensorboard", "mlflow"):
        assert name in out

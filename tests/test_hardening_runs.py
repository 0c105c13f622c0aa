"""Hardening, second round: runs that stop, resume and report (issue items 5, 6, 9, 10, 11).

- ``--resume`` of a run with no usable checkpoint (none asked for, killed
  before the first, checkpoints deleted) is refused in one line (exit 2) and
  leaves the folder as it was, instead of starting again and recording every
  round twice;
- SIGTERM (what a batch scheduler sends) ends a run as Ctrl-C does: one line,
  an ``interrupted`` row, finished rounds kept, exit 143;
- ``validate`` refuses what ``run`` would: checkpoints of a strategy that
  cannot save them, a learner without its ``model:`` block; a setup error
  every client hits is reported once, with the count;
- ``deploy local --nodes 0`` is one argparse line, no traceback;
- a component registered in this process only is refused before a
  ``simulation`` run starts, naming it and what to do;
- a finished run whose ``metrics.summary`` names a metric no phase produced
  exits 0 with a warning.

Every test here failed on the code before this round (each says how).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import tiny_scenario
from test_hardening_lifecycle import finish, rows_of, start_cli, wait_for_row

import flowerbed
from flowerbed.clients.learner import Learner
from flowerbed.core import registry
from flowerbed.core.scenario import ScenarioError, from_dict, validate_scenario
from flowerbed.platform.cli import main
from flowerbed.platform.runner import RunError


@contextlib.contextmanager
def registered(kind: str, name: str, target: Any, params: Any = None) -> Iterator[None]:
    """``target`` registered as a script would, for the block (the schema rebuilt around it)."""
    from flowerbed.core.scenario import scenario_model

    registry.register(kind, name, params=params)(target)
    scenario_model.cache_clear()  # the schema's unions are built from the registry
    try:
        yield
    finally:
        registry.unregister(kind, name)
        scenario_model.cache_clear()


def _write(tmp_path: Path, **changes: Any) -> Path:
    data = tiny_scenario(output_dir=str(tmp_path / "runs"), baselines=[], **changes)
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _unfinished_run(tmp_path: Path, **changes: Any) -> Path:
    """A finished tiny run made to look killed: its ``summary.json`` removed."""
    result = flowerbed.run(_write(tmp_path, **changes))
    assert result.run_dir is not None
    (result.run_dir / "summary.json").unlink()
    return result.run_dir


# --- 5. --resume without a usable checkpoint ---------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "delete_checkpoints", "needle"),
    [
        ({}, False, "checkpoint.every: 0"),  # K6: a run that never asked for checkpoints
        ({"checkpoint": {"every": 30}, "rounds": 2}, False, "before its first"),  # K13
        ({"checkpoint": {"every": 1}}, True, "checkpoints folder was deleted"),  # K8
    ],
)
def test_resume_without_a_checkpoint_is_refused_and_changes_nothing(
    tmp_path, capsys, changes, delete_checkpoints, needle
):
    """Before: exit 0, the run started again from round 0 and appended every round twice."""
    run_dir = _unfinished_run(tmp_path, **changes)
    if delete_checkpoints:
        import shutil

        shutil.rmtree(run_dir / "checkpoints")
    before = (run_dir / "metrics.jsonl").read_bytes()
    assert main(["run", "--resume", str(run_dir), "--quiet"]) == 2
    (line,) = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert line.startswith(f"--resume {run_dir}: no checkpoint") and needle in line
    assert f"flowerbed run {run_dir / 'scenario.resolved.yaml'}" in line  # how to start afresh
    assert (run_dir / "metrics.jsonl").read_bytes() == before
    assert not (run_dir / "summary.json").exists()


# --- 6. SIGTERM --------------------------------------------------------------------------------


def _terminated_mid_run(
    tmp_path: Path, group: bool, **changes: Any
) -> tuple[Path, str, int, int]:
    """Run folder, stderr, exit status and process group of a run sent SIGTERM at round 1+."""
    path = _write(tmp_path, rounds=500, num_clients=2, partition="iid", **changes)
    proc = start_cli("run", str(path), "--quiet", cwd=tmp_path)
    run_dir = wait_for_row(
        proc, tmp_path / "runs", lambda r: r.get("round", 0) >= 1 and "event" not in r, 240
    )
    if group:  # a scheduler ending a job signals its whole process group
        os.killpg(proc.pid, signal.SIGTERM)
    else:
        os.kill(proc.pid, signal.SIGTERM)
    sent = time.monotonic()
    _, err = finish(proc, timeout=60)
    assert time.monotonic() - sent < 20, err
    return run_dir, err, proc.returncode, proc.pid


def _assert_ended_like_ctrl_c(run_dir: Path, err: str, status: int, pgid: int) -> None:
    assert status == 143, err
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert lines[-1] == f"terminated (SIGTERM); finished rounds are saved in {run_dir}", err
    rows = rows_of(run_dir)
    assert rows[-1]["event"] == "interrupted" and rows[-1]["signal"] == "SIGTERM"
    assert rows[-1]["rounds_done"] >= 1
    assert not (run_dir / "summary.json").exists()


def test_sigterm_ends_an_inline_run_like_ctrl_c(tmp_path):
    """Before: exit 143 with no message and no ``interrupted`` row."""
    _assert_ended_like_ctrl_c(*_terminated_mid_run(tmp_path, group=False))


@pytest.mark.slow
def test_sigterm_to_the_group_ends_a_simulation_run_and_its_workers(tmp_path):
    """The client worker processes (which ignore the group's SIGTERM) end with the run."""
    import psutil

    engine = {"name": "simulation", "ray_num_cpus": 1, "client_resources": {"num_cpus": 1}}
    found = _terminated_mid_run(tmp_path, group=True, engine=engine)
    _assert_ended_like_ctrl_c(*found)

    def left() -> list[int]:
        pids = []
        for p in psutil.process_iter():
            with contextlib.suppress(OSError):
                if os.getpgid(p.pid) == found[3] and p.status() != psutil.STATUS_ZOMBIE:
                    pids.append(p.pid)
        return pids

    deadline = time.monotonic() + 5
    while left() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left()


# --- 9. validate refuses what run would; setup errors once; deploy --nodes ---------------------


def _problems(**changes: Any) -> list[str]:
    with pytest.raises(ScenarioError) as info:
        validate_scenario(tiny_scenario(**changes))
    return info.value.problems


def test_validate_refuses_checkpoints_of_a_strategy_that_cannot_save_them():
    """Before: ``validate`` said ok and only ``run`` refused (exit 2)."""
    (line,) = _problems(strategy="oneshot_average", checkpoint={"every": 1})
    assert line.startswith("checkpoint.every: strategy 'oneshot_average' does not save")
    assert "fedavg" in line  # the strategies that do


def test_validate_refuses_a_learner_without_its_model_block():
    """Before: ``validate`` said ok; every node then failed setup with the same error."""
    (line,) = _problems(model=None)
    assert line == "model: learner 'sgd' needs a 'model:' block (e.g. model: mlp)"


class _NoSetup(Learner):
    """A learner whose every client fails to set up."""

    def __init__(self, params: Any, *, scenario: Any) -> None:
        super().__init__(params, scenario=scenario)
        raise ValueError("no GPU driver here")

    def run_local(self, data: Any, ctx: Any) -> Any:
        """Never reached: set-up fails first."""
        raise AssertionError


def test_a_setup_error_every_client_hits_is_reported_once_with_the_count():
    """Before: ``node 1: <class 'ValueError'>:<'...'>; node 2: ...`` once per node."""
    with registered("learner", "test_no_setup", _NoSetup), pytest.raises(RunError) as info:
        flowerbed.run(tiny_scenario(learner="test_no_setup", strategy="local",
                                    baselines=[], model=None), save=False)
    message = str(info.value)
    assert "client setup failed on 4 of 4 nodes: ValueError: no GPU driver here" in message
    assert message.count("no GPU driver") == 1 and "<class" not in message


@pytest.mark.parametrize(("command", "value"), [("local", "0"), ("compose", "-3"),
                                                 ("local", "two")])
def test_deploy_with_a_bad_node_count_is_one_line(capsys, command, value):
    """Before: ``deploy local --nodes 0`` printed a traceback (``ValueError``), exit 1."""
    with pytest.raises(SystemExit) as info:
        main(["deploy", command, "--nodes", value])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "Traceback" not in err
    assert "error: argument --nodes: " in err.splitlines()[-1]


# --- 10. components registered in this process only --------------------------------------------


def _script_net(params: Any, *, in_features: int, out_features: int) -> Any:
    """A one-layer net, as a user's script would register it."""
    import torch

    return torch.nn.Linear(in_features, out_features)


def test_a_model_registered_in_a_script_is_refused_on_simulation_and_runs_inline():
    """Before: inline ran; simulation failed at every node with 'unknown model', per node."""
    with registered("model", "script_mlp", _script_net):
        scenario = tiny_scenario(model="script_mlp", rounds=1, baselines=[])
        assert flowerbed.run(scenario, save=False).final("federated")
        simulation = {**scenario, "engine": {"name": "simulation", "ray_num_cpus": 1}}
        with pytest.raises(ScenarioError) as info:
            flowerbed.run(simulation, save=False)
    (line,) = info.value.problems
    assert line.startswith("model.name: model 'script_mlp' is registered in this process only")
    assert "engine: inline" in line and "flowerbed.plugins" in line


# --- 11. a typo in metrics.summary after a finished run ----------------------------------------


def test_a_finished_run_with_an_unknown_summary_name_exits_0_with_a_warning(tmp_path, capsys):
    """Before: the run finished, then ``error: metrics.summary ...`` and exit 1."""
    path = _write(tmp_path, rounds=1, metrics={"summary": ["accuracy", "f1"]})
    assert main(["run", str(path), "--quiet"]) == 0
    err = capsys.readouterr().err
    (line,) = [ln for ln in err.splitlines() if "'f1'" in ln]
    assert line.startswith("warning: metrics.summary: no phase produced 'f1'; this run has: ")
    assert "test/accuracy" in line
    (summary,) = (tmp_path / "runs").glob("*/*/summary.json")
    assert json.loads(summary.read_text())["results"]["federated"]


# --- 2. clients with nothing to evaluate; infeasible Dirichlet minimums ---------------------------

#: A power-law size skew steep enough that the smallest of 4 clients holds 1 row (0 test rows).
TINY_CLIENT = {"name": "quantity_skew", "law": "powerlaw", "exponent": 6.0, "min_size": 1}


def test_a_client_without_local_test_rows_is_left_out_of_the_evaluation_and_counted(tmp_path):
    """Before: Flower's FedAvg raised ``InconsistentMessageReplies`` and the run died."""
    result = flowerbed.run(tiny_scenario(partition=TINY_CLIENT, baselines=[]),
                           output_dir=tmp_path)
    run_dir = result.run_dir
    assert run_dir is not None
    clients = json.loads((run_dir / "clients.json").read_text())
    empty = [c["partition_id"] for c in clients if c["num_test"] == 0]
    assert empty, clients  # the data gives a client nothing to evaluate
    rows = rows_of(run_dir)
    replies = [r for r in rows if r.get("event") == "replies" and r["phase"] == "evaluate"]
    assert replies and all(r["empty_clients"] == empty for r in replies)
    # The round's local_test/accuracy is the others' example-weighted mean (independent sum).
    per_client = [json.loads(line) for line in
                  (run_dir / "client_metrics.jsonl").read_text().splitlines()]
    for r in (r for r in rows if r.get("phase") == "evaluate" and "event" not in r):
        mine = [c for c in per_client if c["phase"] == "evaluate" and c["round"] == r["round"]]
        assert {c["client"] for c in mine}.isdisjoint(empty)
        total = sum(c["num_examples"] for c in mine)
        mean = sum(c["metrics"]["accuracy"] * c["num_examples"] for c in mine) / total
        assert r["evaluate/local_test/accuracy"] == pytest.approx(mean, rel=1e-6)


def test_no_client_with_local_test_rows_skips_the_clients_evaluation():
    """``local_test_fraction: 0`` with FedAvg: before, ``ZeroDivisionError`` in Flower."""
    result = flowerbed.run(
        tiny_scenario(clients={"local_test_fraction": 0.0}, baselines=[], rounds=1), save=False
    )
    assert "test/accuracy" in result.final("federated")
    replies = [r for r in result.rows if r.get("event") == "replies" and r["phase"] == "evaluate"]
    assert replies[0]["empty_clients"] == [0, 1, 2, 3]
    assert not any("evaluate/local_test/accuracy" in r for r in result.rows)


def test_an_infeasible_dirichlet_minimum_names_the_sizes_it_got():
    """The error names the field, and the first draw's smallest clients (before: no sizes)."""
    import re

    from flowerbed.data.federated import federated_data
    from flowerbed.data.partitioners import PartitionError

    scenario = tiny_scenario(dataset="breast_cancer", num_clients=20,
                             partition={"name": "dirichlet", "alpha": 0.5})
    with pytest.raises(PartitionError) as info:
        federated_data(from_dict(scenario))
    text = str(info.value)
    assert text.startswith("partition.min_partition_size=10 not met")
    sizes = re.search(r"the first draw's smallest clients: (\d+), (\d+), (\d+) rows", text)
    assert sizes is not None, text
    smallest = [int(s) for s in sizes.groups()]
    assert smallest == sorted(smallest) and smallest[0] < 10  # the draw that fell short


# --- 7. trackers after a resume ----------------------------------------------------------------


class _Killed(BaseException):
    """Stands in for a kill: not an ``Exception``, so nothing records it as a failure."""


def test_a_resumed_run_continues_its_mlflow_run_and_its_tensorboard_log(tmp_path, monkeypatch):
    """Before: a second MLflow run of the same name (the first left behind), and round 3's
    TensorBoard scalars twice (the killed half's and the resumed half's)."""
    import mlflow
    from tensorboard.backend.event_processing import event_accumulator

    from flowerbed.core.records import Recorder
    from flowerbed.platform.runner import resume

    mlruns = tmp_path / "mlruns"
    scenario = tiny_scenario(
        rounds=4, baselines=[], checkpoint={"every": 1},
        sinks=["tensorboard", {"name": "mlflow", "mlflow_uri": str(mlruns)}],
    )
    original = Recorder.metrics

    def killed_in_round_3(self: Recorder, server_round: int, phase: str, values: Any) -> None:
        original(self, server_round, phase, values)
        if server_round == 3 and phase == "train":  # after round 2's checkpoint
            raise _Killed

    monkeypatch.setattr(Recorder, "metrics", killed_in_round_3)
    with pytest.raises(_Killed):
        flowerbed.run(scenario, output_dir=tmp_path / "runs")
    monkeypatch.setattr(Recorder, "metrics", original)
    (run_dir,) = (tmp_path / "runs").glob("*/*")
    resume(run_dir)

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlruns.resolve().as_uri())
    (run,) = mlflow.search_runs(experiment_names=["tiny"], output_format="list")
    assert run.info.status == "FINISHED"
    assert run.data.tags["flowerbed.resumed_from_round"] == "2"
    history = mlflow.MlflowClient().get_metric_history(run.info.run_id, ACCURACY)
    assert sorted({m.step for m in history}) == [0, 1, 2, 3, 4]

    acc = event_accumulator.EventAccumulator(
        str(run_dir / "tensorboard"), size_guidance={event_accumulator.SCALARS: 0}
    )
    acc.Reload()
    for tag in (ACCURACY, "train/train/loss"):
        steps = [e.step for e in acc.Scalars(tag)]
        assert sorted(steps) == sorted(set(steps)), (tag, steps)  # every round once
    assert [e.step for e in acc.Scalars(ACCURACY)] == [0, 1, 2, 3, 4]


ACCURACY = "server_eval/test/accuracy"


def test_a_tracking_store_that_cannot_be_opened_names_the_sink(tmp_path):
    """Before: ``run failed: FileNotFoundError: ... /proc/mlruns``, naming no field."""
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    sinks = [{"name": "mlflow", "mlflow_uri": str(blocker / "mlruns")}]
    with pytest.raises(RunError) as info:
        flowerbed.run(tiny_scenario(rounds=1, sinks=sinks), output_dir=tmp_path / "runs")
    assert str(info.value).startswith("SinkOpenError: sinks[0] (mlflow): cannot open: ")

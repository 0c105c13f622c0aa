"""Failure handling: evaluate and one-shot faults, min_replies, crash safety, memory limits."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import tiny_scenario

import flowerbed
from flowerbed.core.records import Recorder
from flowerbed.core.scenario import ScenarioError, from_dict
from flowerbed.platform import resources, runner
from flowerbed.platform.runner import RunError
from flowerbed.strategies.federation import required_replies

REPO = Path(__file__).parents[1]


def quick(**changes):
    """``tiny_scenario`` without the baseline: only the federation matters here."""
    return tiny_scenario(baselines=[], **changes)


def reply_rows(result, phase):
    return [r for r in result.rows if r.get("event") == "replies" and r["phase"] == phase]


def read_rows(run_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


# --- client faults ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("fault", "reason"),
    [
        ("nan", "is nan"),
        ("inf", "is inf"),
        ("raise", "RuntimeError: injected fault on client 1"),
        ("no_payload", "TypeError: learner handler for 'evaluate"),
    ],
)
def test_evaluate_fault_is_rejected_by_partition_id_and_round_proceeds(fault, reason):
    learner = {"name": "faulty_sgd", "fail_clients": [1], "fault": fault, "phase": "evaluate"}
    result = flowerbed.run(quick(learner=learner), save=False)
    rows = reply_rows(result, "evaluate")
    assert [r["round"] for r in rows] == [1, 2]
    for row in rows:
        assert (row["ok"], row["failed"]) == (3, 1)
        assert reason in row["failed_clients"]["1"]
    assert all(r["failed"] == 0 for r in reply_rows(result, "train"))
    evals = [r for r in result.rows if r.get("phase") == "evaluate" and "event" not in r]
    assert len(evals) == 2
    assert all(np.isfinite(v) for r in evals for k, v in r.items() if k.startswith("evaluate/"))


def test_train_handler_returning_nothing_is_a_named_failure():
    learner = {"name": "faulty_sgd", "fail_clients": [3], "fault": "no_payload", "fail_rounds": [2]}
    result = flowerbed.run(quick(learner=learner), save=False)
    rows = reply_rows(result, "train")
    assert [r["failed"] for r in rows] == [0, 1]
    assert "returned NoneType, expected Payload" in rows[1]["failed_clients"]["3"]


def test_faulty_learner_rejects_array_faults_in_evaluate():
    learner = {"name": "faulty_sgd", "fault": "wrong_shape", "phase": "evaluate"}
    with pytest.raises(ScenarioError, match=r"learner: .*evaluate replies do not carry"):
        from_dict(quick(learner=learner))


@pytest.mark.parametrize(
    ("learner", "phase", "reason"),
    [
        ({"fault": "wrong_shape"}, "train", "expected float32"),
        ({"fault": "inf"}, "train", "non-finite values"),
        ({"fault": "nan", "phase": "evaluate"}, "evaluate", "is nan"),
    ],
)
def test_federation_ask_rejects_bad_replies_in_one_shot_strategy(learner, phase, reason):
    """``oneshot_average`` talks through ``Federation.ask`` (not Flower's FedAvg)."""
    spec = {"name": "faulty_sgd", "fail_clients": [2], **learner}
    result = flowerbed.run(quick(learner=spec, strategy="oneshot_average"), save=False)
    (row, *_) = reply_rows(result, phase)
    assert (row["ok"], row["failed"]) == (3, 1)
    assert reason in row["failed_clients"]["2"]
    assert np.isfinite(result.final()["test/loss"])
    assert np.isfinite(result.final()["local_test/loss"])


@pytest.mark.parametrize(
    ("min_replies", "asked", "need"),
    [(1, 4, 1), (3, 4, 3), (10, 4, 4), (0.5, 4, 2), (0.3, 4, 2), (0.75, 4, 3), (0.01, 4, 1)],
)
def test_required_replies_absolute_and_fraction(min_replies, asked, need):
    """``< 1`` is a fraction rounded up (0.3 * 4 = 1.2 -> 2); ``>= 1`` is capped by ``asked``."""
    assert required_replies(min_replies, asked) == need


def test_absolute_min_replies_met_lets_the_run_finish():
    learner = {"name": "faulty_sgd", "fail_clients": [0], "fault": "raise"}
    result = flowerbed.run(quick(learner=learner, federation={"min_replies": 3}), save=False)
    assert [r["ok"] for r in reply_rows(result, "train")] == [3, 3]


def test_absolute_min_replies_missed_stops_and_keeps_round_one(tmp_path):
    learner = {"name": "faulty_sgd", "fail_clients": [0], "fault": "raise", "fail_rounds": [2]}
    data = quick(learner=learner, federation={"min_replies": 4})
    with pytest.raises(RunError, match=r"train round 2: 3 usable replies, need 4") as info:
        flowerbed.run(data, output_dir=tmp_path)
    run_dir = info.value.run_dir
    assert run_dir is not None and not (run_dir / "summary.json").exists()
    rows = read_rows(run_dir)
    assert any(r.get("phase") == "server_eval" and r["round"] == 1 for r in rows)
    assert "injected fault on client 0" in rows[-1]["error"]


def test_fraction_min_replies_missed_in_evaluate_stops_the_run(tmp_path):
    learner = {
        "name": "faulty_sgd",
        "fail_clients": [0, 1],
        "fault": "nan",
        "phase": "evaluate",
        "fail_rounds": [2],
    }
    data = quick(learner=learner, federation={"min_replies": 0.75})
    with pytest.raises(RunError, match=r"evaluate round 2: 2 usable replies, need 3"):
        flowerbed.run(data, output_dir=tmp_path)
    (run_dir,) = (tmp_path / "tiny").iterdir()
    rows = read_rows(run_dir)
    assert any(r.get("phase") == "evaluate" and r.get("round") == 1 for r in rows)
    assert any(r.get("phase") == "train" and r.get("round") == 2 for r in rows)
    assert rows[-1]["event"] == "run_failed" and not (run_dir / "summary.json").exists()


# --- crash safety -----------------------------------------------------------------


def test_each_metrics_row_is_one_write_call(tmp_path, monkeypatch):
    """A row larger than Python's 8 KiB file buffer still goes out in one system call."""
    calls: list[bytes] = []
    real_write = os.write

    def spy(fd: int, data: bytes) -> int:
        calls.append(bytes(data))
        return real_write(fd, data)

    recorder = Recorder(from_dict(quick()), tmp_path)
    monkeypatch.setattr(os, "write", spy)
    recorder.event("big", text="x" * 100_000)
    recorder.event("small")
    monkeypatch.undo()
    assert len(calls) == 2 and all(c.endswith(b"\n") and c.count(b"\n") == 1 for c in calls)
    assert (tmp_path / "metrics.jsonl").read_bytes() == b"".join(calls)
    assert len(json.loads(calls[0])["text"]) == 100_000


def _start_run(tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    path = tmp_path / "long.yaml"
    path.write_text(yaml.safe_dump(quick(rounds=200, metrics={"eval_every": 1})))
    out = tmp_path / "runs"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "flowerbed.platform.cli", "run", str(path), "--quiet"]
    proc = subprocess.Popen(
        [*cmd, "--output-dir", str(out)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return proc, out / "tiny"


def _wait_for_rows(proc: subprocess.Popen, runs: Path, count: int, timeout: float) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the run ended before it could be killed"
        for run_dir in runs.glob("*") if runs.is_dir() else []:
            metrics = run_dir / "metrics.jsonl"
            if metrics.is_file() and metrics.read_bytes().count(b"\n") >= count:
                return run_dir
        time.sleep(0.05)
    raise AssertionError(f"no {count} metric rows within {timeout} s")


@pytest.mark.slow
def test_sigkill_mid_run_leaves_only_complete_files(tmp_path):
    """Kill ``flowerbed run`` at a random moment after its first rounds.

    Afterwards every ``metrics.jsonl`` line is complete JSON, the rows seen
    before the kill are still there, ``summary.json`` is absent or complete,
    and leftover temporary files are hidden ``.name.tmp`` files, never
    something a reader would take for a result.
    """
    proc, runs = _start_run(tmp_path)
    try:
        run_dir = _wait_for_rows(proc, runs, count=3, timeout=240)
        time.sleep(random.Random(0).uniform(0.0, 2.0))
        seen = (run_dir / "metrics.jsonl").read_bytes()
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    data = (run_dir / "metrics.jsonl").read_bytes()
    assert data.startswith(seen) and data.endswith(b"\n")
    rows = [json.loads(line) for line in data.splitlines()]
    assert rows[-1].get("event") != "run_failed"  # killed, not stopped
    summary = run_dir / "summary.json"
    assert not summary.exists() or json.loads(summary.read_text())["rounds"] == 200
    for leftover in run_dir.glob("*.tmp"):
        assert leftover.name.startswith("."), leftover
    assert not any(p.name == "summary.json.tmp" for p in run_dir.iterdir())


# --- resource limits -----------------------------------------------------------------


def test_absurd_model_fails_fast_before_the_engine_starts(tmp_path, monkeypatch):
    """hidden=[100000, 100000] is 1e10 weights (37 GiB in float32) before any copy."""

    def no_engine(scenario, recorder):
        raise AssertionError("the engine must not start")

    monkeypatch.setitem(runner.ENGINES, "simulation", no_engine)
    data = quick(model={"name": "mlp", "hidden": [100000, 100000]}, engine="simulation")
    started = time.monotonic()
    with pytest.raises(RunError, match=r"ResourceLimitError: estimated memory [\d.]+ GiB"):
        flowerbed.run(data, output_dir=tmp_path)
    assert time.monotonic() - started < 60
    (run_dir,) = (tmp_path / "tiny").iterdir()
    (row,) = [r for r in read_rows(run_dir) if r.get("event") == "run_failed"]
    assert "37.3 GiB" in row["error"] and "available" in row["error"]


def test_memory_estimate_exact_for_linear_model_on_digits():
    """Linear model on digits: 64 * 10 + 10 = 650 float32 weights = 2600 bytes.

    Inline: data + 2600 * (4 replies + 3 server copies) + 1 client * 2600 * 6.
    Simulation, 2 CPUs at 0.5 per client: 4 actors, each with its own data copy.
    Deployment: clients run on SuperNodes, so only the server counts here.
    """
    inline = resources.estimate_memory(from_dict(quick(model="linear")))
    data = inline.data_bytes
    assert inline.model_bytes == 2600 and data > 0
    assert inline.total_bytes == data + 2600 * 7 + 2600 * 6
    sim = from_dict(
        quick(
            model="linear",
            engine={"name": "simulation", "ray_num_cpus": 2, "client_resources": {"num_cpus": 0.5}},
        )
    )
    est = resources.estimate_memory(sim)
    assert est.actors == 4
    assert est.total_bytes == data + 2600 * 7 + 4 * (data + 2600 * 6)
    deployed = resources.estimate_memory(from_dict(quick(model="linear", engine="deployment")))
    assert deployed.actors == 0 and deployed.total_bytes == data + 2600 * 7


def test_check_memory_compares_with_available_and_can_be_skipped(monkeypatch):
    scenario = from_dict(quick())
    assert resources.check_memory(scenario, available=2**40) is not None
    with pytest.raises(resources.ResourceLimitError, match="more than the 1 B available"):
        resources.check_memory(scenario, available=1)
    monkeypatch.setenv(resources.SKIP_ENV, "1")
    assert resources.check_memory(scenario, available=1) is None


def test_available_memory_reads_proc_meminfo(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "psutil", None)  # force the /proc/meminfo path
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal: 100 kB\nMemAvailable:    2048 kB\n")
    assert resources.available_memory(meminfo) == 2048 * 1024
    assert resources.available_memory(tmp_path / "absent") is None

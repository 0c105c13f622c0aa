"""Checkpoints and ``flowerbed run --resume``: a killed run ends where an uninterrupted one does.

The killed runs are real processes ended by SIGKILL in the middle of a round
(after the round's training rows were written, before its checkpoint), so the
resumed run must cut those rows and compute them again.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import flowerbed
from flowerbed.core.checkpoints import (
    CHECKPOINT_DIR,
    CheckpointError,
    checkpoint_folders,
    pack,
    read_checkpoint,
    rng_states,
    set_rng_states,
    unpack,
)
from flowerbed.core.records import METRICS_FILE, SUMMARY_FILE

ROOT = Path(__file__).resolve().parents[1]

FEDADAM = {
    "name": "resume_fedadam",
    "seed": 3,
    "num_clients": 4,
    "rounds": 6,
    "dataset": {"name": "digits"},
    "partition": {"name": "dirichlet", "alpha": 0.5},
    "model": {"name": "mlp", "hidden": [16]},
    "learner": {"name": "sgd", "lr": 0.05, "batch_size": 32},
    "strategy": {"name": "fedadam", "eta": 0.05},
    "engine": "inline",
    "checkpoint": {"every": 1, "keep": 2},
}

# Runs ``flowerbed run`` in this process and SIGKILLs it when round KILL_ROUND's
# row of phase KILL_PHASE is recorded: mid-round, after the last checkpoint.
KILLER = """
import os, signal, sys
from flowerbed.core.records import Recorder
from flowerbed.platform import cli

kill_round, kill_phase = int(sys.argv[1]), sys.argv[2]
original = Recorder.metrics

def metrics(self, server_round, phase, values):
    original(self, server_round, phase, values)
    if server_round == kill_round and phase == kill_phase:
        os.kill(os.getpid(), signal.SIGKILL)

Recorder.metrics = metrics
sys.exit(cli.main(sys.argv[3:]))
"""


def _write(tmp_path: Path, scenario: dict[str, Any], name: str = "scenario.yaml") -> Path:
    import yaml

    path = tmp_path / name
    path.write_text(yaml.safe_dump({**scenario, "output_dir": str(tmp_path / "runs")}))
    return path


def _killed_run(tmp_path: Path, file: Path, kill_round: int, kill_phase: str) -> Path:
    """Run ``file`` in a subprocess killed mid-round; return its run folder."""
    proc = subprocess.run(
        [sys.executable, "-c", KILLER, str(kill_round), kill_phase, "run", str(file), "--quiet"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    (run_dir,) = (tmp_path / "runs").glob("*/*")
    assert not (run_dir / SUMMARY_FILE).exists()
    return run_dir


@pytest.fixture(scope="module")
def killed_fedadam(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A FedAdam run SIGKILLed in round 4's training (checkpoints of rounds 2 and 3 on disk)."""
    tmp = tmp_path_factory.mktemp("killed")
    return _killed_run(tmp, _write(tmp, FEDADAM), kill_round=4, kill_phase="train")


def _copy(run_dir: Path, tmp_path: Path) -> Path:
    import shutil

    out = tmp_path / "run"
    shutil.copytree(run_dir, out)
    return out


def _resume_cli(run_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "flowerbed.platform.cli", "run", "--resume", str(run_dir),
         "--quiet", "--format", "json"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )


def _metric_rows(run_dir: Path) -> list[dict[str, Any]]:
    rows = [json.loads(x) for x in (run_dir / METRICS_FILE).read_text().splitlines()]
    return [{k: v for k, v in r.items() if k != "time_s"} for r in rows if "event" not in r]


def _untimed(results: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """Results less the measured seconds (``time/...``), which no two runs share."""
    return {
        s: {k: v for k, v in m.items() if not k.startswith("time/")} for s, m in results.items()
    }


def _rounds_phases(rows: list[dict[str, Any]]) -> list[tuple[int, str]]:
    return [(int(r["round"]), str(r["phase"])) for r in rows]


def test_pack_round_trips_nested_state_and_names_what_it_cannot_save():
    state = {"m_t": {"w": np.arange(3.0), "b": np.float32(2.5)}, "t": (1, 2), "lr": None}
    packed, arrays = pack(state)
    back = unpack(json.loads(json.dumps(packed)), arrays)
    assert back["m_t"]["w"].tolist() == [0.0, 1.0, 2.0] and back["m_t"]["b"] == 2.5
    assert back["t"] == [1, 2] and back["lr"] is None
    with pytest.raises(TypeError, match="state /opt: cannot checkpoint a object"):
        pack({"opt": object()})


def test_random_generators_continue_as_they_would_have():
    import torch

    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    random.random(), np.random.normal(), torch.rand(1)
    saved = rng_states()
    expected = (random.random(), np.random.normal(size=3).tolist(), torch.rand(2).tolist())
    packed, arrays = pack(saved)
    random.seed(9), np.random.seed(9), torch.manual_seed(9)
    set_rng_states(unpack(json.loads(json.dumps(packed)), arrays))
    assert (random.random(), np.random.normal(size=3).tolist(), torch.rand(2).tolist()) == expected


def test_fedadam_killed_mid_round_resumes_to_the_uninterrupted_numbers(tmp_path, killed_fedadam):
    """SIGKILL in round 4 (checkpoint of round 3 on disk); ``--resume`` ends bit for bit equal."""
    reference = flowerbed.run(FEDADAM, output_dir=tmp_path / "reference")
    run_dir = _copy(killed_fedadam, tmp_path)
    assert (4, "train") in _rounds_phases(_metric_rows(run_dir))  # a row past the checkpoint
    assert [p.name for p in checkpoint_folders(run_dir)] == ["round_000002", "round_000003"]
    proc = _resume_cli(run_dir)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads((run_dir / SUMMARY_FILE).read_text())
    assert summary["results"] == reference.summary["results"]
    rows = _metric_rows(run_dir)
    assert len(set(_rounds_phases(rows))) == len(rows)  # every round and phase once
    assert rows == _metric_rows(reference.run_dir)  # and each with the same numbers
    events = [json.loads(x) for x in (run_dir / METRICS_FILE).read_text().splitlines()]
    assert {"event": "resumed", "round": 3} in [
        {k: v for k, v in e.items() if k != "time_s"} for e in events if "event" in e
    ]


def test_resume_without_the_server_state_would_differ(tmp_path, killed_fedadam):
    """The test above can fail: dropping FedAdam's moments on resume changes the result."""
    from flowerbed.platform.runner import resume
    from flowerbed.strategies import flower_fedavg

    reference = flowerbed.run(FEDADAM, save=False)
    run_dir = _copy(killed_fedadam, tmp_path)
    original = flower_fedavg.SeededFedAvg.load_state_dict
    flower_fedavg.SeededFedAvg.load_state_dict = lambda self, state: None  # type: ignore[method-assign]
    try:
        resumed = resume(run_dir)
    finally:
        flower_fedavg.SeededFedAvg.load_state_dict = original  # type: ignore[method-assign]
    assert resumed.summary["results"] != reference.summary["results"]


def test_a_corrupted_or_foreign_checkpoint_is_refused_in_one_line(tmp_path, killed_fedadam):
    from flowerbed.platform.results import InputPathError
    from flowerbed.platform.runner import resume

    run_dir = _copy(killed_fedadam, tmp_path)
    newest = checkpoint_folders(run_dir)[-1]
    meta = json.loads((newest / "meta.json").read_text())
    (newest / "meta.json").write_text(json.dumps({**meta, "digest": "0123456789"}))
    proc = _resume_cli(run_dir)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"--resume {run_dir}: checkpoint {newest / 'meta.json'}: written by another scenario "
        f"(digest 0123456789, this run's is {meta['digest']})"
    ]
    (newest / "meta.json").write_text(json.dumps(meta))
    data = bytearray((newest / "arrays.npz").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (newest / "arrays.npz").write_bytes(bytes(data))
    with pytest.raises(InputPathError) as err:
        resume(run_dir)
    assert str(err.value) == (
        f"--resume {run_dir}: checkpoint {newest / 'arrays.npz'}: corrupted "
        "(checksum does not match)"
    )
    with pytest.raises(CheckpointError, match="corrupted"):
        read_checkpoint(newest)


def test_resume_refuses_a_finished_run_and_a_folder_that_is_no_run(tmp_path):
    from flowerbed.platform.results import InputPathError
    from flowerbed.platform.runner import resume

    done = flowerbed.run({**FEDADAM, "rounds": 1}, output_dir=tmp_path)
    assert done.run_dir is not None
    with pytest.raises(InputPathError, match="the run has finished"):
        resume(done.run_dir)
    with pytest.raises(InputPathError, match="not a run folder"):
        resume(tmp_path)


def test_checkpoints_asked_of_a_strategy_that_cannot_write_them_are_bad_input(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "flowerbed.platform.cli", "run", "scenarios/fqr/real.yaml",
         "--set", "checkpoint.every=1", "--set", "engine=inline", "--output-dir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 2
    assert "checkpoint.every: strategy 'fqr' does not save checkpoints" in proc.stderr
    assert not any(tmp_path.iterdir())  # nothing ran, no run folder


def test_only_the_newest_checkpoints_are_kept(tmp_path):
    result = flowerbed.run({**FEDADAM, "checkpoint": {"every": 2, "keep": 2}}, output_dir=tmp_path)
    assert result.run_dir is not None
    assert [p.name for p in checkpoint_folders(result.run_dir)] == ["round_000004", "round_000006"]
    assert not list((result.run_dir / CHECKPOINT_DIR).glob(".*"))  # no temporary folder left


def test_a_sweep_point_with_a_checkpoint_resumes_instead_of_starting_again(tmp_path):
    """A point interrupted after its round-3 checkpoint continues from round 4 on the next sweep."""
    from flowerbed.core import checkpoints
    from flowerbed.platform.sweep import load_plan, run_sweep

    sweep = {**FEDADAM, "rounds": 4, "sweep": {"name": "resume_sweep", "seeds": [3]}}
    file = _write(tmp_path, sweep)
    reference = flowerbed.run({**FEDADAM, "rounds": 4}, save=False)

    class Killed(BaseException):
        pass

    original = checkpoints.Checkpoints.save

    def save_then_die(self: Any, server_round: int, state: dict[str, Any]) -> Any:
        out = original(self, server_round, state)
        if server_round == 3:
            raise Killed
        return out

    checkpoints.Checkpoints.save = save_then_die  # type: ignore[method-assign]
    try:
        with pytest.raises(Killed):
            run_sweep(load_plan(file), output_dir=tmp_path / "sweeps")
    finally:
        checkpoints.Checkpoints.save = original  # type: ignore[method-assign]
    result = run_sweep(load_plan(file), output_dir=tmp_path / "sweeps")
    (point,) = result.points
    assert point.status == "ok"
    assert point.summary is not None
    assert point.summary["results"] == reference.summary["results"]
    rows = _metric_rows(point.folder)
    assert sorted({r for r, _ in _rounds_phases(rows)}) == [0, 1, 2, 3, 4]
    assert len(set(_rounds_phases(rows))) == len(rows)
    assert not (point.folder / "previous").exists()  # resumed, not archived and restarted


@pytest.mark.slow
def test_simulation_engine_killed_mid_round_resumes_to_the_uninterrupted_numbers(tmp_path):
    scenario = {**FEDADAM, "rounds": 4, "engine": {"name": "simulation", "ray_num_cpus": 2}}
    reference = flowerbed.run({**scenario, "engine": "inline"}, save=False)
    run_dir = _killed_run(tmp_path, _write(tmp_path, scenario), kill_round=3, kill_phase="train")
    proc = _resume_cli(run_dir)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads((run_dir / SUMMARY_FILE).read_text())
    assert summary["results"] == reference.summary["results"]
    rows = _metric_rows(run_dir)
    assert len(set(_rounds_phases(rows))) == len(rows)


@pytest.mark.slow
def test_fedspa_with_client_state_resumes_to_the_uninterrupted_numbers(tmp_path):
    """FedSPA's clients keep their prototypes between rounds: the checkpoint restores them too."""
    from flowerbed.core.scenario import load_scenario

    base = load_scenario(
        ROOT / "scenarios/fedspa/synthetic.yaml",
        ["rounds=4", "strategy.local_epochs=2", "strategy.local_epochs_last=4",
         "strategy.server_epochs=5", "strategy.baselines=[local_only]", "engine=inline",
         "checkpoint.every=1"],
    ).to_dict()
    reference = flowerbed.run(base, save=False)
    run_dir = _killed_run(tmp_path, _write(tmp_path, base), kill_round=3, kill_phase="fedspa")
    assert (checkpoint_folders(run_dir)[-1] / "client_state").is_dir()
    proc = _resume_cli(run_dir)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads((run_dir / SUMMARY_FILE).read_text())
    assert _untimed(summary["results"]) == _untimed(reference.summary["results"])
    assert len(set(_rounds_phases(_metric_rows(run_dir)))) == len(_metric_rows(run_dir))


@pytest.mark.parametrize(
    ("strategy", "learner"),
    [({"name": "scaffold"}, "sgd_drift"), ({"name": "feddyn", "alpha": 0.1}, "sgd_drift"),
     ({"name": "ditto", "lam": 1.0}, "personal_sgd"),
     ({"name": "dp_server_adaptive", "noise_multiplier": 0.3, "num_sampled_clients": 4}, "sgd"),
     ({"name": "dp_client_fixed", "noise_multiplier": 0.5, "clipping_norm": 1.0,
       "num_sampled_clients": 4, "inner": {"name": "fedadam"}, "delta": None}, "sgd"),
     ({"name": "fedxgb_cyclic"}, "xgboost"), ({"name": "fedxgb_bagging"}, "xgboost")],
)
def test_strategies_with_their_own_state_resume_exactly(tmp_path, strategy, learner):
    """SCAFFOLD's ``c``/``c_i``, FedDyn's ``h``, Ditto's personal models, a DP wrapper's
    adaptive clipping norm and its inner FedAdam's moments, the XGBoost boosters survive a stop."""
    from flowerbed.core import checkpoints
    from flowerbed.platform.runner import RunError, resume

    sgd = {"lr": 0.05, "batch_size": 32}
    scenario = {**FEDADAM, "rounds": 4, "strategy": strategy,
                "learner": {"name": learner, **({} if learner == "xgboost" else sgd)}}
    if learner == "xgboost":  # trees: a tabular two-class task, no torch model
        scenario.update(dataset={"name": "breast_cancer"}, model=None, partition={"name": "iid"})
    reference = flowerbed.run(scenario, save=False)
    original = checkpoints.Checkpoints.save

    def save_then_fail(self: Any, server_round: int, state: dict[str, Any]) -> Any:
        out = original(self, server_round, state)
        if server_round == 2:
            raise RuntimeError("stopped after the round-2 checkpoint")
        return out

    checkpoints.Checkpoints.save = save_then_fail  # type: ignore[method-assign]
    try:
        with pytest.raises(RunError) as err:
            flowerbed.run(scenario, output_dir=tmp_path)
    finally:
        checkpoints.Checkpoints.save = original  # type: ignore[method-assign]
    assert err.value.run_dir is not None
    resumed = resume(err.value.run_dir)
    assert resumed.summary["results"] == reference.summary["results"]

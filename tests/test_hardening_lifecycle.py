"""First-user hardening: Ctrl-C and failed runs, resources, paths, time, noise, CLI details.

The subprocess tests run ``flowerbed`` as a user would (stderr piped, so not
a terminal) and read what it printed and what it left in the run folder.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import tiny_scenario

import flowerbed
from flowerbed.core.scenario import ScenarioError, from_dict
from flowerbed.platform import console, progress, resources, runner, simulation_control
from flowerbed.platform.cli import build_parser, main
from flowerbed.platform.results import Result
from flowerbed.platform.runner import RunError

REPO = Path(__file__).resolve().parents[1]
FLOWERBED = str(Path(sys.executable).parent / "flowerbed")
SIMULATION = {"name": "simulation", "ray_num_cpus": 1, "client_resources": {"num_cpus": 1}}
#: Ray's long-lived processes; none may outlive the run that started them.
RAY_PROCESSES = ("raylet", "gcs_server", "ray::", "dashboard", "log_monitor", "monitor.py")


def write_scenario(tmp_path: Path, **changes: Any) -> Path:
    data = tiny_scenario(output_dir=str(tmp_path / "runs"), **changes)
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def start_cli(
    *args: str, cwd: Path, verbose: bool = False, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO), **(env or {})}
    env.pop("FORCE_COLOR", None)
    cmd = [FLOWERBED, *(["-v"] if verbose else []), *args]
    return subprocess.Popen(
        cmd,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group: Ray's processes join it
        # A suite started as a background job inherits SIGINT ignored, and so would
        # the child: give it the default disposition, as a terminal's would have.
        preexec_fn=_default_sigint,
    )


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def finish(proc: subprocess.Popen[str], timeout: float) -> tuple[str, str]:
    """Wait for the process; on timeout kill its whole group and fail."""
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate()
        raise AssertionError(f"still running after {timeout} s; stderr:\n{err[-3000:]}") from None


def group_ray_processes(pgid: int) -> list[str]:
    """Ray processes still alive in process group ``pgid``."""
    import psutil

    found = []
    for p in psutil.process_iter(["pid", "name", "cmdline"]):
        try:
            if os.getpgid(p.pid) != pgid:
                continue
        except OSError:
            continue
        text = f"{p.info['name']} {' '.join(p.info['cmdline'] or [])}"
        if any(name in text for name in RAY_PROCESSES):
            found.append(text[:120])
    return found


def rows_of(run_dir: Path) -> list[dict[str, Any]]:
    text = (run_dir / "metrics.jsonl").read_text()
    return [json.loads(x) for x in text.splitlines() if x.strip()]


def wait_for_row(proc: subprocess.Popen[str], runs: Path, test: Any, timeout: float) -> Path:
    """The run folder once one of its ``metrics.jsonl`` rows passes ``test``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ended = proc.poll() is not None  # before reading: a row written just before exit counts
        for metrics in runs.glob("*/*/metrics.jsonl"):
            if any(test(r) for r in rows_of(metrics.parent)):
                return metrics.parent
        if ended:
            raise AssertionError(f"the run ended early: {proc.communicate()[1][-3000:]}")
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    raise AssertionError(f"no such row within {timeout} s")


# --- 1. Ctrl-C, failed runs, resources -------------------------------------------------


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.parametrize("target", ["process", "group"])
def test_ctrl_c_stops_a_simulation_run_promptly_and_cleanly(tmp_path, target):
    """One SIGINT (to the process, or to its group as a terminal sends it) ends the run.

    Exit 130 within seconds, no traceback, an ``interrupted`` row after the
    finished rounds, and no Ray process of the run left behind.
    """
    path = write_scenario(
        tmp_path, engine=SIMULATION, rounds=500, num_clients=2, partition="iid", baselines=[]
    )
    proc = start_cli("run", str(path), "--quiet", cwd=tmp_path)
    run_dir = wait_for_row(
        proc, tmp_path / "runs", lambda r: r.get("round", 0) >= 1 and "event" not in r, 240
    )
    if target == "group":
        os.killpg(proc.pid, signal.SIGINT)
    else:
        os.kill(proc.pid, signal.SIGINT)
    sent = time.monotonic()
    _, err = finish(proc, timeout=60)
    assert time.monotonic() - sent < 15, err
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "\x1b[" not in err, err
    assert [ln for ln in err.splitlines() if ln.strip()][-1].startswith("interrupted"), err
    rows = rows_of(run_dir)
    assert rows[-1]["event"] == "interrupted" and rows[-1]["rounds_done"] >= 1
    assert not (run_dir / "summary.json").exists()
    deadline = time.monotonic() + 5
    while (left := group_ray_processes(proc.pid)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, left
    assert "DEPRECATED" not in (run_dir / "run.log").read_text()


@pytest.mark.slow
@pytest.mark.ray
def test_failed_simulation_run_exits_promptly_with_one_line(tmp_path):
    """Every client raises every round: exit 1 right after the failure, one error line."""
    learner = {"name": "faulty_sgd", "fail_clients": [0, 1], "fault": "raise"}
    path = write_scenario(
        tmp_path, engine=SIMULATION, num_clients=2, partition="iid", learner=learner, baselines=[]
    )
    proc = start_cli("run", str(path), "--quiet", cwd=tmp_path)
    wait_for_row(proc, tmp_path / "runs", lambda r: r.get("event") == "run_failed", 240)
    _, err = finish(proc, timeout=20)
    assert proc.returncode == 1, err
    assert "Traceback" not in err and "\x1b[" not in err and "ERROR" not in err, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    failed = [ln for ln in lines if ln.startswith("run failed:")]
    assert len(failed) == 1 and "train round 1" in failed[0], err
    # Besides it, only flowerbed's one-line warnings naming each failing client.
    assert all(ln.startswith("WARNING round") for ln in lines if ln not in failed), err


def test_gpus_asked_without_a_gpu_are_refused_before_ray_starts(tmp_path):
    path = write_scenario(tmp_path, engine={"name": "simulation"})
    proc = start_cli(
        "run", str(path), "--quiet", "--set", "engine.client_resources.num_gpus=1",
        cwd=tmp_path, env={"CUDA_VISIBLE_DEVICES": ""},  # no GPU, even on a GPU machine
    )
    _, err = finish(proc, timeout=90)
    assert proc.returncode == 1, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "engine.client_resources.num_gpus" in lines[0], err
    assert "Traceback" not in err


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(resources, "visible_gpus", lambda: 0)


@pytest.fixture
def no_engine(monkeypatch):
    def engine(scenario, recorder):
        raise AssertionError("the engine must not start")

    for name in runner.ENGINES:
        monkeypatch.setitem(runner.ENGINES, name, engine)


def test_gpu_request_refused_in_process_names_the_field(tmp_path, no_gpu, no_engine):
    engine = {"name": "simulation", "client_resources": {"num_gpus": 0.5}}
    with pytest.raises(RunError, match=r"engine\.client_resources\.num_gpus"):
        flowerbed.run(tiny_scenario(engine=engine), output_dir=tmp_path)


def test_more_cpus_per_client_than_ray_has_is_refused(tmp_path, no_engine):
    engine = {"name": "simulation", "ray_num_cpus": 1, "client_resources": {"num_cpus": 2}}
    with pytest.raises(RunError, match=r"engine\.client_resources\.num_cpus"):
        flowerbed.run(tiny_scenario(engine=engine), output_dir=tmp_path)


def test_inline_gpu_request_falls_back_to_cpu_with_one_line(no_gpu, caplog):
    engine = {"name": "inline", "client_resources": {"num_gpus": 1}}
    with caplog.at_level(logging.INFO, logger="flowerbed"):
        result = flowerbed.run(tiny_scenario(engine=engine, baselines=[]), save=False)
    assert result.final()["test/accuracy"] > 0
    notes = [r for r in caplog.records if "CPU" in r.getMessage()]
    assert len(notes) == 1 and "engine.client_resources.num_gpus" in notes[0].getMessage()


def test_visible_gpus_honours_an_empty_cuda_visible_devices(monkeypatch):
    for hidden in ("", "-1"):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", hidden)
        assert resources.visible_gpus() == 0


def test_interrupted_run_is_recorded_and_the_cli_exits_130(tmp_path, monkeypatch, capsys):
    def interrupted_engine(scenario, recorder):
        recorder.metrics(1, "server_eval", {"accuracy": 0.5})
        raise KeyboardInterrupt

    monkeypatch.setitem(runner.ENGINES, "inline", interrupted_engine)
    path = write_scenario(tmp_path)
    assert main(["run", str(path), "--quiet"]) == 130
    err = capsys.readouterr().err
    (run_dir,) = (tmp_path / "runs" / "tiny").iterdir()
    assert err.strip().count("\n") == 0 and str(run_dir) in err
    rows = rows_of(run_dir)
    assert rows[-1]["event"] == "interrupted" and rows[-1]["rounds_done"] == 1
    with pytest.raises(KeyboardInterrupt) as info:
        flowerbed.run(tiny_scenario(), output_dir=tmp_path / "api")
    assert getattr(info.value, "run_dir", None) is not None


def test_stopping_the_engine_releases_a_server_waiting_for_replies(monkeypatch):
    """A ServerApp thread blocked on replies ends once the simulation engine stops.

    Without this, Ctrl-C or an engine crash left it waiting for
    ``federation.timeout`` and the process hung on exit.
    """
    from flwr.app import ConfigRecord, Message, RecordDict
    from flwr.common.constant import SUPERLINK_NODE_ID
    from flwr.supercore.task_identity import TaskIdentity

    from flowerbed.platform.linkstate import IndexedLinkStateFactory, simulation_state

    monkeypatch.setattr(TaskIdentity, "_run_id", 7)
    monkeypatch.setattr(TaskIdentity, "_task_id", 11)
    monkeypatch.setattr(TaskIdentity, "_node_id", SUPERLINK_NODE_ID)
    scenario = from_dict(tiny_scenario(engine={"name": "simulation"}))
    outcome: dict[str, BaseException] = {}

    def server(grid_cls: type) -> None:
        inner, nodes = simulation_state(IndexedLinkStateFactory, 2, 7, 11)
        factory = type("Factory", (), {"state": lambda self: inner.state})()
        grid = grid_cls(state_factory=factory)  # as Flower builds it in run_simulation
        grid.set_run(inner.run)
        message = Message(RecordDict({"c": ConfigRecord({"x": 1})}), nodes[0], "query")
        try:
            grid.send_and_receive([message], timeout=600)
        except BaseException as exc:  # noqa: BLE001 - what stopped it is the test
            outcome["error"] = exc

    module = importlib.import_module("flwr.simulation.run_simulation")
    thread = None
    with pytest.raises(RuntimeError, match="engine crashed"), runner.simulation_engine(scenario):
        thread = threading.Thread(target=server, args=(module.InMemoryGrid,), daemon=True)
        thread.start()
        time.sleep(0.5)
        raise RuntimeError("engine crashed")
    assert thread is not None
    thread.join(timeout=5)
    assert not thread.is_alive()
    assert isinstance(outcome["error"], simulation_control.SimulationStoppedError)


# --- 3. file-system problems through the Python API -------------------------------------


def test_api_scenario_path_problems_are_one_line_errors(tmp_path):
    folder = tmp_path / "a_folder"
    folder.mkdir()
    for path, needle in [(folder, "is a folder"), (tmp_path / "nope.yaml", "not found")]:
        with pytest.raises(ScenarioError) as info:
            flowerbed.run(path)
        text = str(info.value)
        assert "\n" not in text and str(path) in text and needle in text, text


def test_api_unusable_output_dir_fails_before_any_data_is_built(tmp_path, monkeypatch):
    import flowerbed.data.federated as federated

    def no_data(*args, **kwargs):
        raise AssertionError("no data may be built")

    monkeypatch.setattr(federated, "federated_data", no_data)
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    for root, needle in [(blocker, "is a file"), (blocker / "sub", "is a file")]:
        with pytest.raises(ScenarioError) as info:
            flowerbed.run(tiny_scenario(), output_dir=root)
        text = str(info.value)
        assert "\n" not in text and str(root) in text and needle in text, text


# --- 8. time --------------------------------------------------------------------------


PHASES = {"validate", "data", "connect", "strategy", "baselines", "total"}


def test_wall_time_covers_the_whole_call_and_phases_add_up(tmp_path, monkeypatch):
    real_check = resources.check_memory

    def slow_check(scenario, available=None):
        time.sleep(0.6)  # stands for data loading before the engine starts
        return real_check(scenario, available)

    monkeypatch.setattr(runner, "check_memory", slow_check)
    started = time.time()
    result = flowerbed.run(tiny_scenario(), output_dir=tmp_path)
    elapsed = time.time() - started
    summary = result.summary
    assert elapsed - 0.3 <= summary["wall_time_s"] <= elapsed + 0.05, (summary, elapsed)
    phases = summary["phases_s"]
    assert set(phases) >= PHASES and phases["total"] == summary["wall_time_s"]
    assert phases["data"] >= 0.6 and phases["baselines"] > 0 and phases["strategy"] > 0
    assert sum(v for k, v in phases.items() if k != "total") <= phases["total"] + 0.01
    on_disk = json.loads((result.run_dir / "summary.json").read_text())
    assert on_disk["phases_s"] == phases and on_disk["wall_time_s"] == summary["wall_time_s"]


def test_cli_wall_time_counts_from_process_start(tmp_path):
    path = write_scenario(tmp_path, baselines=[])
    started = time.time()
    proc = start_cli("run", str(path), "--quiet", cwd=tmp_path)
    out, err = finish(proc, timeout=300)
    assert proc.returncode == 0, err
    (summary_file,) = (tmp_path / "runs" / "tiny").glob("*/summary.json")
    summary = json.loads(summary_file.read_text())
    # From the process start (Python start-up and imports included) to the summary's
    # writing: only the printing afterwards is left out.
    until_written = summary_file.stat().st_mtime - started
    assert abs(until_written - summary["wall_time_s"]) < 0.5, (until_written, summary["phases_s"])
    assert summary["phases_s"]["startup"] > 0
    assert f"wall time {summary['wall_time_s']:.1f} s" in out


def test_live_display_is_told_what_the_run_is_doing():
    seen: list[str] = []
    with progress.activity_listener(seen.append):
        flowerbed.run(tiny_scenario(), save=False)
    text = "\n".join(seen)
    for needle in ("building data", "connecting clients", "waiting for 4 replies", "baselines"):
        assert needle in text, seen


def test_live_display_shows_the_current_activity_and_its_time():
    import io

    from rich.console import Console

    console = Console(file=io.StringIO(), force_terminal=False, width=100)
    with LiveProgressProbe(console) as display:
        progress.activity("starting Ray")
        rendered = display.render_text()
    assert "starting Ray" in rendered and " s" in rendered


def test_deployment_rows_are_shown_while_the_serverapp_writes_them(tmp_path):
    """A deployed ServerApp writes metrics.jsonl itself; the display follows it live."""
    from flowerbed.core.records import Recorder

    recorder = Recorder(from_dict(tiny_scenario()), tmp_path)
    seen: list[dict[str, Any]] = []
    recorder.listeners.append(seen.append)
    metrics = tmp_path / "metrics.jsonl"
    with runner.follow_rows(recorder, every_s=0.05):
        metrics.write_text('{"round": 1, "phase": "train"}\n{"round": 2')  # 2nd: half written
        deadline = time.monotonic() + 5
        while not seen and time.monotonic() < deadline:
            time.sleep(0.05)
        assert seen == [{"round": 1, "phase": "train"}]
        with metrics.open("a") as fh:
            fh.write(', "phase": "train"}\n')
        while len(seen) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
    assert seen[1] == {"round": 2, "phase": "train"}


def test_live_display_counts_a_row_seen_twice_once():
    import io

    from rich.console import Console

    console = Console(file=io.StringIO(), force_terminal=False)
    row = {"round": 1, "phase": "train", "event": "replies", "ok": 1, "failed": 1, "missing": 0}
    with progress.LiveProgress("demo", 2, console=console) as display:
        display(row)
        display(dict(row))
    assert display.failures == 1


class LiveProgressProbe(progress.LiveProgress):
    """The display with a way to read what it would draw now."""

    def __init__(self, console: Any) -> None:
        super().__init__("demo", 3, console=console)

    def render_text(self) -> str:
        import io

        from rich.console import Console

        buffer = io.StringIO()
        Console(file=buffer, width=100, force_terminal=False).print(self._render())
        return buffer.getvalue()


# --- 10. noise ------------------------------------------------------------------------


def test_cli_run_is_plain_text_and_quiet_and_verbose_brings_flower_back(tmp_path):
    path = write_scenario(tmp_path, baselines=[])
    proc = start_cli("run", str(path), cwd=tmp_path)
    out, err = finish(proc, timeout=180)
    assert proc.returncode == 0, err
    assert "\x1b[" not in out + err and "DEPRECATED" not in err
    assert "INFO" not in err, err
    proc = start_cli("run", str(path), "--quiet", cwd=tmp_path, verbose=True)
    out, err = finish(proc, timeout=180)
    assert proc.returncode == 0, err
    assert "\x1b[" not in out + err
    assert any(ln.startswith("INFO") and "ROUND" in ln for ln in err.splitlines()), err


def test_python_api_prints_nothing_of_flowers_by_default(tmp_path):
    code = (
        "import sys; sys.path.insert(0, 'tests'); from conftest import tiny_scenario; "
        "import flowerbed; flowerbed.run(tiny_scenario(), save=False)"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    assert "INFO" not in done.stdout + done.stderr, done.stderr[:2000]
    assert "\x1b[" not in done.stdout + done.stderr


def test_flowers_run_simulation_banner_is_dropped_everywhere(tmp_path):
    from flwr.supercore.logger import warn_deprecated_feature

    flwr_log = logging.getLogger("flwr")
    log_file = tmp_path / "run.log"
    handler = logging.FileHandler(log_file)
    flwr_log.addHandler(handler)
    try:
        with console.quiet_flower():
            warn_deprecated_feature("The `run_simulation` function is deprecated and will be")
            flwr_log.warning("another Flower warning")
    finally:
        flwr_log.removeHandler(handler)
        handler.close()
    text = log_file.read_text()
    assert "DEPRECATED" not in text and "another Flower warning" in text


def test_repeated_warnings_are_shown_once(monkeypatch, caplog):
    def warning_engine(scenario, recorder):
        for i in range(5):
            warnings.warn(f"partition retry {i}", UserWarning, stacklevel=1)
        return runner.run_inline(scenario, recorder)

    monkeypatch.setitem(runner.ENGINES, "inline", warning_engine)
    with caplog.at_level(logging.INFO, logger="flowerbed"):
        flowerbed.run(tiny_scenario(baselines=[]), save=False)
    shown = [r for r in caplog.records if "partition retry" in r.getMessage()]
    assert [r.levelno for r in shown].count(logging.WARNING) == 1, shown


# --- 12. CLI details --------------------------------------------------------------------


def test_version_flag(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert flowerbed.__version__ in capsys.readouterr().out


def test_list_kind_name_shows_parameters_with_defaults_and_descriptions(capsys):
    assert main(["list", "partition", "dirichlet"]) == 0
    out = capsys.readouterr().out
    for needle in ("alpha", "0.5", "concentration", "min_partition_size", "10"):
        assert needle in out, out


def test_list_unknown_name_is_one_line_listing_the_known_ones(capsys):
    assert main(["list", "strategy", "fedavgg"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "fedavgg" in err and "fedavg" in err.replace("fedavgg", "")


def test_result_final_of_an_unknown_source_names_the_known_ones():
    result = Result({"results": {"federated": {}, "centralized": {}}}, [], None)
    with pytest.raises(KeyError) as info:
        result.final("fedavg")
    assert "federated" in str(info.value) and "centralized" in str(info.value)


def _subparsers(parser: Any) -> list[tuple[str, Any]]:
    import argparse

    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.append((name, sub))
                found.extend((f"{name} {n}", s) for n, s in _subparsers(sub))
    return found


def test_every_subcommand_has_a_description():
    missing = [name for name, p in _subparsers(build_parser()) if not (p.description or "").strip()]
    assert not missing, missing


def test_the_deployment_tutorials_example_is_short_and_says_how_long():
    text = (REPO / "docs" / "tutorial-from-simulation-to-deployment.md").read_text()
    line = next(ln for ln in text.splitlines() if "--set engine=deployment --set num_clients" in ln)
    assert "--set rounds=2" in line
    section = text.split("## A deployment on this machine", 1)[1].split("## Several machines")[0]
    assert "minute" in section or " s)" in section or "seconds" in section


def test_an_abbreviated_option_is_refused_not_guessed(capsys):
    """`--output` once ran as `--output-dir`; every option must be spelled out."""
    from flowerbed.platform.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["run", "scenarios/quickstart.yaml", "--output", "elsewhere"])
    assert exc.value.code == 2
    assert "unrecognized arguments: --output elsewhere" in capsys.readouterr().err

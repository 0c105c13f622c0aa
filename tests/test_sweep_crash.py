"""A sweep process killed with SIGKILL midway, then re-run: every point ends with one result.

The sweep runs as a real ``flowerbed sweep`` subprocess so that the kill is a
real crash (no ``finally`` blocks, no atexit handlers, files left as they were).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from flowerbed.platform import sweep as sw

#: Six inline points of a tiny digits scenario, a few seconds each on a loaded machine.
SWEEP = {
    "name": "crash",
    "num_clients": 3,
    "rounds": 2,
    "dataset": {"name": "digits"},
    "partition": {"name": "iid"},
    "model": {"name": "mlp", "hidden": [16]},
    "learner": {"name": "sgd", "lr": 0.1, "batch_size": 16, "local_epochs": 1},
    "strategy": {"name": "fedavg"},
    "engine": "inline",
    "sweep": {"name": "crash", "learner.lr": [0.05, 0.1], "seeds": [0, 1, 2]},
}
#: Generous: the machine running the tests may be shared and loaded.
TIMEOUT_S = 600


def _command(path: Path, out: Path) -> list[str]:
    """``flowerbed sweep`` through this interpreter (no reliance on PATH)."""
    code = "import sys; from flowerbed.platform.cli import main; sys.exit(main(sys.argv[1:]))"
    return [sys.executable, "-c", code, "sweep", str(path), "--output-dir", str(out), "--quiet"]


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def _summaries(root: Path) -> list[Path]:
    return sorted(root.glob("*/summary.json"))


def _in_progress(root: Path) -> bool:
    """A point folder with an attempt under way (metrics written, no summary yet)."""
    return any(
        (d / "metrics.jsonl").exists() and not (d / "summary.json").exists()
        for d in root.glob("[0-9]*-*")
    )


def _kill_midway(cmd: list[str], root: Path, total: int) -> None:
    """Start the sweep; SIGKILL it once a point is done and the next one is running."""
    proc = subprocess.Popen(
        cmd, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
    )
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                err = proc.stderr.read().decode() if proc.stderr else ""
                pytest.fail(f"the sweep ended (status {proc.returncode}) before the kill:\n{err}")
            if len(_summaries(root)) >= 1 and _in_progress(root):
                break
            time.sleep(0.02)
        else:
            pytest.fail("no point finished within the timeout")
    finally:
        # The whole process group: nothing the sweep started may live on.
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
        if proc.stderr:
            proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    assert 1 <= len(_summaries(root)) < total, "the kill came too late to test anything"


@pytest.mark.slow
def test_sigkilled_sweep_resumes_without_duplicates_or_lost_points(tmp_path):
    path = tmp_path / "crash.yaml"
    path.write_text(yaml.safe_dump(SWEEP, sort_keys=False))
    out = tmp_path / "runs"
    plan = sw.load_plan(path)
    total = len(plan.points)
    root = plan.root(out)
    expected = {plan.folder(p, out).name: p for p in plan.points}
    assert total == 6

    _kill_midway(_command(path, out), root, total)
    done_before = {f.parent.name: (f.read_bytes(), f.stat().st_mtime_ns) for f in _summaries(root)}
    interrupted = [
        d
        for d in root.glob("[0-9]*-*")
        if d.name not in done_before and (d / "metrics.jsonl").exists()
    ]
    assert interrupted, "the kill should have caught a point in progress"

    rerun = subprocess.run(
        _command(path, out), env=_env(), capture_output=True, text=True, timeout=TIMEOUT_S
    )
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    counts = re.search(r"(\d+) ran, (\d+) skipped \(done before\), (\d+) failed", rerun.stdout)
    assert counts, rerun.stdout
    assert [int(c) for c in counts.groups()] == [total - len(done_before), len(done_before), 0]

    # One folder per point, named by its index and digest: nothing duplicated or stray.
    folders = sorted(d.name for d in root.iterdir() if d.is_dir())
    assert folders == sorted(expected)
    for name, point in expected.items():
        folder = root / name
        # Exactly one result: one summary.json in the folder tree (none in previous/).
        assert [p.relative_to(folder) for p in folder.rglob("summary.json")] == [
            Path("summary.json")
        ]
        summary = json.loads((folder / "summary.json").read_text())
        assert summary["digest"] == point.digest
        rows = (folder / "metrics.jsonl").read_text().splitlines()
        assert sum('"connected"' in r for r in rows) == 1, name  # one attempt's log, not two
        if name not in done_before:
            assert json.loads((folder / "status.json").read_text())["status"] == "ok"
            assert not list(folder.glob(".*.tmp")), name

    # Points finished before the kill were not redone: same bytes, same mtime.
    for name, (content, mtime) in done_before.items():
        summary = root / name / "summary.json"
        assert summary.read_bytes() == content and summary.stat().st_mtime_ns == mtime
    # The interrupted attempt was moved aside, not lost and not mixed into the new one.
    for folder in interrupted:
        assert (folder / "previous" / "1" / "metrics.jsonl").is_file()

    state = json.loads((root / sw.PLAN_FILE).read_text())
    assert [p["state"] for p in state["points"]] == ["done"] * total
    assert [p["folder"] for p in state["points"]] == [plan.folder(p, out).name for p in plan.points]

"""Loading run folders (single runs and sweep points) for a report."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from flowerbed.core.keys import LOCAL_TASK
from flowerbed.core.records import CLIENT_METRICS_FILE, METRICS_FILE, SCENARIO_FILE, SUMMARY_FILE

REPORT_DIR = "report"
OVERRIDES_FILE = "overrides.yaml"  # written by flowerbed.platform.sweep
PLAN_FILE = "sweep.json"
STATUS_FILE = "status.json"
ERROR_FILE = "error.txt"
SKIP_DIRS = (REPORT_DIR, "previous")


@dataclass
class RunInfo:
    """What one run folder holds, as the report needs it.

    ``rows`` are ``metrics.jsonl``'s rows; ``clients`` the per-client rows of a
    local task (see :func:`local_client_rows`), empty for other runs.
    """

    path: Path
    scenario: dict[str, Any]
    overrides: dict[str, Any]
    summary: dict[str, Any] | None
    rows: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    clients: list[dict[str, Any]] = field(default_factory=list)

    @property
    def name(self) -> str:
        """The folder name (``003-1a2b3c4d5e`` for a sweep point)."""
        return self.path.name

    @property
    def ok(self) -> bool:
        """Whether the run finished (its summary exists)."""
        return self.summary is not None

    def final(self) -> dict[str, dict[str, float]]:
        """Return final metrics by source (``federated``, baselines)."""
        results: dict[str, dict[str, float]] = (self.summary or {}).get("results", {})
        return results


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return {}
    return data if isinstance(data, dict) else {}


def _read_rows(path: Path, containing: str = "") -> list[dict[str, Any]]:
    """JSON rows of a JSON-lines file; with ``containing``, only lines holding that text."""
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        if containing not in line:
            continue  # cheaper than parsing the rows of every round of a long run
        try:
            row = json.loads(line)
        except ValueError:
            continue  # a line cut by a crash
        if isinstance(row, dict):
            rows.append(row)
    return rows


def local_client_rows(run_dir: Path) -> list[dict[str, Any]]:
    """Each client's row of the local task (strategy ``local``), by client id.

    The rows are ``client_metrics.jsonl``'s rows of phase ``train.local``:
    ``{"round", "phase", "client", "num_examples", "metrics": {...}}``. Other
    phases (``train``, ``evaluate`` of federated rounds) are left out; a client
    with several local-task rows keeps its last one.

    Returns
    -------
    list of dict
        One row per client, ascending client id; empty when the run has no
        local task.
    """
    rows = _read_rows(run_dir / CLIENT_METRICS_FILE, containing=LOCAL_TASK)
    by_client: dict[int, dict[str, Any]] = {}
    for row in rows:
        if row.get("phase") == LOCAL_TASK and isinstance(row.get("client"), int):
            by_client[row["client"]] = row
    return [by_client[c] for c in sorted(by_client)]


def load_run(path: Path) -> RunInfo:
    """Read a run folder; a run without ``summary.json`` comes back with its error."""
    scenario = _read_yaml(path / SCENARIO_FILE)
    point = _read_yaml(path / OVERRIDES_FILE)
    summary = _read_json(path / SUMMARY_FILE)
    error = None
    if summary is None:
        status = _read_json(path / STATUS_FILE) or {}
        error = status.get("error") or "unfinished (no summary.json)"
    overrides = (point or {}).get("overrides") or {}
    rows = _read_rows(path / METRICS_FILE)
    return RunInfo(
        path, scenario or {}, overrides, summary, rows, error, local_client_rows(path)
    )


def _is_run(path: Path) -> bool:
    return any((path / f).is_file() for f in (SUMMARY_FILE, SCENARIO_FILE, STATUS_FILE))


def _candidates(root: Path) -> list[Path]:
    """Subfolders that may be runs; for a sweep, only the current plan's points.

    A sweep's ``sweep.json`` lists its points, so folders of an older plan
    (other digests) left in the same sweep folder are not mixed in.
    """
    plan = _read_json(root / PLAN_FILE)
    if isinstance(plan, dict) and isinstance(plan.get("points"), list):
        return [root / str(p.get("folder")) for p in plan["points"] if isinstance(p, dict)]
    return [p for p in sorted(root.iterdir()) if p.name not in SKIP_DIRS]


def find_runs(path: str | Path) -> list[RunInfo]:
    """Load the run at ``path``, or the runs in its subfolders (sorted by name).

    Raises
    ------
    FileNotFoundError
        ``path`` is neither a run folder nor a folder of runs.
    """
    root = Path(path)
    if _is_run(root):
        return [load_run(root)]
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: no such folder")
    runs = [load_run(p) for p in _candidates(root) if p.is_dir() and _is_run(p)]
    if not runs:
        raise FileNotFoundError(f"{root}: neither a run folder nor a folder of run folders")
    return runs

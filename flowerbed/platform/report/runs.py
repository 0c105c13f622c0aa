"""Loading run folders (single runs and sweep points) for a report."""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
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
#: Phases whose rows are the federated model's own, in the order a metric is looked up:
#: the server's evaluation first, then the clients' training and evaluation means.
FEDERATED_PHASES = ("server_eval", "train", "evaluate", "local")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _round(row: dict[str, Any]) -> int | None:
    value = row.get("round")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def latest_metrics(
    rows: Sequence[dict[str, Any]], upto: int | None = None
) -> dict[str, float]:
    """Each ``<split>/<metric>`` the federated model logged, at the last round it was logged.

    ``metrics.jsonl`` names a value ``<phase>/<split>/<metric>``; the names
    here drop the phase. A metric several phases log comes from the first
    of :data:`FEDERATED_PHASES`; rows after round ``upto`` are ignored.
    """
    by_phase: dict[str, dict[str, float]] = {p: {} for p in FEDERATED_PHASES}
    for row in rows:
        phase, rnd = row.get("phase"), _round(row)
        if phase not in by_phase or "event" in row or (upto is not None and (rnd or 0) > upto):
            continue
        prefix = f"{phase}/"
        for key, value in row.items():
            if key.startswith(prefix) and _number(value):
                by_phase[str(phase)][key.removeprefix(prefix)] = float(value)  # later rows win
    merged: dict[str, float] = {}
    for values in by_phase.values():
        for key, value in values.items():
            merged.setdefault(key, value)
    return merged


def metrics_round(rows: Sequence[dict[str, Any]]) -> int | None:
    """The round a killed run's table shows: its last server evaluation, else last metrics row."""
    for phases in (("server_eval",), FEDERATED_PHASES):
        rounds = [
            r for row in rows
            if row.get("phase") in phases and "event" not in row and (r := _round(row)) is not None
        ]
        if rounds:
            return max(rounds)
    return None


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
    #: What could not be read (a corrupt summary, unparseable rows), one line each.
    problems: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        """The folder name (``003-1a2b3c4d5e`` for a sweep point)."""
        return self.path.name

    @property
    def ok(self) -> bool:
        """Whether the run finished (its summary exists)."""
        return self.summary is not None

    @property
    def rounds(self) -> int | None:
        """The rounds the scenario asked for."""
        value = self.scenario.get("rounds")
        return value if isinstance(value, int) else None

    @functools.cached_property
    def partial_round(self) -> int | None:
        """For an unfinished run with metrics rows: the round its table shows, else ``None``."""
        return None if self.ok else metrics_round(self.rows)

    @property
    def partial(self) -> bool:
        """Whether this is a killed or failed run reported from its last round."""
        return self.partial_round is not None and bool(self.final())

    @property
    def reached(self) -> int | None:
        """The last round any row of ``metrics.jsonl`` belongs to."""
        rounds = [r for row in self.rows if (r := _round(row)) is not None]
        return max(rounds) if rounds else None

    def progress_note(self) -> str:
        """``reached round 4 of 10; metrics at round 3`` for a partial run, else ``""``."""
        if not self.partial:
            return ""
        of = f" of {self.rounds}" if self.rounds else ""
        return f"reached round {self.reached}{of}; metrics at round {self.partial_round}"

    def source_label(self, source: str) -> str:
        """``federated``, or ``federated (partial: round 3 of 10)`` for a partial run."""
        if not self.partial:
            return source
        of = f" of {self.rounds}" if self.rounds else ""
        return f"{source} (partial: round {self.partial_round}{of})"

    def final(self) -> dict[str, dict[str, float]]:
        """Return final metrics by source (``federated``, baselines).

        The federated source also has what only ``metrics.jsonl`` holds
        (``train/upload_bytes``: its last round); the summary's values win.
        A run without a summary has only ``federated``, at
        :attr:`partial_round`.
        """
        return self._final

    @functools.cached_property
    def _final(self) -> dict[str, dict[str, float]]:
        if self.summary is None:
            if self.partial_round is None:
                return {}
            values = latest_metrics(self.rows, upto=self.partial_round)
            return {"federated": values} if values else {}
        results: dict[str, dict[str, float]] = dict(self.summary.get("results") or {})
        if "federated" in results and self.rows:
            federated = results["federated"]
            logged = latest_metrics(self.rows).items()
            results["federated"] = {**federated, **{k: v for k, v in logged if k not in federated}}
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


def _read_rows(
    path: Path, containing: str = "", bad: list[int] | None = None
) -> list[dict[str, Any]]:
    """JSON rows of a JSON-lines file; with ``containing``, only lines holding that text.

    Lines that are not a JSON object are skipped; their numbers (from 1) go
    to ``bad`` when given.
    """
    if not path.is_file():
        return []
    rows = []
    for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        if containing not in line or not line.strip():
            continue  # cheaper than parsing the rows of every round of a long run
        try:
            row = json.loads(line)
        except ValueError:
            row = None  # garbage, or a line cut by a crash
        if isinstance(row, dict):
            rows.append(row)
        elif bad is not None:
            bad.append(number)
    return rows


def metrics_rows(run_dir: Path, problems: list[str] | None = None) -> list[dict[str, Any]]:
    """``metrics.jsonl``'s rows of a run folder (none when it has no such file).

    With ``problems``, a line naming the unreadable lines is added to it.
    """
    bad: list[int] = []
    rows = _read_rows(run_dir / METRICS_FILE, bad=bad)
    if bad and problems is not None:
        shown = ", ".join(map(str, bad[:5])) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
        problems.append(
            f"{run_dir / METRICS_FILE}: {len(bad)} line(s) are not JSON rows, skipped "
            f"(line {shown})"
        )
    return rows


def _summary(path: Path, problems: list[str]) -> dict[str, Any] | None:
    """``summary.json`` of a run folder; ``None``, with a line in ``problems``, if unreadable."""
    file = path / SUMMARY_FILE
    if not file.exists():
        return None
    try:
        data = json.loads(file.read_text())
    except (OSError, ValueError) as exc:
        problems.append(f"{file}: unreadable ({type(exc).__name__}: {exc})")
        return None
    if not isinstance(data, dict):
        problems.append(f"{file}: not a summary (a JSON {type(data).__name__}, not an object)")
        return None
    return data


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
    problems: list[str] = []
    summary = _summary(path, problems)
    error = None
    if summary is None:
        status = _read_json(path / STATUS_FILE) or {}
        unreadable = "unfinished or damaged (summary.json unreadable)" if problems else None
        error = status.get("error") or unreadable or "unfinished (no summary.json)"
    overrides = (point or {}).get("overrides") or {}
    rows = metrics_rows(path, problems)
    return RunInfo(
        path, scenario or {}, overrides, summary, rows, error, local_client_rows(path), problems
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
    if root.is_file():
        raise FileNotFoundError(
            f"{root}: a file; give a run folder (it holds {SCENARIO_FILE}) or a folder of runs"
        )
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: no such folder")
    runs = [load_run(p) for p in _candidates(root) if p.is_dir() and _is_run(p)]
    if not runs:
        raise FileNotFoundError(f"{root}: neither a run folder nor a folder of run folders")
    return runs

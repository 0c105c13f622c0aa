"""Sweeps: expand a scenario's ``sweep:`` block into validated points and run them.

A sweep block maps dotted scenario keys to value lists::

    sweep:
      name: quickstart_alpha          # folder under the output dir (default: <scenario>-sweep)
      partition.alpha: [0.1, 1.0]     # bare keys are grid axes (cartesian product)
      grid: {learner.lr: [0.01, 0.1]} # the same, spelt out
      zip:                            # each group varies its keys together, position-wise
        - {rounds: [2, 4], learner.local_epochs: [2, 1]}
      seeds: [0, 1]                   # the root seed, always the innermost axis

Planning (:func:`expand`) is a pure function: every point is resolved and
validated before anything runs. Running (:func:`run_sweep`) writes each point
to ``<output_dir>/<sweep>/<index>-<digest>/`` with the layout of a plain run,
skips points whose ``summary.json`` carries the same digest, records failures
without stopping, and runs all simulation points that can share one Flower
simulation (same engine, clients and resources) in a single Ray start-up.
"""

from __future__ import annotations

import argparse
import copy
import functools
import itertools
import json
import re
import shutil
import sys
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from flowerbed.platform.results import SUMMARY_FILE, atomic_write
from flowerbed.platform.scenario import (
    COMPONENT_FIELDS,
    Scenario,
    ScenarioError,
    apply_overrides,
    parse_override,
    read_yaml,
    validate_scenario,
)

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from flowerbed.platform.results import Recorder

PLAN_FILE = "sweep.json"
SOURCE_FILE = "sweep.yaml"
OVERRIDES_FILE = "overrides.yaml"
STATUS_FILE = "status.json"
ERROR_FILE = "error.txt"
PREVIOUS_DIR = "previous"
#: Files a point attempt writes; an unfinished attempt's are moved aside before a retry.
ATTEMPT_FILES = (
    "metrics.jsonl", "run.log", "clients.json", SUMMARY_FILE, STATUS_FILE, ERROR_FILE,
)
RESERVED = ("name", "grid", "zip", "seeds")
MAX_PROBLEMS = 20
_KEY_RE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
#: Shorthand-able scenario fields (``engine: inline`` means ``engine: {name: inline}``).
_NAMED_FIELDS = (*COMPONENT_FIELDS, "engine")

Axis = list[dict[str, Any]]


# --------------------------------------------------------------------------- schema


def _check_key(key: str) -> str:
    if not _KEY_RE.match(key):
        raise ValueError(f"{key!r} is not a dotted scenario key (e.g. partition.alpha)")
    if key.split(".")[0] == "sweep":
        raise ValueError(f"{key!r}: a sweep cannot sweep itself")
    return key


class SweepSpec(BaseModel):
    """The ``sweep:`` block of a scenario file: strict, frozen, no unknown reserved keys.

    Attributes
    ----------
    name
        Folder of the sweep under the output dir (default ``<scenario>-sweep``).
    grid
        Dotted key to value list; axes combine as a cartesian product. Keys
        written directly in the block (not under a reserved name) land here.
    zip
        Groups of keys whose value lists have equal length and vary together.
    seeds
        Root seeds, the innermost axis (sets the scenario's ``seed``).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    grid: dict[str, list[Any]] = Field(default_factory=dict)
    zip: list[dict[str, list[Any]]] = Field(default_factory=list)
    seeds: list[Annotated[int, Field(ge=0)]] | None = None

    @model_validator(mode="before")
    @classmethod
    def _bare_keys_are_grid(cls, data: Any) -> Any:
        """``partition.alpha: [..]`` directly in the block is a grid axis."""
        if not isinstance(data, dict):
            return data
        bare = {k: v for k, v in data.items() if k not in RESERVED}
        if not bare:
            return data
        grid = dict(data.get("grid") or {}) if isinstance(data.get("grid"), dict) else {}
        for key in bare:
            if key in grid:
                raise ValueError(f"{key!r} is given both directly and under grid")
        rest = {k: v for k, v in data.items() if k in RESERVED}
        return {**rest, "grid": {**grid, **bare}}

    @field_validator("grid")
    @classmethod
    def _grid_axes(cls, grid: dict[str, list[Any]]) -> dict[str, list[Any]]:
        for key, values in grid.items():
            _check_key(key)
            if not values:
                raise ValueError(f"{key!r} has an empty value list")
        return grid

    @field_validator("zip")
    @classmethod
    def _zip_groups(cls, groups: list[dict[str, list[Any]]]) -> list[dict[str, list[Any]]]:
        for i, group in enumerate(groups):
            if not group:
                raise ValueError(f"zip group {i} is empty")
            for key in group:
                _check_key(key)
            lengths = {k: len(v) for k, v in group.items()}
            if len(set(lengths.values())) != 1 or 0 in lengths.values():
                raise ValueError(f"zip group {i}: value lists must have one length: {lengths}")
        return groups

    @field_validator("seeds")
    @classmethod
    def _seed_list(cls, seeds: list[int] | None) -> list[int] | None:
        if seeds is not None and (not seeds or len(set(seeds)) != len(seeds)):
            raise ValueError("seeds must be a non-empty list without repeats")
        return seeds

    @model_validator(mode="after")
    def _distinct_axes(self) -> SweepSpec:
        keys = [*self.grid, *(k for g in self.zip for k in g)]
        repeated = sorted({k for k in keys if keys.count(k) > 1})
        if repeated:
            raise ValueError(f"keys swept twice: {', '.join(repeated)}")
        if self.seeds is not None and "seed" in keys:
            raise ValueError("'seed' is swept as a key and by seeds; keep one")
        return self

    def axes(self) -> list[Axis]:
        """Each axis as its list of assignments, in expansion order (seeds last)."""
        out: list[Axis] = [[{key: v} for v in values] for key, values in self.grid.items()]
        for group in self.zip:
            length = len(next(iter(group.values())))
            out.append([{k: vals[i] for k, vals in group.items()} for i in range(length)])
        if self.seeds is not None:
            out.append([{"seed": s} for s in self.seeds])
        return out

    def keys(self) -> list[str]:
        """Swept keys in column order."""
        return [*self.grid, *(k for g in self.zip for k in g), *(["seed"] if self.seeds else [])]


def _pydantic_problems(exc: ValidationError) -> list[str]:
    """One ``sweep.<path>: message`` line per pydantic error."""
    lines = []
    for err in exc.errors():
        loc = "".join(f"[{p!r}]" if "." in str(p) else f".{p}" for p in err["loc"])
        msg = str(err["msg"]).removeprefix("Value error, ")
        msg = msg[:1].lower() + msg[1:]
        got = err.get("input")
        if err["type"] != "value_error" and not isinstance(got, (dict, list)):
            msg += f" (got {got!r})"
        lines.append(f"sweep{loc}: {msg}")
    return lines


def parse_sweep(block: Any, source: str = "sweep") -> SweepSpec:
    """Validate a ``sweep:`` block (``None`` means a single point).

    Raises
    ------
    ScenarioError
        One line per problem, each naming its path under ``sweep``.
    """
    if block is None:
        return SweepSpec()
    if not isinstance(block, dict):
        raise ScenarioError(["sweep: must be a mapping of dotted keys to value lists"], source)
    try:
        return SweepSpec.model_validate(block)
    except ValidationError as exc:
        raise ScenarioError(_pydantic_problems(exc), source) from None


def combinations(spec: SweepSpec) -> list[dict[str, Any]]:
    """Every point's assignments (dotted key to value), in index order.

    Examples
    --------
    >>> spec = parse_sweep({"partition.alpha": [0.1, 1.0], "seeds": [0, 1]})
    >>> [tuple(c.values()) for c in combinations(spec)]
    [(0.1, 0), (0.1, 1), (1.0, 0), (1.0, 1)]
    """
    out = []
    for combo in itertools.product(*spec.axes()):
        merged: dict[str, Any] = {}
        for part in combo:
            merged.update(part)
        out.append(merged)
    return out


# --------------------------------------------------------------------------- planning


def assign(data: dict[str, Any], key: str, value: Any) -> None:
    """Set ``data[a][b][c] = value`` for ``key = "a.b.c"`` in place.

    A component given by name only (``learner: sgd``, ``engine: inline``)
    is expanded to ``{name: ...}`` first so its name is kept.
    """
    node = data
    parts = key.split(".")
    for part in parts[:-1]:
        child = node.get(part)
        if isinstance(child, str) and part in _NAMED_FIELDS:
            child = {"name": child}
        if not isinstance(child, dict):
            child = {}
        node[part] = child
        node = child
    node[parts[-1]] = copy.deepcopy(value)


def format_value(value: Any) -> str:
    """Compact one-line text of a swept value (flow YAML)."""
    text = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip()
    return text.removesuffix("\n...").removesuffix("...").strip()


def label(overrides: dict[str, Any]) -> str:
    """``partition.alpha=0.1 seed=0``: how points are named in messages and tables."""
    return " ".join(f"{k}={format_value(v)}" for k, v in overrides.items()) or "(base)"


@dataclass(frozen=True)
class SweepPoint:
    """One resolved, validated scenario of a sweep."""

    index: int
    overrides: dict[str, Any] = field(hash=False)
    scenario: Scenario = field(hash=False)

    @property
    def digest(self) -> str:
        """The resolved scenario's digest (also in its ``summary.json``)."""
        return self.scenario.digest()

    def folder_name(self, width: int = 3) -> str:
        """``<index>-<digest>``, the index zero-padded to ``width``."""
        return f"{self.index:0{width}d}-{self.digest}"

    def group_key(self) -> tuple[Any, ...]:
        """Points with equal keys can share one Flower simulation (one Ray start-up)."""
        eng = self.scenario.engine
        res = eng.client_resources
        return (eng.name, self.scenario.num_clients, res.num_cpus, res.num_gpus, eng.ray_num_cpus)


@dataclass(frozen=True)
class SweepPlan:
    """A sweep expanded into points, ready to run."""

    name: str
    keys: tuple[str, ...]
    points: tuple[SweepPoint, ...]
    source: dict[str, Any] = field(hash=False)

    @property
    def width(self) -> int:
        """Digits of the zero-padded point index."""
        return max(3, len(str(len(self.points) - 1)))

    def root(self, output_dir: str | Path | None = None) -> Path:
        """``<output_dir>/<sweep name>`` (default output dir: the scenario's)."""
        base = output_dir if output_dir is not None else self.points[0].scenario.output_dir
        return Path(base) / self.name

    def folder(self, point: SweepPoint, output_dir: str | Path | None = None) -> Path:
        """Return the run folder of ``point``."""
        return self.root(output_dir) / point.folder_name(self.width)


def _split_sets(overrides: Iterable[str]) -> tuple[list[str], list[str]]:
    """``--set`` values for the sweep block (``sweep.…``) and for the base scenario."""
    sweep_sets, base_sets = [], []
    for text in overrides:
        (sweep_sets if text.strip().startswith("sweep.") else base_sets).append(text)
    return sweep_sets, base_sets


def _set_sweep(block: dict[str, Any], text: str) -> None:
    """Apply ``sweep.seeds=[..]``, ``sweep.name=x`` or ``sweep.<dotted key>=[..]``."""
    path, value = parse_override(text)
    key = ".".join(path[1:]).removeprefix("grid.")
    if key in ("name", "seeds"):
        block[key] = value
        return
    for group in block.get("zip") or []:
        if isinstance(group, dict) and key in group:
            group[key] = value
            return
    grid = block.get("grid")
    if isinstance(grid, dict) and key in grid:
        grid[key] = value
    else:
        block[key] = value


def _check_set_conflicts(base_sets: list[str], spec: SweepSpec) -> None:
    swept = set(spec.keys())
    clash = [t for t in base_sets if ".".join(parse_override(t)[0]) in swept]
    if clash:
        raise ScenarioError(
            [f"--set {t!r}: this key is a sweep axis; use --set sweep.<key>=[...]" for t in clash],
            "--set",
        )


def _resolve_points(
    base: dict[str, Any], combos: list[dict[str, Any]], source: str
) -> list[SweepPoint]:
    """Validate every point; collect one line per problem, each naming point and field."""
    points: list[SweepPoint] = []
    problems: dict[str, list[int]] = {}  # problem -> points having it
    firsts: dict[str, str] = {}
    for i, combo in enumerate(combos):
        data = copy.deepcopy(base)
        for key, value in combo.items():
            assign(data, key, value)
        try:
            points.append(SweepPoint(i, combo, validate_scenario(data, source)))
        except ScenarioError as exc:
            for p in exc.problems:
                problems.setdefault(p, []).append(i)
                firsts.setdefault(p, label(combo))
    seen: dict[str, int] = {}
    for pt in points:
        if pt.digest in seen:
            text = f"same resolved scenario as point {seen[pt.digest]}"
            problems.setdefault(text, []).append(pt.index)
            firsts.setdefault(text, label(pt.overrides))
        seen.setdefault(pt.digest, pt.index)
    if problems:
        raise ScenarioError(_point_problems(problems, firsts), source)
    return points


def _point_problems(problems: dict[str, list[int]], firsts: dict[str, str]) -> list[str]:
    """``point i [assignments]: field: problem``; repeats name the other points briefly."""
    lines = []
    for text, where in problems.items():
        also = f" (also points {', '.join(map(str, where[1:]))})" if len(where) > 1 else ""
        lines.append(f"point {where[0]} [{firsts[text]}]: {text}{also}")
    more = len(lines) - MAX_PROBLEMS
    return lines[:MAX_PROBLEMS] + ([f"... and {more} more"] if more > 0 else [])


def expand(
    data: dict[str, Any], overrides: Iterable[str] = (), source: str = "sweep"
) -> SweepPlan:
    """Expand scenario data with a ``sweep:`` block into a validated :class:`SweepPlan`.

    Parameters
    ----------
    data
        The scenario mapping as read from YAML, ``sweep`` block included.
    overrides
        ``--set`` strings: ``sweep.<…>`` ones edit the block, the rest the base.
    source
        Name used in error messages (usually the file path).

    Raises
    ------
    ScenarioError
        Before anything runs: a bad block, or any point that does not
        validate (one line per problem, naming the point and the field).
    """
    raw = copy.deepcopy(data)
    block = raw.pop("sweep", None)
    sweep_sets, base_sets = _split_sets(overrides)
    if sweep_sets:
        block = copy.deepcopy(block) if isinstance(block, dict) else {}
        for text in sweep_sets:
            _set_sweep(block, text)
    spec = parse_sweep(block, source)
    _check_set_conflicts(base_sets, spec)
    base = apply_overrides(raw, base_sets)
    points = _resolve_points(base, combinations(spec), source)
    name = spec.name or f"{base.get('name', 'scenario')}-sweep"
    full = {**base, "sweep": block} if block is not None else base
    return SweepPlan(name, tuple(spec.keys()), tuple(points), full)


def load_plan(path: str | Path, overrides: Iterable[str] = ()) -> SweepPlan:
    """Read a scenario file (sweep block kept) and :func:`expand` it."""
    read_yaml(path)  # file and YAML errors, worded like plain runs
    data = yaml.safe_load(Path(path).read_text())
    return expand(data, overrides, str(path))


# --------------------------------------------------------------------------- run folders


def point_state(folder: Path, point: SweepPoint) -> str:
    """``done`` (summary with this digest), ``failed``, ``partial`` or ``new``."""
    try:
        summary = json.loads((folder / SUMMARY_FILE).read_text())
        if summary.get("digest") == point.digest:
            return "done"
    except (OSError, ValueError):
        pass
    if (folder / ERROR_FILE).exists():
        return "failed"
    return "partial" if any((folder / f).exists() for f in ATTEMPT_FILES) else "new"


def archive_attempt(folder: Path) -> Path | None:
    """Move an unfinished attempt's files to ``previous/<n>/`` (nothing is deleted)."""
    present = [folder / f for f in ATTEMPT_FILES if (folder / f).exists()]
    if not present:
        return None
    n = 1
    while (target := folder / PREVIOUS_DIR / str(n)).exists():
        n += 1
    target.mkdir(parents=True)
    for path in present:
        shutil.move(str(path), target / path.name)
    return target


def _write_yaml(path: Path, data: Any) -> None:
    atomic_write(path, yaml.safe_dump(data, sort_keys=False))


def write_plan(plan: SweepPlan, root: Path, states: dict[int, str]) -> None:
    """``sweep.json`` (points, folders, overrides, states) and ``sweep.yaml`` (the source)."""
    root.mkdir(parents=True, exist_ok=True)
    _write_yaml(root / SOURCE_FILE, plan.source)
    points = [
        {
            "index": p.index,
            "folder": p.folder_name(plan.width),
            "digest": p.digest,
            "overrides": p.overrides,
            "state": states.get(p.index, "new"),
        }
        for p in plan.points
    ]
    info = {
        "name": plan.name,
        "keys": list(plan.keys),
        "updated": datetime.now(UTC).isoformat(timespec="seconds"),
        "points": points,
    }
    atomic_write(root / PLAN_FILE, json.dumps(info, indent=2) + "\n")


# --------------------------------------------------------------------------- running


@dataclass
class PointResult:
    """What became of one point: ``ok``, ``skipped`` (already done) or ``failed``."""

    point: SweepPoint
    folder: Path
    status: str
    error: str | None = None
    wall_s: float = 0.0
    summary: dict[str, Any] | None = None


@dataclass
class SweepResult:
    """Every point's outcome, the sweep folder and the simulation start-ups used."""

    root: Path
    points: list[PointResult]
    simulation_starts: int = 0

    def count(self, status: str) -> int:
        """How many points ended with ``status``."""
        return sum(r.status == status for r in self.points)


class SweepProgress:
    """One rich line per point (``i/N``, status, key metric), a spinner while it runs."""

    def __init__(self, total: int, console: Console | None = None) -> None:
        from rich.console import Console

        self.total = total
        self.console = console or Console(stderr=True)
        self._status: Any = None
        self._text = ""

    def start(self, point: SweepPoint) -> Callable[[dict[str, Any]], None]:
        """Show the running point; returns a recorder listener that shows its round."""
        from rich.markup import escape

        self._text = escape(f"point {point.index + 1}/{self.total} [{label(point.overrides)}]")
        self._status = self.console.status(f"{self._text} starting")
        self._status.start()
        rounds = point.scenario.rounds

        def listener(row: dict[str, Any]) -> None:
            if "round" in row and self._status is not None:
                self._status.update(f"{self._text} round {row['round']}/{rounds}")

        return listener

    def done(self, result: PointResult) -> None:
        """Print the point's final line."""
        if self._status is not None:
            self._status.stop()
            self._status = None
        from rich.markup import escape

        p = result.point
        style = {"ok": "green", "skipped": "dim", "failed": "bold red"}[result.status]
        head = f"point {p.index + 1}/{self.total} {result.folder.name} [{label(p.overrides)}] "
        text = escape(head)
        text += f"[{style}]{result.status}[/{style}]"
        if result.status == "failed":
            text += escape(f": {result.error}")
        elif result.summary:
            text += escape(f" {_headline(result.summary, p.scenario)}")
        if result.status == "ok":
            text += f" ({result.wall_s:.1f} s)"
        self.console.print(text, highlight=False)


def _headline(summary: dict[str, Any], scenario: Scenario) -> str:
    """``accuracy=0.9312 loss=0.2100``: the federated test metrics the scenario summarises."""
    federated = summary.get("results", {}).get("federated", {})
    keys = [k for k in scenario.metrics.summary if f"test/{k}" in federated]
    return " ".join(f"{k}={federated[f'test/{k}']:.4f}" for k in keys)


RunPoint = Callable[[Scenario, "Recorder"], dict[str, Any]]


@dataclass
class _Executor:
    """Runs single points into their folders and keeps the outcomes."""

    plan: SweepPlan
    root: Path
    progress: SweepProgress | None
    results: dict[int, PointResult] = field(default_factory=dict)

    def folder(self, point: SweepPoint) -> Path:
        return self.root / point.folder_name(self.plan.width)

    def skip(self, point: SweepPoint) -> None:
        summary = json.loads((self.folder(point) / SUMMARY_FILE).read_text())
        self._finish(PointResult(point, self.folder(point), "skipped", summary=summary))

    def execute(self, point: SweepPoint, run_point: RunPoint) -> None:
        """Run one point with ``run_point(scenario, recorder)``; any error is recorded."""
        from flowerbed.platform.results import Recorder

        folder = self.folder(point)
        archive_attempt(folder)
        recorder = Recorder(point.scenario, folder)
        if self.progress is not None:
            recorder.listeners.append(self.progress.start(point))
        started = time.time()
        try:
            recorder.start()
            summary = run_point(point.scenario, recorder)
        except Exception as exc:  # noqa: BLE001 - one failed point must not stop the sweep
            result = self._failed(point, recorder, exc, time.time() - started)
        else:
            result = PointResult(point, folder, "ok", wall_s=time.time() - started, summary=summary)
            self._status(result)
        finally:
            recorder.close()
        self._finish(result)

    def _failed(
        self, point: SweepPoint, recorder: Recorder, exc: Exception, wall: float
    ) -> PointResult:
        error = f"{type(exc).__name__}: {exc}".splitlines()[0]
        folder = self.folder(point)
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write(folder / ERROR_FILE, "".join(traceback.format_exception(exc)))
        try:
            recorder.event("run_failed", error=error)
        except OSError:
            pass
        result = PointResult(point, folder, "failed", error=error, wall_s=wall)
        self._status(result)
        return result

    def _status(self, result: PointResult) -> None:
        info = {
            "status": result.status,
            "digest": result.point.digest,
            "index": result.point.index,
            "overrides": result.point.overrides,
            "error": result.error,
            "wall_time_s": round(result.wall_s, 3),
        }
        atomic_write(result.folder / STATUS_FILE, json.dumps(info, indent=2) + "\n")

    def _finish(self, result: PointResult) -> None:
        self.results[result.point.index] = result
        if self.progress is not None:
            self.progress.done(result)


def run_inline_group(points: list[SweepPoint], executor: _Executor) -> int:
    """Inline points: one after the other in this process; no simulation start-up."""
    from flowerbed.platform import runner

    with runner.quiet_flower():
        for point in points:
            executor.execute(point, runner.run_inline)
    return 0


def _stopped(reason: str) -> RunPoint:
    def run_point(scenario: Scenario, recorder: Recorder) -> dict[str, Any]:
        raise RuntimeError(f"the simulation stopped before this point ran: {reason}")

    return run_point


def run_simulation_group(points: list[SweepPoint], executor: _Executor) -> int:
    """All ``points`` inside one ``run_simulation``: one Ray start-up for the group.

    The ServerApp's main serves the points one after the other on the same
    grid (each ``serve`` re-sends the setup message with that point's
    scenario); a failing point is recorded and the loop goes on.
    """
    from flwr.serverapp import ServerApp
    from flwr.simulation import run_simulation

    from flowerbed.platform.runner import backend_config, client_app, quiet_flower, worker_threads
    from flowerbed.platform.server import serve

    attempted: set[int] = set()
    server_app = ServerApp()

    @server_app.main()
    def _main(grid: Any, context: Any) -> None:
        del context
        for point in points:
            attempted.add(point.index)
            executor.execute(point, functools.partial(serve, grid))

    first = points[0].scenario
    reason = "the ServerApp never ran"
    try:
        with quiet_flower(), worker_threads(first.engine.client_resources.num_cpus):
            run_simulation(
                server_app=server_app,
                client_app=client_app(),
                num_supernodes=first.num_clients,
                backend_config=backend_config(first),  # type: ignore[arg-type]
            )
    except Exception as exc:  # noqa: BLE001 - recorded on every point it stopped
        reason = f"{type(exc).__name__}: {exc}"
    for point in points:
        if point.index not in attempted:
            executor.execute(point, _stopped(reason))
    return 1


GROUP_RUNNERS: dict[str, Callable[[list[SweepPoint], _Executor], int]] = {
    "inline": run_inline_group,
    "simulation": run_simulation_group,
}


def group_points(points: Iterable[SweepPoint]) -> list[list[SweepPoint]]:
    """Points that can share one engine start-up, groups in order of first appearance."""
    groups: dict[tuple[Any, ...], list[SweepPoint]] = {}
    for point in points:
        groups.setdefault(point.group_key(), []).append(point)
    return list(groups.values())


def run_sweep(
    plan: SweepPlan, output_dir: str | Path | None = None, *, progress: bool = False
) -> SweepResult:
    """Run every point of ``plan`` not already done; failed points do not stop the rest.

    Parameters
    ----------
    plan
        From :func:`expand` or :func:`load_plan`.
    output_dir
        Root of run folders (default: the scenario's ``output_dir``).
    progress
        Print one rich line per point on stderr.

    Returns
    -------
    SweepResult
        Per-point outcomes in index order, and the number of simulation start-ups.
    """
    root = plan.root(output_dir)
    states = {p.index: point_state(plan.folder(p, output_dir), p) for p in plan.points}
    write_plan(plan, root, states)
    executor = _Executor(plan, root, SweepProgress(len(plan.points)) if progress else None)
    todo = []
    for point in plan.points:
        folder = executor.folder(point)
        folder.mkdir(parents=True, exist_ok=True)
        _write_yaml(folder / OVERRIDES_FILE, {"index": point.index, "overrides": point.overrides})
        if states[point.index] == "done":
            executor.skip(point)
        else:
            todo.append(point)
    starts = 0
    for group in group_points(todo):
        starts += GROUP_RUNNERS[group[0].scenario.engine.name](group, executor)
    results = [executor.results[p.index] for p in plan.points]
    write_plan(plan, root, {r.point.index: _state(r) for r in results})
    return SweepResult(root, results, starts)


def _state(result: PointResult) -> str:
    return "failed" if result.status == "failed" else "done"


# --------------------------------------------------------------------------- CLI


def plan_table(plan: SweepPlan, output_dir: str | Path | None = None) -> Table:
    """Build the dry-run table: one row per point, one column per swept key."""
    from rich.markup import escape
    from rich.table import Table

    groups = group_points(plan.points)
    sims = sum(g[0].scenario.engine.name == "simulation" for g in groups)
    table = Table(
        "#", "folder", *plan.keys, "engine", "state",
        title=f"sweep {plan.name}: {len(plan.points)} points",
        caption=f"{plan.root(output_dir)} · {sims} simulation start-up(s)",
    )
    for p in plan.points:
        state = point_state(plan.folder(p, output_dir), p)
        cells = [escape(format_value(p.overrides[k])) for k in plan.keys]
        engine = p.scenario.engine.name
        table.add_row(str(p.index), p.folder_name(plan.width), *cells, engine, state)
    return table


def result_table(result: SweepResult, keys: Iterable[str]) -> Table:
    """Build the final table: one row per point, its status and federated metrics."""
    from rich.markup import escape
    from rich.table import Table

    keys = list(keys)
    table = Table("#", *keys, "status", "federated", "time (s)", title=f"sweep {result.root.name}")
    for r in result.points:
        cells = [escape(format_value(r.point.overrides[k])) for k in keys]
        shown = r.error if r.status == "failed" else _headline(r.summary or {}, r.point.scenario)
        table.add_row(str(r.point.index), *cells, r.status, escape(shown or ""), f"{r.wall_s:.1f}")
    return table


def cmd_sweep(args: argparse.Namespace) -> int:
    """Plan (and unless ``--dry-run``, run) a sweep; exit status = failed points."""
    from rich.console import Console

    plan = load_plan(args.file, args.overrides)
    console = Console()
    if args.dry_run:
        console.print(plan_table(plan, args.output_dir))
        return 0
    result = run_sweep(plan, args.output_dir, progress=not args.quiet)
    failed, skipped = result.count("failed"), result.count("skipped")
    if not args.quiet:
        console.print(result_table(result, plan.keys))
    line = f"{result.count('ok')} ran, {skipped} skipped (done before), {failed} failed"
    line += f" · {result.simulation_starts} simulation start-up(s) · results in {result.root}"
    print(line, file=sys.stderr if failed else sys.stdout)
    if not args.quiet:
        console.print(f"tables and plots: flowerbed report {result.root}")
    return min(failed, 100)


def add_commands(subparsers: Any, commands: dict[str, Callable[[argparse.Namespace], int]]) -> None:
    """Add ``flowerbed sweep`` to the CLI."""
    from flowerbed.platform.cli import add_set_option

    p = subparsers.add_parser(
        "sweep",
        help="run every point of a scenario's sweep: block (resumable)",
        description="Expand the sweep: block, validate every point, then run the points not "
        "done yet (a point is done when its summary.json has the same scenario digest). "
        "--set key=value edits every point; --set sweep.seeds=[0,1,2] or "
        "--set sweep.<key>=[...] edits the sweep itself. Exit status: the number of failed "
        "points (0 = all fine, capped at 100); an invalid sweep is reported before anything "
        "runs, with exit status 2 like other commands.",
    )
    p.add_argument("file")
    add_set_option(p)
    p.add_argument("--dry-run", action="store_true", help="print the plan, run nothing")
    p.add_argument("--output-dir", default=None, help="root of run folders (default: scenario's)")
    p.add_argument("--quiet", action="store_true", help="no per-point progress or result table")
    commands["sweep"] = cmd_sweep

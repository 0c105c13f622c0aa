"""Planning: expand a scenario with a sweep block into resolved, validated points."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from flowerbed.core.population import virtual_clients
from flowerbed.core.scenario import (
    COMPONENT_FIELDS,
    Scenario,
    ScenarioError,
    apply_overrides,
    load_yaml,
    parse_override,
    read_yaml,
    validate_scenario,
)
from flowerbed.platform.sweep.schema import SweepSpec, combinations, parse_sweep

MAX_PROBLEMS = 20
#: Shorthand-able scenario fields (``engine: inline`` means ``engine: {name: inline}``).
_NAMED_FIELDS = (*COMPONENT_FIELDS, "engine")


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
        """The resolved scenario's digest (also in its ``summary.json``).

        It covers only what changes results, so points differing only in,
        say, the engine share a digest (their folders differ by index).
        """
        return self.scenario.digest()

    @property
    def identity(self) -> str:
        """The whole resolved scenario as text: equal for points that are the same run."""
        return json.dumps(self.scenario.to_dict(), sort_keys=True)

    def folder_name(self, width: int = 3) -> str:
        """``<index>-<digest>``, the index zero-padded to ``width``."""
        return f"{self.index:0{width}d}-{self.digest}"

    def group_key(self) -> tuple[Any, ...]:
        """Points with equal keys can share one Flower simulation (one Ray start-up)."""
        eng = self.scenario.engine
        res = eng.client_resources
        return (
            eng.name,
            eng.backend,
            self.scenario.num_clients,
            virtual_clients(self.scenario),
            res.num_cpus,
            res.num_gpus,
            eng.ray_num_cpus,
        )


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
    sweep_sets: list[str] = []
    base_sets: list[str] = []
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
    # By identity, not digest: a sweep over engines (same numbers, other wall
    # times) is a fair comparison, not a repeated point.
    seen: dict[str, int] = {}
    for pt in points:
        if pt.identity in seen:
            text = f"same resolved scenario as point {seen[pt.identity]}"
            problems.setdefault(text, []).append(pt.index)
            firsts.setdefault(text, label(pt.overrides))
        seen.setdefault(pt.identity, pt.index)
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
    data = load_yaml(Path(path).read_text())  # duplicate keys refused, as read_yaml does
    return expand(data, overrides, str(path))

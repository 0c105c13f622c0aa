"""Paired comparisons of runs: ``flowerbed report DIR --compare FIELD=A,B``.

Runs that differ only in ``FIELD`` form pairs. Which other settings must match
is read off the runs' resolved scenarios: every scenario setting that varies
among the compared runs (other than ``FIELD``, the scenario's ``name``,
``description`` and ``output_dir``) is either

- **part of an arm**, when it takes one value in all of A's runs and one
  (other) value in all of B's (a strategy's own parameters, or
  ``learner.name: sgd_drift`` that SCAFFOLD needs): the report names it; or
- **a pairing key** otherwise (the seed, and every other swept setting, such as
  ``partition.alpha``): a pair is one A run and one B run with the same
  values of every pairing key, so several cells of a sweep are blocks and
  pairs never cross them.

A run whose partner is missing is named and left out. Each pair gives one
difference per metric (the federated result, oriented so that positive means
A better, from the metric's better direction); the statistics are
:mod:`flowerbed.algorithms.paired_stats`, with Holm's adjustment over every
comparison and metric of one report.
"""

from __future__ import annotations

import json
import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from flowerbed.algorithms import paired_stats as ps
from flowerbed.core.seeds import derive_seed
from flowerbed.platform.report.runs import RunInfo
from flowerbed.platform.report.summary_table import direction
from flowerbed.platform.report.tables import group_value, write_csv

#: Scenario settings that name or place a run but do not change its result.
METADATA = frozenset({"name", "description", "output_dir"})
#: Keys of each entry of ``comparisons.json`` / ``.csv``, in order.
COLUMNS = (
    "a", "b", "field", "metric", "direction", "n", "mean_diff", "ci_low", "ci_high",
    "ci_method", "p_value", "p_adjusted", "test", "verdict", "detectable_diff",
)


class CompareError(ValueError):
    """Bad ``--compare`` input: the message is one line for the user."""


@dataclass
class Pairs:
    """The runs of one comparison, matched: ``pairs[i] = (a_run, b_run)``."""

    a: str
    b: str
    pairs: list[tuple[RunInfo, RunInfo]]
    keys: list[str]
    arm_keys: dict[str, tuple[str, str]]
    unpaired: list[RunInfo] = field(default_factory=list)
    duplicates: list[RunInfo] = field(default_factory=list)


@dataclass
class Comparisons:
    """Everything ``--compare`` computed: entries (``COLUMNS``), pairings and notes."""

    field: str
    entries: list[dict[str, Any]]
    pairings: list[Pairs]
    notes: list[str]


# --------------------------------------------------------------------------- values


def _text(value: Any) -> str:
    return json.dumps(value, sort_keys=True) if isinstance(value, (list, dict)) else str(value)


def _flat(data: Any, prefix: str = "") -> dict[str, str]:
    """Leaves of a nested scenario as ``{"a.b": text}`` (lists are leaves)."""
    if not isinstance(data, dict):
        return {prefix: _text(data)} if prefix else {}
    out: dict[str, str] = {}
    for key, value in data.items():
        out.update(_flat(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def run_value(run: RunInfo, name: str) -> str | None:
    """The run's value of a dotted setting, as text (``None`` when it has none)."""
    value = group_value(run, name)
    return None if value is None else _text(value)


def _same(run_text: str, wanted: str) -> bool:
    """Whether a run's value equals a value typed on the command line (``1`` = ``1.0``)."""
    if run_text == wanted:
        return True
    try:
        return bool(yaml.safe_load(run_text) == yaml.safe_load(wanted))
    except yaml.YAMLError:
        return False


def field_values(runs: Sequence[RunInfo], name: str) -> list[str]:
    """The distinct values of ``name`` among the runs, first seen first."""
    return list(dict.fromkeys(v for r in runs if (v := run_value(r, name)) is not None))


def _select(runs: Sequence[RunInfo], name: str, wanted: str) -> list[RunInfo]:
    return [r for r in runs if (v := run_value(r, name)) is not None and _same(v, wanted)]


# --------------------------------------------------------------------------- pairing


def _settings(run: RunInfo) -> dict[str, str]:
    flat = _flat(run.scenario)
    flat.update({k: _text(v) for k, v in run.overrides.items() if not isinstance(v, dict)})
    return flat


def _varying(runs: Sequence[RunInfo], name: str) -> list[str]:
    """Settings that differ among ``runs``, other than ``name`` (and its sub-keys) and metadata."""
    flats = [_settings(r) for r in runs]
    keys = dict.fromkeys(k for f in flats for k in f)
    out = []
    for key in keys:
        if key in METADATA or key == name or key.startswith(name + "."):
            continue
        if len({f.get(key) for f in flats}) > 1:
            out.append(key)
    return out


def pair_runs(runs: Sequence[RunInfo], name: str, a: str, b: str) -> Pairs:
    """Match A's runs with B's on every setting that is not part of an arm (module doc)."""
    runs_a, runs_b = _select(runs, name, a), _select(runs, name, b)
    varying = _varying(runs_a + runs_b, name)
    arm_keys: dict[str, tuple[str, str]] = {}
    for key in varying:
        va = {_settings(r).get(key) for r in runs_a}
        vb = {_settings(r).get(key) for r in runs_b}
        if len(va) == 1 and len(vb) == 1:
            arm_keys[key] = (str(next(iter(va))), str(next(iter(vb))))
    keys = [k for k in varying if k not in arm_keys]
    units_a, dup_a = _units(runs_a, keys)
    units_b, dup_b = _units(runs_b, keys)
    pairs = [(units_a[u], units_b[u]) for u in units_a if u in units_b]
    unpaired = [r for u, r in units_a.items() if u not in units_b]
    unpaired += [r for u, r in units_b.items() if u not in units_a]
    return Pairs(a, b, pairs, keys, arm_keys, unpaired, dup_a + dup_b)


def _units(runs: Sequence[RunInfo], keys: Sequence[str]) -> tuple[dict[Hashable, RunInfo], list]:
    """Runs by their pairing-key values; runs sharing one unit are left out as duplicates."""
    by: dict[Hashable, list[RunInfo]] = {}
    for run in runs:
        settings = _settings(run)
        by.setdefault(tuple(settings.get(k) for k in keys), []).append(run)
    units = {u: rs[0] for u, rs in by.items() if len(rs) == 1}
    duplicates = [r for rs in by.values() if len(rs) > 1 for r in rs]
    return units, duplicates


# --------------------------------------------------------------------------- statistics


def _final(run: RunInfo, metric: str) -> float | None:
    value = run.final().get("federated", {}).get(metric)
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def compare_metric(
    pairs: Pairs, name: str, metric: str, way: str
) -> dict[str, Any] | None:
    """One entry of the comparison table (``None`` when fewer than 2 pairs have the metric)."""
    values = [(x, y) for ra, rb in pairs.pairs
              if (x := _final(ra, metric)) is not None and (y := _final(rb, metric)) is not None]
    if len(values) < 2:
        return None
    seed = derive_seed(0, "compare", name, pairs.a, pairs.b, metric)
    s = ps.paired([x for x, _ in values], [y for _, y in values], way, seed)  # type: ignore[arg-type]
    return {
        "a": pairs.a, "b": pairs.b, "field": name, "metric": metric, "direction": way,
        "n": s.n, "mean_diff": s.mean_diff, "ci_low": s.ci_low, "ci_high": s.ci_high,
        "ci_method": s.ci_method, "p_value": s.p_value, "p_adjusted": math.nan,
        "test": s.test, "verdict": s.verdict, "detectable_diff": s.detectable_diff,
    }


def parse_compare(spec: str, reference: str | None) -> tuple[str, list[str] | None]:
    """``FIELD=A,B`` -> (FIELD, [A, B]); ``FIELD`` with ``--reference`` -> (FIELD, None)."""
    name, eq, values = spec.partition("=")
    name = name.strip()
    if not name:
        raise CompareError("--compare: give a scenario field, e.g. strategy.name=fedprox,fedavg")
    if eq and reference is not None:
        raise CompareError("--compare FIELD=A,B and --reference are exclusive")
    if not eq:
        if reference is None:
            raise CompareError(f"--compare {name}: give two values ({name}=A,B) or --reference X")
        return name, None
    parts = [v.strip() for v in values.split(",")]
    if len(parts) != 2 or not all(parts) or parts[0] == parts[1]:
        raise CompareError(f"--compare {spec}: give two different values, {name}=A,B")
    return name, parts


def comparisons(
    runs: Sequence[RunInfo],
    spec: str,
    metrics: Sequence[str],
    reference: str | None = None,
    better: dict[str, str] | None = None,
) -> Comparisons:
    """Pair the finished runs and compare them on each metric (see the module doc).

    Raises
    ------
    CompareError
        Unknown field, a value no run has, or no comparison with 2 pairs.
    """
    name, values = parse_compare(spec, reference)
    done = [r for r in runs if r.ok]
    present = field_values(done, name)
    if not present:
        raise CompareError(f"--compare {name}: no finished run has this scenario field")
    for wanted in values or [reference]:  # type: ignore[list-item]
        if not any(_same(v, wanted) for v in present):  # type: ignore[arg-type]
            raise CompareError(f"--compare {name}: no run has {name}={wanted} "
                               f"(values here: {', '.join(present)})")
    arms = [tuple(values)] if values else [
        (v, reference) for v in present if not _same(v, reference)]  # type: ignore[arg-type]
    notes: list[str] = []
    ways = _directions(metrics, better or {}, notes)
    pairings, entries = [], []
    for a, b in arms:
        pairs = pair_runs(done, name, a, b)  # type: ignore[arg-type]
        pairings.append(pairs)
        for metric, way in ways.items():
            entry = compare_metric(pairs, name, metric, way)
            if entry is None:
                notes.append(f"{a} vs {b} on {metric}: {len(pairs.pairs)} pair(s), need 2 or more")
            else:
                entries.append(entry)
    if not entries:
        raise CompareError(f"--compare {spec}: no comparison has 2 or more pairs of finished runs"
                           + (f" ({notes[-1]})" if notes else ""))
    for entry, p in zip(entries, ps.holm([e["p_value"] for e in entries]), strict=True):
        entry["p_adjusted"] = p
    return Comparisons(name, entries, pairings, notes + _pairing_notes(pairings, name))


def _directions(metrics: Sequence[str], better: dict[str, str], notes: list[str]) -> dict:
    ways = {}
    for metric in metrics:
        way = better.get(metric) or better.get(metric.split("/")[-1]) or direction(metric)
        if way is None:
            notes.append(f"{metric}: not compared, its better direction is unknown "
                         f"(--better {metric.split('/')[-1]}=higher|lower)")
        else:
            ways[metric] = way
    return ways


def _pairing_notes(pairings: Sequence[Pairs], name: str) -> list[str]:
    """Arm settings, then one line per unpaired or duplicate run (naming the comparisons)."""
    notes = []
    component = name.split(".")[0] + "."
    for p in pairings:
        # settings of the compared component (strategy.* for strategy.name) go without saying
        named = [f"{k}={va} / {vb}" for k, (va, vb) in p.arm_keys.items()
                 if not k.startswith(component)]
        if named:
            notes.append(f"{p.a} vs {p.b}: {', '.join(named)} set together with {name}, "
                         "taken as part of each arm")
    lonely: dict[str, tuple[RunInfo, list[str]]] = {}
    for p in pairings:
        for run in p.unpaired:
            lonely.setdefault(run.name, (run, []))[1].append(f"{p.a} vs {p.b}")
    for run, where in lonely.values():
        notes.append(f"unpaired, left out: {run.name} ({_describe(run, name, pairings)}) "
                     f"has no partner in {', '.join(where)}")
    dups = {r.name: r for p in pairings for r in p.duplicates}
    notes += [f"left out: {r.name} repeats the settings of another run" for r in dups.values()]
    return notes


def _describe(run: RunInfo, name: str, pairings: Sequence[Pairs]) -> str:
    """``strategy.name=fedavg learner.momentum=0.0 seed=1``: the field, then the pairing keys."""
    keys = dict.fromkeys(k for p in pairings for k in p.keys)
    settings = _settings(run)
    return " ".join([f"{name}={run_value(run, name)}", *(f"{k}={settings.get(k)}" for k in keys)])


# --------------------------------------------------------------------------- files


def write_comparisons(result: Comparisons, out_dir: Path, plots: bool = True) -> list[Path]:
    """``comparisons.csv``, ``comparisons.json`` and one forest plot per metric."""
    from flowerbed.core.records import atomic_write
    from flowerbed.platform.report.plots import plot_forest

    out_dir.mkdir(parents=True, exist_ok=True)
    rows = [{k: e[k] for k in COLUMNS} for e in result.entries]
    write_csv(out_dir / "comparisons.csv", rows)
    clean = [{k: (None if isinstance(v, float) and not math.isfinite(v) else v)
              for k, v in r.items()} for r in rows]
    atomic_write(out_dir / "comparisons.json", json.dumps(clean, indent=2) + "\n")
    written = [out_dir / "comparisons.csv", out_dir / "comparisons.json"]
    for metric in dict.fromkeys(e["metric"] for e in result.entries):
        target = out_dir / f"comparisons_{_safe(metric.split('/')[-1])}.png"
        chosen = [e for e in result.entries if e["metric"] == metric]
        if plots and plot_forest(chosen, result.field, metric, target):
            written.append(target)
    return written


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)

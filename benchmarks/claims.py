"""The claims runner: a method's claims, in the paper's words, tested on its stored results.

``benchmarks/claims/<method>.yaml`` states each claim and the comparison that
tests it; this script reads the rows the method's experiment stored under
``benchmarks/results/<method>/`` and writes ``claims.json`` and ``claims.md``
there, one verdict per claim. The statistics are
:mod:`flowerbed.algorithms.paired_stats` (the same as ``flowerbed report
--compare``).

Usage::

    python benchmarks/claims.py reaugment manipt
    python benchmarks/claims.py --all

Schema of a claims file (strict: an unknown key is an error)::

    method: reaugment                     # the folder under benchmarks/results/
    paper: "ReAugment, ... (arXiv ...)"   # what the claims are from
    anchors: {}                           # optional: YAML anchors reused below; not read
    claims:
      - id: fed-vs-none                   # unique in the file
        claim: "the paper's words"
        paper: -2.1                       # its number for what `ours` reports, or text, or null
        notes: "..."                      # optional, copied to the output
        comparison:                       # or `untestable: why` when no stored rows can test it
          kind: paired                    # paired | one_sample | equivalence
          metric: federated.test/mse@none # dotted path to the value in a row
          direction: lower                # which values of the metric are better
          source:                         # where the rows are
            file: runs*.jsonl             # name or glob (or a list), under results/<method>/
            format: jsonl                 # jsonl | json | csv (default: from the suffix)
            path: cells                   # json only: dotted path to the list of row dicts
                                          # (or to an object of row dicts: its keys
                                          # become the column `key`)
            unnest: result                # optional: a column holding a list of row dicts;
                                          # each becomes a row with the parent's columns
            parse: {key: "(?P<method>[^/]+)/(?P<seed>[0-9]+)"}  # columns read out of a column
                                          # (regex named groups; numbers where they read so)
            key: null                     # json only: `path` holds a * for an object's keys
                                          # (synthetic.*.rows) or leads to an object of rows;
                                          # each row gets its key in this column (a number
                                          # where it reads as one)
            where: {fraction: [5.0, 10.0]}  # keep rows whose column equals the value
                                          # (a list: any of its values; to match a list
                                          # value, wrap it: [[a, b]])
          a: {label: ReAugment, metric: federated.test/mse@reaugment, where: {}}
          b: {label: no augmentation}     # an arm: label, optional where / metric / source
                                          # / mean_over (its own columns averaged into
                                          # one value per cell, e.g. every few-shot selector)
                                          # / abs_error_to (a column holding the truth: the
                                          # arm's value is |metric - truth|)
          pair_on: [dataset, family, fraction, seed]   # the columns naming a unit
          mean_over: []                   # columns averaged away inside a unit
          transform: log_ratio            # difference (default) | log_ratio (two arms only)
          against: null                   # one_sample / one-arm equivalence: the value
                                          # (default: the claim's numeric `paper`)
          margin: null                    # equivalence: the margin, stated before looking
        power_check:                      # optional: what the testbed must show first
          description: "augmentation can change the MSE here (FrAug's mask beats none)"
          each: []                        # columns: the check must hold for each value
          comparison: {...}               # same form as above

Semantics: arm ``a`` is the arm the claim says is better (for ``one_sample``,
the arm measured against ``against``). Each arm's rows are the source's rows
(after ``source.where``) matching the arm's ``where``; its value is the arm's
``metric`` (else the comparison's). A row's cell is its values of ``pair_on``
and ``mean_over``; rows of one cell that differ in the arm's own ``mean_over``
are averaged (any other two rows of one arm in one cell are an error). Cells that
only one arm has are named in the notes and left out; then each arm's cells
are averaged per unit (``pair_on``), and the units are the pairs.

Verdicts (``holds | contradicted | inconclusive | not testable here``): the
power check is run first; if it does not hold, the claim is ``not testable
here`` (its numbers are still computed and shown). Otherwise ``holds`` when
the 95 % interval of the oriented difference (a better = positive; for
``one_sample``, better than ``against``) excludes 0 on the claimed side, or,
for ``equivalence``, the 90 % interval lies inside ``±margin``;
``contradicted`` when it excludes 0 on the other side (lies outside the
margin); else ``inconclusive``, with the difference the design could have
detected. Fewer than 2 units: ``not testable here``, never an invented pair.
With ``log_ratio`` the difference is ``log(a / b)`` and ``ours`` the
geometric-mean change of ``a`` against ``b`` in percent.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import re
import sys
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from flowerbed.algorithms import paired_stats as ps
from flowerbed.core.seeds import derive_seed

ROOT = Path(__file__).resolve().parent
CLAIMS_DIR = ROOT / "claims"
RESULTS_DIR = ROOT / "results"
HOLDS, CONTRADICTED, INCONCLUSIVE, UNTESTABLE = (
    "holds", "contradicted", "inconclusive", "not testable here",
)
NO_CHECK = "none stated"
KEYS = (
    "id", "claim", "comparison", "metric", "paper", "ours", "n", "mean_diff", "ci_low",
    "ci_high", "ci_method", "p_value", "test", "detectable_diff", "power_check", "verdict",
    "notes",
)


class ClaimsError(Exception):
    """Bad claims file or stored results: one line for the user."""


# ----------------------------------------------------------------------------- schema


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Source(_Strict):
    """Files of stored rows, relative to ``benchmarks/results/<method>/``."""

    file: str | list[str]
    format: Literal["jsonl", "json", "csv"] | None = None
    path: str | None = None
    unnest: str | None = None
    parse: dict[str, str] = Field(default_factory=dict)
    key: str | None = None
    where: dict[str, Any] = Field(default_factory=dict)

    @field_validator("parse")
    @classmethod
    def _named_groups(cls, parse: dict[str, str]) -> dict[str, str]:
        for column, pattern in parse.items():
            try:
                groups = re.compile(pattern).groupindex
            except re.error as exc:
                raise ValueError(f"{column}: not a regular expression ({exc})") from None
            if not groups:
                raise ValueError(f"{column}: the pattern names no group (?P<name>...)")
        return parse


class Arm(_Strict):
    """One side of a comparison: a label, which rows, which value."""

    label: str
    where: dict[str, Any] = Field(default_factory=dict)
    metric: str | None = None
    abs_error_to: str | None = None
    source: Source | None = None
    mean_over: list[str] = Field(default_factory=list)


class Comparison(_Strict):
    """How a claim (or a power check) is tested on the stored rows."""

    kind: Literal["paired", "one_sample", "equivalence"] = "paired"
    metric: str
    direction: Literal["higher", "lower"]
    source: Source
    a: Arm
    b: Arm | None = None
    pair_on: list[str] = Field(min_length=1)
    mean_over: list[str] = Field(default_factory=list)
    transform: Literal["difference", "log_ratio"] = "difference"
    against: float | None = None
    margin: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _consistent(self) -> Comparison:
        if self.kind == "paired" and self.b is None:
            raise ValueError("a paired comparison needs arm b")
        if self.kind == "one_sample" and self.b is not None:
            raise ValueError("a one_sample comparison has arm a only (use `against`)")
        if self.kind == "equivalence" and self.margin is None:
            raise ValueError("an equivalence comparison needs its margin")
        if self.transform == "log_ratio" and self.b is None:
            raise ValueError("transform log_ratio needs arm b (paired or two-arm equivalence)")
        if set(self.pair_on) & set(self.mean_over):
            raise ValueError("a column cannot be in both pair_on and mean_over")
        return self


class PowerCheck(_Strict):
    """A precondition the testbed must show before the claim can be judged."""

    description: str
    comparison: Comparison
    each: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _has_value(self) -> PowerCheck:
        if self.comparison.b is None and self.comparison.against is None:
            raise ValueError("a one-arm power check needs `against`")
        return self


class Claim(_Strict):
    """One claim of the paper and its test."""

    id: str
    claim: str
    paper: float | str | None = None
    comparison: Comparison | None = None
    untestable: str | None = None
    power_check: PowerCheck | None = None
    notes: str = ""

    @model_validator(mode="after")
    def _testable_or_why(self) -> Claim:
        if (self.comparison is None) == (self.untestable is None):
            raise ValueError("give either `comparison` or `untestable` (why not)")
        comp = self.comparison
        needs_value = comp is not None and comp.b is None and comp.against is None
        if needs_value and not isinstance(self.paper, (int, float)):
            raise ValueError("a one-arm comparison needs `against` or a numeric `paper`")
        return self


class ClaimsFile(_Strict):
    """``benchmarks/claims/<method>.yaml``."""

    method: str
    paper: str
    anchors: dict[str, Any] = Field(default_factory=dict)
    claims: list[Claim] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique_ids(self) -> ClaimsFile:
        ids = [c.id for c in self.claims]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise ValueError(f"claim ids repeat: {', '.join(dupes)}")
        return self


def load_claims(path: Path) -> ClaimsFile:
    """Read and validate a claims file; errors are one line naming file and field."""
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ClaimsError(f"{path}: cannot read ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise ClaimsError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    try:
        return ClaimsFile.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        more = f" (and {len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
        raise ClaimsError(f"{path}: {where}: {err['msg']}{more}") from None


# ----------------------------------------------------------------------------- rows


def lookup(row: Any, path: str) -> Any:
    """``row[path]``, else the dotted path into nested dicts (``None`` when absent).

    A key holding a dot itself is found whole before the path is split.
    """
    if not isinstance(row, dict):
        return None
    if path in row:
        return row[path]
    head, dot, rest = path.partition(".")
    while dot:
        if head in row:
            found = lookup(row[head], rest)
            if found is not None:
                return found
        more, dot, rest = rest.partition(".")
        head = f"{head}.{more}"
    return None


def _same(value: Any, wanted: Any) -> bool:
    if isinstance(value, (int, float)) and isinstance(wanted, (int, float)):
        return math.isclose(float(value), float(wanted), rel_tol=0, abs_tol=1e-12)
    return bool(value == wanted)


def matches(row: dict[str, Any], where: dict[str, Any]) -> bool:
    """Whether the row's columns equal (or, for a list, are among) the wanted values."""
    for column, wanted in where.items():
        value = lookup(row, column)
        options = wanted if isinstance(wanted, list) else [wanted]
        if not any(_same(value, w) for w in options):
            return False
    return True


def _cell(text: str) -> Any:
    """A CSV cell as a number where it reads as one (empty: ``None``)."""
    if text == "":
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _dicts(rows: Any, path: Path, what: str) -> list[dict[str, Any]]:
    if isinstance(rows, dict) and rows and all(isinstance(r, dict) for r in rows.values()):
        if any("key" in r for r in rows.values()):
            raise ClaimsError(f"{path}: {what} is an object of rows, but a row has a `key` "
                              "column already")
        return [{"key": k, **r} for k, r in rows.items()]
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise ClaimsError(f"{path}: {what} is not a list (or object) of row objects")
    return rows


def unnest(rows: list[dict[str, Any]], column: str) -> list[dict[str, Any]]:
    """Each row object listed in ``row[column]`` as a row of its own, with the parent's columns.

    The child's columns win where both have one; a row whose ``column`` is not a
    list of row objects is left out.
    """
    out = []
    for row in rows:
        children = row.get(column)
        if isinstance(children, list) and all(isinstance(c, dict) for c in children):
            parent = {k: v for k, v in row.items() if k != column}
            out += [{**parent, **child} for child in children]
    return out


def keyed_rows(doc: Any, doc_path: str | None, key: str, path: Path) -> list[dict[str, Any]]:
    """Rows stored under names, each with its name in column ``key``.

    ``doc_path`` leads to an object whose values are rows (``e1``: ``{"0.2":
    {...}, "0.5": {...}}``), or holds one ``*`` standing for that object's keys,
    the rest of the path leading from each to a row or a list of rows
    (``synthetic.*.rows``). A name that reads as a number becomes one
    (``"0.5"`` -> ``0.5``), so that ``where`` and ``pair_on`` treat it like any
    numeric column.
    """
    head, _, tail = (doc_path or "").partition("*")
    head, tail = head.rstrip("."), tail.lstrip(".")
    node = lookup(doc, head) if head else doc
    if not isinstance(node, dict):
        raise ClaimsError(f"{path}: source.key needs an object at `{head or '(top level)'}`")
    rows = []
    for name, entry in node.items():
        found = lookup(entry, tail) if tail else entry
        for row in found if isinstance(found, list) else [found]:
            if not isinstance(row, dict):
                raise ClaimsError(f"{path}: {name!r} holds no row objects (source.key)")
            if key in row:
                raise ClaimsError(f"{path}: a row under {name!r} already has a column {key!r} "
                                  "(source.key)")
            rows.append({key: _cell(name), **row})
    return rows


def read_file(
    path: Path, fmt: str | None, doc_path: str | None, key: str | None = None
) -> list[dict[str, Any]]:
    """Rows of one JSONL, JSON or CSV file (``key``: JSON only, see :func:`keyed_rows`)."""
    kind = fmt or path.suffix.lstrip(".").lower()
    if key is not None and kind != "json":
        raise ClaimsError(f"{path}: source.key is for JSON files only")
    if key is None and "*" in (doc_path or ""):
        raise ClaimsError(f"{path}: a * in source.path needs source.key (the column for its keys)")
    try:
        text = path.read_text()
        if kind == "jsonl":
            rows = [json.loads(line) for line in text.splitlines() if line.strip()]
            return _dicts(rows, path, "a line")
        if kind == "json":
            doc = json.loads(text)
            if key is not None:
                return keyed_rows(doc, doc_path, key, path)
            node = lookup(doc, doc_path) if doc_path else doc
            return _dicts(node, path, f"`{doc_path}`" if doc_path else "the document")
        if kind == "csv":
            return [{k: _cell(v) for k, v in r.items()} for r in csv.DictReader(text.splitlines())]
    except OSError as exc:
        raise ClaimsError(f"{path}: cannot read ({exc.strerror})") from None
    except ValueError as exc:
        raise ClaimsError(f"{path}: not valid {kind.upper()} ({exc})") from None
    raise ClaimsError(f"{path}: unknown format {kind!r}; give source.format: jsonl|json|csv")


def parsed(row: dict[str, Any], parse: dict[str, str]) -> dict[str, Any]:
    """The row with the named groups of each ``parse`` pattern added as columns.

    ``{"key": "(?P<method>[^/]+)/(?P<seed>[0-9]+)"}`` reads ``"key": "sparsessm/2"`` as
    ``method="sparsessm", seed=2`` (numbers where they read as numbers). A row whose
    column does not match the whole pattern is kept unchanged.
    """
    extra: dict[str, Any] = {}
    for column, pattern in parse.items():
        found = re.fullmatch(pattern, str(lookup(row, column)))
        if found:
            extra.update({k: _cell(v) for k, v in found.groupdict().items() if v is not None})
    return {**row, **extra} if extra else row


@dataclass
class Rows:
    """Reads each source once per claims file."""

    base: Path
    cache: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def of(self, source: Source) -> list[dict[str, Any]]:
        """The source's rows after its ``where``."""
        key = source.model_dump_json()
        if key not in self.cache:
            rows = [parsed(r, source.parse) for p in self._files(source.file) for r in
                    read_file(p, source.format, source.path, source.key)]
            if source.unnest:
                rows = unnest(rows, source.unnest)
            self.cache[key] = [r for r in rows if matches(r, source.where)]
        return self.cache[key]

    def _files(self, names: str | list[str]) -> list[Path]:
        found: list[Path] = []
        for name in [names] if isinstance(names, str) else names:
            hits = sorted(self.base.glob(name))
            if not hits:
                raise ClaimsError(f"{self.base / name}: no such stored results file")
            found += [h for h in hits if h not in found]
        return found


# ----------------------------------------------------------------------------- units


def _hashable(value: Any) -> Hashable:
    return json.dumps(value, sort_keys=True) if isinstance(value, (list, dict)) else value


def _number(value: Any) -> bool:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    return ok and math.isfinite(value)


Cell = tuple[Hashable, Hashable]  # (unit: pair_on values, inner: mean_over values)


def cell_values(
    rows: Iterable[dict[str, Any]], arm: Arm, comp: Comparison
) -> tuple[dict[Cell, float], list[str]]:
    """The arm's value per (unit, ``mean_over`` values); and notes on rows without a value.

    Rows of one cell that differ in the arm's own ``mean_over`` columns are
    averaged first (the arm is their mean: "every few-shot selector").
    """
    metric = arm.metric or comp.metric
    cells: dict[Cell, dict[Hashable, float]] = {}
    missing = 0
    for row in rows:
        if not matches(row, arm.where):
            continue
        value = lookup(row, metric)
        if arm.abs_error_to is not None:
            truth = lookup(row, arm.abs_error_to)
            value = abs(value - truth) if _number(value) and _number(truth) else None
        if not _number(value):
            missing += 1
            continue
        unit = tuple(_hashable(lookup(row, c)) for c in comp.pair_on)
        inner = tuple(_hashable(lookup(row, c)) for c in comp.mean_over)
        own = tuple(_hashable(lookup(row, c)) for c in arm.mean_over)
        if own in cells.setdefault((unit, inner), {}):
            raise ClaimsError(
                f"arm {arm.label!r}: two rows for {_cell_text(comp, (unit, inner))}"
                f"{' ' + _unit_text(arm.mean_over, own) if own else ''}; add the column "
                "that tells them apart to pair_on or mean_over"
            )
        cells[unit, inner][own] = float(value)
    notes = [f"{arm.label}: {missing} row(s) without a number in {metric}"] if missing else []
    return {c: float(np.mean(list(v.values()))) for c, v in cells.items()}, notes


def averaged(cells: dict[Cell, float]) -> dict[Hashable, float]:
    """Each unit's mean over its ``mean_over`` cells."""
    by_unit: dict[Hashable, list[float]] = {}
    for (unit, _), value in cells.items():
        by_unit.setdefault(unit, []).append(value)
    return {u: float(np.mean(v)) for u, v in by_unit.items()}


def _cell_text(comp: Comparison, cell: Hashable) -> str:
    unit, inner = cell if isinstance(cell, tuple) else (cell, ())
    return _unit_text([*comp.pair_on, *comp.mean_over], (*unit, *inner))


def _unit_text(columns: list[str], unit: Hashable) -> str:
    values = unit if isinstance(unit, tuple) else (unit,)
    return ", ".join(f"{c}={v}" for c, v in zip(columns, values, strict=True))


# ----------------------------------------------------------------------------- evaluation


@dataclass
class Outcome:
    """A comparison's statistics and verdict."""

    verdict: str
    n: int
    summary: ps.Summary | None = None
    ours: float | None = None
    notes: list[str] = field(default_factory=list)


def differences(
    comp: Comparison, rows: Rows, against: float | None
) -> tuple[np.ndarray, float, list[str]]:
    """Oriented differences (positive = a better), the estimate ``ours``, notes."""
    a_cells, notes = cell_values(rows.of(comp.a.source or comp.source), comp.a, comp)
    if comp.b is None:
        x = np.array(list(averaged(a_cells).values()), dtype=float)
        d = x - float(against)  # type: ignore[arg-type]
        mean = float(x.mean()) if x.size else math.nan
        return (d if comp.direction == "higher" else -d), mean, notes
    b_cells, b_notes = cell_values(rows.of(comp.b.source or comp.source), comp.b, comp)
    cell_pairs = ps.match(a_cells, b_cells)  # cells first: a cell one arm lacks is left out
    notes += b_notes + _unpaired(comp, cell_pairs)
    kept = set(cell_pairs.keys)
    pairs = ps.match(averaged({c: v for c, v in a_cells.items() if c in kept}),
                     averaged({c: v for c, v in b_cells.items() if c in kept}))
    if comp.transform == "log_ratio":
        if np.any(pairs.a <= 0) or np.any(pairs.b <= 0):
            raise ClaimsError(f"{comp.metric}: log_ratio needs positive values")
        d = np.log(pairs.a / pairs.b)
        ours = 100 * (math.exp(d.mean()) - 1) if d.size else math.nan
        return (d if comp.direction == "higher" else -d), ours, notes
    ours = float(np.mean(pairs.a - pairs.b)) if pairs.keys else math.nan
    return ps.oriented(pairs.a, pairs.b, comp.direction), ours, notes


def _units(value: float, comp: Comparison) -> str:
    """A difference as text; a log ratio also as the percentage it multiplies by."""
    if comp.transform == "log_ratio":
        return f"{value:.3g} in log ratio (a {100 * math.expm1(value):.2g} % change)"
    return f"{value:.4g}"


def _unpaired(comp: Comparison, pairs: ps.Pairing) -> list[str]:
    """One note per unit left out for want of a partner."""
    assert comp.b is not None
    out = []
    for label, other, units in ((comp.a.label, comp.b.label, pairs.only_a),
                                (comp.b.label, comp.a.label, pairs.only_b)):
        out += [f"Unpaired, left out: {_cell_text(comp, u)} has {label} but no {other}"
                for u in units]
    return out


def evaluate(comp: Comparison, rows: Rows, seed: int, against: float | None = None) -> Outcome:
    """Compute a comparison and its verdict (see the module docstring)."""
    target = comp.against if comp.against is not None else against
    d, ours, notes = differences(comp, rows, target)
    if d.size < 2:
        notes.append(f"The stored results give {d.size} unit(s) for this comparison (need 2 "
                     "or more): per-seed or per-cell values are missing")
        return Outcome(UNTESTABLE, d.size, None, ours if d.size else None, notes)
    if comp.kind == "equivalence":
        summary, decision = ps.equivalence(d, comp.margin, seed)  # type: ignore[arg-type]
        verdict = {"equivalent": HOLDS, "not equivalent": CONTRADICTED}.get(decision, INCONCLUSIVE)
        notes.append(f"90 % interval against the margin ±{_units(comp.margin, comp)}")  # TOST
    else:
        summary = ps.summarize(d, seed, one_sample=comp.b is None)
        verdict = {ps.A_BETTER: HOLDS, ps.B_BETTER: CONTRADICTED}.get(summary.verdict, INCONCLUSIVE)
    if verdict == INCONCLUSIVE and comp.kind != "equivalence":
        notes.append(f"The interval spans 0; the design detects a true difference of "
                     f"{_units(summary.detectable_diff, comp)} with 80 % power")
    return Outcome(verdict, d.size, summary, ours, notes)


def check_power(check: PowerCheck, rows: Rows, seed: int) -> dict[str, Any]:
    """Run the power check (for each value of ``each``); passed only if every one holds."""
    comps: list[tuple[str | None, Comparison]] = [(None, check.comparison)]
    if check.each:
        comps = [(label, _restricted(check.comparison, where)) for label, where in
                 _each_values(check, rows)]
    evidence, passed = [], bool(comps)
    for label, comp in comps:
        out = evaluate(comp, rows, derive_seed(seed, "power", label or ""))
        passed = passed and out.verdict == HOLDS
        evidence.append(f"{label + ': ' if label else ''}{_evidence(comp, out)}")
    return {"description": check.description, "passed": passed, "evidence": "; ".join(evidence)}


def _each_values(check: PowerCheck, rows: Rows) -> list[tuple[str, dict[str, Any]]]:
    comp = check.comparison
    seen: dict[Hashable, dict[str, Any]] = {}
    for row in rows.of(comp.source):
        where = {c: lookup(row, c) for c in check.each}
        seen.setdefault(_hashable(where), where)
    return [(" ".join(f"{k}={v}" for k, v in w.items()), w) for w in seen.values()]


def _restricted(comp: Comparison, where: dict[str, Any]) -> Comparison:
    arms = {"a": comp.a.model_copy(update={"where": {**comp.a.where, **where}})}
    if comp.b is not None:
        arms["b"] = comp.b.model_copy(update={"where": {**comp.b.where, **where}})
    return comp.model_copy(update=arms)


def _evidence(comp: Comparison, out: Outcome) -> str:
    what = f"{comp.a.label} - {comp.b.label}" if comp.b else f"{comp.a.label} - {comp.against}"
    s = out.summary
    if s is None:
        pct = " %" if comp.transform == "log_ratio" else ""
        ours = "" if out.ours is None else f"ours = {out.ours:.4g}{pct}; "
        return f"{what}: {ours}{out.notes[-1]} ({out.verdict})"
    return (f"{what} = {s.mean_diff:+.4g} [{s.ci_low:+.4g}, {s.ci_high:+.4g}] "
            f"(oriented, n={s.n}, {s.test} p={s.p_value:.3g}): {out.verdict}")


# ----------------------------------------------------------------------------- claims


def describe(comp: Comparison, against: float | None) -> str:
    """One sentence saying what is compared, on which units."""
    better = "" if comp.kind == "equivalence" else f" ({comp.direction} is better)"
    # Arms may read their own columns; then comp.metric is only a fallback nobody reads.
    read = [arm.metric or comp.metric for arm in (comp.a, comp.b) if arm is not None]
    metric = f"{' vs '.join(dict.fromkeys(read))}{better}"
    truths = {arm.abs_error_to for arm in (comp.a, comp.b) if arm and arm.abs_error_to}
    if truths:
        metric += f", as the absolute error against {', '.join(sorted(truths))}"
    op = "log(a / b)" if comp.transform == "log_ratio" else "a - b"
    if comp.kind == "paired":
        head = f"paired {op}: a = {comp.a.label}, b = {comp.b.label}"  # type: ignore[union-attr]
    elif comp.b is not None:
        head = (f"equivalence within ±{comp.margin} of {op}: a = {comp.a.label}, "
                f"b = {comp.b.label}")
    else:
        value = comp.against if comp.against is not None else against
        kind = f"equivalence within ±{comp.margin}" if comp.kind == "equivalence" else "one-sample"
        head = f"{kind}: {comp.a.label} against {value}"
    units = f"units: {', '.join(comp.pair_on)}"
    if comp.mean_over:
        units += f" (averaged over {', '.join(comp.mean_over)})"
    files = comp.source.file if isinstance(comp.source.file, str) else ", ".join(comp.source.file)
    files += f" at {comp.source.path}" if comp.source.path else ""
    files += f", each of {comp.source.unnest}" if comp.source.unnest else ""
    where = f" where {_where_text(comp.source.where)}" if comp.source.where else ""
    return f"{head}; {metric}; {units}; rows: {files}{where}"


def _where_text(where: dict[str, Any]) -> str:
    def text(v: Any) -> str:
        return "[" + ", ".join(map(text, v)) + "]" if isinstance(v, list) else str(v)

    return ", ".join(f"{k} in {text(v)}" if isinstance(v, list) else f"{k}={v}"
                     for k, v in where.items())


def _num(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else float(value)


def run_claim(claim: Claim, method: str, rows: Rows) -> dict[str, Any]:
    """One claim's entry of ``claims.json``."""
    seed = derive_seed(0, "claims", method, claim.id)
    # A check shared by several claims draws its bootstrap from the check itself, so
    # it prints the same interval under every claim.
    power: dict[str, Any] = {"description": NO_CHECK, "passed": True, "evidence": ""}
    if claim.power_check:
        check_seed = derive_seed(0, "claims", method, "power", claim.power_check.model_dump_json())
        power = check_power(claim.power_check, rows, check_seed)
    paper = claim.paper if isinstance(claim.paper, (int, float)) else None
    notes = [claim.notes] if claim.notes else []
    entry: dict[str, Any] = {k: None for k in KEYS}
    entry.update(id=claim.id, claim=claim.claim, paper=claim.paper, power_check=power, n=0)
    if claim.comparison is None:
        notes.append(f"no comparison: {claim.untestable}")
        return {**entry, "verdict": UNTESTABLE, "notes": " ".join(notes)}
    comp = claim.comparison
    out = evaluate(comp, rows, seed, paper)
    verdict = out.verdict
    if not power["passed"]:
        verdict = UNTESTABLE
        notes.insert(0, f"Power check failed: the testbed does not show that "
                        f"{power['description']}.")
    s = out.summary
    entry.update(
        comparison=describe(comp, paper), metric=comp.metric, ours=_num(out.ours), n=out.n,
        verdict=verdict, notes=" ".join(notes + [n + "." for n in out.notes]),
    )
    if s is not None:
        entry.update(mean_diff=s.mean_diff, ci_low=s.ci_low, ci_high=s.ci_high,
                     ci_method=s.ci_method, p_value=_num(s.p_value), test=s.test,
                     detectable_diff=_num(s.detectable_diff))
    return entry


def run_method(method: str, claims_dir: Path, results_dir: Path) -> list[dict[str, Any]]:
    """Test every claim of one method and write ``claims.json`` / ``claims.md``."""
    spec = load_claims(claims_dir / f"{method}.yaml")
    if spec.method != method:
        raise ClaimsError(f"{claims_dir / f'{method}.yaml'}: method is {spec.method!r}, "
                          f"not {method!r}")
    base = results_dir / method
    if not base.is_dir():
        raise ClaimsError(f"{base}: no stored results for {method}")
    rows = Rows(base)
    entries = []
    for claim in spec.claims:
        try:
            entries.append(run_claim(claim, method, rows))
        except ClaimsError as exc:
            raise ClaimsError(f"{claims_dir / f'{method}.yaml'}: claim {claim.id}: {exc}") from None
    (base / "claims.json").write_text(json.dumps(entries, indent=2, ensure_ascii=False) + "\n")
    (base / "claims.md").write_text(markdown(spec, entries))
    return entries


# ----------------------------------------------------------------------------- output


def _fmt(value: Any, digits: int = 4) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def markdown(spec: ClaimsFile, entries: list[dict[str, Any]]) -> str:
    """``claims.md``: a table (the paper's number beside ours), then each claim's details."""
    lines = [
        f"# {spec.method}: the paper's claims, tested on the stored results", "",
        f"Paper: {spec.paper}", "",
        f"Written by `python benchmarks/claims.py {spec.method}` from `benchmarks/claims/"
        f"{spec.method}.yaml`; the statistics are those of `flowerbed report --compare` "
        "(`flowerbed/algorithms/paired_stats.py`). `mean diff` is oriented: positive means "
        "arm a (the arm the claim favours) is better. `ours` is the estimate in the "
        "metric's own units: a - b for a paired difference, the geometric-mean change of a "
        "against b in percent for a log ratio, the mean of a for a one-sample test. A "
        "verdict reads the 95 % interval (90 % for an equivalence); `not testable here` "
        "means the power check failed or too few units were stored.", "",
        "| claim | paper | ours | n | mean diff [95 % CI] | p (test) | power check | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for e in entries:
        ci = (f"{_fmt(e['mean_diff'])} [{_fmt(e['ci_low'])}, {_fmt(e['ci_high'])}]"
              if e["mean_diff"] is not None else "—")
        p = f"{_fmt(e['p_value'], 3)} ({e['test']})" if e["p_value"] is not None else "—"
        pc = e["power_check"]
        power = "—" if pc["description"] == NO_CHECK else (
            "passed" if pc["passed"] else "**failed**")
        lines.append(f"| {e['id']} | {_fmt(e['paper'])} | {_fmt(e['ours'])} | {e['n']} | {ci} "
                     f"| {p} | {power} | **{e['verdict']}** |")
    for e in entries:
        lines += ["", f"## {e['id']}: {e['verdict']}", "", f"> {e['claim']}", ""]
        lines.append(f"- comparison: {e['comparison'] or '—'}")
        if e["ci_method"]:
            lines.append(f"- interval: {e['ci_method']}; detectable difference (80 % power): "
                         f"{_fmt(e['detectable_diff'])}")
        pc = e["power_check"]
        if pc["description"] != NO_CHECK:
            lines.append(f"- power check: {pc['description']}: "
                         f"{'passed' if pc['passed'] else 'failed'} — {pc['evidence']}")
        if e["notes"]:
            lines.append(f"- notes: {e['notes']}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Command line: ``claims.py METHOD [METHOD ...]`` or ``claims.py --all``."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("methods", nargs="*", metavar="METHOD")
    p.add_argument("--all", action="store_true", help="every benchmarks/claims/*.yaml")
    p.add_argument("--claims-dir", type=Path, default=CLAIMS_DIR)
    p.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    args = p.parse_args(argv)
    methods = sorted(f.stem for f in args.claims_dir.glob("*.yaml")) if args.all else args.methods
    if not methods:
        print("claims: name a method or give --all", file=sys.stderr)
        return 2
    try:
        for method in methods:
            for e in run_method(method, args.claims_dir, args.results_dir):
                ci = "" if e["mean_diff"] is None else (
                    f"  {e['mean_diff']:+.4g} [{e['ci_low']:+.4g}, {e['ci_high']:+.4g}] n={e['n']}"
                )
                print(f"{method:<14} {e['id']:<28} {e['verdict']:<18}{ci}")
            print(f"wrote {args.results_dir / method / 'claims.json'} and claims.md")
    except ClaimsError as exc:
        print(f"claims: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Report tables: grouping runs, final metrics per run, mean ± std per group, CSV/markdown."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from flowerbed.core.records import atomic_write
from flowerbed.platform.report.runs import RunInfo


def lookup(data: dict[str, Any], key: str) -> Any:
    """``data["a"]["b"]`` for ``key = "a.b"`` (``None`` when absent)."""
    node: Any = data
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def metric_key(name: str) -> str:
    """``accuracy`` means the test split's ``test/accuracy``; ``x/y`` is taken as given."""
    return name if "/" in name else f"test/{name}"


def default_metrics(runs: Sequence[RunInfo]) -> list[str]:
    """Pick the scenario's summary metrics present in the results, else every test metric."""
    finals = [m for r in runs for m in r.final().values()]
    wanted = next((r.scenario.get("metrics", {}).get("summary") for r in runs if r.scenario), None)
    keys = [metric_key(m) for m in wanted or []]
    present = [k for k in keys if any(k in m for m in finals)]
    if present:
        return present
    every = dict.fromkeys(k for m in finals for k in m if k.startswith("test/"))
    return [k for k in every if not k.endswith(("_min", "_max")) and not _spread_of(k, every)]


def _spread_of(key: str, keys: Iterable[str]) -> bool:
    """Whether ``key`` is ``<m>_mean``/``<m>_std`` of a metric ``m`` also in ``keys``.

    A local task's summary holds both the example-weighted ``m`` and its
    spread over clients; the table shows ``m``, the client view the spread.
    """
    stem, _, suffix = key.rpartition("_")
    return suffix in ("mean", "std") and stem in keys


def default_group_by(runs: Sequence[RunInfo]) -> list[str]:
    """Swept keys other than ``seed``: points differing only in seed form a group.

    Runs that are not sweep points are one group when their scenarios differ
    at most in ``seed``, else each run is its own group (key ``run``).
    """
    keys = list(dict.fromkeys(k for r in runs for k in r.overrides if k != "seed"))
    if keys or any(r.overrides for r in runs):
        return keys
    configs = {json.dumps({**r.scenario, "seed": None}, sort_keys=True) for r in runs}
    return ["run"] if len(configs) > 1 else []


def group_value(run: RunInfo, key: str) -> Any:
    """Return a run's value of ``key``: its sweep override, else its resolved scenario.

    The key ``run`` (not a scenario field) is the run folder's name.
    """
    if key in run.overrides:
        return run.overrides[key]
    return run.name if key == "run" else lookup(run.scenario, key)


def _fmt_value(value: Any) -> str:
    return json.dumps(value) if isinstance(value, (list, dict)) else str(value)


def group_label(run: RunInfo, keys: Sequence[str]) -> str:
    """``partition.alpha=0.1 rounds=3`` (``all`` without keys)."""
    return " ".join(f"{k}={_fmt_value(group_value(run, k))}" for k in keys) or "all"


def run_rows(
    runs: Sequence[RunInfo], metrics: Sequence[str], keys: Sequence[str]
) -> list[dict[str, Any]]:
    """One row per run and source: the run, its group values, seed, final metrics.

    A partial run (no summary, rounds logged) has ``status`` ``partial`` and
    its source says at which round its metrics are.
    """
    rows = []
    for run in runs:
        for source, values in run.final().items():
            row: dict[str, Any] = {"run": run.name}
            row.update({k: _fmt_value(group_value(run, k)) for k in keys})
            row.update({"seed": run.scenario.get("seed"), "source": run.source_label(source)})
            row.update({m: values.get(m) for m in metrics})
            row["status"] = "partial" if run.partial else "done"
            rows.append(row)
    return rows


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (``nan`` std for a single value).

    Examples
    --------
    >>> mean_std([1.0, 3.0])
    (2.0, 1.4142135623730951)
    """
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, math.nan
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))


def summary_rows(
    runs: Sequence[RunInfo], metrics: Sequence[str], keys: Sequence[str]
) -> list[dict[str, Any]]:
    """Per group and source: ``n`` runs and each metric's mean and std over them.

    Partial runs pool only with partial runs stopped at the same round (their
    source label names it), never with finished ones. A source holding none
    of ``metrics`` (DP's ``privacy`` results beside the accuracies) gets no
    row, unless no source holds any.
    """
    cells: dict[tuple[str, str], dict[str, list[float]]] = {}
    first: dict[str, RunInfo] = {}
    for run in runs:
        label = group_label(run, keys)
        first.setdefault(label, run)
        for source, values in run.final().items():
            key = (label, run.source_label(source))
            bucket = cells.setdefault(key, {m: [] for m in metrics})
            for m in metrics:
                if values.get(m) is not None:
                    bucket[m].append(float(values[m]))
    rows = []
    for (label, source), bucket in cells.items():
        row: dict[str, Any] = {k: _fmt_value(group_value(first[label], k)) for k in keys}
        n = max(map(len, bucket.values()), default=0)
        row.update({"group": label, "source": source, "n": n})
        for m, samples in bucket.items():
            mean, std = mean_std(samples) if samples else (math.nan, math.nan)
            row.update({f"{m} mean": mean, f"{m} std": std})
        rows.append(row)
    with_values = [r for r in rows if r["n"] > 0]
    return with_values or rows


def client_table(clients: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One flat row per client: ``client``, ``num_examples`` and each metric by full name.

    ``clients`` are :func:`~flowerbed.platform.report.runs.local_client_rows`'
    rows; a bare metric name becomes ``test/<name>``, as in ``summary.json``.
    """
    rows = []
    for c in clients:
        row: dict[str, Any] = {"client": c.get("client"), "num_examples": c.get("num_examples")}
        metrics = c.get("metrics") or {}
        row.update({metric_key(k): float(v) for k, v in metrics.items() if _number(v)})
        rows.append(row)
    return rows


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def client_metrics(table: Sequence[dict[str, Any]]) -> list[str]:
    """Metric columns of :func:`client_table`'s rows, first seen first."""
    fixed = ("client", "num_examples")
    return list(dict.fromkeys(k for row in table for k in row if k not in fixed))


def client_means(table: Sequence[dict[str, Any]], metric: str) -> tuple[float, float]:
    """Mean of ``metric`` over clients, unweighted and weighted by ``num_examples``.

    The unweighted mean is the level of the bars in the client plot; the
    weighted one is what ``summary.json`` reports as the federated value.
    """
    pairs = [(float(r[metric]), r.get("num_examples") or 0) for r in table if metric in r]
    if not pairs:
        return math.nan, math.nan
    plain = sum(v for v, _ in pairs) / len(pairs)
    total = sum(n for _, n in pairs)
    weighted = sum(v * n for v, n in pairs) / total if total else math.nan
    return plain, weighted


def client_lines(
    table: Sequence[dict[str, Any]], metric: str, results: dict[str, dict[str, float]]
) -> dict[str, float]:
    """Reference levels of the client plot: the mean over clients, and centralized if run."""
    lines = {"mean over clients": client_means(table, metric)[0]}
    central = (results.get("centralized") or {}).get(metric)
    if _number(central):
        lines["centralized"] = float(central)  # type: ignore[arg-type]
    return lines


def client_markdown(
    table: Sequence[dict[str, Any]], metrics: Sequence[str], results: dict[str, dict[str, float]]
) -> str:
    """The per-client table in markdown, closed by the means and the centralized value."""
    head = ["client", "num_examples", *metrics]
    body = [[_cell(r.get(c)) for c in head] for r in table]
    means = [client_means(table, m) for m in metrics]
    total = sum(r.get("num_examples") or 0 for r in table)
    body.append(["mean over clients", "", *(_cell(plain) for plain, _ in means)])
    body.append(["example-weighted mean", str(total), *(_cell(w) for _, w in means)])
    central = results.get("centralized") or {}
    if any(m in central for m in metrics):
        body.append(["centralized (pooled data)", "", *(_cell(central.get(m)) for m in metrics)])
    return markdown_table(head, body)


def _pms(row: dict[str, Any], metrics: Sequence[str]) -> list[str]:
    return [_pm(row, m) for m in metrics]


def _cell(value: Any, digits: int = 4) -> str:
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.{digits}f}"
    return "" if value is None else str(value)


def _pm(row: dict[str, Any], metric: str) -> str:
    """``0.9312 ± 0.0040`` (just the mean when the std is undefined)."""
    mean, std = row[f"{metric} mean"], row[f"{metric} std"]
    if math.isnan(mean):
        return "-"
    return f"{mean:.4f}" if math.isnan(std) else f"{mean:.4f} ± {std:.4f}"


def write_csv(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    """Rows as CSV (full precision; empty cells for missing values)."""
    import io

    columns = list(dict.fromkeys(k for row in rows for k in row))
    out = io.StringIO()
    writer = csv.DictWriter(out, columns, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: "" if _missing(row.get(k)) else row.get(k) for k in columns})
    atomic_write(path, out.getvalue())


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def markdown_table(header: Sequence[str], body: Iterable[Sequence[str]]) -> str:
    """Render a GitHub-flavoured markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in body]
    return "\n".join(lines)

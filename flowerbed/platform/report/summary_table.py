"""Summary tables that stay readable in a terminal, a pipe or a CI log.

A :class:`SummaryGrid` is what ``flowerbed run`` and ``flowerbed report``
summarise: one row per source (federated, baselines, a strategy's arms) and
one column per metric. :func:`render` writes it as

- ``table``: a box table that never cuts a name or a number. When it is
  wider than the terminal (``shutil.get_terminal_size``, 80 columns when
  not a TTY) it is transposed, one row per metric and one column per source,
  and split into several tables if that is still too wide. A legend under
  it says which way each metric is better and what each row is;
- ``json``, ``csv``, ``markdown``: the same rows at full precision, to
  parse back (``json`` and ``csv``) or paste (``markdown``).

Nothing heavy is imported at module level; rich is imported when a table is
drawn.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
import shutil
import textwrap
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from flowerbed.platform.report.runs import latest_metrics

if TYPE_CHECKING:
    from rich.table import Table

    from flowerbed.platform.report.build import Report

FORMATS = ("table", "json", "csv", "markdown")
#: Words of a metric name that say smaller values are better.
LOWER_BETTER = frozenset(
    {"loss", "mse", "mae", "rmse", "pinball", "error", "ppl", "perplexity", "bytes", "time",
     "seconds"}
)
#: Words of a metric name that say larger values are better.
HIGHER_BETTER = frozenset(
    {"accuracy", "acc", "f1", "auc", "auroc", "r2", "psnr", "ssim", "spearman", "coverage",
     "precision", "recall", "iou", "dice"}
)
#: Words of a spread, for which neither way is better.
SPREAD = frozenset({"std", "var", "variance"})
#: What the rows of a summary are; any other row is an arm the strategy reports.
ROW_MEANINGS = {
    "federated": "the strategy's result",
    "centralized": "one model trained on the pooled data of every client",
    "local_only": "each client trained alone on its own data",
}


@dataclass
class SummaryGrid:
    """A summary ready to render.

    ``label_names`` head the label columns (``source``, or the grouping keys
    and ``source``); each row has its ``labels`` and, for the table, one text
    cell per name in ``columns``. ``records`` are the same rows as plain
    values at full precision, for the machine formats.
    """

    title: str
    label_names: list[str]
    columns: list[str]
    labels: list[list[str]]
    cells: list[list[str]]
    records: list[dict[str, Any]]
    legend: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- numbers and words


def format_number(value: Any) -> str:
    """A value as the table shows it: whole, never cut.

    Integers (and whole floats from 1000 up, such as byte counts) in full,
    tiny values in scientific notation, other floats with 4 decimals.

    Examples
    --------
    >>> format_number(0.9312345), format_number(203560.0), format_number(1.2345e-05)
    ('0.9312', '203560', '1.234e-05')
    """
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return str(value)
    if math.isinf(value):
        return str(value)
    if value.is_integer() and 1000 <= abs(value) < 1e16:
        return str(int(value))
    if value != 0 and abs(value) < 5e-5:  # would show as 0.0000
        return f"{value:.3e}"
    return f"{value:.4f}"


def direction(metric: str) -> str | None:
    """``lower`` or ``higher`` (is better) from the words of a metric's name, else ``None``.

    Examples
    --------
    >>> direction("test/loss"), direction("screen/spearman"), direction("test/exit_fraction")
    ('lower', 'higher', None)
    """
    words = set(re.split(r"[^a-z0-9]+", metric.rsplit("/", 1)[-1].lower()))
    if words & SPREAD:
        return None
    lower, higher = bool(words & LOWER_BETTER), bool(words & HIGHER_BETTER)
    if lower == higher:
        return None  # neither, or contradicting words
    return "lower" if lower else "higher"


def metric_legend(names: Sequence[str]) -> list[str]:
    """``higher is better: accuracy, f1`` and ``lower is better: loss`` lines (known only)."""
    lines = []
    for way in ("higher", "lower"):
        chosen = [n for n in names if direction(n) == way]
        if chosen:
            lines.append(f"{way} is better: {', '.join(chosen)}")
    return lines


def base_source(label: str) -> str:
    """``federated`` for ``federated (partial: round 3 of 10)``."""
    return label.split(" (", 1)[0]


def row_legend(sources: Sequence[str], described: Collection[str] = ()) -> list[str]:
    """``rows: federated = the strategy's result; ...`` for the rows present.

    Rows in ``described`` are left out: the strategy's own words follow.
    """
    bases = [s for s in dict.fromkeys(base_source(s) for s in sources) if s not in described]
    parts = [f"{s} = {ROW_MEANINGS[s]}" for s in bases if s in ROW_MEANINGS]
    others = [s for s in bases if s not in ROW_MEANINGS]
    if others:
        parts.append(f"{', '.join(others)} = arms the strategy reports")
    if any(base_source(s) != s for s in sources):
        parts.append("partial = a run that stopped early, at its last evaluated round")
    return [f"rows: {'; '.join(parts)}"] if parts else []


def declared_legend(
    declared: Mapping[str, str],
    sources: Sequence[str],
    present: Sequence[str],
    columns: Mapping[str, str],
) -> list[str]:
    """``name = meaning`` for each row or column shown that the strategy described.

    ``declared`` is ``summary.json``'s ``legend`` (a source or a metric key
    such as ``test/ci_coverage``, or its bare name, mapped to its meaning).
    """
    shown = [*sources, *((c, columns[c]) for c in present)]
    lines = []
    for item in shown:
        name, key = item if isinstance(item, tuple) else (item, item)
        text = declared.get(key) or declared.get(name)
        if text:
            lines.append(f"{name} = {text}")
    return lines


def empty_rows(
    results: Mapping[str, Mapping[str, Any]], keys: Sequence[str], run_dir: str = "RUN_DIR"
) -> list[str]:
    """Why a row shows only ``-``: it has no value for these columns, but has others.

    Examples
    --------
    >>> line, = empty_rows({"personalized": {"local_test/mse": 1.0}}, ["test/mse"])
    >>> line.split(" (")[0]
    'personalized: no value for these columns; it has local_test/mse'

    """
    lines = []
    for source, values in results.items():
        if keys and all(values.get(k) is None for k in keys) and values:
            have = sorted(values)
            shown = ", ".join(have[:6]) + (f" and {len(have) - 6} more" if len(have) > 6 else "")
            lines.append(
                f"{source}: no value for these columns; it has {shown} (show it with "
                f"flowerbed report {run_dir} --metric {have[0]})"
            )
    return lines


# --------------------------------------------------------------------------- grids


def run_grid(
    summary: Mapping[str, Any],
    columns: Mapping[str, str],
    rows: Sequence[dict[str, Any]] = (),
) -> SummaryGrid:
    """The summary of one run: a row per source, a column per summary metric present.

    Parameters
    ----------
    summary
        ``summary.json``'s content (``results`` by source, ``scenario``, ``seed``).
    columns
        Column name -> metric key (``MetricsConfig.summary_keys``).
    rows
        ``metrics.jsonl``'s rows: a federated metric missing from the
        results (``train/upload_bytes``) is taken at its last round there.
    """
    results: dict[str, dict[str, Any]] = {
        s: dict(v) for s, v in (summary.get("results") or {}).items()
    }
    logged = _fill_federated(results, columns.values(), rows)
    present = [c for c, k in columns.items() if any(k in v for v in results.values())]
    records = [
        {"source": source, **{c: values.get(columns[c]) for c in present}}
        for source, values in results.items()
    ]
    declared = summary.get("legend") or {}
    legend = metric_legend(present) + row_legend(list(results), declared)
    from_rows = [c for c in present if columns[c] in logged]
    if from_rows:
        legend.append(f"{', '.join(from_rows)}: federated value at the last round "
                      "of metrics.jsonl")
    legend += declared_legend(declared, list(results), present, columns)
    where = str(summary.get("run_dir") or "RUN_DIR")
    legend += empty_rows(results, [columns[c] for c in present], where)
    return SummaryGrid(
        title=f"{summary.get('scenario', '')} (seed {summary.get('seed')})",
        label_names=["source"],
        columns=present,
        labels=[[source] for source in results],
        cells=[[format_number(r[c]) for c in present] for r in records],
        records=records,
        legend=legend,
    )


def _fill_federated(
    results: dict[str, dict[str, Any]], keys: Sequence[str] | Any, rows: Sequence[dict[str, Any]]
) -> set[str]:
    """Add the wanted federated metrics that only ``metrics.jsonl`` has; return their keys."""
    federated = results.get("federated")
    if federated is None or not rows:
        return set()
    logged = latest_metrics(rows)
    added = {k for k in keys if k not in federated and k in logged}
    federated.update({k: logged[k] for k in added})
    return added


def report_grid(report: Report) -> SummaryGrid:
    """A report's summary: a row per group and source, ``n`` and ``mean ± std`` per metric."""
    keys, metrics = list(report.keys), list(report.metrics)
    rows = report.summary_table
    legend = metric_legend(metrics) + row_legend([r["source"] for r in rows])
    logged = [m for m in metrics if _only_logged(report, m)]
    if logged:
        legend.append(f"{', '.join(logged)}: federated value at the last round of metrics.jsonl")
    return SummaryGrid(
        title=f"report · {report.path} (mean ± sample std over runs)",
        label_names=[*keys, "source"],
        columns=["n", *metrics],
        labels=[[*(str(r[k]) for k in keys), r["source"]] for r in rows],
        cells=[[str(r["n"]), *(_mean_std(r, m) for m in metrics)] for r in rows],
        records=[{k: v for k, v in r.items() if k != "group"} for r in rows],
        legend=legend,
    )


def _only_logged(report: Report, metric: str) -> bool:
    """Whether finished runs have ``metric`` from ``metrics.jsonl`` only, not their summary."""
    done = [r for r in report.runs if r.ok]
    summarised = any(metric in (r.summary or {}).get("results", {}).get("federated", {})
                     for r in done)
    return not summarised and any(metric in r.final().get("federated", {}) for r in done)


def _mean_std(row: Mapping[str, Any], metric: str) -> str:
    mean, std = row[f"{metric} mean"], row[f"{metric} std"]
    if math.isnan(mean):
        return "-"
    if math.isnan(std):
        return format_number(mean)
    return f"{format_number(mean)} ± {format_number(std)}"


# --------------------------------------------------------------------------- rendering


def terminal_width() -> int:
    """Columns of the terminal; 80 in a pipe or a CI log (``$COLUMNS`` wins)."""
    return shutil.get_terminal_size((80, 24)).columns


def render(grid: SummaryGrid, fmt: str = "table", width: int | None = None) -> str:
    """``grid`` as text in format ``fmt`` (one of :data:`FORMATS`), ending without a newline."""
    if fmt == "table":
        return render_table(grid, width or terminal_width())
    if fmt == "json":
        return json.dumps({"title": grid.title, "rows": _clean(grid.records)}, indent=2)
    if fmt == "csv":
        return _csv(grid.records)
    if fmt == "markdown":
        return _markdown(grid)
    raise ValueError(f"unknown format {fmt!r}; known: {', '.join(FORMATS)}")


def _clean(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """NaN (undefined std of one run) becomes ``null``: JSON has no NaN."""
    return [{k: None if _missing(v) else v for k, v in r.items()} for r in records]


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _columns(records: Sequence[dict[str, Any]]) -> list[str]:
    return list(dict.fromkeys(k for r in records for k in r))


def _csv(records: Sequence[dict[str, Any]]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, _columns(records), lineterminator="\n")
    writer.writeheader()
    for row in _clean(records):
        writer.writerow({k: "" if v is None else v for k, v in row.items()})  # floats: repr
    return out.getvalue().rstrip("\n")


def _exact(value: Any) -> str:
    """Full precision (``repr`` of a float parses back to the same float)."""
    if _missing(value):
        return ""
    text = repr(value) if isinstance(value, float) else str(value)
    return text.replace("|", "\\|")


def _markdown(grid: SummaryGrid) -> str:
    head = _columns(grid.records)
    lines = [f"**{grid.title}**", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(_exact(r.get(c)) for c in head) + " |" for r in grid.records]
    return "\n".join([*lines, "", *(f"- {line}" for line in grid.legend)]).rstrip()


def render_table(grid: SummaryGrid, width: int) -> str:
    """The box table(s) and legend, each line at most ``width`` wide where a line can be."""
    # Titles are lines of their own: a rich title would wrap a long run path.
    parts = [f"{title}\n{_draw(t, max(width, _width(t)))}" for title, t in _fit(grid, width)]
    wrap = textwrap.TextWrapper(
        width=max(width, 20), subsequent_indent="  ", break_long_words=False,
        break_on_hyphens=False,
    )
    legend = [w for line in grid.legend for w in wrap.wrap(line)]
    return "\n".join([*parts, *legend])


def _fit(grid: SummaryGrid, width: int) -> list[tuple[str, Table]]:
    """The natural table if it fits; else the transposed one, split into parts that fit."""
    natural = _table([*grid.label_names, *grid.columns],
                     [[*lab, *row] for lab, row in zip(grid.labels, grid.cells, strict=True)],
                     len(grid.label_names))
    if _width(natural) <= width:
        return [(grid.title, natural)]
    heads = [_row_title(grid, lab) for lab in grid.labels]
    body = [[c, *(row[j] for row in grid.cells)] for j, c in enumerate(grid.columns)]
    return _split(grid.title, "metric", heads, body, width)


def _row_title(grid: SummaryGrid, labels: Sequence[str]) -> str:
    """A transposed column's header: ``key=value`` lines, then the source."""
    named = [f"{n}={v}" for n, v in zip(grid.label_names[:-1], labels[:-1], strict=True)]
    return "\n".join([*named, labels[-1]])


def _split(
    title: str, corner: str, heads: list[str], body: list[list[str]], width: int
) -> list[tuple[str, Table]]:
    """Tables of the label column and as many value columns as fit ``width``, left to right."""
    groups: list[list[int]] = []
    for j in range(len(heads)):
        if groups and _width(_part(corner, heads, body, [*groups[-1], j])) <= width:
            groups[-1].append(j)
        else:
            groups.append([j])
    n = len(groups)
    return [
        (f"{title} ({i + 1}/{n})" if n > 1 else title, _part(corner, heads, body, cols))
        for i, cols in enumerate(groups)
    ]


def _part(corner: str, heads: list[str], body: list[list[str]], cols: list[int]) -> Table:
    rows = [[r[0], *(r[1 + j] for j in cols)] for r in body]
    return _table([corner, *(heads[j] for j in cols)], rows, 1)


def _table(head: list[str], body: list[list[str]], n_labels: int) -> Table:
    from rich import box
    from rich.table import Table

    table = Table(box=box.SQUARE)
    for i, name in enumerate(head):
        # fold, never "…": the width is chosen so nothing needs to fold
        table.add_column(name, justify="left" if i < n_labels else "right", overflow="fold")
    for row in body:
        table.add_row(*row)
    return table


def _console(width: int, file: io.StringIO | None = None) -> Any:
    from rich.console import Console

    return Console(
        file=file or io.StringIO(), width=width, color_system=None, force_terminal=False,
        highlight=False, emoji=False, markup=False, legacy_windows=False,
    )


def _width(table: Table) -> int:
    """The width ``table`` takes when nothing in it is wrapped."""
    from rich.measure import Measurement

    console = _console(10_000)
    return Measurement.get(console, console.options, table).maximum


def _draw(table: Table, width: int) -> str:
    out = io.StringIO()
    _console(width, out).print(table)
    return "\n".join(line.rstrip() for line in out.getvalue().splitlines())

"""Reports: final-metric tables and PNG plots from run folders and sweeps.

``flowerbed report PATH`` takes one run folder (it holds ``summary.json``) or
a folder of runs (a sweep, or ``runs/<scenario>/``) and writes, under
``PATH/report/``:

- ``runs.csv``: final metrics of every run and source (federated, baselines);
- ``summary.csv``: mean and sample std over the runs of each group (by
  default the swept keys other than ``seed``, so: mean ± std over seeds);
- ``report.md``: both tables in markdown, failed runs, the plots;
- ``curves_<metric>.png``: the metric per round (per run, or a group's mean
  with a ±std band), and ``runs/<run>_<metric>.png`` for each run;
- ``bars_<metric>.png``: final metric per group and source, with std bars.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from flowerbed.platform.results import METRICS_FILE, SCENARIO_FILE, SUMMARY_FILE, atomic_write

if TYPE_CHECKING:
    from rich.table import Table

REPORT_DIR = "report"
OVERRIDES_FILE = "overrides.yaml"  # written by flowerbed.platform.sweep
PLAN_FILE = "sweep.json"
STATUS_FILE = "status.json"
ERROR_FILE = "error.txt"
SKIP_DIRS = (REPORT_DIR, "previous")
#: Round series preferred for a metric's curve, most global first.
CURVE_PREFIXES = ("server_eval/test/", "evaluate/local_test/", "evaluate/test/")


@dataclass
class RunInfo:
    """What one run folder holds, as the report needs it."""

    path: Path
    scenario: dict[str, Any]
    overrides: dict[str, Any]
    summary: dict[str, Any] | None
    rows: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None

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


def _read_rows(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue  # a line cut by a crash
    return rows


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
    return RunInfo(path, scenario or {}, overrides, summary, _read_rows(path / METRICS_FILE), error)


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


# --------------------------------------------------------------------------- tables


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
    return [k for k in every if not k.endswith(("_min", "_max"))]


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
    """One row per finished run and source: the run, its group values, seed, final metrics."""
    rows = []
    for run in runs:
        for source, values in run.final().items():
            row: dict[str, Any] = {"run": run.name}
            row.update({k: _fmt_value(group_value(run, k)) for k in keys})
            row.update({"seed": run.scenario.get("seed"), "source": source})
            row.update({m: values.get(m) for m in metrics})
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
    """Per group and source: ``n`` runs and each metric's mean and std over them."""
    cells: dict[tuple[str, str], dict[str, list[float]]] = {}
    first: dict[str, RunInfo] = {}
    for run in runs:
        label = group_label(run, keys)
        first.setdefault(label, run)
        for source, values in run.final().items():
            bucket = cells.setdefault((label, source), {m: [] for m in metrics})
            for m in metrics:
                if values.get(m) is not None:
                    bucket[m].append(float(values[m]))
    rows = []
    for (label, source), bucket in cells.items():
        row: dict[str, Any] = {k: _fmt_value(group_value(first[label], k)) for k in keys}
        n = max(map(len, bucket.values()), default=0)
        row.update({"group": label, "source": source, "n": n})
        for m, values in bucket.items():
            mean, std = mean_std(values) if values else (math.nan, math.nan)
            row.update({f"{m} mean": mean, f"{m} std": std})
        rows.append(row)
    return rows


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


# --------------------------------------------------------------------------- plots


def curve(rows: Sequence[dict[str, Any]], metric: str) -> tuple[str, dict[int, float]] | None:
    """Extract the per-round series of ``metric`` (``test/accuracy``) from metrics rows.

    Prefers the server's evaluation of the global model, then the clients'
    weighted evaluation; returns the column used and ``{round: value}``.
    """
    base = metric.split("/")[-1]
    for column in (p + base for p in CURVE_PREFIXES):
        series = _series(rows, column)
        if series:
            return column, series
    return None


def _series(rows: Sequence[dict[str, Any]], column: str) -> dict[int, float]:
    """``{round: value}`` of one metrics column, rounds ascending."""
    series = {int(r["round"]): float(r[column]) for r in rows if column in r and "round" in r}
    return dict(sorted(series.items()))


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_run(run: RunInfo, metric: str, path: Path) -> bool:
    """One run: the metric per round, baselines' final values as dashed lines."""
    plt, found = _pyplot(), curve(run.rows, metric)
    if plt is None or found is None:
        return False
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for k, prefix in enumerate(CURVE_PREFIXES):
        series = _series(run.rows, prefix + metric.split("/")[-1])
        if series:
            style = {"marker": "o"} if k == 0 else {"marker": ".", "alpha": 0.6}
            ax.plot(list(series), list(series.values()), color="C0", label=prefix.rstrip("/"),
                    linestyle="-" if k == 0 else ":", **style)
    for i, (source, values) in enumerate(run.final().items()):
        if source != "federated" and metric in values:
            ax.axhline(values[metric], linestyle="--", color=f"C{i}", label=source)
    where = " ".join(f"{k}={_fmt_value(v)}" for k, v in run.overrides.items())
    _finish(ax, fig, path, f"{run.scenario.get('name', '')} · {run.name} {where}", metric)
    plt.close(fig)
    return True


def _finish(ax: Any, fig: Any, path: Path, title: str, metric: str) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("round")
    ax.set_ylabel(metric)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _group_curves(
    runs: Sequence[RunInfo], metric: str, keys: Sequence[str]
) -> dict[str, list[dict[int, float]]]:
    groups: dict[str, list[dict[int, float]]] = {}
    for run in runs:
        found = curve(run.rows, metric)
        if found is not None:
            groups.setdefault(group_label(run, keys), []).append(found[1])
    return groups


def plot_curves(runs: Sequence[RunInfo], metric: str, keys: Sequence[str], path: Path) -> bool:
    """All groups: mean federated curve over each group's runs, ±std band."""
    plt, groups = _pyplot(), _group_curves(runs, metric, keys)
    if plt is None or not groups:
        return False
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, (label, series) in enumerate(groups.items()):
        rounds = sorted({r for s in series for r in s})
        stats = [mean_std([s[r] for s in series if r in s]) for r in rounds]
        means = [m for m, _ in stats]
        stds = [0.0 if math.isnan(s) else s for _, s in stats]
        ax.plot(rounds, means, marker="o", color=f"C{i}", label=f"{label} (n={len(series)})")
        lo = [m - s for m, s in zip(means, stds, strict=True)]
        hi = [m + s for m, s in zip(means, stds, strict=True)]
        ax.fill_between(rounds, lo, hi, color=f"C{i}", alpha=0.2)
    _finish(ax, fig, path, f"federated {metric} per round (mean ± std)", metric)
    plt.close(fig)
    return True


def plot_bars(rows: Sequence[dict[str, Any]], metric: str, path: Path) -> bool:
    """Plot final ``metric`` per group (x) and source (bars), with std error bars."""
    plt = _pyplot()
    if plt is None or not rows:
        return False
    groups = list(dict.fromkeys(r["group"] for r in rows))
    sources = list(dict.fromkeys(r["source"] for r in rows))
    width = 0.8 / len(sources)
    fig, ax = plt.subplots(figsize=(max(5.0, 1.6 * len(groups) + 2), 4.5))
    for j, source in enumerate(sources):
        by_group = {r["group"]: r for r in rows if r["source"] == source}
        means = [by_group[g][f"{metric} mean"] if g in by_group else math.nan for g in groups]
        stds = [by_group[g][f"{metric} std"] if g in by_group else math.nan for g in groups]
        xs = [i + (j - (len(sources) - 1) / 2) * width for i in range(len(groups))]
        errs = [0.0 if math.isnan(s) else s for s in stds]
        ax.bar(xs, means, width, yerr=errs, capsize=3, label=source, color=f"C{j}")
    ax.set_xticks(range(len(groups)), groups, rotation=15 if len(groups) > 3 else 0, fontsize=8)
    ax.set_ylabel(metric)
    ax.set_title(f"final {metric} (mean ± std)", fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=len(sources))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


# --------------------------------------------------------------------------- report


@dataclass
class Report:
    """Everything ``flowerbed report`` computed and where it wrote it."""

    path: Path
    runs: list[RunInfo]
    metrics: list[str]
    keys: list[str]
    run_table: list[dict[str, Any]]
    summary_table: list[dict[str, Any]]
    files: list[Path] = field(default_factory=list)

    @property
    def out_dir(self) -> Path:
        """``<path>/report``."""
        return self.path / REPORT_DIR


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def build_report(
    path: str | Path, metrics: Sequence[str] = (), group_by: Sequence[str] = ()
) -> Report:
    """Read the runs under ``path`` and compute the tables (nothing written yet)."""
    runs = find_runs(path)
    done = [r for r in runs if r.ok]
    chosen = [metric_key(m) for m in metrics] or default_metrics(done)
    keys = list(group_by) or default_group_by(runs)
    root = Path(path)
    return Report(
        root, runs, chosen, keys, run_rows(done, chosen, keys), summary_rows(done, chosen, keys)
    )


def write_plots(report: Report) -> list[Path]:
    """Per-run curves, group curves and comparison bars for every metric."""
    out = report.out_dir
    written = []
    done = [r for r in report.runs if r.ok]
    for metric in report.metrics:
        tag = _safe(metric.split("/")[-1])
        if len(report.runs) == 1:
            target = out / f"curves_{tag}.png"
            written += [target] if plot_run(done[0], metric, target) else []
            continue
        (out / "runs").mkdir(exist_ok=True)
        for run in done:
            target = out / "runs" / f"{run.name}_{tag}.png"
            written += [target] if plot_run(run, metric, target) else []
        if plot_curves(done, metric, report.keys, out / f"curves_{tag}.png"):
            written.append(out / f"curves_{tag}.png")
        if plot_bars(report.summary_table, metric, out / f"bars_{tag}.png"):
            written.append(out / f"bars_{tag}.png")
    return written


def markdown(report: Report, plots: Sequence[Path]) -> str:
    """Render the report as markdown: summary, per-run table, failures, plots."""
    head = [*report.keys, "source", "n", *report.metrics]
    body = [
        [*(r[k] for k in report.keys), r["source"], str(r["n"]), *_pms(r, report.metrics)]
        for r in report.summary_table
    ]
    parts = [f"# Report: {report.path}", "", "## Final metrics (mean ± sample std over runs)", ""]
    parts += [markdown_table(head, body), "", "## Runs", ""]
    run_head = ["run", *report.keys, "seed", "source", *report.metrics]
    run_body = [[_cell(r[c]) for c in run_head] for r in report.run_table]
    parts.append(markdown_table(run_head, run_body))
    failed = [r for r in report.runs if not r.ok]
    if failed:
        parts += ["", "## Failed or unfinished runs", ""]
        parts += [f"- `{r.name}`: {r.error}" for r in failed]
    if plots:
        parts += ["", "## Plots", ""]
        ordered = sorted(plots, key=lambda p: (p.parent != report.out_dir, p.name))
        parts += [f"![{p.stem}]({p.relative_to(report.out_dir).as_posix()})" for p in ordered]
    return "\n".join(parts) + "\n"


def write_report(report: Report, plots: bool = True) -> list[Path]:
    """Write CSVs, markdown and (unless ``plots=False``) PNGs under ``<path>/report``."""
    out = report.out_dir
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / "runs.csv", report.run_table)
    write_csv(out / "summary.csv", report.summary_table)
    pngs = write_plots(report) if plots else []
    atomic_write(out / "report.md", markdown(report, pngs))
    report.files = [out / "runs.csv", out / "summary.csv", out / "report.md", *pngs]
    return report.files


def rich_table(report: Report) -> Table:
    """Render the summary (mean ± std per group and source) as a rich table."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(*report.keys, "source", "n", *report.metrics, title=f"report · {report.path}")
    for r in report.summary_table:
        cells = [escape(r[k]) for k in report.keys]
        table.add_row(*cells, r["source"], str(r["n"]), *(_pm(r, m) for m in report.metrics))
    return table


def cmd_report(args: argparse.Namespace) -> int:
    """Print the report table and write CSV, markdown and PNGs next to the runs."""
    from rich.console import Console

    try:
        report = build_report(args.path, args.metric, args.group_by)
    except FileNotFoundError as exc:
        print(exc, file=sys.stderr)
        return 2
    files = write_report(report, plots=not args.no_plots)
    console = Console()
    console.print(rich_table(report))
    for run in (r for r in report.runs if not r.ok):
        console.print(f"[red]failed or unfinished[/red] {run.name}: {run.error}", highlight=False)
    if not args.no_plots and not any(f.suffix == ".png" for f in files) and _pyplot() is None:
        console.print("no plots: matplotlib is not installed (pip install matplotlib)")
    console.print(f"wrote {len(files)} files to {report.out_dir}")
    return 0


Command = Callable[[argparse.Namespace], int]


def add_commands(subparsers: Any, commands: dict[str, Command]) -> None:
    """Add ``flowerbed report`` to the CLI."""
    p = subparsers.add_parser(
        "report",
        help="tables and plots of a run folder or a sweep",
        description="Final metrics of federated and baselines (mean ± std over seeds for a "
        "sweep), written as CSV/markdown/PNG under PATH/report/.",
    )
    p.add_argument("path", metavar="RUN_DIR_OR_SWEEP_DIR")
    p.add_argument(
        "--metric", action="append", default=[], metavar="M",
        help="metric (repeatable): accuracy means test/accuracy (default: the scenario's summary)",
    )
    p.add_argument(
        "--group-by", action="append", default=[], metavar="KEY",
        help="dotted scenario key grouping runs (repeatable; default: swept keys except seed)",
    )
    p.add_argument("--no-plots", action="store_true", help="tables only")
    commands["report"] = cmd_report

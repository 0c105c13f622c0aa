"""Building a report from run folders and writing its files under ``<path>/report``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flowerbed.core.records import atomic_write
from flowerbed.platform.report.plots import (
    CURVE_PREFIXES,
    phase_curves,
    plot_bars,
    plot_clients,
    plot_curves,
    plot_phases,
    plot_run,
    readable_group,
)
from flowerbed.platform.report.runs import REPORT_DIR, RunInfo, find_runs
from flowerbed.platform.report.tables import (
    _cell,
    _pms,
    client_lines,
    client_markdown,
    client_metrics,
    client_table,
    default_group_by,
    default_metrics,
    group_label,
    markdown_table,
    metric_key,
    run_rows,
    summary_rows,
    write_csv,
)


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
    #: Per-client rows of each local-task run, by run folder name.
    clients: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    @property
    def out_dir(self) -> Path:
        """``<path>/report``."""
        return self.path / REPORT_DIR


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def build_report(
    path: str | Path, metrics: Sequence[str] = (), group_by: Sequence[str] = ()
) -> Report:
    """Read the runs under ``path`` and compute the tables (nothing written yet).

    Finished runs and partial ones (killed, with rounds in ``metrics.jsonl``)
    are in the tables; a partial run is marked so in its source.
    """
    runs = find_runs(path)
    shown = _shown(runs)
    chosen = [metric_key(m) for m in metrics] or default_metrics(shown)
    keys = list(group_by) or default_group_by(runs)
    _check_asked(shown, [metric_key(m) for m in metrics], list(group_by))
    root = Path(path)
    return Report(
        root,
        runs,
        chosen,
        keys,
        run_rows(shown, chosen, keys),
        summary_rows(shown, chosen, keys),
        clients={r.name: client_table(r.clients) for r in runs if r.ok and r.clients},
    )


class ReportInputError(ValueError):
    """A ``--metric`` or ``--group-by`` no run has: one line with the known ones."""


def _check_asked(runs: Sequence[RunInfo], metrics: list[str], keys: list[str]) -> None:
    """Refuse a metric or grouping key that none of ``runs`` has (a typo), naming what they have.

    Nothing is checked without runs to show (every one failed): the report
    then says so itself.
    """
    if not runs:
        return
    have = sorted({k for r in runs for values in r.final().values() for k in values})
    for metric in metrics:
        if metric not in have:
            raise ReportInputError(_unknown("--metric", metric, have))
    fields = sorted({k for r in runs for k in (*_dotted(r.scenario), *r.overrides)} | {"run"})
    for key in keys:
        if key not in fields:
            raise ReportInputError(_unknown("--group-by", key, fields))


def _unknown(option: str, given: str, known: list[str]) -> str:
    """``--metric test/f1: no run has it (did you mean ...?); known: ...``."""
    import difflib

    close = difflib.get_close_matches(given, known, n=1)
    mean = f" (did you mean {close[0]!r}?)" if close else ""
    shown = known if len(known) <= 40 else [*known[:40], f"... {len(known) - 40} more"]
    return f"{option} {given!r}: no run has it{mean}; known: {', '.join(shown)}"


def _dotted(data: Any, prefix: str = "") -> list[str]:
    """Every dotted key path of a nested mapping (``strategy.name``, ``strategy``...)."""
    if not isinstance(data, dict):
        return []
    found = []
    for key, value in data.items():
        path = f"{prefix}{key}"
        found += [path, *_dotted(value, f"{path}.")]
    return found


def _shown(runs: Sequence[RunInfo]) -> list[RunInfo]:
    """Runs with metrics to show: finished ones and partial ones."""
    return [r for r in runs if r.ok or r.partial]


def _run_file(report: Report, run: RunInfo, name: str) -> Path:
    """Where a per-run file goes: the top level for one run, ``runs/<run>_<name>`` for several.

    Creates ``runs/`` when needed.
    """
    if len(report.runs) == 1:
        return report.out_dir / name
    (report.out_dir / "runs").mkdir(exist_ok=True)
    return report.out_dir / "runs" / f"{run.name}_{name}"


def _client_tag(metric: str) -> str:
    """``psnr`` for ``test/psnr`` (as curves are named), the full name for other splits."""
    return _safe(metric.removeprefix("test/"))


def write_plots(report: Report) -> list[Path]:
    """Per-run curves, group curves and comparison bars for every metric.

    Then each finished run's per-phase curves and, for a local-task run, its
    per-client bars.
    """
    out = report.out_dir
    written = []
    # Per-run plots show partial runs' rounds too; group curves only finished runs.
    shown = _shown(report.runs)
    done = [r for r in report.runs if r.ok]
    for metric in report.metrics:
        tag = _safe(metric.split("/")[-1])
        if len(report.runs) == 1:
            target = out / f"curves_{tag}.png"
            # ``shown`` is empty when the only run failed before its first round
            written += [target] if shown and plot_run(shown[0], metric, target) else []
            continue
        (out / "runs").mkdir(exist_ok=True)
        for run in shown:
            target = out / "runs" / f"{run.name}_{tag}.png"
            written += [target] if plot_run(run, metric, target) else []
        if plot_curves(done, metric, report.keys, out / f"curves_{tag}.png"):
            written.append(out / f"curves_{tag}.png")
        names = {group_label(r, report.keys): readable_group(r, report.keys) for r in shown}
        if plot_bars(report.summary_table, metric, out / f"bars_{tag}.png", names):
            written.append(out / f"bars_{tag}.png")
    for run in shown:
        written += write_phase_plots(report, run) + write_client_plots(report, run)
    return written


def write_phase_plots(report: Report, run: RunInfo) -> list[Path]:
    """``phases_<split>_<metric>.png`` for every quantity some phase logged over rounds.

    The global model's series of the report's metrics are left out: the
    ``curves_<metric>`` plots already draw them.
    """
    drawn = {prefix + m.split("/")[-1] for m in report.metrics for prefix in CURVE_PREFIXES}
    written = []
    for quantity, curves, levels in phase_curves(run.rows, drawn):
        target = _run_file(report, run, f"phases_{_safe(quantity)}.png")
        if plot_phases(run, quantity, curves, levels, target):
            written.append(target)
    return written


def write_client_plots(report: Report, run: RunInfo) -> list[Path]:
    """``clients_<metric>.png`` of a local-task run for every client metric.

    A bar per client, a line at the mean over clients and, when the run has
    that baseline, one at the centralized value.
    """
    table = report.clients.get(run.name)
    if not table:
        return []
    written = []
    for metric in client_metrics(table):
        target = _run_file(report, run, f"clients_{_client_tag(metric)}.png")
        lines = client_lines(table, metric, run.final())
        if plot_clients(run, table, metric, lines, target):
            written.append(target)
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
    if len(report.runs) == 1 and report.clients:
        run = report.runs[0]
        table = report.clients[run.name]
        parts += ["", "## Clients (local task: each client's own data)", ""]
        parts.append(client_markdown(table, client_metrics(table), run.final()))
    failed = [r for r in report.runs if not r.ok]
    if failed:
        parts += ["", "## Failed or unfinished runs", ""]
        parts += [f"- `{r.name}`: {r.error}{_note(r)}" for r in failed]
    if plots:
        parts += ["", "## Plots", ""]
        ordered = sorted(plots, key=lambda p: (p.parent != report.out_dir, p.name))
        parts += [f"![{p.stem}]({p.relative_to(report.out_dir).as_posix()})" for p in ordered]
    return "\n".join(parts) + "\n"


def _note(run: RunInfo) -> str:
    """`` (partial: reached round 4 of 10; metrics at round 3)`` or nothing."""
    note = run.progress_note()
    return f" (partial: {note})" if note else ""


def write_report(report: Report, plots: bool = True) -> list[Path]:
    """Write CSVs, markdown and (unless ``plots=False``) PNGs under ``<path>/report``."""
    out = report.out_dir
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / "runs.csv", report.run_table)
    write_csv(out / "summary.csv", report.summary_table)
    tables = write_client_tables(report)
    pngs = write_plots(report) if plots else []
    atomic_write(out / "report.md", markdown(report, pngs))
    report.files = [out / "runs.csv", out / "summary.csv", *tables, out / "report.md", *pngs]
    return report.files


def write_client_tables(report: Report) -> list[Path]:
    """``clients.csv`` (``runs/<run>_clients.csv`` in a sweep) of each local-task run."""
    written = []
    for run in report.runs:
        if run.name in report.clients:
            target = _run_file(report, run, "clients.csv")
            write_csv(target, report.clients[run.name])
            written.append(target)
    return written

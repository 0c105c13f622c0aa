"""Building a report from run folders and writing its files under ``<path>/report``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flowerbed.core.records import atomic_write
from flowerbed.platform.report.plots import plot_bars, plot_curves, plot_run
from flowerbed.platform.report.runs import REPORT_DIR, RunInfo, find_runs
from flowerbed.platform.report.tables import (
    _cell,
    _pms,
    default_group_by,
    default_metrics,
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

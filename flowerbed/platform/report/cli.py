"""``flowerbed report``: the command and its rich summary table."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from flowerbed.platform.report.build import Report, build_report, write_report
from flowerbed.platform.report.plots import _pyplot
from flowerbed.platform.report.tables import _pm

if TYPE_CHECKING:
    from rich.table import Table

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

"""``flowerbed report``: the command; its summary is drawn by :mod:`.summary_table`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from flowerbed.platform.report.build import Report, ReportInputError, build_report, write_report
from flowerbed.platform.report.plots import _pyplot
from flowerbed.platform.report.tables import _pm

if TYPE_CHECKING:
    from rich.table import Table


def _esc(text: str) -> str:
    """Rich markup escaped (run names and errors may hold brackets)."""
    from rich.markup import escape

    return escape(text)


def rich_table(report: Report) -> Table:
    """Render the summary (mean ± std per group and source) as one rich table.

    ``flowerbed report`` prints :func:`.summary_table.report_grid` instead (it
    transposes and splits a table wider than the terminal).
    """
    from rich.markup import escape
    from rich.table import Table

    table = Table(*report.keys, "source", "n", *report.metrics, title=f"report · {report.path}")
    for r in report.summary_table:
        cells = [escape(r[k]) for k in report.keys]
        table.add_row(*cells, r["source"], str(r["n"]), *(_pm(r, m) for m in report.metrics))
    return table


def cmd_report(args: argparse.Namespace) -> int:
    """Print the summary (``--format``) and write CSV, markdown and PNGs next to the runs.

    With a machine format (json, csv, markdown) only the summary goes to
    stdout; the notes go to stderr.
    """
    from rich.console import Console

    from flowerbed.platform.report.summary_table import render, report_grid

    try:
        report = build_report(args.path, args.metric, args.group_by)
    except (FileNotFoundError, ReportInputError) as exc:
        print(exc, file=sys.stderr)
        return 2
    for problem in (p for run in report.runs for p in run.problems):
        print(f"warning: {problem}", file=sys.stderr)
    if args.compare is not None:
        return cmd_compare(args, report)
    if args.reference is not None or args.better:
        print("--reference and --better go with --compare", file=sys.stderr)
        return 2
    files = write_report(report, plots=not args.no_plots)
    print(render(report_grid(report), args.format))
    console = Console(stderr=args.format != "table")
    for run in (r for r in report.runs if not r.ok):
        if run.partial:
            text = f"[yellow]partial[/yellow] {_esc(run.name)}: {_esc(str(run.error))}; "
            console.print(text + _esc(run.progress_note()), highlight=False, soft_wrap=True)
        else:
            text = f"[red]failed or unfinished[/red] {_esc(run.name)}: {_esc(str(run.error))}"
            console.print(text, highlight=False, soft_wrap=True)
    if not args.no_plots and not any(f.suffix == ".png" for f in files) and _pyplot() is None:
        console.print("no plots: matplotlib is not installed (pip install matplotlib)")
    console.print(f"wrote {len(files)} files to {_esc(str(report.out_dir))}", soft_wrap=True)
    return 0


def cmd_compare(args: argparse.Namespace, report: Report) -> int:
    """``--compare``: paired comparisons printed (``--format``) and written under ``report/``."""
    from rich.console import Console

    from flowerbed.platform.report.compare import CompareError, comparisons, write_comparisons
    from flowerbed.platform.report.compare_table import render_comparisons

    try:
        better = _better(args.better)
        result = comparisons(report.runs, args.compare, report.metrics, args.reference, better)
        files = write_comparisons(result, report.out_dir, plots=not args.no_plots)
    except (CompareError, ImportError) as exc:
        print(exc, file=sys.stderr)
        return 2
    print(render_comparisons(result, args.format))
    console = Console(stderr=args.format != "table")
    for note in result.notes:
        console.print(_esc(note), highlight=False, soft_wrap=True)
    console.print(f"wrote {len(files)} files to {_esc(str(report.out_dir))}", soft_wrap=True)
    return 0


def _better(items: list[str]) -> dict[str, str]:
    """``--better loss=lower`` options as ``{"loss": "lower"}``."""
    from flowerbed.platform.report.compare import CompareError

    out = {}
    for item in items:
        metric, _, way = item.partition("=")
        if way not in ("higher", "lower") or not metric:
            raise CompareError(f"--better {item}: write METRIC=higher or METRIC=lower")
        out[metric] = way
    return out


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
    p.add_argument(
        "--compare", metavar="FIELD=A,B",
        help="paired comparison of runs differing only in a scenario field (dotted, e.g. "
        "strategy.name=fedprox,fedavg, or FIELD with --reference): differences with 95%% "
        "CIs, paired tests, Holm-adjusted p, verdicts; writes report/comparisons.*",
    )
    p.add_argument(
        "--reference", metavar="X",
        help="with --compare FIELD: compare every other value of FIELD with X",
    )
    p.add_argument(
        "--better", action="append", default=[], metavar="METRIC=higher|lower",
        help="which way a metric is better, where its name does not say (repeatable)",
    )
    add_format_option(p)
    commands["report"] = cmd_report


def add_format_option(p: argparse.ArgumentParser) -> None:
    """``--format table|json|csv|markdown`` for a command that prints a summary."""
    from flowerbed.platform.report.summary_table import FORMATS

    p.add_argument(
        "--format", choices=FORMATS, default="table",
        help="how the summary is printed: table (transposed when wider than the terminal), "
        "or json/csv/markdown at full precision (default: table)",
    )

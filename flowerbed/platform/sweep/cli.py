"""``flowerbed sweep``: the command, its dry-run plan table and its result table."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flowerbed.platform.sweep.execute import SweepResult, group_points, run_sweep
from flowerbed.platform.sweep.folders import point_state, sweep_folder_of
from flowerbed.platform.sweep.plan import SweepPlan, format_value, load_plan
from flowerbed.platform.sweep.progress import _headline

if TYPE_CHECKING:
    from rich.table import Table

def plan_table(plan: SweepPlan, output_dir: str | Path | None = None) -> Table:
    """Build the dry-run table: one row per point, one column per swept key."""
    from rich.markup import escape
    from rich.table import Table

    groups = group_points(plan.points)
    sims = sum(g[0].scenario.engine.name == "simulation" for g in groups)
    table = Table(
        "#", "folder", *plan.keys, "engine", "state",
        title=f"sweep {plan.name}: {len(plan.points)} points",
        caption=f"{plan.root(output_dir)} · {sims} simulation start-up(s)",
    )
    for p in plan.points:
        state = point_state(plan.folder(p, output_dir), p)
        cells = [escape(format_value(p.overrides[k])) for k in plan.keys]
        engine = p.scenario.engine.name
        table.add_row(str(p.index), p.folder_name(plan.width), *cells, engine, state)
    return _never_cut(table)


def _never_cut(table: Table) -> Table:
    """Fold cells that do not fit onto more lines instead of cutting them with ``…``."""
    for column in table.columns:
        column.overflow = "fold"
    return table


def result_table(result: SweepResult, keys: Iterable[str]) -> Table:
    """Build the final table: one row per point, its status and federated metrics."""
    from rich.markup import escape
    from rich.table import Table

    keys = list(keys)
    # a dotted key's header on several lines leaves the metrics column room
    heads = [escape(k).replace(".", ".\n") for k in keys]
    table = Table("#", *heads, "status", "federated", "time (s)", title=f"sweep {result.root.name}")
    for r in result.points:
        cells = [escape(format_value(r.point.overrides[k])) for k in keys]
        if r.status == "failed":
            shown = escape(r.error or "")
        else:  # one metric a line: a narrow column then folds no number
            shown = "\n".join(map(escape, _headline(r.summary or {}, r.point.scenario, r.folder)
                                  .split()))
        table.add_row(str(r.point.index), *cells, r.status, shown, f"{r.wall_s:.1f}")
    return _never_cut(table)


def _located(
    plan: SweepPlan, file: str, output_dir: str | None, overrides: Iterable[str]
) -> tuple[SweepPlan, str | Path | None]:
    """The plan and output dir to use: a sweep folder's own ``sweep.yaml`` resumes in place.

    An explicit ``--output-dir`` or ``--set output_dir=...`` still wins.
    """
    folder = sweep_folder_of(file)
    chosen = output_dir is not None or any(
        t.partition("=")[0].strip() == "output_dir" for t in overrides
    )
    if folder is None or chosen:
        return plan, output_dir
    return dataclasses.replace(plan, name=folder.name), folder.parent


def cmd_sweep(args: argparse.Namespace) -> int:
    """Plan (and unless ``--dry-run``, run) a sweep; exit status = failed points."""
    from rich.console import Console

    plan, output_dir = _located(
        load_plan(args.file, args.overrides), args.file, args.output_dir, args.overrides
    )
    console = Console()
    if args.dry_run:
        console.print(plan_table(plan, output_dir))
        return 0
    result = run_sweep(plan, output_dir, progress=not args.quiet)
    failed, skipped = result.count("failed"), result.count("skipped")
    if not args.quiet:
        console.print(result_table(result, plan.keys))
    line = f"{result.count('ok')} ran, {skipped} skipped (done before), {failed} failed"
    line += f" · {result.simulation_starts} simulation start-up(s) · results in {result.root}"
    print(line, file=sys.stderr if failed else sys.stdout)
    if not args.quiet:
        console.print(f"tables and plots: flowerbed report {result.root}")
    return min(failed, 100)


def add_commands(subparsers: Any, commands: dict[str, Callable[[argparse.Namespace], int]]) -> None:
    """Add ``flowerbed sweep`` to the CLI."""
    from flowerbed.platform.cli import add_set_option

    p = subparsers.add_parser(
        "sweep",
        help="run every point of a scenario's sweep: block (resumable)",
        description="Expand the sweep: block, validate every point, then run the points not "
        "done yet (a point is done when its summary.json has the same scenario digest). "
        "--set key=value edits every point; --set sweep.seeds=[0,1,2] or "
        "--set sweep.<key>=[...] edits the sweep itself. Exit status: the number of failed "
        "points (0 = all fine, capped at 100); an invalid sweep is reported before anything "
        "runs, with exit status 2 like other commands.",
    )
    p.add_argument("file")
    add_set_option(p)
    p.add_argument("--dry-run", action="store_true", help="print the plan, run nothing")
    p.add_argument("--output-dir", default=None, help="root of run folders (default: scenario's)")
    p.add_argument("--quiet", action="store_true", help="no per-point progress or result table")
    commands["sweep"] = cmd_sweep

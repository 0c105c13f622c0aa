"""``flowerbed`` command line: run, validate, list."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Callable, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from flowerbed.core.scenario import ScenarioError

Command = Callable[[argparse.Namespace], int]
_COMMANDS: dict[str, Command] = {}

#: Modules adding subcommands: each defines ``add_commands(subparsers, commands)``,
#: adding its parsers and filling ``commands[name] = function(args) -> exit status``.
COMMAND_MODULES: tuple[str, ...] = (
    "flowerbed.platform.sweep",
    "flowerbed.platform.report",
    "flowerbed.platform.inspect",
    "flowerbed.platform.deploy",
    "flowerbed.platform.pretrain",
)


def add_set_option(
    p: argparse.ArgumentParser,
    help: str = "override a scenario value (repeatable), e.g. --set strategy.fraction_train=0.5",
) -> None:
    """Add the repeatable ``--set KEY.PATH=VALUE`` option to a subcommand."""
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY.PATH=VALUE",
        help=help,
    )


def cmd_validate(args: argparse.Namespace) -> int:
    """Validate scenario files; print every problem with its YAML path."""
    from flowerbed.core.scenario import load_scenario

    status = 0
    for path in args.files:
        try:
            scenario = load_scenario(path, args.overrides)
        except ScenarioError as exc:
            print(exc, file=sys.stderr)
            status = 1
            continue
        print(f"{path}: ok ({scenario.name}, digest {scenario.digest()})")
        if args.show:
            print(scenario.to_yaml())
    return status


def cmd_list(args: argparse.Namespace) -> int:
    """List registered components with where they come from and one-line descriptions."""
    from flowerbed.core import registry
    from flowerbed.core.plugins import component_source, load_plugins

    load_plugins()
    kinds = [args.kind] if args.kind else list(registry.KINDS)
    if args.kind and args.kind not in registry.KINDS:
        print(f"unknown kind {args.kind!r}; known: {', '.join(registry.KINDS)}", file=sys.stderr)
        return 2
    table = Table("kind", "name", "from", "description")
    for kind in kinds:
        for entry in registry.entries(kind):
            table.add_row(kind, entry.name, component_source(kind, entry.name), entry.summary)
        for name, hint in registry.hints(kind).items():
            table.add_row(
                kind, name, component_source(kind, name), f"[dim]unavailable: {hint}[/dim]"
            )
    Console().print(table)
    return 0


def read_yaml_raw(path: str) -> Any:
    """The file's YAML as plain data (``None`` when unreadable; errors come from the loader)."""
    import yaml

    try:
        with open(path) as fh:
            return yaml.safe_load(fh)
    except (OSError, yaml.YAMLError):
        return None


def summary_table(summary: dict[str, Any], full: dict[str, str]) -> Table:
    """Federated vs baselines, one row per source, the scenario's summary metrics as columns.

    ``full`` maps each column name to its metric key (``MetricsConfig.summary_keys``).
    """
    results: dict[str, dict[str, float]] = summary["results"]
    present = [k for k in full if any(full[k] in m for m in results.values())]
    table = Table("", *present, title=f"{summary['scenario']} (seed {summary['seed']})")
    for source, metrics in results.items():
        cells = [f"{metrics[full[k]]:.4f}" if full[k] in metrics else "-" for k in present]
        table.add_row(source, *cells)
    return table


def cmd_run(args: argparse.Namespace) -> int:
    """Run one scenario; print the summary table and the run folder."""
    from flowerbed.core.scenario import load_scenario
    from flowerbed.platform.runner import RunError, run

    scenario = load_scenario(args.file, args.overrides)
    if "sweep" in (read_yaml_raw(args.file) or {}):
        print(
            f"note: {args.file} has a sweep block; `flowerbed run` runs the base scenario "
            f"only (use `flowerbed sweep {args.file}`)",
            file=sys.stderr,
        )
    try:
        result = run(scenario, output_dir=args.output_dir, progress=not args.quiet)
    except RunError as exc:
        print(f"run failed: {exc}", file=sys.stderr)
        return 1
    console = Console()
    console.print()
    console.print(summary_table(result.summary, scenario.metrics.summary_keys()))
    console.print(f"wall time {result.summary['wall_time_s']:.1f} s · results in {result.run_dir}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(prog="flowerbed", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("run", help="run a scenario")
    p.add_argument("file")
    add_set_option(p)
    p.add_argument("--output-dir", default=None, help="root of run folders (default: scenario's)")
    p.add_argument("--quiet", action="store_true", help="logs only, no live display")
    _COMMANDS["run"] = cmd_run

    p = sub.add_parser("validate", help="check scenario files")
    p.add_argument("files", nargs="+")
    add_set_option(p)
    p.add_argument("--show", action="store_true", help="print the resolved scenario")
    _COMMANDS["validate"] = cmd_validate

    p = sub.add_parser("list", help="list registered components")
    p.add_argument("kind", nargs="?")
    _COMMANDS["list"] = cmd_list

    for module in COMMAND_MODULES:
        importlib.import_module(module).add_commands(sub, _COMMANDS)
    return parser


def _configure_logging(verbose: bool) -> None:
    """Our logger to stderr (warnings, or everything with -v); run.log gets INFO anyway."""
    logger = logging.getLogger("flowerbed")
    logger.setLevel(logging.DEBUG if verbose else logging.INFO)
    if not any(
        isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler)
        for h in logger.handlers
    ):
        handler = logging.StreamHandler()
        handler.setLevel(logging.DEBUG if verbose else logging.WARNING)
        handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
        logger.addHandler(handler)
    logger.propagate = False


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``flowerbed`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    _configure_logging(args.verbose)
    try:
        return _COMMANDS[args.command](args)
    except ScenarioError as exc:
        print(exc, file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted; finished rounds are saved in the run folder", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

"""``flowerbed`` command line: run, validate, list.

Exit status of every command: 0 done, 1 a run failed (its partial results
are kept), 2 bad input (an invalid scenario, an unusable path: nothing ran),
130 interrupted with Ctrl-C, 143 terminated by SIGTERM (finished rounds are
kept either way).
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import importlib
import logging
import os
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from flowerbed.core.scenario import ScenarioBase, ScenarioError

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
    "flowerbed.platform.warm_ray",
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
    """Validate scenario files; print every problem with its YAML path.

    Exit status 1 when a scenario is invalid, 2 when a file (or the output
    folder a run would write to) cannot be used; every file is checked.
    """
    from flowerbed.core.scenario import load_scenario
    from flowerbed.platform.results import InputPathError, check_output_dir, check_scenario_file

    status = 0
    for path in args.files:
        try:
            check_scenario_file(path)
            scenario = load_scenario(path, args.overrides)
            check_output_dir(scenario.output_dir, create=False)
        except InputPathError as exc:
            print(exc, file=sys.stderr)
            status = 2
            continue
        except ScenarioError as exc:
            print(exc, file=sys.stderr)
            status = max(status, 1)
            continue
        data_note = ""
        if args.data:
            try:
                data_note = check_data(scenario)
            except ScenarioError as exc:
                print(f"{path}: {exc.problems[0]}", file=sys.stderr)
                status = max(status, 1)
                continue
        print(f"{path}: ok ({scenario.name}, digest {scenario.digest()}){data_note}")
        if args.show:
            print(scenario.to_yaml())
    return status


def check_data(scenario: ScenarioBase) -> str:
    """Build ``scenario``'s federated data; return ``", N clients, sizes a-b"``.

    Raises
    ------
    ScenarioError
        One line: the dataset or partition cannot be built (the message of the
        data layer, which names the field to change).
    """
    from flowerbed.data.base import DataSourceError, MissingExtraError
    from flowerbed.data.federated import federated_data

    try:
        data = federated_data(scenario)
        sizes = [len(rows) for rows in data.local_train]
        if not sizes:  # a lazy partition: clients are drawn on demand; build the first
            first = len(data.client(0).y_train)
            return f", {scenario.num_clients} clients drawn on demand (client 0: {first} rows)"
    except (DataSourceError, MissingExtraError, ValueError) as exc:
        raise ScenarioError([f"data: {str(exc).splitlines()[0]}"]) from None
    return f", {len(sizes)} clients, {min(sizes)}-{max(sizes)} training rows each"


def cmd_list(args: argparse.Namespace) -> int:
    """List registered components with where they come from and one-line descriptions."""
    from flowerbed.core import registry
    from flowerbed.core.plugins import component_source, load_plugins

    load_plugins()
    kinds = [args.kind] if args.kind else list(registry.KINDS)
    if args.kind and args.kind not in registry.KINDS:
        print(f"unknown kind {args.kind!r}; known: {', '.join(registry.KINDS)}", file=sys.stderr)
        return 2
    if args.name:
        return list_parameters(args.kind, args.name)
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


def list_parameters(kind: str, name: str) -> int:
    """Print one component's parameters: type, default and description, as YAML writes them."""
    from flowerbed.core import registry

    try:
        entry = registry.get(kind, name)
    except KeyError as exc:  # UnknownComponentError: one line naming the known names
        print(str(exc).strip("'\""), file=sys.stderr)
        return 2
    table = Table("parameter", "type", "default", "description", title=f"{kind} {name}")
    for field, info in entry.params.model_fields.items():
        if field == "name":  # the tag itself, added by the registry
            continue
        default = "(required)" if info.is_required() else repr(info.get_default(
            call_default_factory=True))
        table.add_row(field, _type_name(info.annotation), default, info.description or "")
    console = Console()
    console.print(f"{kind} {name}: {entry.summary}")
    if len(table.rows):
        console.print(table)
    else:
        console.print("no parameters")
    return 0


def _type_name(annotation: Any) -> str:
    """``float``, ``Literal['sgd', 'adam']``, ``tuple[int, ...]``: a type as a user reads it."""
    text = getattr(annotation, "__name__", None) if isinstance(annotation, type) else None
    return text or str(annotation).replace("typing.", "")


def read_yaml_raw(path: str) -> Any:
    """The file's YAML as plain data (``None`` when unreadable; errors come from the loader)."""
    import yaml

    try:
        with open(path) as fh:
            return yaml.safe_load(fh)
    except (OSError, yaml.YAMLError):
        return None


def cmd_run(args: argparse.Namespace) -> int:
    """Run one scenario; print the summary table and the run folder."""
    from flowerbed.core.scenario import load_scenario
    from flowerbed.platform.progress import RunClock, process_started
    from flowerbed.platform.results import check_output_dir
    from flowerbed.platform.runner import RunError, run

    # Wall time counts from the process start: interpreter start-up and imports too.
    clock = RunClock(process_started())
    clock.add("startup", clock.elapsed())
    if args.resume is not None:
        return _resume(args, clock)
    with clock.phase("validate"):
        scenario = load_scenario(args.file, args.overrides)
        check_output_dir(args.output_dir or scenario.output_dir, create=True)
    if "sweep" in (read_yaml_raw(args.file) or {}):
        print(
            f"note: {args.file} has a sweep block; `flowerbed run` runs the base scenario "
            f"only (use `flowerbed sweep {args.file}`)",
            file=sys.stderr,
        )
    try:
        result = run(scenario, output_dir=args.output_dir, progress=not args.quiet, clock=clock)
    except RunError as exc:
        print(f"run failed: {one_line(str(exc))}", file=sys.stderr)
        return 1
    print_summary(result, scenario.metrics.summary_keys(), args.format)
    return _summary_names_status(scenario, result)


def _resume(args: argparse.Namespace, clock: Any) -> int:
    """``flowerbed run --resume RUN_DIR``: continue a run from its newest checkpoint."""
    from flowerbed.platform.runner import RunError, resume

    try:
        result = resume(args.resume, progress=not args.quiet, clock=clock)
    except RunError as exc:
        print(f"run failed: {one_line(str(exc))}", file=sys.stderr)
        return 1
    from flowerbed.core.records import SCENARIO_FILE
    from flowerbed.core.scenario import load_scenario

    scenario = load_scenario(Path(args.resume) / SCENARIO_FILE)
    print_summary(result, scenario.metrics.summary_keys(), args.format)
    return _summary_names_status(scenario, result)


def _summary_names_status(scenario: Any, result: Any) -> int:
    """0, with a warning line, when names the user wrote in ``metrics.summary`` were never produced.

    Checked after everything is saved: the run itself finished, only what
    its table shows is off, so the line names the metrics the run did
    produce. The default names are not held against a run (a regression
    task reports no accuracy).
    """
    from flowerbed.core.scenario import summary_problem

    if "summary" not in scenario.metrics.model_fields_set:
        return 0
    problem = summary_problem(scenario.metrics, result.summary, result.rows)
    if problem:
        print(f"warning: {problem}", file=sys.stderr)
    return 0


def print_summary(result: Any, columns: dict[str, str], fmt: str) -> None:
    """The run's summary on stdout in ``fmt``; with a machine format, the rest on stderr."""
    from flowerbed.platform.report.summary_table import render, run_grid

    table = fmt == "table"
    if table:
        print()
    print(render(run_grid(result.summary, columns, result.rows), fmt))
    where = f"wall time {result.summary['wall_time_s']:.1f} s · results in {result.run_dir}"
    print(where, file=sys.stdout if table else sys.stderr)


def one_line(message: str) -> str:
    """A message's first line, noting that the rest is in the run's ``run.log``."""
    lines = [ln for ln in message.splitlines() if ln.strip()]
    if len(lines) <= 1:
        return message.strip()
    return f"{lines[0].strip()} (the rest of the message is in run.log)"


RUN_DESCRIPTION = (
    "Run one scenario end to end: validate it with its --set overrides, check its output "
    "folder and the resources it asks for, build the federated data, then run the strategy "
    "on the scenario's engine (inline, simulation on Ray, or a Flower deployment) and the "
    "baselines, with a live display of what is happening now. Every row is saved in a new "
    "run folder as it happens; the summary table and the folder are printed at the end. "
    "Exit status: 0 done, 1 the run failed (partial results kept), 2 bad input (nothing "
    "ran), 130 interrupted by Ctrl-C, 143 terminated by SIGTERM (finished rounds kept)."
)
VALIDATE_DESCRIPTION = (
    "Check scenario files without running anything. Every problem is one line naming its "
    "YAML path (wrong type, unknown key or component, missing field, value out of range, "
    "malformed YAML), or naming the file or output folder that cannot be used. --show "
    "prints the resolved scenario with every default spelt out. --data also builds each "
    "scenario's dataset and client partitions (as a run would, without training), so a "
    "partition that cannot be drawn (e.g. a Dirichlet minimum size too large for the data) "
    "is found before the run. Exit status: 0 all valid, 1 a scenario is invalid, 2 a file "
    "or folder cannot be used."
)
LIST_DESCRIPTION = (
    "List the registered components of every kind, or of KIND (dataset, partition, model, "
    "learner, strategy, baseline, encoder, vlm, lm, sink), with the package each comes from and "
    "a one-line description; a component whose optional extra is missing is shown with "
    "the install hint. With KIND and NAME, show that component's parameters, each with "
    "its type, default and description, as a scenario's YAML block writes them."
)
#: Descriptions for subcommands whose modules give none (each module's own wins).
FALLBACK_DESCRIPTIONS = {
    "deploy": (
        "Flower deployments for `engine: deployment`. `deploy local` starts a SuperLink and "
        "N SuperNodes with their SuperExecs as local processes, writes the connection to "
        "Flower's config.toml and keeps them running until Ctrl-C stops them all; `deploy "
        "compose` writes docker compose files for the same topology."
    ),
    "deploy local": (
        "Start a SuperLink and --nodes SuperNodes (each with its SuperExec) on loopback, "
        "write the connection (--connection) to config.toml under --flwr-home, and keep "
        "them running until Ctrl-C, which stops every process; --tls uses the certificates "
        "made by docker/make-certs.sh."
    ),
    "deploy compose": (
        "Write a docker compose file (--out) for a SuperLink and --nodes SuperNodes with "
        "their SuperExecs on flowerbed's SuperExec image; nothing is started."
    ),
    "pretrain": (
        "Train and cache an artefact a component needs before it can run (TARGET names "
        "it). --set changes one of the target's parameters, --output writes the artefact "
        "elsewhere than the cache folder, --force retrains even when it exists."
    ),
}


def describe_subcommands(parser: argparse.ArgumentParser, prefix: str = "") -> None:
    """Give every subcommand a description (its fallback, else its help); no abbreviations."""
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        helps = {a.dest: a.help for a in action._choices_actions}
        for name, sub in action.choices.items():
            full = f"{prefix}{name}"
            if not (sub.description or "").strip():
                sub.description = FALLBACK_DESCRIPTIONS.get(full) or helps.get(name) or full
            # An abbreviation is taken silently (`--output` for `--output-dir`); spelled out only.
            sub.allow_abbrev = False
            describe_subcommands(sub, f"{full} ")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    from flowerbed import __version__

    parser = argparse.ArgumentParser(prog="flowerbed", description=__doc__, allow_abbrev=False)
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="debug logging, Flower's log lines included")
    parser.add_argument("--version", action="version", version=f"flowerbed {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("run", help="run a scenario", description=RUN_DESCRIPTION)
    p.add_argument("file", nargs="?", help="the scenario YAML (not with --resume)")
    p.add_argument(
        "--resume", metavar="RUN_DIR", default=None,
        help="continue the unfinished run in RUN_DIR from its newest checkpoint "
        "(scenario block checkpoint: {every: N}); the run's own scenario is used",
    )
    add_set_option(p)
    p.add_argument("--output-dir", default=None, help="root of run folders (default: scenario's)")
    p.add_argument("--quiet", action="store_true", help="logs only, no live display")
    p.add_argument(  # the formats of flowerbed.platform.report.summary_table.FORMATS
        "--format", choices=("table", "json", "csv", "markdown"), default="table",
        help="how the summary is printed: table (transposed when wider than the terminal), "
        "or json/csv/markdown at full precision (default: table)",
    )
    _COMMANDS["run"] = cmd_run

    p = sub.add_parser("validate", help="check scenario files", description=VALIDATE_DESCRIPTION)
    p.add_argument("files", nargs="+")
    add_set_option(p)
    p.add_argument("--show", action="store_true", help="print the resolved scenario")
    p.add_argument(
        "--data", action="store_true",
        help="also build the dataset and client partitions (slower: reads the data)",
    )
    _COMMANDS["validate"] = cmd_validate

    p = sub.add_parser("list", help="list registered components", description=LIST_DESCRIPTION)
    p.add_argument("kind", nargs="?")
    p.add_argument("name", nargs="?", help="a component of KIND: show its parameters")
    _COMMANDS["list"] = cmd_list

    for module in COMMAND_MODULES:
        importlib.import_module(module).add_commands(sub, _COMMANDS)
    describe_subcommands(parser)
    return parser


#: Name of the handler that writes flowerbed's log to the terminal.
CONSOLE_HANDLER = "flowerbed-console"


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is at emit time.

    A handler holding the stream it was created with keeps writing to it after
    the stream is replaced and closed (a test harness capturing output, a
    notebook redirecting it), which fails with "I/O operation on closed file".
    """

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        del value


def _configure_logging(verbose: bool) -> None:
    """Our logger to stderr (warnings, or everything with -v); run.log gets INFO anyway."""
    logger = logging.getLogger("flowerbed")
    logger.setLevel(logging.DEBUG if verbose else logging.INFO)
    # Found by name: other handlers may sit on the logger too (pytest's, for one).
    consoles: list[logging.Handler] = [
        h for h in logger.handlers if h.get_name() == CONSOLE_HANDLER
    ]
    if not consoles:
        created = _StderrHandler()
        created.set_name(CONSOLE_HANDLER)
        created.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
        logger.addHandler(created)
        consoles = [created]
    for handler in consoles:
        # Each call sets both: ``main`` may run several times in one process (tests).
        handler.setLevel(logging.DEBUG if verbose else logging.WARNING)
    logger.propagate = False


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``flowerbed`` console script."""
    from flowerbed.platform.console import sigterm_as_interrupt

    parser = build_parser()
    args = parser.parse_args(argv)
    _configure_logging(args.verbose)
    try:
        with sigterm_as_interrupt():
            check_paths(args)
            return _COMMANDS[args.command](args)
    except ScenarioError as exc:
        print(exc, file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        run_dir = getattr(exc, "run_dir", None)  # runner.RunInterrupted says where
        where = f"; finished rounds are saved in {run_dir}" if run_dir else ""
        if getattr(exc, "signal_name", "SIGINT") == "SIGTERM":
            print(f"terminated (SIGTERM){where}", file=sys.stderr)
            return 143
        print(f"interrupted{where}", file=sys.stderr)
        return 130
    except OSError as exc:
        # A file-system problem no earlier check caught (a disk filling up mid-way).
        logging.getLogger("flowerbed").debug("file-system error", exc_info=True)
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 1


#: Commands reading one scenario file (``args.file``), checked before they start.
READS_SCENARIO = ("run", "sweep", "inspect")


def check_paths(args: argparse.Namespace) -> None:
    """Check the paths a command needs before it does any work (:class:`InputPathError`).

    The scenario file of ``run``, ``sweep`` and ``inspect``; for ``sweep``
    also its output folder (``run`` and ``inspect`` check theirs once the
    scenario is validated). ``validate`` checks each of its files itself.
    """
    if args.command not in READS_SCENARIO:
        return
    from flowerbed.platform.results import check_output_dir, check_scenario_file

    if args.command == "run" and (args.file is None) == (args.resume is None):
        problem = "both given" if args.file else "neither given"
        raise ScenarioError([f"run: give a scenario file or --resume RUN_DIR ({problem})"], "run")
    if args.command == "run" and args.resume is not None:
        if args.overrides or args.output_dir:
            raise ScenarioError(
                ["run --resume: --set and --output-dir do not apply (the run keeps its "
                 "scenario and folder)"], "run")
        return

    check_scenario_file(args.file)
    if args.command == "sweep":
        root = args.output_dir or _raw_output_dir(args.file, args.overrides)
        if root:
            check_output_dir(root, create=False)


def _raw_output_dir(path: str, overrides: list[str]) -> str | None:
    """The scenario's ``output_dir`` (after ``--set output_dir=...``), read without validating.

    ``None`` when the file or the value is invalid: the command reports that
    with the scenario's other problems.
    """
    from flowerbed.core.scenario import ScenarioBase, apply_overrides, read_yaml

    mine = [o for o in overrides if o.partition("=")[0].strip() == "output_dir"]
    try:
        data = apply_overrides(read_yaml(path), mine)
    except ScenarioError:
        return None
    value = data.get("output_dir", ScenarioBase.model_fields["output_dir"].default)
    return value if isinstance(value, str) and value else None


def console_main() -> None:
    """The ``flowerbed`` console script: :func:`main`, then exit without the interpreter's teardown.

    After a run has printed and saved its results, tearing down the
    interpreter (freeing torch, scikit-learn and Ray modules and the run's
    objects) took 6-7 s on a 2-core machine: a quarter of the quickstart's
    ``inline`` wall time, spent after the answer was on screen. Every exit
    handler still runs (log files flushed and closed, temporary folders
    removed) and the streams are flushed; only the teardown is skipped.
    """
    code = main()
    for thread in threading.enumerate():  # what a normal exit waits for first
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()  # then the exit handlers, in the same order
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    console_main()

"""Sinks: where a run's rows go besides ``metrics.jsonl`` (TensorBoard, MLflow).

A sink is a component of kind ``sink``, named in a scenario's ``sinks:`` list.
The :class:`~flowerbed.core.records.Recorder` that writes a run folder opens
every named sink when the run starts, hands it each row it records (the rows
of ``metrics.jsonl``) and, when the run ends, the summary: ``None`` for a run
that stopped early. ``jsonl`` (``metrics.jsonl`` itself, written by the
recorder) is always on, listed or not.

A sink needing an optional package says so in its params (``packages``), so
``flowerbed validate`` refuses the scenario with one line naming the sink and
the install command, before anything runs; the package itself is imported
only when the sink opens.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from flowerbed.core.registry import Params, name_of

if TYPE_CHECKING:
    from flowerbed.core.scenario import Scenario

#: The sink that is always on: ``metrics.jsonl``, written by the recorder.
JSONL = "jsonl"
#: How to install the packages the tracking sinks need.
TRACKING_INSTALL = "pip install 'flowerbed[tracking]'"
#: Row keys that describe a row rather than measure anything.
ROW_FIELDS = frozenset({"time_s", "round", "phase", "event"})


class Sink(Protocol):
    """What the recorder calls: every row while the run goes, then once at the end.

    ``row`` gets each row exactly as ``metrics.jsonl`` has it (metrics rows,
    reply rows and events); ``close`` gets the summary (``summary.json``'s
    content) or ``None`` when the run failed or was interrupted, and must
    leave everything the sink wrote complete on disk.
    """

    def row(self, row: dict[str, Any]) -> None:
        """Take one recorded row."""

    def close(self, summary: dict[str, Any] | None) -> None:
        """Finish; ``summary`` is ``None`` for a run that stopped early."""


@dataclass(frozen=True)
class SinkContext:
    """What a sink is opened with.

    Attributes
    ----------
    scenario
        The resolved scenario of the run.
    run_dir
        The run folder (sinks open only for runs that have one).
    sweep
        Name of the sweep the run is a point of; ``None`` for a single run.
    resumed_round
        For a run resumed with ``--resume``: the round of the checkpoint it
        continues from (rows after it are computed again); ``None`` otherwise.
        A sink continues the run's existing record instead of starting another.
    """

    scenario: Scenario
    run_dir: Path
    sweep: str | None = None
    resumed_round: int | None = None


class SinkOpenError(RuntimeError):
    """A sink that could not open its store (``sinks[0] (mlflow): cannot open: ...``)."""


class SinkUnavailableError(RuntimeError):
    """A sink's package cannot be imported; the message is the one-line install hint."""


def missing_package(sink: str, module: str) -> str | None:
    """The install hint if ``module`` cannot be found, else ``None``; imports nothing.

    Examples
    --------
    >>> missing_package("tensorboard", "json") is None
    True
    >>> missing_package("tensorboard", "no_such_module_anywhere")
    "sink 'tensorboard' needs the no_such_module_anywhere package; install it with: pip install 'flowerbed[tracking]'"
    """  # noqa: E501
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    if found:
        return None
    return f"sink {sink!r} needs the {module} package; install it with: {TRACKING_INSTALL}"


def require(sink: str, module: str) -> ModuleType:
    """Import ``module`` for ``sink``, or raise :class:`SinkUnavailableError` with the hint."""
    try:
        return importlib.import_module(module)
    except ImportError:
        hint = missing_package(sink, module) or (
            f"sink {sink!r} cannot import {module}; reinstall it with: {TRACKING_INSTALL}"
        )
        raise SinkUnavailableError(hint) from None


class SinkParams(Params):
    """Base of a sink's params; ``packages`` are checked when the scenario is validated."""

    packages: ClassVar[tuple[str, ...]] = ()

    def scenario_problems(self, scenario: Any) -> list[str]:
        """One line per missing package, relative to the sink's block (``name: ...``)."""
        del scenario
        name = name_of(self)
        lines = (missing_package(name, module) for module in self.packages)
        return [f"name: {line}" for line in lines if line]


def metric_values(row: dict[str, Any]) -> dict[str, float] | None:
    """The metrics of a metrics row (``<phase>/<split>/<metric>`` -> value); ``None`` otherwise.

    Reply rows and events carry counts and text, not measurements.

    Examples
    --------
    >>> metric_values({"time_s": 1.0, "round": 2, "phase": "server_eval",
    ...                "server_eval/test/accuracy": 0.5})
    {'server_eval/test/accuracy': 0.5}
    >>> metric_values({"round": 2, "phase": "train", "event": "replies", "ok": 4}) is None
    True
    """
    if "event" in row or "round" not in row or "phase" not in row:
        return None
    return {
        k: float(v)
        for k, v in row.items()
        if k not in ROW_FIELDS and isinstance(v, (int, float)) and not isinstance(v, bool)
    }


def final_metrics(summary: dict[str, Any]) -> dict[str, float]:
    """``<source>/<split>/<metric>`` -> value of every number in the summary's ``results``.

    Examples
    --------
    >>> final_metrics({"results": {"federated": {"test/accuracy": 0.9, "note": "x"}}})
    {'federated/test/accuracy': 0.9}
    """
    found: dict[str, float] = {}
    for source, values in (summary.get("results") or {}).items():
        if not isinstance(values, dict):
            continue
        for key, value in values.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                found[f"{source}/{key}"] = float(value)
    return found


def open_sinks(ctx: SinkContext) -> list[Sink]:
    """Open every sink the scenario names except ``jsonl`` (the recorder's own file).

    If one fails to open, those already open are closed (as failed) and the
    error is raised: a run never starts with fewer sinks than it asked for.
    """
    from flowerbed.core import registry

    opened: list[Sink] = []
    try:
        for i, spec in enumerate(ctx.scenario.sinks):
            if name_of(spec) == JSONL:
                continue
            try:
                sink = registry.build("sink", spec, ctx=ctx)
            except SinkUnavailableError:
                raise
            except Exception as exc:  # a store that cannot be opened: name the sink
                raise SinkOpenError(
                    f"sinks[{i}] ({name_of(spec)}): cannot open: {type(exc).__name__}: {exc}"
                ) from exc
            if sink is not None:
                opened.append(sink)
    except BaseException:
        for sink in opened:
            sink.close(None)
        raise
    return opened

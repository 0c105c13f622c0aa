"""Running a sweep: execute points into their folders, one engine start-up per group."""

from __future__ import annotations

import functools
import json
import logging
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flowerbed.core.records import SUMMARY_FILE, atomic_write
from flowerbed.core.scenario import Scenario
from flowerbed.platform.sweep.folders import (
    ERROR_FILE,
    OVERRIDES_FILE,
    STATUS_FILE,
    _write_yaml,
    archive_attempt,
    point_state,
    write_plan,
)
from flowerbed.platform.sweep.plan import SweepPlan, SweepPoint
from flowerbed.platform.sweep.progress import SweepProgress

if TYPE_CHECKING:
    from flowerbed.core.records import Recorder

log = logging.getLogger("flowerbed")

@dataclass
class PointResult:
    """What became of one point: ``ok``, ``skipped`` (already done) or ``failed``."""

    point: SweepPoint
    folder: Path
    status: str
    error: str | None = None
    wall_s: float = 0.0
    summary: dict[str, Any] | None = None


@dataclass
class SweepResult:
    """Every point's outcome, the sweep folder and the simulation start-ups used."""

    root: Path
    points: list[PointResult]
    simulation_starts: int = 0

    def count(self, status: str) -> int:
        """How many points ended with ``status``."""
        return sum(r.status == status for r in self.points)


RunPoint = Callable[[Scenario, "Recorder"], dict[str, Any]]


def resumable_attempt(folder: Path, point: SweepPoint) -> tuple[Path | None, list[dict[str, Any]]]:
    """An unfinished attempt's newest usable checkpoint, with the rows recorded before it.

    ``(None, [])`` when the folder has no checkpoint of this point's scenario
    (or an unusable one, said in one warning): the attempt is then archived and
    the point starts from round 0.
    """
    from flowerbed.core.checkpoints import CheckpointError, checkpoint_folders, prepare_resume
    from flowerbed.core.records import METRICS_FILE
    from flowerbed.platform.runner import read_rows

    if not checkpoint_folders(folder):
        return None, []
    try:
        checkpoint = prepare_resume(folder, point.digest)
    except CheckpointError as exc:
        log.warning("point %s starts again from round 0: %s", folder.name, exc)
        return None, []
    return checkpoint, read_rows(folder / METRICS_FILE) if checkpoint else []


@dataclass
class _Executor:
    """Runs single points into their folders and keeps the outcomes."""

    plan: SweepPlan
    root: Path
    progress: SweepProgress | None
    results: dict[int, PointResult] = field(default_factory=dict)

    def folder(self, point: SweepPoint) -> Path:
        return self.root / point.folder_name(self.plan.width)

    def skip(self, point: SweepPoint) -> None:
        summary = json.loads((self.folder(point) / SUMMARY_FILE).read_text())
        self._finish(PointResult(point, self.folder(point), "skipped", summary=summary))

    def execute(self, point: SweepPoint, run_point: RunPoint) -> None:
        """Run one point with ``run_point(scenario, recorder)``; any error is recorded."""
        from flowerbed.core.records import Recorder

        folder = self.folder(point)
        resume_from, rows = resumable_attempt(folder, point)
        if resume_from is None:
            archive_attempt(folder)
        recorder = Recorder(
            point.scenario, folder, sweep=self.plan.name, rows=rows, resume_from=resume_from
        )
        if self.progress is not None:
            recorder.listeners.append(self.progress.start(point))
        started = time.time()
        try:
            recorder.start()
            summary = run_point(point.scenario, recorder)
        except Exception as exc:  # noqa: BLE001 - one failed point must not stop the sweep
            result = self._failed(point, recorder, exc, time.time() - started)
        else:
            result = PointResult(point, folder, "ok", wall_s=time.time() - started, summary=summary)
            self._status(result)
        finally:
            recorder.close()
        self._finish(result)

    def _failed(
        self, point: SweepPoint, recorder: Recorder, exc: Exception, wall: float
    ) -> PointResult:
        error = f"{type(exc).__name__}: {exc}".splitlines()[0]
        folder = self.folder(point)
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write(folder / ERROR_FILE, "".join(traceback.format_exception(exc)))
        try:
            recorder.event("run_failed", error=error)
        except OSError:
            pass
        result = PointResult(point, folder, "failed", error=error, wall_s=wall)
        self._status(result)
        return result

    def _status(self, result: PointResult) -> None:
        info = {
            "status": result.status,
            "digest": result.point.digest,
            "index": result.point.index,
            "overrides": result.point.overrides,
            "error": result.error,
            "wall_time_s": round(result.wall_s, 3),
        }
        atomic_write(result.folder / STATUS_FILE, json.dumps(info, indent=2) + "\n")

    def _finish(self, result: PointResult) -> None:
        self.results[result.point.index] = result
        if self.progress is not None:
            self.progress.done(result)


def run_inline_group(points: list[SweepPoint], executor: _Executor) -> int:
    """Inline points: one after the other in this process; no simulation start-up."""
    from flowerbed.platform import console, runner

    with console.quiet_flower():
        for point in points:
            executor.execute(point, runner.run_inline)
    return 0


def _stopped(reason: str) -> RunPoint:
    def run_point(scenario: Scenario, recorder: Recorder) -> dict[str, Any]:
        raise RuntimeError(f"the simulation stopped before this point ran: {reason}")

    return run_point


def run_simulation_group(points: list[SweepPoint], executor: _Executor) -> int:
    """All ``points`` inside one ``run_simulation``: one Ray start-up for the group.

    The ServerApp's main serves the points one after the other on the same
    grid (each ``serve`` re-sends the setup message with that point's
    scenario); a failing point is recorded and the loop goes on.
    """
    from flwr.serverapp import ServerApp
    from flwr.simulation import run_simulation

    from flowerbed.core.population import flower_nodes
    from flowerbed.platform.runner import backend_config, client_app, simulation_engine
    from flowerbed.platform.server import serve

    attempted: set[int] = set()
    server_app = ServerApp()

    @server_app.main()
    def _main(grid: Any, context: Any) -> None:
        del context
        for point in points:
            attempted.add(point.index)
            executor.execute(point, functools.partial(serve, grid))

    first = points[0].scenario
    reason = "the ServerApp never ran"
    try:
        with simulation_engine(first):
            run_simulation(
                server_app=server_app,
                client_app=client_app(),
                num_supernodes=flower_nodes(first),
                backend_config=backend_config(first),  # type: ignore[arg-type]
            )
    except Exception as exc:  # noqa: BLE001 - recorded on every point it stopped
        reason = f"{type(exc).__name__}: {exc}"
    for point in points:
        if point.index not in attempted:
            executor.execute(point, _stopped(reason))
    return 1


GROUP_RUNNERS: dict[str, Callable[[list[SweepPoint], _Executor], int]] = {
    "inline": run_inline_group,
    "simulation": run_simulation_group,
}


def group_points(points: Iterable[SweepPoint]) -> list[list[SweepPoint]]:
    """Points that can share one engine start-up, groups in order of first appearance."""
    groups: dict[tuple[Any, ...], list[SweepPoint]] = {}
    for point in points:
        groups.setdefault(point.group_key(), []).append(point)
    return list(groups.values())


def run_sweep(
    plan: SweepPlan, output_dir: str | Path | None = None, *, progress: bool = False
) -> SweepResult:
    """Run every point of ``plan`` not already done; failed points do not stop the rest.

    Parameters
    ----------
    plan
        From :func:`expand` or :func:`load_plan`.
    output_dir
        Root of run folders (default: the scenario's ``output_dir``).
    progress
        Print one rich line per point on stderr.

    Returns
    -------
    SweepResult
        Per-point outcomes in index order, and the number of simulation start-ups.
    """
    root = plan.root(output_dir)
    states = {p.index: point_state(plan.folder(p, output_dir), p) for p in plan.points}
    write_plan(plan, root, states)
    executor = _Executor(plan, root, SweepProgress(len(plan.points)) if progress else None)
    todo = []
    for point in plan.points:
        folder = executor.folder(point)
        folder.mkdir(parents=True, exist_ok=True)
        _write_yaml(folder / OVERRIDES_FILE, {"index": point.index, "overrides": point.overrides})
        if states[point.index] == "done":
            executor.skip(point)
        else:
            todo.append(point)
    starts = 0
    for group in group_points(todo):
        starts += GROUP_RUNNERS[group[0].scenario.engine.name](group, executor)
    results = [executor.results[p.index] for p in plan.points]
    write_plan(plan, root, {r.point.index: _state(r) for r in results})
    return SweepResult(root, results, starts)


def _state(result: PointResult) -> str:
    return "failed" if result.status == "failed" else "done"

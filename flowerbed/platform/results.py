"""Run folders and what a finished run gives back (:class:`Result`)."""

from __future__ import annotations

import json
import os
import platform as pyplatform
import stat
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flowerbed.core.records import METRICS_FILE, SUMMARY_FILE
from flowerbed.core.scenario import ScenarioError

if TYPE_CHECKING:
    from flowerbed.core.scenario import Scenario


class InputPathError(ScenarioError):
    """A path a command needs cannot be used; one line naming the path and the problem.

    Bad input like any :class:`ScenarioError` (exit status 2), found before
    any work starts: no data built, no engine started.
    """

    def __init__(self, what: str, path: str | Path, problem: str) -> None:
        self.path = Path(path)
        super().__init__([f"{what} {path}: {problem}"], str(path))

    def __str__(self) -> str:
        return self.problems[0]


def _nearest_existing(path: Path) -> Path:
    """``path`` itself or its nearest ancestor that exists (``.`` for a relative path)."""
    for candidate in (path, *path.parents):
        try:
            candidate.lstat()
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError:
            return candidate
        return candidate
    return Path(".")


def _blocked_by_file(path: Path) -> str:
    """`` (<ancestor> is a file, not a folder)`` when a file stands where a folder must be."""
    ancestor = _nearest_existing(path)
    return "" if ancestor.is_dir() else f" ({ancestor} is a file, not a folder)"


def check_scenario_file(path: str | Path) -> Path:
    """Raise :class:`InputPathError` unless ``path`` is a file this process can open.

    Opening is tried rather than inferred from permission bits, which root ignores.
    """
    what = "scenario file"
    p = Path(path)
    try:
        mode = p.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        broken = " (a broken link)" if p.is_symlink() else _blocked_by_file(p.parent)
        raise InputPathError(what, p, f"not found{broken}") from None
    except OSError as exc:
        raise InputPathError(what, p, f"cannot be read: {exc.strerror}") from None
    if stat.S_ISDIR(mode):
        raise InputPathError(what, p, "is a folder, not a scenario file")
    try:
        with open(p, "rb"):
            pass
    except OSError as exc:
        raise InputPathError(what, p, f"cannot be read: {exc.strerror}") from None
    return p


def check_output_dir(root: str | Path, *, create: bool) -> Path:
    """Raise :class:`InputPathError` unless run folders can be written under ``root``.

    Writing is tried, not inferred from permission bits (root ignores them; a
    read-only mount does not): with ``create`` the folder is made and a
    temporary file written and removed in it; without, the temporary file
    goes to the nearest existing folder, so nothing is left behind.

    Parameters
    ----------
    root
        The output folder (``output_dir`` or ``--output-dir``).
    create
        Make ``root`` (and its parents) now, as the run would.
    """
    what = "output_dir"
    p = Path(root)
    try:
        is_dir = stat.S_ISDIR(p.stat().st_mode)
    except (FileNotFoundError, NotADirectoryError):
        is_dir = None
    except OSError as exc:
        raise InputPathError(what, p, f"cannot be used: {exc.strerror}") from None
    if is_dir is False:
        raise InputPathError(what, p, "is a file, not a folder")
    if is_dir is None and (blocked := _blocked_by_file(p)):
        raise InputPathError(what, p, f"cannot be created{blocked}")
    target = p if is_dir else _nearest_existing(p)
    if create and not is_dir:
        try:
            p.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputPathError(what, p, f"cannot be created: {exc.strerror}") from None
        target = p
    try:
        fd, probe = tempfile.mkstemp(prefix=".flowerbed-write-check-", dir=target)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        where = "" if target == p else f" in {target}"
        raise InputPathError(what, p, f"is not writable{where}: {exc.strerror}") from None
    return p


def versions() -> dict[str, str]:
    """Versions of the packages that decide a run's numbers."""
    out = {"python": pyplatform.python_version()}
    for pkg in ("flowerbed", "flwr", "torch", "numpy", "scipy", "scikit-learn", "ray"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            continue
    return out


def new_run_dir(scenario: Scenario, root: str | Path | None = None) -> Path:
    """``<output_dir>/<scenario>/<timestamp>-<digest>``, created; never reuses a folder."""
    base = Path(root if root is not None else scenario.output_dir) / scenario.name
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    path = base / f"{stamp}-{scenario.digest()}"
    suffix = 1
    while path.exists():
        suffix += 1
        path = base / f"{stamp}-{scenario.digest()}-{suffix}"
    path.mkdir(parents=True)
    return path


@dataclass(frozen=True)
class Result:
    """What :func:`flowerbed.run` returns: the summary, every metrics row, the folder."""

    summary: dict[str, Any]
    rows: list[dict[str, Any]]
    run_dir: Path | None

    def final(self, source: str = "federated") -> dict[str, float]:
        """Final metrics of ``federated`` or of a baseline.

        Raises
        ------
        UnknownSourceError
            A ``KeyError`` naming the sources this run has.
        """
        results: dict[str, dict[str, float]] = self.summary["results"]
        if source not in results:
            known = ", ".join(repr(k) for k in results) or "none"
            raise UnknownSourceError(f"no results from {source!r}; this run has: {known}")
        return results[source]


class UnknownSourceError(KeyError):
    """:meth:`Result.final` of a source the run does not have; the message lists those it has."""

    def __str__(self) -> str:
        return str(self.args[0])


def load_result(run_dir: str | Path) -> Result:
    """Read a finished run folder back into a :class:`Result`."""
    path = Path(run_dir)
    summary = json.loads((path / SUMMARY_FILE).read_text())
    rows = [json.loads(ln) for ln in (path / METRICS_FILE).read_text().splitlines() if ln.strip()]
    return Result(summary, rows, path)

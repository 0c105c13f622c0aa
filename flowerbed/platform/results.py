"""Run folders and what a finished run gives back (:class:`Result`)."""

from __future__ import annotations

import json
import os
import platform as pyplatform
import stat
import tempfile
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flowerbed.core.records import CLIENT_METRICS_FILE, METRICS_FILE, SUMMARY_FILE
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


#: Phases whose rows are the federated model's own, in the order a metric is taken:
#: the server's evaluation, then the clients' training and evaluation means.
FEDERATED_PHASES = ("server_eval", "train", "evaluate", "local")


@dataclass(frozen=True)
class Result:
    """What :func:`flowerbed.run` returns: the summary, every metrics row, the folder.

    ``rows`` are ``metrics.jsonl``'s rows as written: metric rows (values
    named ``<phase>/<split>/<metric>``) and event rows (``event``: who
    replied, a resume...). The tables name metrics as :meth:`final` does
    (``<split>/<metric>``): :meth:`per_round` for the federated model per
    round, :meth:`per_client` for each client's own replies, :meth:`events`
    for the event rows (each a pandas ``DataFrame``; pandas is in the
    ``data`` extra).

    Examples
    --------
    >>> result = flowerbed.run("scenarios/quickstart.yaml", ["engine=inline"])  # doctest: +SKIP
    >>> result.per_round()["test/accuracy"]  # doctest: +SKIP
    round
    0    0.109
    1    0.758
    ...
    """

    summary: dict[str, Any]
    rows: list[dict[str, Any]]
    run_dir: Path | None
    #: ``client_metrics.jsonl``'s rows (kept here too when the run has no folder).
    client_rows: list[dict[str, Any]] = field(default_factory=list)

    def per_round(self) -> Any:
        """The federated model's metrics per round: index ``round``, a column per metric.

        Columns are named as in :meth:`final` (``test/accuracy`` from the
        server's evaluation, ``local_test/accuracy`` the clients' mean,
        ``train/loss``); a metric two phases log comes from the first of
        :data:`FEDERATED_PHASES`. Rounds a metric was not logged in are NaN.
        """
        pd = _pandas()
        by_round: dict[int, dict[str, dict[str, float]]] = {}
        for row in self.rows:
            phase = row.get("phase")
            if "event" in row or phase not in FEDERATED_PHASES or "round" not in row:
                continue
            found = by_round.setdefault(int(row["round"]), {}).setdefault(str(phase), {})
            for key, value in row.items():
                if key.startswith(f"{phase}/") and isinstance(value, (int, float)):
                    found[key.removeprefix(f"{phase}/")] = float(value)
        table = {r: _merged(phases) for r, phases in sorted(by_round.items())}
        frame = pd.DataFrame.from_dict(table, orient="index")
        frame.index.name = "round"
        return frame[sorted(frame.columns)]

    def per_client(self) -> Any:
        """Each client's own reply per round and phase: one row per (round, phase, client).

        Columns ``round``, ``phase``, ``client``, ``num_examples``, then the
        client's metrics named as the aggregates are: ``local_test/<m>`` for
        an ``evaluate`` reply, ``train/<m>`` for a ``train`` reply.
        """
        pd = _pandas()
        rows = self.client_rows
        if self.run_dir is not None and (self.run_dir / CLIENT_METRICS_FILE).is_file():
            lines = (self.run_dir / CLIENT_METRICS_FILE).read_text().splitlines()
            rows = [json.loads(line) for line in lines if line.strip()]
        records = [
            {
                "round": r["round"], "phase": r["phase"], "client": r["client"],
                "num_examples": r["num_examples"],
                **{client_metric_name(r["phase"], k): v for k, v in r["metrics"].items()},
            }
            for r in rows
        ]
        columns = ["round", "phase", "client", "num_examples"]
        return pd.DataFrame.from_records(records, columns=_columns(records, columns))

    def events(self) -> Any:
        """The event rows (``event``: replies, connected, resumed, interrupted...), as written."""
        pd = _pandas()
        return pd.DataFrame.from_records([r for r in self.rows if "event" in r])

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


def _merged(phases: dict[str, dict[str, float]]) -> dict[str, float]:
    """One round's metrics, each from the first phase of :data:`FEDERATED_PHASES` logging it."""
    merged: dict[str, float] = {}
    for phase in FEDERATED_PHASES:
        for key, value in phases.get(phase, {}).items():
            merged.setdefault(key, value)
    return merged


def _columns(records: list[dict[str, Any]], first: list[str]) -> list[str]:
    """``first``, then every other key of ``records`` sorted."""
    rest = sorted({k for r in records for k in r} - set(first))
    return [*first, *rest]


def client_metric_name(phase: str, metric: str) -> str:
    """A client's metric named as its aggregate is (``accuracy`` of ``evaluate``: ``local_test/``).

    Examples
    --------
    >>> client_metric_name("evaluate", "accuracy"), client_metric_name("train", "loss")
    ('local_test/accuracy', 'train/loss')
    >>> client_metric_name("train.local", "test/f1")
    'test/f1'
    """
    if "/" in metric:
        return metric
    if phase.split(".")[0] == "evaluate":
        return f"local_test/{metric}"
    if phase.split(".")[0] == "train":
        return f"train/{metric}"
    return metric


def _pandas() -> Any:
    """pandas, or one line saying how to install it (the ``data`` extra)."""
    try:
        import pandas
    except ImportError:
        raise ImportError(
            "Result tables need pandas: pip install pandas (or 'flowerbed[data]')"
        ) from None
    return pandas


class UnknownSourceError(KeyError):
    """:meth:`Result.final` of a source the run does not have; the message lists those it has."""

    def __str__(self) -> str:
        return str(self.args[0])


def load_result(run_dir: str | Path) -> Result:
    """Read a finished run folder back into a :class:`Result`."""
    path = Path(run_dir)
    summary = json.loads((path / SUMMARY_FILE).read_text())
    rows = [json.loads(ln) for ln in (path / METRICS_FILE).read_text().splitlines() if ln.strip()]
    return Result(summary, rows, path)  # per_client() reads client_metrics.jsonl

"""Run folders and what a finished run gives back (:class:`Result`)."""

from __future__ import annotations

import json
import platform as pyplatform
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flowerbed.core.records import METRICS_FILE, SUMMARY_FILE

if TYPE_CHECKING:
    from flowerbed.core.scenario import Scenario


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
        """Final metrics of ``federated`` or of a baseline."""
        value: dict[str, float] = self.summary["results"][source]
        return value


def load_result(run_dir: str | Path) -> Result:
    """Read a finished run folder back into a :class:`Result`."""
    path = Path(run_dir)
    summary = json.loads((path / SUMMARY_FILE).read_text())
    rows = [json.loads(ln) for ln in (path / METRICS_FILE).read_text().splitlines() if ln.strip()]
    return Result(summary, rows, path)

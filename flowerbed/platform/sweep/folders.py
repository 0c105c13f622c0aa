"""Run folders of a sweep: point states, archived attempts and the plan files."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from flowerbed.core.checkpoints import CHECKPOINT_DIR
from flowerbed.core.records import (
    CLIENT_METRICS_FILE,
    CLIENTS_FILE,
    LOG_FILE,
    METRICS_FILE,
    STATE_DIR_NAME,
    SUMMARY_FILE,
    TENSORBOARD_DIR,
    atomic_write,
)
from flowerbed.platform.sweep.plan import SweepPlan, SweepPoint

PLAN_FILE = "sweep.json"
SOURCE_FILE = "sweep.yaml"
OVERRIDES_FILE = "overrides.yaml"
STATUS_FILE = "status.json"
ERROR_FILE = "error.txt"
PREVIOUS_DIR = "previous"
#: Files a point attempt writes; an unfinished attempt's are moved aside before a retry
#: (the ``tensorboard`` sink's folder too, so a retry's curves do not overlay the last;
#: the clients' state, so a retry from round 0 does not start from the last attempt's).
ATTEMPT_FILES = (
    METRICS_FILE, CLIENT_METRICS_FILE, LOG_FILE, CLIENTS_FILE, SUMMARY_FILE, STATUS_FILE,
    ERROR_FILE, TENSORBOARD_DIR, CHECKPOINT_DIR, STATE_DIR_NAME,
)


def sweep_folder_of(file: str | Path) -> Path | None:
    """The sweep folder whose own copy of the sweep ``file`` is (its ``sweep.yaml``), if any.

    Resuming from that copy resumes in the folder itself, wherever it was
    moved or however it was renamed since it was written.
    """
    path = Path(file)
    if path.name == SOURCE_FILE and (path.parent / PLAN_FILE).is_file():
        return path.parent
    return None


def point_state(folder: Path, point: SweepPoint) -> str:
    """``done`` (summary with this digest), ``failed``, ``partial`` or ``new``."""
    try:
        summary = json.loads((folder / SUMMARY_FILE).read_text())
        if summary.get("digest") == point.digest:
            return "done"
    except (OSError, ValueError):
        pass
    if (folder / ERROR_FILE).exists():
        return "failed"
    return "partial" if any((folder / f).exists() for f in ATTEMPT_FILES) else "new"


def archive_attempt(folder: Path) -> Path | None:
    """Move an unfinished attempt's files to ``previous/<n>/`` (nothing is deleted)."""
    present = [folder / f for f in ATTEMPT_FILES if (folder / f).exists()]
    if not present:
        return None
    n = 1
    while (target := folder / PREVIOUS_DIR / str(n)).exists():
        n += 1
    target.mkdir(parents=True)
    for path in present:
        shutil.move(str(path), target / path.name)
    return target


def _write_yaml(path: Path, data: Any) -> None:
    atomic_write(path, yaml.safe_dump(data, sort_keys=False))


def write_plan(plan: SweepPlan, root: Path, states: dict[int, str]) -> None:
    """``sweep.json`` (points, folders, overrides, states) and ``sweep.yaml`` (the source)."""
    root.mkdir(parents=True, exist_ok=True)
    _write_yaml(root / SOURCE_FILE, plan.source)
    points = [
        {
            "index": p.index,
            "folder": p.folder_name(plan.width),
            "digest": p.digest,
            "overrides": p.overrides,
            "state": states.get(p.index, "new"),
        }
        for p in plan.points
    ]
    info = {
        "name": plan.name,
        "keys": list(plan.keys),
        "updated": datetime.now(UTC).isoformat(timespec="seconds"),
        "points": points,
    }
    atomic_write(root / PLAN_FILE, json.dumps(info, indent=2) + "\n")

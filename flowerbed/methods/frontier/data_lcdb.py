"""LCDB learning-curve database as a real model x task evaluation matrix (optional extra).

For the weak-monotonicity method ("Hedging on the Frontier", arXiv 2605.30997):
rows are LCDB's learners, columns its OpenML datasets, entries the mean validation
error (1 - accuracy) at each dataset's largest anchor where every learner has a
result. The PyPI package ``lcdb`` (Mohr et al., 2022) ships the database as CSV
files inside the wheel; they are read directly, nothing is downloaded.
"""

from __future__ import annotations

import csv
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from flowerbed.data.base import MissingExtraError


@dataclass(frozen=True)
class EvaluationMatrix:
    """Losses ``values[learner, dataset]`` with row and column names."""

    learners: tuple[str, ...]
    datasets: tuple[int, ...]
    values: np.ndarray


def lcdb_file(metric: str = "accuracy") -> Path:
    """Path of ``database-<metric>.csv`` inside the installed ``lcdb`` package."""
    import importlib.util

    spec = importlib.util.find_spec("lcdb")
    if spec is None or not spec.submodule_search_locations:
        raise MissingExtraError("the lcdb evaluation matrix needs lcdb: pip install lcdb")
    return Path(next(iter(spec.submodule_search_locations))) / f"database-{metric}.csv"


def load_lcdb_matrix(
    path: str | Path | None = None, split: str = "score_valid"
) -> EvaluationMatrix:
    """Learner x dataset error matrix from an LCDB accuracy CSV (see module docstring).

    Datasets where some learner has no result at the shared anchor are left out.
    """
    path = Path(path) if path is not None else lcdb_file("accuracy")
    sums: dict[tuple[int, int, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    with open(path, newline="") as fh:
        for row in csv.DictReader(fh):
            if row[split]:
                acc = sums[(int(row["openmlid"]), int(row["size_train"]), row["learner"])]
                acc[0] += float(row[split])
                acc[1] += 1
    learners = sorted({k[2] for k in sums})
    by_anchor: dict[tuple[int, int], dict[str, float]] = defaultdict(dict)
    for (did, anchor, learner), (total, count) in sums.items():
        by_anchor[(did, anchor)][learner] = 1.0 - total / count
    best: dict[int, int] = {}
    for (did, anchor), scores in by_anchor.items():
        if len(scores) == len(learners) and anchor > best.get(did, -1):
            best[did] = anchor
    datasets = tuple(sorted(best))
    values = np.array([[by_anchor[(d, best[d])][ln] for d in datasets] for ln in learners])
    return EvaluationMatrix(tuple(learners), datasets, values)

"""Smartwatch IMU exercises (seglearn ``load_watch``), with subjects as natural clients.

140 recordings of 6-axis IMU at 50 Hz (accelerometer and gyroscope) from 10
subjects doing 7 shoulder exercises. Each recording is cut into windows of
``width`` samples every ``step`` samples; a window becomes per-channel
statistics (mean, std, min, max, mean absolute change). Whole recordings are
held out for the test split, so test windows come from unseen sessions;
``groups_train`` holds each training window's subject id (use ``natural_id``).
"""

from __future__ import annotations

import numpy as np
from pydantic import Field

from flowerbed.core.registry import Params
from flowerbed.data.base import Dataset, DatasetMeta, require
from flowerbed.data.extras import register_with_extra
from flowerbed.data.sklearn_data import split_rows, standardize

STATS = ("mean", "std", "min", "max", "mad")


class WatchParams(Params):
    """Window length and step (samples at 50 Hz) and the held-out share of recordings."""

    width: int = Field(100, ge=4, description="window length in samples (100 = 2 s)")
    step: int = Field(50, ge=1, description="hop between windows in samples")
    test_fraction: float = Field(0.25, gt=0, lt=1, description="share of recordings")
    standardize: bool = True


def window_features(series: np.ndarray, width: int, step: int) -> np.ndarray:
    """Per-channel statistics of each window: shape ``(n_windows, channels * 5)``.

    Examples
    --------
    >>> window_features(np.arange(8.0)[:, None], width=4, step=4)[:, :2].tolist()
    [[1.5, 1.118033988749895], [5.5, 1.118033988749895]]
    """
    starts = np.arange(0, len(series) - width + 1, step)
    w = series[starts[:, None] + np.arange(width)]  # (n, width, channels)
    mad = np.abs(np.diff(w, axis=1)).mean(axis=1)
    feats = [w.mean(axis=1), w.std(axis=1), w.min(axis=1), w.max(axis=1), mad]
    return np.stack(feats, axis=2).reshape(len(starts), -1)


def _windows(recordings: list[np.ndarray], labels: np.ndarray, subjects: np.ndarray,
             params: WatchParams) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Stack windows of the given recordings with their labels and subjects."""
    feats = [window_features(np.asarray(r, dtype=np.float64), params.width, params.step)
             for r in recordings]
    counts = [len(f) for f in feats]
    return np.concatenate(feats), np.repeat(labels, counts), np.repeat(subjects, counts)


@register_with_extra("watch", WatchParams, "seglearn", "seglearn")
def watch(params: WatchParams, *, seed: int) -> Dataset:
    """Smartwatch IMU shoulder exercises (seglearn, 7 classes, 10 subjects = natural clients)."""
    datasets = require("seglearn.datasets", "seglearn", "watch")
    raw = datasets.load_watch()  # type: ignore[attr-defined]
    y = np.asarray(raw["y"], dtype=np.int64)
    subjects = np.asarray(raw["subject"], dtype=np.int64)
    tr, te = split_rows(len(y), y, params.test_fraction, seed)
    x_tr, y_tr, g_tr = _windows([raw["X"][i] for i in tr], y[tr], subjects[tr], params)
    x_te, y_te, _ = _windows([raw["X"][i] for i in te], y[te], subjects[te], params)
    if params.standardize:
        x_tr, x_te = standardize(x_tr, x_te)
    names = tuple(f"{ch}_{s}" for ch in raw["X_labels"] for s in STATS)
    meta = DatasetMeta(
        name="watch", task="classification", num_features=x_tr.shape[1], num_classes=7,
        feature_names=names, class_names=tuple(raw["y_labels"]),
        source="seglearn load_watch (Burns et al. 2018, shoulder physiotherapy IMU)",
        license="BSD-3-Clause (seglearn)",
    )
    return Dataset(x_tr.astype(np.float32), y_tr, x_te.astype(np.float32), y_te, meta, g_tr)

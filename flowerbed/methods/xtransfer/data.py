"""Raw multichannel IMU windows for few-shot cross-modal transfer (XTransfer).

- ``watch_raw``: seglearn's smartwatch recordings (6 channels, 50 Hz; 10 subjects
  x 7 shoulder exercises x 2 sides), cut into non-overlapping windows of
  ``width`` samples; one row = one window flattened channel-major, with
  ``input_shape`` ``(6, width)``; ``groups_train`` is the subject (use
  ``partition: natural_id``). Every window is a training row: a few-shot
  learner draws its support, validation and query windows from each client's rows.
- ``basic_motions``: sktime's BasicMotions (smartwatch accelerometer + gyroscope,
  10 Hz, 100 samples, 4 activities, 80 recordings; no subject ids), train and
  test splits merged into the training rows for the same few-shot protocol.

Windows are standardised per channel with statistics of the whole dataset
(``standardize``), which uses no labels.
"""

from __future__ import annotations

import numpy as np
from pydantic import Field

from flowerbed.core.registry import Params
from flowerbed.data.base import Dataset, DatasetMeta, require
from flowerbed.data.extras import register_with_extra


class WatchRawParams(Params):
    """Window length and hop (samples at 50 Hz)."""

    width: int = Field(100, ge=8, description="window length in samples (100 = 2 s)")
    step: int = Field(100, ge=1, description="hop between windows (= width: no overlap)")
    standardize: bool = Field(True, description="z-score each channel over the dataset")


def raw_windows(series: np.ndarray, width: int, step: int) -> np.ndarray:
    """``(n_windows, channels, width)`` windows of a ``(T, channels)`` recording.

    Examples
    --------
    >>> raw_windows(np.arange(10.0)[:, None], width=4, step=3).tolist()
    [[[0.0, 1.0, 2.0, 3.0]], [[3.0, 4.0, 5.0, 6.0]], [[6.0, 7.0, 8.0, 9.0]]]
    """
    starts = np.arange(0, len(series) - width + 1, step)
    return np.stack([series[s : s + width].T for s in starts]) if len(starts) else np.zeros(
        (0, series.shape[1], width))


def _standardize(x: np.ndarray) -> np.ndarray:
    mean = x.mean(axis=(0, 2), keepdims=True)
    std = x.std(axis=(0, 2), keepdims=True)
    return (x - mean) / np.where(std > 0, std, 1.0)


def _dataset(x: np.ndarray, y: np.ndarray, groups: np.ndarray | None,
             meta: DatasetMeta) -> Dataset:
    flat = x.reshape(len(x), -1).astype(np.float32)
    return Dataset(flat, y.astype(np.int64), flat[:0], y[:0].astype(np.int64), meta, groups)


@register_with_extra("watch_raw", WatchRawParams, "seglearn", "seglearn")
def watch_raw(params: WatchRawParams, *, seed: int) -> Dataset:
    """Smartwatch IMU as raw 6 x width windows (seglearn, 7 classes, 10 subjects)."""
    del seed
    datasets = require("seglearn.datasets", "seglearn", "watch_raw")
    raw = datasets.load_watch()  # type: ignore[attr-defined]
    parts = [raw_windows(np.asarray(r, dtype=np.float64), params.width, params.step)
             for r in raw["X"]]
    counts = [len(p) for p in parts]
    x = np.concatenate(parts)
    y = np.repeat(np.asarray(raw["y"], dtype=np.int64), counts)
    subjects = np.repeat(np.asarray(raw["subject"], dtype=np.int64), counts)
    if params.standardize:
        x = _standardize(x)
    meta = DatasetMeta(
        name="watch_raw", task="classification", num_features=x.shape[1] * x.shape[2],
        num_classes=7, class_names=tuple(raw["y_labels"]), input_shape=x.shape[1:],
        feature_names=tuple(raw["X_labels"]),
        source="seglearn load_watch (Burns et al. 2018, shoulder physiotherapy IMU)",
        license="BSD-3-Clause (seglearn)",
    )
    return _dataset(x, y, subjects, meta)


class BasicMotionsParams(Params):
    """Per-channel standardisation."""

    standardize: bool = Field(True, description="z-score each channel over the dataset")


@register_with_extra("basic_motions", BasicMotionsParams, "sktime", "sktime")
def basic_motions(params: BasicMotionsParams, *, seed: int) -> Dataset:
    """BasicMotions (sktime): 80 recordings, 6 x 100 at 10 Hz, 4 activities, one group."""
    del seed
    sk = require("sktime.datasets", "sktime", "basic_motions")
    x, labels = sk.load_basic_motions(return_type="numpy3D")  # type: ignore[attr-defined]
    names = tuple(sorted(set(labels.tolist())))
    y = np.asarray([names.index(v) for v in labels], dtype=np.int64)
    x = np.asarray(x, dtype=np.float64)
    if params.standardize:
        x = _standardize(x)
    meta = DatasetMeta(
        name="basic_motions", task="classification", num_features=x.shape[1] * x.shape[2],
        num_classes=len(names), class_names=names, input_shape=x.shape[1:],
        feature_names=("acc_x", "acc_y", "acc_z", "gyr_x", "gyr_y", "gyr_z"),
        source="sktime load_basic_motions (UEA archive, BasicMotions)",
        license="UEA/UCR archive terms (research use), via sktime (BSD-3-Clause)",
    )
    return _dataset(x, y, np.zeros(len(y), dtype=np.int64), meta)

"""User tables: ``csv`` and ``parquet`` files with a target column (pandas, pyarrow).

Rows with empty (or infinite) cells in a used column are refused unless the
scenario says what to do with them (``missing: drop | mean``): a table never
loses rows without a word.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field

from flowerbed.core.registry import Params, register
from flowerbed.data.base import Dataset, DatasetMeta, DataSourceError, require
from flowerbed.data.sklearn_data import split_rows, standardize

log = logging.getLogger("flowerbed.data")


class TableParams(Params):
    """A table file, its target column and (optionally) the feature columns to use."""

    path: str
    target: str
    features: tuple[str, ...] | None = Field(
        None, description="default: every numeric column except target and group"
    )
    task: Literal["classification", "regression"] = "classification"
    group: str | None = Field(None, description="natural client id column (natural_id)")
    test_fraction: float = Field(0.25, gt=0, lt=1)
    standardize: bool = True
    missing: Literal["error", "drop", "mean"] = Field(
        "error",
        description="empty or non-finite cells: error (refuse, naming the columns), drop "
        "(the rows), mean (fill feature cells with the training mean; rows without a "
        "target or group are dropped)",
    )


def _read(kind: str, params: TableParams) -> Any:
    """Read the file into a pandas frame, with one-line errors for a missing path."""
    path = Path(params.path)
    if not path.is_file():
        raise DataSourceError(f"{kind} dataset: file not found: {path}")
    pd = require("pandas", "pandas", kind)
    if kind == "parquet":
        require("pyarrow", "pyarrow", kind)
        return pd.read_parquet(path)  # type: ignore[attr-defined]
    return pd.read_csv(path)  # type: ignore[attr-defined]


def _columns(kind: str, frame: Any, params: TableParams) -> list[str]:
    """The feature columns, checking that every named column exists and is numeric."""
    available = [str(c) for c in frame.columns]
    named = [params.target, *(params.features or ()), *([params.group] if params.group else [])]
    for col in named:
        if col not in available:
            raise DataSourceError(
                f"{kind} dataset: column {col!r} not in {params.path} "
                f"(columns: {', '.join(available)})"
            )
    if params.features is not None:
        features = list(params.features)
    else:
        skip = {params.target, params.group}
        features = [c for c in available if c not in skip and frame[c].dtype.kind in "biuf"]
    bad = [c for c in features if frame[c].dtype.kind not in "biuf"]
    if bad or not features:
        raise DataSourceError(
            f"{kind} dataset: feature columns must be numeric; "
            f"{', '.join(bad) or 'none found'} in {params.path}"
        )
    return features


def _target(frame: Any, params: TableParams) -> tuple[np.ndarray, tuple[str, ...]]:
    """Integer codes (classification, classes sorted) or float targets (regression)."""
    column = frame[params.target]
    if params.task == "regression":
        return column.to_numpy(dtype=np.float64), ()
    classes = sorted(column.unique(), key=str)
    codes = {c: i for i, c in enumerate(classes)}
    return column.map(codes).to_numpy(dtype=np.int64), tuple(str(c) for c in classes)


def _incomplete(frame: Any, columns: list[str]) -> dict[str, np.ndarray]:
    """Per column, which rows hold no usable value: empty (NaN/None) or, if numeric, infinite."""
    flags: dict[str, np.ndarray] = {}
    for col in columns:
        values = frame[col]
        bad = values.isna().to_numpy(dtype=bool, copy=True)
        if values.dtype.kind in "biuf":
            bad |= ~np.isfinite(values.to_numpy(dtype=np.float64))
        flags[col] = bad
    return flags


def _refuse_missing(kind: str, params: TableParams, flags: dict[str, np.ndarray]) -> None:
    """``missing: error``: one line naming the file, each incomplete column and its count."""
    rows = int(np.logical_or.reduce(list(flags.values())).sum())
    total = len(next(iter(flags.values())))
    columns = ", ".join(f"{c!r}: {int(f.sum())}" for c, f in flags.items() if f.any())
    raise DataSourceError(
        f"{kind} dataset: {params.path} has missing or non-finite values in {rows} of "
        f"{total} rows (column {columns}); fix the file, or set dataset.missing: drop "
        f"(drop those rows) or mean (fill feature cells with the training mean)"
    )


def _drop_incomplete(
    kind: str, frame: Any, features: list[str], params: TableParams
) -> tuple[Any, int]:
    """Apply ``params.missing`` to rows with empty cells; return the frame and rows dropped.

    ``mean`` keeps rows whose only gaps are feature cells (filled after the
    split, from training rows only); a missing target or group cannot be
    filled, so those rows go under ``mean`` as under ``drop``.
    """
    keys = [params.target, *([params.group] if params.group else [])]
    flags = _incomplete(frame, list(dict.fromkeys([*features, *keys])))
    if not any(f.any() for f in flags.values()):
        return frame, 0
    if params.missing == "error":
        _refuse_missing(kind, params, flags)
    checked = keys if params.missing == "mean" else list(flags)
    drop = np.logical_or.reduce([flags[c] for c in checked])
    if drop.any():
        log.warning(
            "%s dataset: dropped %d of %d rows of %s with missing or non-finite values "
            "(missing: %s)", kind, int(drop.sum()), len(frame), params.path, params.missing,
        )
    return frame[~drop].reset_index(drop=True), int(drop.sum())


def _fill_means(
    kind: str, x_tr: np.ndarray, x_te: np.ndarray, features: list[str], params: TableParams
) -> tuple[np.ndarray, np.ndarray]:
    """``missing: mean``: empty feature cells of both splits take the training rows' mean."""
    gaps_tr, gaps_te = ~np.isfinite(x_tr), ~np.isfinite(x_te)
    if not (gaps_tr.any() or gaps_te.any()):
        return x_tr, x_te
    known = np.where(gaps_tr, 0.0, x_tr)
    counts = (~gaps_tr).sum(axis=0)
    empty = [f for f, c in zip(features, counts, strict=True) if c == 0]
    if empty:
        raise DataSourceError(
            f"{kind} dataset: column {empty[0]!r} of {params.path} has no value in the "
            f"training rows to take the mean of (missing: mean); drop the column or the rows"
        )
    means = known.sum(axis=0) / counts
    log.warning(
        "%s dataset: filled %d empty feature cells of %s with training means (missing: mean)",
        kind, int(gaps_tr.sum() + gaps_te.sum()), params.path,
    )
    return np.where(gaps_tr, means, x_tr), np.where(gaps_te, means, x_te)


#: How a table's metadata records the rows it dropped (read back by :func:`dropped_rows`).
_DROPPED = "; {dropped} of {total} rows dropped for missing values"
_DROPPED_RE = re.compile(r"; (\d+) of \d+ rows dropped for missing values$")


def dropped_rows(meta: DatasetMeta) -> int | None:
    """Rows a user table lost to ``missing: drop | mean``; ``None`` for other datasets.

    The count travels in ``meta.source`` because the metadata is what the
    federated data cache keeps of a dataset besides its arrays.
    """
    if meta.name not in ("csv", "parquet") or not meta.source.startswith("user "):
        return None
    found = _DROPPED_RE.search(meta.source)
    return int(found.group(1)) if found else 0


def load_table(kind: str, params: TableParams, seed: int) -> Dataset:
    """Read, select, clean (per ``params.missing``), split and scale a table."""
    frame = _read(kind, params)
    features = _columns(kind, frame, params)
    total = len(frame)
    frame, dropped = _drop_incomplete(kind, frame, features, params)
    if len(frame) < 2:
        raise DataSourceError(f"{kind} dataset: {params.path} has fewer than 2 complete rows")
    y, classes = _target(frame, params)
    x = frame[features].to_numpy(dtype=np.float64)
    tr, te = split_rows(len(y), y if classes else None, params.test_fraction, seed)
    x_tr, x_te = x[tr], x[te]
    if params.missing == "mean":
        x_tr, x_te = _fill_means(kind, x_tr, x_te, features, params)
    if params.standardize:
        x_tr, x_te = standardize(x_tr, x_te)
    groups = frame[params.group].to_numpy()[tr] if params.group else None
    note = _DROPPED.format(dropped=dropped, total=total) if dropped else ""
    meta = DatasetMeta(
        name=kind, task=params.task, num_features=len(features),
        num_classes=len(classes), feature_names=tuple(features), class_names=classes,
        source=f"user {kind} file {params.path}{note}", license="user-supplied",
    )
    return Dataset(
        x_tr.astype(np.float32), y[tr], x_te.astype(np.float32), y[te], meta, groups
    )


@register("dataset", "csv", params=TableParams)
def csv(params: TableParams, *, seed: int) -> Dataset:
    """A user CSV file: target column, numeric feature columns, optional group column."""
    return load_table("csv", params, seed)


@register("dataset", "parquet", params=TableParams)
def parquet(params: TableParams, *, seed: int) -> Dataset:
    """A user Parquet file: target column, numeric feature columns, optional group column."""
    return load_table("parquet", params, seed)

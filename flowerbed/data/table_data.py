"""User tables: ``csv`` and ``parquet`` files with a target column (pandas, pyarrow)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field

from flowerbed.core.registry import Params, register
from flowerbed.data.base import Dataset, DatasetMeta, DataSourceError, require
from flowerbed.data.sklearn_data import split_rows, standardize


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


def load_table(kind: str, params: TableParams, seed: int) -> Dataset:
    """Read, select, clean (rows with missing values dropped), split and scale a table."""
    frame = _read(kind, params)
    features = _columns(kind, frame, params)
    used = [*features, params.target, *([params.group] if params.group else [])]
    frame = frame.dropna(subset=list(dict.fromkeys(used))).reset_index(drop=True)
    if len(frame) < 2:
        raise DataSourceError(f"{kind} dataset: {params.path} has fewer than 2 complete rows")
    y, classes = _target(frame, params)
    x = frame[features].to_numpy(dtype=np.float64)
    tr, te = split_rows(len(y), y if classes else None, params.test_fraction, seed)
    x_tr, x_te = (standardize(x[tr], x[te]) if params.standardize else (x[tr], x[te]))
    groups = frame[params.group].to_numpy()[tr] if params.group else None
    meta = DatasetMeta(
        name=kind, task=params.task, num_features=len(features),
        num_classes=len(classes), feature_names=tuple(features), class_names=classes,
        source=f"user {kind} file {params.path}", license="user-supplied",
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

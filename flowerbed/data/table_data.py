"""User tables: ``csv`` and ``parquet`` files with a target column (pandas, pyarrow).

A table never changes silently. Rows with empty (or infinite) cells in a used
column are refused unless the scenario says what to do with them (``missing:
drop | mean``); a column the features would use that holds text (a few stray
cells, or only text) or numbers beyond ``float32`` is refused naming its
first bad rows, unless the scenario lists its ``features`` or sets
``drop_non_numeric: true`` (then each column left out is logged); a
classification target with one class, or with non-integer numbers, is
refused; so is a file pandas cannot read, naming the file.
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

#: Largest magnitude a feature may have: the arrays are ``float32``.
FLOAT32_MAX = float(np.finfo(np.float32).max)
#: How many bad cells an error message shows.
_SHOWN = 3


class TableParams(Params):
    """A table file, its target column and (optionally) the feature columns to use."""

    path: str
    target: str
    features: tuple[str, ...] | None = Field(
        None, description="default: every column except target and group (each must be numeric)"
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
    drop_non_numeric: bool = Field(
        False,
        description="default features: leave out (and log) columns holding text instead of "
        "refusing the table; listed features must be numeric either way",
    )

    def scenario_problems(self, scenario: Any) -> list[str]:
        """A missing file, and one column in two roles, are known before reading the table."""
        del scenario
        found = []
        path = Path(self.path).expanduser()
        if path.is_dir():
            found.append(f"path: {self.path} is a folder, not a table file")
        elif not path.exists():
            found.append(f"path: {self.path}: no such file")
        if self.group is not None and self.group == self.target:
            found.append(
                f"group: {self.group!r} is also the target; a client id cannot be the label"
            )
        for role in filter(None, (self.target, self.group)):
            if role in (self.features or ()):
                which = "target" if role == self.target else "group"
                found.append(f"features: lists {role!r}, the {which} column")
        return found


def _read(kind: str, params: TableParams) -> Any:
    """Read the file into a pandas frame; any reading problem is one line naming the file."""
    path = Path(params.path).expanduser()
    if path.is_dir():
        raise DataSourceError(f"{kind} dataset: {path} is a folder, not a table file")
    if not path.is_file():
        raise DataSourceError(f"{kind} dataset: file not found: {path}")
    pd = require("pandas", "pandas", kind)
    try:
        if kind == "parquet":
            require("pyarrow", "pyarrow", kind)
            frame = pd.read_parquet(path)  # type: ignore[attr-defined]
        else:
            frame = pd.read_csv(path)  # type: ignore[attr-defined]
    except Exception as exc:  # noqa: BLE001 - pandas/pyarrow raise many types; all bad input
        raise DataSourceError(f"{kind} dataset: cannot read {path}: {_why(kind, exc)}") from None
    if len(frame) == 0:
        raise DataSourceError(f"{kind} dataset: {path} has a header but no data rows")
    return frame


def _why(kind: str, exc: Exception) -> str:
    """What went wrong reading a table, in words (pandas' own message as the detail)."""
    name = type(exc).__name__
    if isinstance(exc, UnicodeDecodeError):
        return f"not UTF-8 text at byte {exc.start}; is it a {kind} file?"
    if name == "EmptyDataError":
        return "the file is empty (no header, no rows)"
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else name
    return f"not a readable {kind} file ({name}: {first})"


def _cells(frame: Any, column: str, rows: np.ndarray) -> str:
    """The first bad cells of ``column``: ``row 18: 'n/a?', row 1204: 'abc'``.

    Rows are counted from 1 below the header, in the file as read (the frame
    keeps the file's row labels after rows are dropped).
    """
    values = frame[column]
    shown = [
        f"row {int(values.index[i]) + 1}: {_scalar(values.iloc[i])!r}"
        for i in np.flatnonzero(rows)[:_SHOWN]
    ]
    more = int(rows.sum()) - len(shown)
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")


def _scalar(value: Any) -> Any:
    """A cell as a plain Python value (``1e+308``, not ``np.float64(1e+308)``)."""
    return value.item() if isinstance(value, np.generic) else value


def _not_numeric(frame: Any, column: str) -> np.ndarray:
    """Rows whose cell holds something that is not a number (empty cells are not counted)."""
    import pandas as pd

    values = frame[column]
    if values.dtype.kind in "biuf":
        return np.zeros(len(values), dtype=bool)
    parsed = pd.to_numeric(values, errors="coerce")
    return np.asarray(values.notna() & parsed.isna(), dtype=bool)


def _beyond_float32(frame: Any, column: str) -> np.ndarray:
    """Finite cells too large for the ``float32`` arrays (they would become infinite)."""
    import pandas as pd

    values = pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=np.float64)
    with np.errstate(invalid="ignore"):
        return np.isfinite(values) & (np.abs(values) > FLOAT32_MAX)


def _columns(kind: str, frame: Any, params: TableParams) -> list[str]:
    """The feature columns: each named column exists, each used one is numeric and in range."""
    available = [str(c) for c in frame.columns]
    named = [params.target, *(params.features or ()), *([params.group] if params.group else [])]
    for col in named:
        if col not in available:
            raise DataSourceError(
                f"{kind} dataset: column {col!r} not in {params.path} "
                f"(columns: {', '.join(available)})"
            )
    skip = {params.target, params.group}
    features = (
        list(params.features) if params.features is not None
        else [c for c in available if c not in skip]
    )
    numeric = _numeric_features(kind, frame, features, params)
    if not numeric:
        left = f" (left out as text: {', '.join(features)})" if features else ""
        raise DataSourceError(
            f"{kind} dataset: {params.path} has no numeric feature column besides target "
            f"and group{left}"
        )
    features = numeric
    for col in features:
        huge = _beyond_float32(frame, col)
        if huge.any():
            raise DataSourceError(
                f"{kind} dataset: column {col!r} of {params.path} has values beyond the "
                f"float32 range (|x| > {FLOAT32_MAX:.3g}): {_cells(frame, col, huge)}; "
                f"rescale the column (e.g. take its log)"
            )
    return features


def _numeric_features(
    kind: str, frame: Any, features: list[str], params: TableParams
) -> list[str]:
    """``features`` without the columns holding text, which are refused unless opted out.

    Dropping is deliberate only when the user asked for it: default features
    with ``drop_non_numeric: true`` (each column left out is logged). A listed
    feature holding text is always refused.
    """
    kept = []
    for col in features:
        bad = _not_numeric(frame, col)
        if not bad.any():
            kept.append(col)
            continue
        if params.features is None and params.drop_non_numeric:
            log.warning(
                "%s dataset: column %r of %s left out of the features: %d cells hold text "
                "(%s) (drop_non_numeric: true)",
                kind, col, params.path, int(bad.sum()), _cells(frame, col, bad),
            )
            continue
        fix = (
            "fix those cells or leave the column out of dataset.features"
            if params.features is not None
            else "fix those cells, list the feature columns in dataset.features, or set "
            "dataset.drop_non_numeric: true to leave such columns out"
        )
        raise DataSourceError(
            f"{kind} dataset: column {col!r} of {params.path} is not numeric: "
            f"{int(bad.sum())} of {len(bad)} cells hold text ({_cells(frame, col, bad)}); {fix}"
        )
    if params.features is None and len(kept) < len(features):
        log.info("%s dataset: features of %s: %s", kind, params.path, ", ".join(kept))
    return kept


def _target(kind: str, frame: Any, params: TableParams) -> tuple[np.ndarray, tuple[str, ...]]:
    """Integer codes (classification, classes sorted) or float targets (regression)."""
    column = frame[params.target]
    if params.task == "regression":
        bad = _not_numeric(frame, params.target)
        if bad.any():
            raise DataSourceError(
                f"{kind} dataset: target column {params.target!r} of {params.path} is not "
                f"numeric ({_cells(frame, params.target, bad)}) under task: regression; "
                f"set dataset.task: classification for class labels"
            )
        return column.to_numpy(dtype=np.float64), ()
    _check_classes(kind, frame, params)
    classes = sorted(column.unique(), key=str)
    codes = {c: i for i, c in enumerate(classes)}
    return column.map(codes).to_numpy(dtype=np.int64), tuple(str(c) for c in classes)


def _check_classes(kind: str, frame: Any, params: TableParams) -> None:
    """A classification target needs 2+ classes, and class labels rather than measurements.

    Non-integer numbers, or more distinct values than half the rows, are a
    continuous target (or an id column), not classes.
    """
    column, where = frame[params.target], f"target column {params.target!r} of {params.path}"
    distinct = column.unique()
    if len(distinct) < 2:
        raise DataSourceError(
            f"{kind} dataset: {where} has one class ({distinct[0]!r} in all {len(column)} "
            f"rows); a classifier needs two or more"
        )
    if column.dtype.kind == "f":
        values = column.to_numpy(dtype=np.float64)
        fractional = values != np.round(values)
        if fractional.any():
            raise DataSourceError(
                f"{kind} dataset: {where} holds non-integer numbers "
                f"({_cells(frame, params.target, fractional)}) under task: classification; "
                f"set dataset.task: regression"
            )
    if len(distinct) > max(2, len(column) // 2):
        raise DataSourceError(
            f"{kind} dataset: {where} has {len(distinct)} distinct values in {len(column)} "
            f"rows: a continuous target or an id column, not classes; set dataset.task: "
            f"regression, or name the class column in dataset.target"
        )


def _as_numbers(column: Any) -> Any:
    """A feature column as numbers (checked numeric before; empty cells become NaN)."""
    import pandas as pd

    return pd.to_numeric(column, errors="coerce")


def _incomplete(frame: Any, columns: list[str]) -> dict[str, np.ndarray]:
    """Per column, which rows hold no usable value: empty (NaN/None) or, if numeric, infinite."""
    flags: dict[str, np.ndarray] = {}
    for col in columns:
        values = frame[col]
        bad = values.isna().to_numpy(dtype=bool, copy=True)
        if values.dtype.kind in "biuf":
            bad |= ~np.isfinite(values.to_numpy(dtype=np.float64))
        elif values.dtype.kind == "O":  # numbers held as objects: "inf" is no value either
            parsed = _as_numbers(values).to_numpy(dtype=np.float64)
            bad |= np.isinf(parsed)
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
    return frame[~drop], int(drop.sum())  # the file's row labels stay, for error messages


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
    y, classes = _target(kind, frame, params)
    x = frame[features].apply(_as_numbers).to_numpy(dtype=np.float64)
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

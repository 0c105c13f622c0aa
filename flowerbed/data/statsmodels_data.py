"""Real tables and time series bundled with statsmodels (optional extra ``statsmodels``).

Tables (``engel``, ``randhie``, ``fair``, ``star98``) are regression tasks split
at random. Time series (``sunspots``, ``co2``, ``nile``, ``elnino``,
``macrodata``) become supervised windows: predict the value ``horizon`` steps
after the last ``window`` values; the split is chronological (test = the last
``test_fraction`` of targets) and scaling uses the training period only.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from pydantic import Field

from flowerbed.core.registry import Params
from flowerbed.data.base import Dataset, DatasetMeta, require
from flowerbed.data.extras import register_with_extra
from flowerbed.data.sklearn_data import SplitParams, split_and_scale


def _module(name: str) -> Any:
    """The ``statsmodels.datasets.<name>`` module (lazy import, pip hint when missing)."""
    require("statsmodels.datasets", "statsmodels", name)
    return require(f"statsmodels.datasets.{name}", "statsmodels", name)


def _meta(name: str, num_features: int, feature_names: tuple[str, ...]) -> DatasetMeta:
    """Regression metadata; source (title) and license (copyright note) from statsmodels."""
    module = _module(name)
    return DatasetMeta(
        name=name, task="regression", num_features=num_features, feature_names=feature_names,
        source=f"statsmodels.datasets: {module.TITLE.strip()}",
        license=module.COPYRIGHT.strip().splitlines()[0],
    )


# --- regression tables ---------------------------------------------------------------------


def _table(name: str, target: Any, features: Any, params: SplitParams, seed: int) -> Dataset:
    """Regression dataset from a target series and a feature frame."""
    x = np.asarray(features, dtype=np.float64)
    y = np.asarray(target, dtype=np.float64)
    x_tr, x_te, y_tr, y_te = split_and_scale(x, y, params, seed, stratify=False)
    meta = _meta(name, x.shape[1], tuple(str(c) for c in features.columns))
    return Dataset(x_tr, y_tr, x_te, y_te, meta)


def _endog_exog(name: str, params: SplitParams, seed: int) -> Dataset:
    frame = _module(name).load_pandas()
    return _table(name, frame.endog, frame.exog, params, seed)


@register_with_extra("engel", SplitParams, "statsmodels", "statsmodels")
def engel(params: SplitParams, *, seed: int) -> Dataset:
    """Engel food expenditure vs income (235 x 1), the quantile-regression classic."""
    # statsmodels labels income as endog; the classic model is foodexp ~ income.
    frame = _module("engel").load_pandas().data
    return _table("engel", frame["foodexp"], frame[["income"]], params, seed)


@register_with_extra("randhie", SplitParams, "statsmodels", "statsmodels")
def randhie(params: SplitParams, *, seed: int) -> Dataset:
    """RAND health insurance experiment: doctor visits from 9 covariates (20,190 rows)."""
    return _endog_exog("randhie", params, seed)


@register_with_extra("fair", SplitParams, "statsmodels", "statsmodels")
def fair(params: SplitParams, *, seed: int) -> Dataset:
    """Fair (1978) affairs survey: time in affairs from 8 covariates (6,366 rows)."""
    return _endog_exog("fair", params, seed)


@register_with_extra("star98", SplitParams, "statsmodels", "statsmodels")
def star98(params: SplitParams, *, seed: int) -> Dataset:
    """STAR98 California schools: share of pupils above the maths median (303 x 20)."""
    frame = _module("star98").load_pandas()
    above, below = frame.endog["NABOVE"], frame.endog["NBELOW"]
    return _table("star98", above / (above + below), frame.exog, params, seed)


# --- time series as supervised windows -----------------------------------------------------


class SeriesParams(Params):
    """A univariate series turned into (last ``window`` values -> value ``horizon`` later)."""

    window: int = Field(8, ge=1, description="number of past values used as features")
    horizon: int = Field(1, ge=1, description="steps ahead of the last window value")
    test_fraction: float = Field(0.2, gt=0, lt=1, description="last share of targets")
    difference: bool = Field(False, description="model first differences of the series")
    standardize: bool = Field(True, description="z-score with the training period's stats")


MacroColumn = Literal[
    "realgdp", "realcons", "realinv", "realgovt", "realdpi", "cpi", "m1",
    "tbilrate", "unemp", "pop", "infl", "realint",
]


class MacroParams(SeriesParams):
    """Windows over one column of the US quarterly macro data."""

    column: MacroColumn = "infl"


def supervised_windows(
    series: np.ndarray, window: int, horizon: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All windows of a series: inputs, targets and each target's time index.

    Examples
    --------
    >>> x, y, t = supervised_windows(np.arange(6.0), window=2, horizon=1)
    >>> x.tolist(), y.tolist(), t.tolist()
    ([[0.0, 1.0], [1.0, 2.0], [2.0, 3.0], [3.0, 4.0]], [2.0, 3.0, 4.0, 5.0], [2, 3, 4, 5])
    """
    n = len(series) - window - horizon + 1
    if n < 2:
        raise ValueError(f"series of length {len(series)} is too short for window={window}")
    starts = np.arange(n)
    x = series[starts[:, None] + np.arange(window)]
    target_index = starts + window + horizon - 1
    return x, series[target_index], target_index


def series_dataset(name: str, series: np.ndarray, params: SeriesParams) -> Dataset:
    """Chronological train/test windows of ``series`` with training-period scaling."""
    s = np.asarray(series, dtype=np.float64)
    if params.difference:
        s = np.diff(s)
    cut = round(len(s) * (1 - params.test_fraction))
    if params.standardize:
        mean, std = s[:cut].mean(), s[:cut].std() or 1.0
        s = (s - mean) / std
    x, y, t = supervised_windows(s, params.window, params.horizon)
    train = t < cut
    if train.all() or not train.any():
        raise ValueError(f"{name}: test_fraction leaves an empty train or test split")
    names = tuple(f"t-{params.window - i}" for i in range(params.window))
    meta = _meta(name, params.window, names)
    return Dataset(
        x[train].astype(np.float32), y[train], x[~train].astype(np.float32), y[~train], meta
    )


@register_with_extra("sunspots", SeriesParams, "statsmodels", "statsmodels")
def sunspots(params: SeriesParams, *, seed: int) -> Dataset:
    """Yearly sunspot activity 1700-2008 (309 values) as next-value windows."""
    del seed
    frame = _module("sunspots").load_pandas().data
    return series_dataset("sunspots", frame["SUNACTIVITY"].to_numpy(), params)


@register_with_extra("co2", SeriesParams, "statsmodels", "statsmodels")
def co2(params: SeriesParams, *, seed: int) -> Dataset:
    """Mauna Loa weekly CO2 1958-2001 (2,284 values, gaps interpolated) as windows."""
    del seed
    frame = _module("co2").load_pandas().data
    series = frame["co2"].interpolate(limit_direction="both").to_numpy()
    return series_dataset("co2", series, params)


@register_with_extra("nile", SeriesParams, "statsmodels", "statsmodels")
def nile(params: SeriesParams, *, seed: int) -> Dataset:
    """Nile yearly flow at Aswan 1871-1970 (100 values) as next-value windows."""
    del seed
    frame = _module("nile").load_pandas().data
    return series_dataset("nile", frame["volume"].to_numpy(), params)


@register_with_extra("elnino", SeriesParams, "statsmodels", "statsmodels")
def elnino(params: SeriesParams, *, seed: int) -> Dataset:
    """El Nino monthly sea surface temperature 1950-2010 (732 values) as windows."""
    del seed
    frame = _module("elnino").load_pandas().data
    return series_dataset("elnino", frame.drop(columns="YEAR").to_numpy().ravel(), params)


@register_with_extra("macrodata", MacroParams, "statsmodels", "statsmodels")
def macrodata(params: MacroParams, *, seed: int) -> Dataset:
    """US quarterly macro data 1959-2009 (203 quarters): windows of one ``column``."""
    del seed
    frame = _module("macrodata").load_pandas().data
    return series_dataset("macrodata", frame[params.column].to_numpy(), params)

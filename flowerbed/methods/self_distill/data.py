"""Synthetic linear-Gaussian regression with a known anisotropic covariance.

The design of the self-distillation experiments (Dang,
Patil, Rinaldo, arXiv 2602.17565): rows ``x ~ N(0, Σ)`` with ``Σ`` AR(1)
(``Σᵢⱼ = rho^|i-j|``), a linear truth ``y = xᵀβ + ε`` with ``ε ~ N(0, sigma²)``, and β a
random direction scaled to a signal energy ``‖β‖²_Σ``. Because Σ, β and sigma are known
(:func:`population`), the exact prediction risk of any coefficient vector is
computable, in distribution or under a shifted test covariance.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pydantic import Field

from flowerbed.core.registry import Params, register
from flowerbed.core.seeds import rng
from flowerbed.data.base import Dataset, DatasetMeta


class SyntheticRidgeParams(Params):
    """Size, covariance, signal and noise of the synthetic regression problem."""

    n_train: int = Field(2000, ge=2)
    n_test: int = Field(2000, ge=1)
    num_features: int = Field(100, ge=1)
    rho: float = Field(0.5, ge=0, lt=1, description="AR(1) correlation of the training Σ")
    test_rho: float | None = Field(
        None, ge=0, lt=1, description="AR(1) correlation of test covariates (None: same as rho)"
    )
    signal: float = Field(1.0, ge=0, description="‖β‖²_Σ, the signal energy")
    noise: float = Field(1.0, ge=0, description="noise standard deviation sigma")


@dataclass(frozen=True)
class Population:
    """The true model: training covariance, test covariance, coefficients, noise sd."""

    cov: np.ndarray
    test_cov: np.ndarray
    beta: np.ndarray
    noise: float


def ar1_covariance(p: int, rho: float) -> np.ndarray:
    """AR(1) covariance ``Σᵢⱼ = rho^|i-j|``.

    Its eigenvalues lie in ``[(1-rho)/(1+rho), (1+rho)/(1-rho)]`` (anisotropic for rho > 0).
    """
    idx = np.arange(p)
    return np.asarray(rho ** np.abs(idx[:, None] - idx[None, :]), dtype=float)


def population(params: SyntheticRidgeParams, seed: int) -> Population:
    """The seeded true model behind :func:`synthetic_ridge`."""
    p = params.num_features
    cov = ar1_covariance(p, params.rho)
    test_rho = params.rho if params.test_rho is None else params.test_rho
    direction = rng(seed, "synthetic-ridge", "beta").standard_normal(p)
    energy = float(direction @ cov @ direction)
    beta = direction * np.sqrt(params.signal / energy) if energy > 0 else direction
    return Population(cov, ar1_covariance(p, test_rho), beta, params.noise)


def _sample(
    pop: Population, cov: np.ndarray, n: int, gen: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    chol = np.linalg.cholesky(cov)
    x = gen.standard_normal((n, len(pop.beta))) @ chol.T
    y = x @ pop.beta + pop.noise * gen.standard_normal(n)
    return x, y


@register("dataset", "synthetic_ridge", params=SyntheticRidgeParams)
def synthetic_ridge(params: SyntheticRidgeParams, *, seed: int) -> Dataset:
    """Gaussian design with AR(1) covariance, linear truth plus noise (known population)."""
    pop = population(params, seed)
    x_tr, y_tr = _sample(pop, pop.cov, params.n_train, rng(seed, "synthetic-ridge", "train"))
    x_te, y_te = _sample(pop, pop.test_cov, params.n_test, rng(seed, "synthetic-ridge", "test"))
    meta = DatasetMeta(
        name="synthetic_ridge",
        task="regression",
        num_features=params.num_features,
        feature_names=tuple(f"x{i}" for i in range(params.num_features)),
        source="synthetic: x ~ N(0, AR(1) Σ), y = xᵀβ + sigmaε",
        license="n/a (generated)",
    )
    return Dataset(x_tr.astype(np.float32), y_tr, x_te.astype(np.float32), y_te, meta)

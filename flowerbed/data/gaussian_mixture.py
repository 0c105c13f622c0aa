"""Synthetic Gaussian-mixture features with class structure (for alignment methods)."""

from __future__ import annotations

import numpy as np
from pydantic import Field

from flowerbed.core.registry import Params, register
from flowerbed.core.seeds import rng
from flowerbed.data.base import Dataset, DatasetMeta


class GaussianMixtureParams(Params):
    """Classes x components isotropic Gaussians in ``dim`` dimensions.

    Component centres are drawn as ``separation * N(0, I) / sqrt(dim)``, so each
    lies about ``separation`` within-component standard deviations from the
    origin; ``separation = 0`` makes the classes indistinguishable.
    """

    num_classes: int = Field(4, ge=2)
    components: int = Field(2, ge=1, description="Gaussian components per class")
    dim: int = Field(16, ge=1)
    separation: float = Field(4.0, ge=0)
    noise: float = Field(1.0, gt=0, description="within-component standard deviation")
    n_train: int = Field(2000, ge=2)
    n_test: int = Field(500, ge=1)


def mixture_centres(params: GaussianMixtureParams, seed: int) -> np.ndarray:
    """Component centres, shape ``(num_classes, components, dim)``."""
    shape = (params.num_classes, params.components, params.dim)
    return params.separation * rng(seed, "gmm-centres").standard_normal(shape) / np.sqrt(params.dim)


def sample_mixture(
    params: GaussianMixtureParams, centres: np.ndarray, n: int, gen: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """``n`` points with balanced classes (labels cycle) and uniform components."""
    y = np.arange(n) % params.num_classes
    comp = gen.integers(0, params.components, size=n)
    x = centres[y, comp] + params.noise * gen.standard_normal((n, params.dim))
    order = gen.permutation(n)
    return x[order].astype(np.float32), y[order].astype(np.int64)


@register("dataset", "gaussian_mixture", params=GaussianMixtureParams)
def gaussian_mixture(params: GaussianMixtureParams, *, seed: int) -> Dataset:
    """Synthetic classes made of Gaussian components (classes x components, dim, separation)."""
    centres = mixture_centres(params, seed)
    x_tr, y_tr = sample_mixture(params, centres, params.n_train, rng(seed, "gmm-train"))
    x_te, y_te = sample_mixture(params, centres, params.n_test, rng(seed, "gmm-test"))
    meta = DatasetMeta(
        name="gaussian_mixture", task="classification", num_features=params.dim,
        num_classes=params.num_classes,
        class_names=tuple(f"class{c}" for c in range(params.num_classes)),
        source="synthetic (flowerbed.data.gaussian_mixture)", license="CC0 (generated)",
    )
    return Dataset(x_tr, y_tr, x_te, y_te, meta)

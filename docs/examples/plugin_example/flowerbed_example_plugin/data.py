"""Dataset ``circle_blobs``: one Gaussian class per point on a circle."""

from __future__ import annotations

import numpy as np
from pydantic import Field

from flowerbed.core.registry import Params, register
from flowerbed.core.seeds import rng
from flowerbed.data.base import Dataset, DatasetMeta


class CircleBlobsParams(Params):
    """Class centres evenly spaced on a circle in the first two of ``dim`` features."""

    num_classes: int = Field(4, ge=2, description="classes, one centre each")
    dim: int = Field(2, ge=2, description="features; those past the first two are pure noise")
    radius: float = Field(3.0, gt=0, description="distance of each centre from the origin")
    noise: float = Field(1.0, gt=0, description="standard deviation around each centre")
    n_train: int = Field(1200, ge=2)
    n_test: int = Field(400, ge=1)


def centres(p: CircleBlobsParams) -> np.ndarray:
    """The class centres, shape ``(num_classes, dim)``."""
    angle = 2 * np.pi * np.arange(p.num_classes) / p.num_classes
    out = np.zeros((p.num_classes, p.dim))
    out[:, 0], out[:, 1] = p.radius * np.cos(angle), p.radius * np.sin(angle)
    return out


def sample(p: CircleBlobsParams, n: int, gen: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``n`` rows with balanced, shuffled labels."""
    y = gen.permutation(np.arange(n) % p.num_classes)
    x = centres(p)[y] + p.noise * gen.standard_normal((n, p.dim))
    return x.astype(np.float32), y.astype(np.int64)


@register("dataset", "circle_blobs", params=CircleBlobsParams)
def circle_blobs(params: CircleBlobsParams, *, seed: int) -> Dataset:
    """Gaussian classes around a circle (example plugin)."""
    x_train, y_train = sample(params, params.n_train, rng(seed, "circle_blobs", "train"))
    x_test, y_test = sample(params, params.n_test, rng(seed, "circle_blobs", "test"))
    meta = DatasetMeta(
        name="circle_blobs", task="classification", num_features=params.dim,
        num_classes=params.num_classes,
        class_names=tuple(f"c{k}" for k in range(params.num_classes)),
        source="synthetic (flowerbed-example-plugin)", license="CC0 (generated)",
    )
    return Dataset(x_train, y_train, x_test, y_test, meta)

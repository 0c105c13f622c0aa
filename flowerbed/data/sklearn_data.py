"""Real datasets bundled with scikit-learn (no download ever happens)."""

from __future__ import annotations

import numpy as np
from pydantic import Field
from sklearn import datasets as skd
from sklearn.model_selection import train_test_split

from flowerbed.data.base import Dataset, DatasetMeta
from flowerbed.platform.registry import Params, register
from flowerbed.platform.seeds import derive_seed


class SplitParams(Params):
    """Parameters shared by bundled tabular datasets."""

    test_fraction: float = Field(0.25, gt=0, lt=1)
    standardize: bool = Field(True, description="z-score features with train statistics")


def split_and_scale(
    x: np.ndarray, y: np.ndarray, params: SplitParams, seed: int, stratify: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Seeded (stratified) train/test split, then optional train-statistics scaling."""
    x_tr, x_te, y_tr, y_te = train_test_split(
        x,
        y,
        test_size=params.test_fraction,
        random_state=derive_seed(seed, "train-test-split") % 2**32,
        stratify=y if stratify else None,
    )
    if params.standardize:
        mean, std = x_tr.mean(axis=0), x_tr.std(axis=0)
        std[std == 0] = 1.0
        x_tr, x_te = (x_tr - mean) / std, (x_te - mean) / std
    return x_tr.astype(np.float32), x_te.astype(np.float32), y_tr, y_te


@register("dataset", "digits", params=SplitParams)
def digits(params: SplitParams, *, seed: int) -> Dataset:
    """Handwritten digits 8x8 (1,797 images, 10 classes), bundled with scikit-learn."""
    bunch = skd.load_digits()
    x_tr, x_te, y_tr, y_te = split_and_scale(
        bunch.data, bunch.target.astype(np.int64), params, seed, stratify=True
    )
    meta = DatasetMeta(
        name="digits",
        task="classification",
        num_features=x_tr.shape[1],
        num_classes=10,
        feature_names=tuple(bunch.feature_names),
        class_names=tuple(str(c) for c in bunch.target_names),
        source="scikit-learn load_digits (UCI optical recognition of handwritten digits)",
        license="CC BY 4.0",
        input_shape=(8, 8),
    )
    return Dataset(x_tr, y_tr, x_te, y_te, meta)

"""Real datasets bundled with scikit-learn (no download ever happens)."""

from __future__ import annotations

import numpy as np
from pydantic import Field

from flowerbed.core.registry import Params, register
from flowerbed.core.seeds import derive_seed
from flowerbed.data.base import Dataset, DatasetMeta, Task


class SplitParams(Params):
    """Parameters shared by bundled tabular datasets."""

    test_fraction: float = Field(0.25, gt=0, lt=1)
    standardize: bool = Field(True, description="z-score features with train statistics")


def split_rows(
    n: int, y: np.ndarray | None, test_fraction: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Seeded train/test row indices, stratified by ``y`` when every class has 2+ rows.

    Examples
    --------
    >>> tr, te = split_rows(8, None, 0.25, seed=0)
    >>> len(tr), len(te), sorted(np.concatenate([tr, te]).tolist()) == list(range(8))
    (6, 2, True)
    """
    # scikit-learn only when data is built: validating a scenario must stay light.
    from sklearn.model_selection import train_test_split

    stratify = None
    if y is not None and np.unique(y, return_counts=True)[1].min() >= 2:
        stratify = y
    tr, te = train_test_split(
        np.arange(n),
        test_size=test_fraction,
        random_state=derive_seed(seed, "train-test-split") % 2**32,
        stratify=stratify,
    )
    return tr, te


def standardize(x_tr: np.ndarray, x_te: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Z-score both splits with the training split's per-column mean and std."""
    mean, std = x_tr.mean(axis=0), x_tr.std(axis=0)
    std = np.where(std == 0, 1.0, std)
    return (x_tr - mean) / std, (x_te - mean) / std


def split_and_scale(
    x: np.ndarray, y: np.ndarray, params: SplitParams, seed: int, stratify: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Seeded (stratified) train/test split, then optional train-statistics scaling."""
    tr, te = split_rows(len(y), y if stratify else None, params.test_fraction, seed)
    x_tr, x_te = x[tr], x[te]
    if params.standardize:
        x_tr, x_te = standardize(x_tr, x_te)
    return x_tr.astype(np.float32), x_te.astype(np.float32), y[tr], y[te]


def _bundled(
    loader: str,
    params: SplitParams,
    seed: int,
    meta: dict[str, object],
) -> Dataset:
    """Split the ``Bunch`` of ``sklearn.datasets.<loader>()`` and attach metadata.

    ``meta`` holds the remaining :class:`DatasetMeta` fields.
    """
    from sklearn import datasets as skd

    bunch = getattr(skd, loader)()
    task: Task = meta["task"]  # type: ignore[assignment]
    classify = task == "classification"
    y = bunch.target.astype(np.int64 if classify else np.float64)  # type: ignore[attr-defined]
    x_tr, x_te, y_tr, y_te = split_and_scale(
        np.asarray(bunch.data, dtype=np.float64), y, params, seed, stratify=classify  # type: ignore[attr-defined]
    )
    names = getattr(bunch, "target_names", ()) if classify else ()
    info = DatasetMeta(
        num_features=x_tr.shape[1],
        num_classes=len(names) if classify else 0,
        feature_names=tuple(str(f) for f in bunch.feature_names),  # type: ignore[attr-defined]
        class_names=tuple(str(c) for c in names),
        **meta,  # type: ignore[arg-type]
    )
    return Dataset(x_tr, y_tr, x_te, y_te, info)


@register("dataset", "digits", params=SplitParams)
def digits(params: SplitParams, *, seed: int) -> Dataset:
    """Handwritten digits 8x8 (1,797 images, 10 classes), bundled with scikit-learn."""
    return _bundled("load_digits", params, seed, {
        "name": "digits", "task": "classification", "input_shape": (8, 8),
        "source": "scikit-learn load_digits (UCI optical recognition of handwritten digits)",
        "license": "CC BY 4.0",
    })


@register("dataset", "breast_cancer", params=SplitParams)
def breast_cancer(params: SplitParams, *, seed: int) -> Dataset:
    """Breast Cancer Wisconsin diagnostic (569 x 30, malignant/benign), from scikit-learn."""
    return _bundled("load_breast_cancer", params, seed, {
        "name": "breast_cancer", "task": "classification",
        "source": "scikit-learn load_breast_cancer (UCI Breast Cancer Wisconsin, Diagnostic)",
        "license": "CC BY 4.0",
    })


@register("dataset", "wine", params=SplitParams)
def wine(params: SplitParams, *, seed: int) -> Dataset:
    """Wine recognition (178 x 13 chemical measurements, 3 cultivars), from scikit-learn."""
    return _bundled("load_wine", params, seed, {
        "name": "wine", "task": "classification",
        "source": "scikit-learn load_wine (UCI Wine)", "license": "CC BY 4.0",
    })


@register("dataset", "iris", params=SplitParams)
def iris(params: SplitParams, *, seed: int) -> Dataset:
    """Fisher's iris (150 x 4, 3 species), from scikit-learn."""
    return _bundled("load_iris", params, seed, {
        "name": "iris", "task": "classification",
        "source": "scikit-learn load_iris (Fisher 1936, UCI Iris)", "license": "CC BY 4.0",
    })


@register("dataset", "diabetes", params=SplitParams)
def diabetes(params: SplitParams, *, seed: int) -> Dataset:
    """Diabetes progression regression (442 x 10, Efron et al. 2004), from scikit-learn."""
    return _bundled("load_diabetes", params, seed, {
        "name": "diabetes", "task": "regression",
        "source": "scikit-learn load_diabetes (Efron, Hastie, Johnstone, Tibshirani 2004)",
        "license": "BSD-3-Clause (as distributed with scikit-learn)",
    })

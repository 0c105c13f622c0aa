"""Dataset and partition containers shared by every data source and partitioner."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

Task = Literal["classification", "regression", "language_modeling"]

#: A per-client input transform: rows of ``x`` (full width) in, same shape out.
Transform = Callable[[np.ndarray], np.ndarray]


class DataSourceError(ValueError):
    """Data that cannot be loaded: a missing file, column or system package.

    The message is one line naming what is missing and how to fix it.
    """


class MissingExtraError(ImportError):
    """An optional Python package a dataset needs is not installed (message: the pip command)."""


def require(module: str, package: str, dataset: str) -> object:
    """Import ``module`` for ``dataset`` or raise :class:`MissingExtraError` with the pip hint.

    Examples
    --------
    >>> require("numpy", "numpy", "doc").__name__
    'numpy'
    """
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingExtraError(
            f"dataset {dataset!r} needs {package}: pip install {package}"
        ) from None


@dataclass(frozen=True)
class DatasetMeta:
    """What a learner needs to know about a dataset without seeing the data.

    Attributes
    ----------
    name
        Registry name of the dataset.
    task
        ``classification`` (integer labels ``0..num_classes-1``), ``regression``,
        or ``language_modeling`` (``x`` holds int64 token ids, one window of
        ``num_features`` tokens per row, inputs and next-token targets from the
        same row; ``y`` is unused zeros; ``num_classes`` is the vocabulary size).
    num_features
        Width of ``x`` (after flattening images).
    num_classes
        Number of classes (0 for regression).
    feature_names, class_names
        Human-readable names (may be empty).
    source, license
        Where the data comes from and under which terms.
    input_shape
        Shape of one example before flattening (e.g. ``(8, 8)``).
    """

    name: str
    task: Task
    num_features: int
    num_classes: int = 0
    feature_names: tuple[str, ...] = ()
    class_names: tuple[str, ...] = ()
    source: str = ""
    license: str = ""
    input_shape: tuple[int, ...] = ()


@dataclass(frozen=True)
class Dataset:
    """Train and test splits as numpy arrays, plus metadata.

    ``x_*`` are ``float32`` arrays of shape ``(n, num_features)`` (``int64``
    token ids for ``language_modeling``); ``y_*`` are ``int64`` labels for
    classification and ``float64`` targets for regression.
    ``groups_train`` optionally holds a natural client id per training example.

    Text datasets keep their raw text beside the arrays: ``text_*[i]`` is the
    input text of row ``i`` and ``refs_*[i]`` (word-pair tasks) every acceptable
    output for it. ``None`` for datasets without text.
    """

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    meta: DatasetMeta
    groups_train: np.ndarray | None = None
    text_train: tuple[str, ...] | None = None
    text_test: tuple[str, ...] | None = None
    refs_train: tuple[tuple[str, ...], ...] | None = None
    refs_test: tuple[tuple[str, ...], ...] | None = None


@dataclass(frozen=True)
class Partition:
    """How the training split is divided among clients.

    Attributes
    ----------
    indices
        One index array into ``Dataset.x_train`` per client.
    columns
        Optional per-client feature columns (vertical / feature-subset splits);
        ``None`` means every client sees every column.
    transforms
        Optional per-client input transform (domain shift), applied to the
        client's rows (full width, before ``columns``) for its local train and
        test data and for the pooled centralized data; ``None`` entries, or
        ``None`` for the list, mean no transform.
    domains
        Optional one-line description of each client's domain (natural id,
        transform and magnitude), shown by ``flowerbed inspect``.
    """

    indices: list[np.ndarray]
    columns: list[np.ndarray] | None = None
    transforms: list[Transform | None] | None = None
    domains: list[str] | None = None

    @property
    def sizes(self) -> list[int]:
        """Number of training examples per client."""
        return [len(i) for i in self.indices]

    def transform(self, pid: int) -> Transform | None:
        """Client ``pid``'s input transform, or ``None`` for the identity."""
        return None if self.transforms is None else self.transforms[pid]


@dataclass(frozen=True)
class ClientData:
    """One client's local data, as its learner sees it.

    ``x_train``/``x_test`` already hold only the client's columns when the
    partition restricts features; ``columns`` says which ones they are.
    ``text_*``/``refs_*`` are the client's rows of the dataset's text side
    table (same order as ``y_*``), ``None`` when the dataset has no text.
    """

    partition_id: int
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    meta: DatasetMeta
    columns: np.ndarray | None = None
    extra: dict[str, object] = field(default_factory=dict)
    text_train: tuple[str, ...] | None = None
    text_test: tuple[str, ...] | None = None
    refs_train: tuple[tuple[str, ...], ...] | None = None
    refs_test: tuple[tuple[str, ...], ...] | None = None

    @property
    def num_train(self) -> int:
        """Number of local training examples."""
        return len(self.y_train)

    def column_ids(self) -> np.ndarray:
        """Global indices (int64) of the client's feature columns: all of them unless restricted."""
        if self.columns is None:
            return np.arange(self.x_train.shape[1], dtype=np.int64)
        return np.asarray(self.columns, dtype=np.int64)

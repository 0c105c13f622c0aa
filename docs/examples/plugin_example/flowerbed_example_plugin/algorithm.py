"""Nearest-centroid classification from class sums: the maths, with no Flower in sight.

Class sums and counts add up across clients, so the centroids computed from
the clients' summed statistics equal the centroids of the pooled rows exactly.
"""

from __future__ import annotations

import numpy as np


def class_sums(x: np.ndarray, y: np.ndarray, num_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-class sums of the rows, shape ``(num_classes, d)``, and per-class counts."""
    sums = np.zeros((num_classes, x.shape[1]))
    np.add.at(sums, y, x)
    return sums, np.bincount(y, minlength=num_classes).astype(float)


def centroids(sums: np.ndarray, counts: np.ndarray, shrinkage: float = 0.0) -> np.ndarray:
    """Class means, each pulled towards the overall mean by ``shrinkage`` (0: none, 1: all).

    A class no row belongs to gets the overall mean.
    """
    overall = sums.sum(axis=0) / max(counts.sum(), 1.0)
    means = np.where(counts[:, None] > 0, sums / np.maximum(counts, 1.0)[:, None], overall)
    return (1 - shrinkage) * means + shrinkage * overall


def predict(centres: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The class of the nearest centroid (Euclidean) for every row."""
    distances = ((x[:, None, :] - centres[None, :, :]) ** 2).sum(axis=2)
    return np.asarray(distances.argmin(axis=1))


def accuracy(centres: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
    """Share of rows whose nearest centroid is their class (0 rows: 0)."""
    return float((predict(centres, x) == y).mean()) if len(y) else 0.0

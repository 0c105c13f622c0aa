"""Poisoning attacks on federated training: the pure maths of what a malicious client sends.

Updates are weights relative to the global model, ``delta = w_local - w``;
every function takes and returns ``dict[str, np.ndarray]`` of weights.

* Label flipping, ``y -> C - 1 - y`` (the "label flipping attack" of Fang
  et al., 2020, "Local Model Poisoning Attacks to Byzantine-Robust Federated
  Learning", https://arxiv.org/abs/1911.11815).
* Sign flipping with scaling, ``w - s * delta`` (the reversed-gradient /
  "bit flip" attack of Damaskinos et al., 2018 and Karimireddy et al., 2021;
  ``s > 1`` is the scaled variant).
* Gaussian updates, ``w + N(0, std^2)`` per coordinate (the Gaussian
  Byzantine workers of Blanchard et al., 2017, "Machine Learning with
  Adversaries: Byzantine Tolerant Gradient Descent", NeurIPS).
* "A little is enough" (Baruch, Baruch and Goldberg, 2019, NeurIPS,
  https://arxiv.org/abs/1902.06156), Algorithm 1: every malicious client
  sends ``w + mu - z * sigma``, ``mu`` and ``sigma`` the per-coordinate mean
  and standard deviation of the honest updates the attackers can see, and
  ``z = z_max = Phi^-1((n - s) / n)``, ``s = floor(n / 2 + 1) - m``, for ``n``
  clients of which ``m`` are malicious.

Only floating-point arrays are attacked; integer arrays (counters such as
BatchNorm's ``num_batches_tracked``) keep the client's own honest values.

Examples
--------
>>> import numpy as np
>>> g, w = {"a": np.array([1.0, 2.0])}, {"a": np.array([2.0, 1.0])}
>>> sign_flip(g, w, scale=2.0)["a"].tolist()
[-1.0, 4.0]
>>> flip_labels(np.array([0, 3, 9]), num_classes=10).tolist()
[9, 6, 0]
>>> round(alie_z(num_clients=10, num_malicious=2), 4)
0.2533
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist

import numpy as np

Arrays = dict[str, np.ndarray]


def flip_labels(y: np.ndarray, num_classes: int) -> np.ndarray:
    """Labels ``y -> num_classes - 1 - y`` (same dtype); every label moves unless C is odd."""
    labels = np.asarray(y)
    if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
        raise ValueError(f"labels outside 0..{num_classes - 1}: cannot flip them")
    return (num_classes - 1 - labels).astype(labels.dtype, copy=False)


def _attacked(value: np.ndarray) -> bool:
    return np.issubdtype(np.asarray(value).dtype, np.floating)


def sign_flip(global_arrays: Arrays, local_arrays: Arrays, scale: float = 1.0) -> Arrays:
    """``w - scale * (w_local - w)``: the client's own update, reversed and scaled."""
    out: Arrays = {}
    for key, local in local_arrays.items():
        if not _attacked(local):
            out[key] = local
            continue
        g = np.asarray(global_arrays[key], dtype=np.float64)
        delta = np.asarray(local, dtype=np.float64) - g
        out[key] = (g - scale * delta).astype(local.dtype)
    return out


def gaussian_update(
    global_arrays: Arrays, local_arrays: Arrays, std: float, rng: np.random.Generator
) -> Arrays:
    """``w + N(0, std^2)`` per coordinate: an update that is pure noise (keys in local order)."""
    out: Arrays = {}
    for key, local in local_arrays.items():
        if not _attacked(local):
            out[key] = local
            continue
        g = np.asarray(global_arrays[key], dtype=np.float64)
        out[key] = (g + rng.normal(0.0, std, size=g.shape)).astype(local.dtype)
    return out


def alie_z(num_clients: int, num_malicious: int) -> float:
    """Baruch et al.'s ``z_max = Phi^-1((n - s) / n)`` with ``s = floor(n / 2 + 1) - m``.

    ``s`` is how many honest clients the attackers need on their side to
    hold a majority; ``z_max`` is the largest shift that keeps the malicious
    value closer to the mean than that many honest ones, for normal updates.
    """
    n, m = num_clients, num_malicious
    if not 0 < m < n:
        raise ValueError(f"alie needs 0 < malicious < clients, got {m} of {n}")
    s = math.floor(n / 2 + 1) - m
    if s <= 0:
        raise ValueError(
            f"alie: {m} malicious of {n} clients are a majority already (s = {s} <= 0)"
        )
    return NormalDist().inv_cdf((n - s) / n)


def alie_update(
    global_arrays: Arrays, honest_arrays: Sequence[Arrays], z: float, own: Arrays
) -> Arrays:
    """``w + mu - z * sigma`` over the honest updates ``honest_arrays - w`` (population std).

    ``own`` is the sending client's honest reply: its keys, order and dtypes
    shape the result, and its non-float arrays pass through unchanged.
    """
    if not honest_arrays:
        raise ValueError("alie needs at least one honest update")
    out: Arrays = {}
    for key, local in own.items():
        if not _attacked(local):
            out[key] = local
            continue
        g = np.asarray(global_arrays[key], dtype=np.float64)
        deltas = np.stack([np.asarray(a[key], dtype=np.float64) - g for a in honest_arrays])
        mu, sigma = deltas.mean(axis=0), deltas.std(axis=0)
        out[key] = (g + mu - z * sigma).astype(local.dtype)
    return out

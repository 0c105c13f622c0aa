"""Heads for one-shot FL on frozen features: O-FedAvg linear head, probability ensemble, prototypes.

The downstream pipelines SLOT-Align (arXiv 2606.16655) is combined with:
one-shot FedAvg (O-FedAvg) of a linear head trained locally with SGD, as in the
authors' ``run_ofedavg.py`` (optionally with their "double softmax" loss, i.e.
cross-entropy applied to softmax outputs); an ensemble of the client heads
(averaged class probabilities); and a nearest-class-mean (prototype) classifier
built from per-class feature sums. Pure numpy; the optional per-epoch feature transport
(SLOT-Align's frozen layer in front of the head) is applied here.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from flowerbed.methods.slot_align.algorithm import transport

Loss = Literal["standard_ce", "double_softmax"]


def init_linear_head(dim: int, num_classes: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """PyTorch-default ``nn.Linear`` init: ``U(-1/sqrt(dim), 1/sqrt(dim))`` for W and c."""
    gen = np.random.default_rng(seed)
    bound = 1 / np.sqrt(dim)
    return (gen.uniform(-bound, bound, (num_classes, dim)),
            gen.uniform(-bound, bound, num_classes))


def softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise softmax, numerically stable."""
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    out: np.ndarray = e / e.sum(axis=1, keepdims=True)
    return out


def logit_gradient(logits: np.ndarray, y: np.ndarray, loss: Loss) -> np.ndarray:
    """d(mean loss)/d(logits) for cross-entropy on the logits or on their softmax."""
    onehot = np.eye(logits.shape[1])[y]
    p = softmax(logits)
    if loss == "standard_ce":
        return (p - onehot) / len(y)
    g = softmax(p) - onehot  # gradient w.r.t. p of CE(softmax(p))
    return p * (g - np.sum(p * g, axis=1, keepdims=True)) / len(y)


def train_linear_head(
    w: np.ndarray, c: np.ndarray, z: np.ndarray, y: np.ndarray, *, seed: int,
    taus: list[float], a: np.ndarray | None = None, b: np.ndarray | None = None,
    lr: float = 1e-3, momentum: float = 0.9, weight_decay: float = 1e-5,
    batch_size: int = 64, loss: Loss = "double_softmax",
) -> tuple[np.ndarray, np.ndarray]:
    """SGD (PyTorch semantics) for ``len(taus)`` epochs on ``transport(z, a, b, taus[e])``.

    With ``a is None`` (no map) the features are used as they are.
    """
    w, c = w.copy(), c.copy()
    vw, vc = np.zeros_like(w), np.zeros_like(c)
    gen = np.random.default_rng(seed)
    for tau in taus:
        feats = z if a is None or b is None else transport(z, a, b, tau)
        for idx in np.array_split(gen.permutation(len(y)), max(1, -(-len(y) // batch_size))):
            g = logit_gradient(feats[idx] @ w.T + c, y[idx], loss)
            vw = momentum * vw + g.T @ feats[idx] + weight_decay * w
            vc = momentum * vc + g.sum(axis=0) + weight_decay * c
            w, c = w - lr * vw, c - lr * vc
    return w, c


def accuracy(logits: np.ndarray, y: np.ndarray) -> float:
    """Share of rows whose arg-max logit is the label."""
    return float(np.mean(np.argmax(logits, axis=1) == y)) if len(y) else float("nan")


def ensemble_probs(ws: np.ndarray, cs: np.ndarray, z: np.ndarray) -> np.ndarray:
    """Mean over heads ``(K, C, d)``, ``(K, C)`` of their softmax outputs on ``z``.

    Probabilities, not logits: the mean of linear heads' logits is the logit of the
    mean head, i.e. equal-weight O-FedAvg again.
    """
    logits = np.einsum("kcd,nd->knc", ws, z) + cs[:, None, :]
    e = np.exp(logits - logits.max(axis=2, keepdims=True))
    out: np.ndarray = (e / e.sum(axis=2, keepdims=True)).mean(axis=0)
    return out


def class_sums(z: np.ndarray, y: np.ndarray, num_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-class feature sums ``(C, d)`` and counts ``(C,)``."""
    sums = np.zeros((num_classes, z.shape[1]))
    np.add.at(sums, y, z)
    return sums, np.bincount(y, minlength=num_classes).astype(np.float64)


def prototype_logits(sums: np.ndarray, counts: np.ndarray, z: np.ndarray) -> np.ndarray:
    """Negative squared distances to the class means; classes nobody holds score ``-inf``."""
    seen = counts > 0
    protos = sums[seen] / counts[seen, None]
    out = np.full((len(z), len(counts)), -np.inf)
    out[:, seen] = -(np.sum(z**2, axis=1, keepdims=True) - 2 * z @ protos.T
                     + np.sum(protos**2, axis=1))
    return out

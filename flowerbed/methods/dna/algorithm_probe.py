"""DNA's detector: a logistic probe on the forgery-discriminative units alone (arXiv 2601.22515).

The probe reads only the selected units of the chosen layer, standardised with the
pooled mean and standard deviation (:func:`flowerbed.methods.dna.algorithm.standardisation`,
so a federation standardises exactly as the pooled data would), and is L2-regularised
logistic regression with scikit-learn's objective ``C Σ log-loss + ½‖w‖²``
(the spec's C = 1). :func:`fit_logistic` warm-starts from given weights and stops
after ``max_iter`` L-BFGS iterations, which is one client's local step under FedAvg.
:func:`finetune_tail` is the fine-tuning baseline: the last blocks of the backbone
plus a new linear layer, trained on the same shots.

Examples
--------
>>> x = np.array([[-2.0], [-1.0], [1.0], [2.0]]); y = np.array([0, 0, 1, 1])
>>> det = Detector(np.array([3]), np.zeros(1), np.ones(1), *fit_logistic(x, y))
>>> det.input_dim, bool(det.proba(np.array([[0, 0, 0, 5.0]]))[0] > 0.5)
(1, True)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


def _objective(theta: np.ndarray, x: np.ndarray, y: np.ndarray, c: float
               ) -> tuple[float, np.ndarray]:
    """``C Σ log(1 + exp(-ỹ z)) + ½‖w‖²`` (``ỹ = ±1``, bias unpenalised) and its gradient."""
    w, b = theta[:-1], theta[-1]
    z = x @ w + b
    sign = 2.0 * y - 1.0
    margin = sign * z
    loss = c * float(np.sum(np.logaddexp(0.0, -margin))) + 0.5 * float(w @ w)
    g = -c * sign * np.exp(-np.logaddexp(0.0, margin))
    return loss, np.concatenate([x.T @ g + w, [g.sum()]])


def fit_logistic(
    x: np.ndarray,
    y: np.ndarray,
    c: float = 1.0,
    w0: np.ndarray | None = None,
    b0: float = 0.0,
    max_iter: int = 500,
) -> tuple[np.ndarray, float]:
    """Weights and bias of L2 logistic regression (labels 0/1) by L-BFGS from ``(w0, b0)``."""
    from scipy.optimize import minimize

    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    start = np.concatenate([np.zeros(x.shape[1]) if w0 is None else np.asarray(w0, float), [b0]])
    res = minimize(_objective, start, args=(x, y, c), jac=True, method="L-BFGS-B",
                   options={"maxiter": max_iter, "gtol": 1e-8, "ftol": 1e-12})
    return np.asarray(res.x[:-1]), float(res.x[-1])


def newton_logistic(x: np.ndarray, y: np.ndarray, c: float = 1.0, tol: float = 1e-10,
                    max_iter: int = 100) -> tuple[np.ndarray, float]:
    """The same L2 logistic regression as :func:`fit_logistic`, by damped Newton steps.

    For a few rows and columns (the Hessian is ``(d + 1)²``): quadratic convergence to
    ``tol`` on the gradient's largest entry.
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    xb = np.hstack([x, np.ones((len(x), 1))])
    theta = np.zeros(xb.shape[1])
    reg = np.r_[np.ones(x.shape[1]), 0.0]
    loss, grad = _objective(theta, x, y, c)
    for _ in range(max_iter):
        if np.abs(grad).max() < tol:
            break
        p = sigmoid(xb @ theta)
        hess = (xb * (c * p * (1.0 - p))[:, None]).T @ xb + np.diag(reg)
        step = np.linalg.solve(hess + 1e-12 * np.eye(len(theta)), grad)
        t = 1.0
        while t > 1e-10:
            new_loss, new_grad = _objective(theta - t * step, x, y, c)
            if new_loss <= loss - 1e-4 * t * float(grad @ step):
                break
            t /= 2.0
        theta, loss, grad = theta - t * step, new_loss, new_grad
    return theta[:-1], float(theta[-1])


def loo_auc(x: np.ndarray, y: np.ndarray, c: float = 1.0) -> float:
    """Leave-one-out AUC of the L2 logistic probe on rows ``x`` (labels 0/1).

    Each row's logit comes from the probe fitted on every other row; the AUC of those
    held-out logits scores the features (layer localisation by probe quality). The
    objective only sees the rows through their inner products, so the fits run on the
    rows' coordinates in their own span (``x = U Σ Vᵀ``, coordinates ``U Σ``, at most
    ``n`` columns) by Newton steps: the same logits as in the full space, far faster
    when units outnumber images.
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y)
    u, sv, _ = np.linalg.svd(x, full_matrices=False)
    keep_dims = sv > sv.max() * 1e-12 if sv.size else sv > 0
    coords = u[:, keep_dims] * sv[keep_dims]
    held = np.empty(len(x))
    keep = np.ones(len(x), dtype=bool)
    for i in range(len(x)):
        keep[i] = False
        w, b = newton_logistic(coords[keep], y[keep], c)
        held[i] = float(coords[i] @ w + b)
        keep[i] = True
    return auc(held, y)


def sigmoid(z: np.ndarray) -> np.ndarray:
    """Numerically stable logistic function."""
    return np.asarray(np.exp(-np.logaddexp(0.0, -np.asarray(z, dtype=np.float64))))


@dataclass(frozen=True)
class Detector:
    """A probe on chosen units of a layer: ``P(fake) = sigmoid(w · (x[units] - mean) / std + b)``.

    Contract: only the columns ``units`` of the layer's features are read; every
    other unit can take any value without changing the output.
    """

    units: np.ndarray
    mean: np.ndarray
    std: np.ndarray
    w: np.ndarray
    b: float

    @property
    def input_dim(self) -> int:
        """Number of units the probe reads."""
        return len(self.units)

    def inputs(self, x: np.ndarray) -> np.ndarray:
        """The standardised selected units of full-layer features ``x``."""
        return (np.asarray(x)[:, self.units].astype(np.float64) - self.mean) / self.std

    def proba(self, x: np.ndarray, masked: np.ndarray | None = None) -> np.ndarray:
        """``P(fake)`` of layer features ``x``; ``masked`` positions of ``units`` at their mean."""
        z = self.inputs(x)
        if masked is not None:
            z[:, masked] = 0.0
        return sigmoid(z @ self.w + self.b)


def accuracy(p: np.ndarray, y: np.ndarray) -> float:
    """Share of images on the right side of 0.5."""
    return float(np.mean((np.asarray(p) > 0.5) == (np.asarray(y) > 0)))


def auc(p: np.ndarray, y: np.ndarray) -> float:
    """Area under the ROC curve (Mann-Whitney, ties count half); NaN with one class only."""
    from scipy.stats import rankdata

    y = np.asarray(y) > 0
    pos, neg = int(y.sum()), int((~y).sum())
    if pos == 0 or neg == 0:
        return float("nan")
    ranks = rankdata(p)
    return float((ranks[y].sum() - pos * (pos + 1) / 2) / (pos * neg))


def finetune_tail(
    tail: Any,
    x: np.ndarray,
    y: np.ndarray,
    epochs: int,
    lr: float,
    seed: int,
    weight_decay: float = 1e-4,
) -> list[float]:
    """Train ``tail`` (a torch module: inputs at the cut to one logit) on ``(x, y)`` in place.

    Full-batch AdamW on the binary cross-entropy for ``epochs`` steps; batch-norm
    layers stay in eval mode (a few shots cannot estimate their statistics).
    Returns the loss per step.
    """
    import torch

    torch.manual_seed(seed % 2**63)
    params = [p for p in tail.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    xb = torch.as_tensor(np.asarray(x, dtype=np.float32))
    yb = torch.as_tensor(np.asarray(y, dtype=np.float32))
    tail.eval()
    losses = []
    for _ in range(epochs):
        loss = torch.nn.functional.binary_cross_entropy_with_logits(tail(xb).reshape(-1), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses

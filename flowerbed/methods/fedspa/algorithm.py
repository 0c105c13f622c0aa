"""FedSPA: semantic-visual prototype alignment (github.com/eejiarong/FedSPA-main).

A frozen vision-language model gives unit-norm image features ``f`` and class
text features ``T0``. Each client keeps personalised visual prototypes ``P_k``
(``C x D``, the keys of a Tip-Adapter cache whose values are ``I_C``) and trains
them on its few-shot features with

    logits = logit_scale * f T^T + alpha * exp(-beta (1 - f P^T))

(``P`` is never renormalised). The server trains the shared semantic prototypes
``T`` on the uploaded ``(P_k[c], c)`` pairs with InfoNCE (in-batch negatives,
temperature 0.01) plus the "semantic stability" term ``-lam sum(T * T0) / C``
and row-normalises the result. Also here: the baselines' client updates (a
linear head on frozen features, CoOp-style prompt context). The training loop
and the weighted average are :mod:`flowerbed.algorithms.adapter_training`'s,
shared with ManiPT. Pure torch / numpy; no Flower. Each function imports torch itself,
so that the strategy's params (defaulting to :data:`TEMPERATURE`) validate
without it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from flowerbed.algorithms.adapter_training import TrainConfig, fit

if TYPE_CHECKING:
    import torch

#: InfoNCE temperature, hard-coded in the authors' server.
TEMPERATURE = 0.01


def _tensor(x: np.ndarray) -> torch.Tensor:
    import torch

    return torch.as_tensor(np.asarray(x, dtype=np.float32))


def tip_logits(
    f: torch.Tensor, t: torch.Tensor, p: torch.Tensor, alpha: float, beta: float,
    logit_scale: float,
) -> torch.Tensor:
    """``logit_scale * f T^T + alpha * exp(-beta (1 - f P^T))`` (cache values ``I_C``)."""
    import torch

    clip = logit_scale * f @ t.T
    return clip + alpha * torch.exp(-beta * (1.0 - f @ p.T))


def class_sums(f: np.ndarray, y: np.ndarray, num_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-class feature sums ``(C, D)`` (float64) and counts ``(C,)``."""
    sums = np.zeros((num_classes, f.shape[1]))
    np.add.at(sums, y, np.asarray(f, dtype=np.float64))
    return sums, np.bincount(y, minlength=num_classes).astype(np.float64)


def init_prototypes(
    sums: np.ndarray, counts: np.ndarray, t0: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Round-0 prototypes: pooled class means; classes nobody holds fall back to ``T0`` rows.

    Returns ``(P0 as float32, boolean mask of fallback rows)``. The authors' code
    takes the mean of every few-shot feature of the class (and fails when a
    class is absent); summing per-client sums and counts gives the same means.
    """
    missing = counts <= 0
    safe = np.where(missing, 1.0, counts)[:, None]
    p0 = np.where(missing[:, None], t0, sums / safe)
    return p0.astype(np.float32), missing


def train_prototypes(
    p: np.ndarray, t: np.ndarray, f: np.ndarray, y: np.ndarray, cfg: TrainConfig, *,
    alpha: float, beta: float, logit_scale: float,
) -> tuple[np.ndarray, list[float]]:
    """Client update of FedSPA: cross-entropy on Tip logits, only ``P`` trains.

    Returns the new ``P`` (float32, not renormalised) and the per-epoch mean loss.
    """
    import torch
    from torch.nn import functional as F

    p_param = _tensor(p).clone().requires_grad_(True)
    t_fixed, feats, labels = _tensor(t), _tensor(f), torch.as_tensor(y, dtype=torch.long)

    def loss_fn(idx: torch.Tensor) -> torch.Tensor:
        logits = tip_logits(feats[idx], t_fixed, p_param, alpha, beta, logit_scale)
        return F.cross_entropy(logits, labels[idx])

    losses = fit([p_param], loss_fn, len(y), cfg)
    return p_param.detach().numpy().astype(np.float32), losses


def info_nce(
    queries: torch.Tensor, keys: torch.Tensor, temperature: float = TEMPERATURE
) -> torch.Tensor:
    """InfoNCE with in-batch negatives: ``CE(q~ k~^T / temperature, arange(B))``, mean.

    ``q~``, ``k~`` are the row-normalised queries and (positive) keys; row ``i``'s
    negatives are the other rows' keys, so two rows of the same class in one
    batch are false negatives of each other (as in the authors' server).
    """
    import torch
    from torch.nn import functional as F

    q = F.normalize(queries, dim=-1)
    k = F.normalize(keys, dim=-1)
    logits = q @ k.T / temperature
    return F.cross_entropy(logits, torch.arange(len(q)))


def alignment_loss(
    queries: torch.Tensor, t_param: torch.Tensor, labels: torch.Tensor, t0: torch.Tensor,
    lam: float, temperature: float = TEMPERATURE,
) -> torch.Tensor:
    """One batch of the server objective: ``info_nce(P_b, T[c_b]) - lam * sum(T * T0) / C``."""
    reg = -lam * (t_param * t0).sum() / t_param.shape[0]
    return info_nce(queries, t_param[labels], temperature) + reg


def align_text(
    t: np.ndarray, t0: np.ndarray, protos: np.ndarray, labels: np.ndarray, cfg: TrainConfig, *,
    lam: float, temperature: float = TEMPERATURE,
) -> tuple[np.ndarray, dict[str, float]]:
    """Server update of FedSPA: InfoNCE of ``(P_k[c], T[c])`` pairs plus the stability term.

    ``protos`` (``N x D``) are the uploaded prototype rows and ``labels`` their
    classes. Loss per batch: :func:`alignment_loss`.
    Returns the row-normalised ``T`` and diagnostics (mean row norm of
    ``T_param`` before normalising, last epoch's loss).
    """
    import torch
    from torch.nn import functional as F

    t_param = _tensor(t).clone().requires_grad_(True)
    anchor, q = _tensor(t0), _tensor(protos)
    c = torch.as_tensor(labels, dtype=torch.long)

    def loss_fn(idx: torch.Tensor) -> torch.Tensor:
        return alignment_loss(q[idx], t_param, c[idx], anchor, lam, temperature)

    losses = fit([t_param], loss_fn, len(c), cfg)
    raw = t_param.detach()
    info = {"t_param_norm": float(raw.norm(dim=1).mean()),
            "server_loss": losses[-1] if losses else float("nan")}
    return F.normalize(raw, dim=1).numpy().astype(np.float32), info


def train_linear_head(
    w: np.ndarray, b: np.ndarray, f: np.ndarray, y: np.ndarray, cfg: TrainConfig
) -> tuple[np.ndarray, np.ndarray, list[float]]:
    """Linear head ``f W^T + b`` on frozen features, cross-entropy (FedAvg baseline's client)."""
    import torch
    from torch.nn import functional as F

    wp, bp = _tensor(w).clone().requires_grad_(True), _tensor(b).clone().requires_grad_(True)
    feats, labels = _tensor(f), torch.as_tensor(y, dtype=torch.long)

    def loss_fn(idx: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(feats[idx] @ wp.T + bp, labels[idx])

    losses = fit([wp, bp], loss_fn, len(y), cfg)
    return wp.detach().numpy(), bp.detach().numpy(), losses


def train_prompt(
    context: torch.Tensor, text_fn: Callable[[torch.Tensor], torch.Tensor], f: np.ndarray,
    y: np.ndarray, cfg: TrainConfig, logit_scale: float,
) -> tuple[np.ndarray, list[float]]:
    """CoOp context update (PromptFL baseline's client): CE on ``logit_scale * f T(ctx)^T``.

    ``text_fn(ctx)`` returns the ``(C, D)`` unit-norm class features of the
    prompts "[ctx] [class name]." and must be differentiable in ``ctx``.
    """
    import torch
    from torch.nn import functional as F

    ctx = context.detach().clone().float().requires_grad_(True)
    feats, labels = _tensor(f), torch.as_tensor(y, dtype=torch.long)

    def loss_fn(idx: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logit_scale * feats[idx] @ text_fn(ctx).T, labels[idx])

    losses = fit([ctx], loss_fn, len(y), cfg)
    return ctx.detach().numpy(), losses


def accuracy(logits: np.ndarray | torch.Tensor, y: np.ndarray) -> tuple[int, int]:
    """``(correct, total)`` of the argmax of ``logits`` against labels ``y``."""
    import torch

    pred = np.asarray(torch.as_tensor(logits).argmax(dim=1))
    return int((pred == np.asarray(y)).sum()), len(y)

"""The training loop of few-shot vision-language adaptation, and weighted averaging.

FedSPA's authors train every few-shot adapter the same way (github.com/eejiarong/
FedSPA-main): shuffled mini-batches, AdamW (``eps=1e-4``, torch's default weight
decay) and cosine annealing over every step. FedSPA's client and server updates,
its baselines' client updates and ManiPT's prompt tuning all use this one loop, and
both methods average the clients' uploads by example count. Pure torch / numpy; no
Flower. Each function imports torch itself, so that parameter models that refer to
:class:`TrainConfig` validate without it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch

#: AdamW settings of the authors' client and server (``eps=1e-4``, torch's default wd).
ADAMW_EPS = 1e-4
ADAMW_WEIGHT_DECAY = 0.01


@dataclass(frozen=True)
class TrainConfig:
    """One optimisation schedule: AdamW + cosine annealing over ``epochs x batches`` steps."""

    lr: float
    epochs: int
    batch_size: int
    seed: int


def _batches(n: int, batch_size: int, gen: torch.Generator) -> list[torch.Tensor]:
    """Shuffled index batches covering ``0..n-1`` (the last one may be short)."""
    import torch

    order = torch.randperm(n, generator=gen)
    return list(torch.split(order, batch_size))


def _optimiser(
    params: list[torch.Tensor], cfg: TrainConfig, steps_per_epoch: int
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    import torch

    opt = torch.optim.AdamW(params, lr=cfg.lr, eps=ADAMW_EPS, weight_decay=ADAMW_WEIGHT_DECAY)
    total = max(1, cfg.epochs * steps_per_epoch)
    return opt, torch.optim.lr_scheduler.CosineAnnealingLR(opt, total)


def fit(
    params: list[torch.Tensor], loss_fn: Callable[[torch.Tensor], torch.Tensor], n: int,
    cfg: TrainConfig,
) -> list[float]:
    """The one training loop: shuffled mini-batches, AdamW + cosine; mean loss per epoch.

    ``loss_fn(idx)`` returns the loss of the batch of row indices ``idx``;
    ``params`` are leaf tensors with ``requires_grad``. The batch size is
    ``min(batch_size, n)``, as in the authors' clients.
    """
    import torch

    if n == 0 or cfg.epochs == 0:
        return []
    gen = torch.Generator().manual_seed(cfg.seed % 2**63)
    bs = min(cfg.batch_size, n)
    opt, sched = _optimiser(params, cfg, math.ceil(n / bs))
    losses = []
    for _ in range(cfg.epochs):
        total = 0.0
        batches = _batches(n, bs, gen)
        for idx in batches:
            loss = loss_fn(idx)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            total += float(loss.detach())
        losses.append(total / len(batches))
    return losses


def weighted_average(arrays: Sequence[np.ndarray], weights: Sequence[float]) -> np.ndarray:
    """``sum_k w_k a_k / sum_k w_k`` in float64, cast back to float32.

    Raises ``ValueError`` when every weight is zero (no client had examples).
    """
    w = np.asarray(weights, dtype=np.float64)
    if w.sum() <= 0:
        raise ValueError("weighted_average: every client reported 0 examples")
    out = np.tensordot(w / w.sum(), np.stack([np.asarray(a, np.float64) for a in arrays]), 1)
    return out.astype(np.float32)

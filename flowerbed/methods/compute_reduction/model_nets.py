"""Torch modules of the early-exit model (:mod:`flowerbed.methods.compute_reduction.model`).

Kept apart from the registered params and build function, which a scenario's
validation imports, so that only building the model imports torch.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F


class EarlyExitMLP(nn.Module):
    """Linear-ReLU blocks, exit heads after ``exits`` and a final head.

    ``forward`` returns the final logits ``(batch, classes)``, or, when
    ``all_exits`` is set, the logits of every head stacked ``(heads, batch,
    classes)``, shallowest first and the final head last.
    """

    def __init__(
        self, in_features: int, hidden: tuple[int, ...], exits: tuple[int, ...], out: int
    ) -> None:
        super().__init__()
        widths = (in_features, *hidden)
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Linear(widths[i], widths[i + 1]), nn.ReLU())
            for i in range(len(hidden))
        )
        self.heads = nn.ModuleList(nn.Linear(hidden[k - 1], out) for k in exits)
        self.head = nn.Linear(hidden[-1], out)
        self.exits = tuple(exits)
        self.all_exits = False
        blocks = np.cumsum([widths[i] * widths[i + 1] for i in range(len(hidden))])
        head_macs = np.cumsum([hidden[k - 1] * out for k in exits])
        #: Multiply-accumulates of an input leaving at each head (earlier heads included).
        self.exit_macs = [int(blocks[k - 1] + head_macs[j]) for j, k in enumerate(exits)]
        self.exit_macs.append(int(blocks[-1] + head_macs[-1] + hidden[-1] * out))
        #: Multiply-accumulates of the same MLP without exit heads.
        self.base_macs = int(blocks[-1] + hidden[-1] * out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Final logits, or every head's logits stacked when ``all_exits``."""
        outs = []
        for i, block in enumerate(self.blocks, start=1):
            x = block(x)
            if self.all_exits and i in self.exits:
                outs.append(self.heads[self.exits.index(i)](x))
        final = self.head(x)
        return torch.stack([*outs, final]) if self.all_exits else final


class MultiExitLoss(nn.Module):
    """``sum_k weight_k * CE(logits_k, y)`` over stacked ``(heads, batch, classes)`` logits."""

    def __init__(self, weights: list[float]) -> None:
        super().__init__()
        self.weights = weights

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Weighted sum of the heads' cross-entropies."""
        losses = [w * F.cross_entropy(z, target) for w, z in zip(self.weights, logits, strict=True)]
        return torch.stack(losses).sum()

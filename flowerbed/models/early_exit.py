"""Early-exit model: an MLP with exit heads and the multi-exit loss it is trained with.

Method: the adaptive "partial computation" regime of "Theoretical Guarantees for
One-Shot Magnitude Pruning and Compute-Adaptive Early Exit" (ICML 2026 poster
63550; reconstructed in docs/methods/compute_reduction.md). At inference an input
leaves at the first head whose confidence (or logit margin) is above a threshold,
:func:`flowerbed.algorithms.compute_theory.cascade_exit`; with two classes and the
margin rule that is the paper's conditional perceptron. Training sums the
cross-entropy of every head (as in BranchyNet, Teerapittayanon et al., 2016).

Model ``early_exit_mlp`` and learner ``sgd_early_exit``
(:mod:`flowerbed.clients.early_exit_learner`) go together: the learner is
``sgd_pruned`` (so the upload can also be pruned) with the multi-exit loss and a
score that reports, besides ``accuracy`` (with early exits) and ``loss`` (final
head), ``accuracy_full``, ``accuracy_exit<k>`` (head after block k on every input),
``exit_fraction``, ``exit_disagreement`` (early-exit prediction differs from the
full model's: the excess error of the theory) and ``compute_fraction`` (mean
multiply-accumulates per input over those of the same MLP without exit heads).
"""

from __future__ import annotations

import numpy as np
import torch
from pydantic import Field, model_validator
from torch import nn
from torch.nn import functional as F

from flowerbed.core.registry import Params, register


class EarlyExitMLPParams(Params):
    """ReLU MLP with a linear exit head after some hidden blocks."""

    hidden: tuple[int, ...] = Field(
        (64, 256, 256), min_length=2, description="width of each hidden block"
    )
    exits: tuple[int, ...] = Field(
        (1,), min_length=1, description="1-based hidden blocks followed by an exit head"
    )

    @model_validator(mode="after")
    def _valid_exits(self) -> EarlyExitMLPParams:
        last = len(self.hidden) - 1
        if list(self.exits) != sorted(set(self.exits)) or not all(
            1 <= k <= last for k in self.exits
        ):
            raise ValueError(
                f"exits must be increasing block numbers in 1..{last} (the last block "
                f"feeds the final head), got {list(self.exits)}"
            )
        return self


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


@register("model", "early_exit_mlp", params=EarlyExitMLPParams)
def early_exit_mlp(params: EarlyExitMLPParams, *, in_features: int, out_features: int) -> nn.Module:
    """MLP with early-exit heads (train it with learner ``sgd_early_exit``)."""
    return EarlyExitMLP(in_features, params.hidden, params.exits, out_features)


class MultiExitLoss(nn.Module):
    """``sum_k weight_k * CE(logits_k, y)`` over stacked ``(heads, batch, classes)`` logits."""

    def __init__(self, weights: list[float]) -> None:
        super().__init__()
        self.weights = weights

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Weighted sum of the heads' cross-entropies."""
        losses = [w * F.cross_entropy(z, target) for w, z in zip(self.weights, logits, strict=True)]
        return torch.stack(losses).sum()

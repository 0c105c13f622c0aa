"""Learner ``sgd_early_exit``: ``sgd_pruned`` with the multi-exit loss and early-exit scoring.

The model is registered in :mod:`flowerbed.methods.compute_reduction.model` (network and loss
in :mod:`flowerbed.methods.compute_reduction.model_nets`); the method and the metrics
reported are described there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import numpy as np
from pydantic import Field

from flowerbed.core.messages import Arrays
from flowerbed.core.registry import register
from flowerbed.data.base import DatasetMeta
from flowerbed.methods.compute_reduction.learner import PrunedSGDLearner, PrunedSGDParams

if TYPE_CHECKING:
    from torch import nn

    from flowerbed.methods.compute_reduction.model_nets import EarlyExitMLP


class EarlyExitParams(PrunedSGDParams):
    """``sgd_pruned`` settings plus the multi-exit loss and the exit rule."""

    exit_loss_weight: float = Field(
        1.0, ge=0, description="weight of each early head's cross-entropy (final head: 1)"
    )
    exit_threshold: float = Field(
        0.9, ge=0, description="an input exits when its score is strictly above this"
    )
    exit_rule: Literal["confidence", "margin"] = Field(
        "confidence", description="score: top softmax probability or top-2 logit gap"
    )
    curve_thresholds: tuple[float, ...] = Field(
        (),
        description="more thresholds scored in the same evaluation, reported as "
        "accuracy_at_<t>, exit_fraction_at_<t>, exit_disagreement_at_<t>, "
        "compute_fraction_at_<t>",
    )


@register("learner", "sgd_early_exit")
class EarlyExitLearner(PrunedSGDLearner):
    """``sgd_pruned`` for ``early_exit_mlp``: multi-exit loss, early-exit scoring.

    Contract: the exchanged arrays are the model's state dict (every head
    included), so FedAvg averages all heads. ``score`` answers as the deployed
    model would (``accuracy`` with early exits at ``exit_threshold``) and also
    reports the full model and each head; a threshold no score exceeds
    (``confidence`` >= 1, or ``margin`` = inf) gives ``accuracy ==
    accuracy_full`` and ``exit_fraction == 0``.
    """

    Params = EarlyExitParams
    p: EarlyExitParams

    def _build(self, meta: DatasetMeta) -> nn.Module:
        # torch (and scipy) only once a learner runs: validating a scenario must stay light.
        from flowerbed.methods.compute_reduction.model_nets import EarlyExitMLP

        if meta.task != "classification":
            raise ValueError(
                f"learner 'sgd_early_exit' needs a classification dataset; "
                f"{meta.name!r} is {meta.task}"
            )
        model = super()._build(meta)
        if not isinstance(model, EarlyExitMLP):
            raise ValueError(
                f"learner 'sgd_early_exit' needs model 'early_exit_mlp', got {type(model).__name__}"
            )
        model.all_exits = True
        return model

    def _loss(self, meta: DatasetMeta) -> nn.Module:
        from flowerbed.methods.compute_reduction.model_nets import MultiExitLoss

        assert self.scenario.model is not None  # checked by SGDLearner
        exits: tuple[int, ...] = getattr(self.scenario.model, "exits", ())
        return MultiExitLoss([self.p.exit_loss_weight] * len(exits) + [1.0])

    def score(
        self, arrays: Arrays, x: np.ndarray, y: np.ndarray, meta: DatasetMeta
    ) -> dict[str, float]:
        """Loss (final head), accuracy with early exits, per-head accuracy and compute."""
        import torch
        from torch.nn import functional as F

        from flowerbed.methods.compute_reduction.model_nets import EarlyExitMLP

        model = self._load(meta, arrays)
        assert isinstance(model, EarlyExitMLP)
        model.eval()
        with torch.no_grad():
            xt = torch.as_tensor(np.asarray(x, dtype=np.float32), device=self.device())
            logits = [z.cpu().numpy().astype(np.float64) for z in model(xt)]
        y = np.asarray(y)
        final = torch.as_tensor(logits[-1])
        metrics = {
            "loss": float(F.cross_entropy(final, torch.as_tensor(y, dtype=torch.int64))),
            "accuracy_full": float(np.mean(logits[-1].argmax(1) == y)),
            **self._at(logits, y, model, self.p.exit_threshold, suffix=""),
        }
        for k, z in zip(model.exits, logits[:-1], strict=True):
            metrics[f"accuracy_exit{k}"] = float(np.mean(z.argmax(1) == y))
        for t in self.p.curve_thresholds:
            metrics.update(self._at(logits, y, model, t, suffix=f"_at_{t:g}"))
        return metrics

    def _at(
        self,
        logits: list[np.ndarray],
        y: np.ndarray,
        model: EarlyExitMLP,
        threshold: float,
        suffix: str,
    ) -> dict[str, float]:
        """Accuracy, exits, disagreement with the full model and compute at ``threshold``."""
        from flowerbed.methods.compute_reduction.algorithm_theory import cascade_exit

        pred, used = cascade_exit(logits, threshold, self.p.exit_rule)
        macs = float(np.mean(np.take(model.exit_macs, used)))
        return {
            f"accuracy{suffix}": float(np.mean(pred == y)),
            f"exit_fraction{suffix}": float(np.mean(used < len(logits) - 1)),
            f"exit_disagreement{suffix}": float(np.mean(pred != logits[-1].argmax(1))),
            f"compute_fraction{suffix}": macs / model.base_macs,
        }

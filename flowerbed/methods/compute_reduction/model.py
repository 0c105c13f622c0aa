"""Early-exit model: an MLP with exit heads and the multi-exit loss it is trained with.

Method: the adaptive "partial computation" regime of "Theoretical Guarantees for
One-Shot Magnitude Pruning and Compute-Adaptive Early Exit" (ICML 2026 poster
63550; reconstructed in docs/methods/compute_reduction.md). At inference an input
leaves at the first head whose confidence (or logit margin) is above a threshold,
:func:`flowerbed.methods.compute_reduction.algorithm_theory.cascade_exit`; with two classes and the
margin rule that is the paper's conditional perceptron. Training sums the
cross-entropy of every head (as in BranchyNet, Teerapittayanon et al., 2016).

Model ``early_exit_mlp`` and learner ``sgd_early_exit``
(:mod:`flowerbed.methods.compute_reduction.learner_early_exit`) go together: the learner is
``sgd_pruned`` (so the upload can also be pruned) with the multi-exit loss and a
score that reports, besides ``accuracy`` (with early exits) and ``loss`` (final
head), ``accuracy_full``, ``accuracy_exit<k>`` (head after block k on every input),
``exit_fraction``, ``exit_disagreement`` (early-exit prediction differs from the
full model's: the excess error of the theory) and ``compute_fraction`` (mean
multiply-accumulates per input over those of the same MLP without exit heads).

The torch modules, ``EarlyExitMLP`` and ``MultiExitLoss``, are in
:mod:`flowerbed.methods.compute_reduction.model_nets`; this module holds what a scenario's
validation needs (the params) and the registered build function.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field, PositiveInt, model_validator

from flowerbed.core.registry import FEATURES, Params, register

if TYPE_CHECKING:
    from torch import nn


class EarlyExitMLPParams(Params):
    """ReLU MLP with a linear exit head after some hidden blocks."""

    hidden: tuple[PositiveInt, ...] = Field(
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


@register("model", "early_exit_mlp", params=EarlyExitMLPParams, requires=(FEATURES,))
def early_exit_mlp(params: EarlyExitMLPParams, *, in_features: int, out_features: int) -> nn.Module:
    """MLP with early-exit heads (train it with learner ``sgd_early_exit``)."""
    # The network lives apart so that validating a scenario never imports torch.
    from flowerbed.methods.compute_reduction.model_nets import EarlyExitMLP

    return EarlyExitMLP(in_features, params.hidden, params.exits, out_features)

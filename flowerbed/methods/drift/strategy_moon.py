"""MOON (Li, He & Song, CVPR 2021, arXiv:2103.16257): FedAvg's server, a contrastive client.

The server is Flower's FedAvg exactly as strategy ``fedavg`` runs it
(:class:`~flowerbed.strategies.fedavg.FedAvgStrategy`: seeded cohorts, weighted
average in partition-id order, per-round records); only its train messages go
out as ``train.moon`` with ``μ`` and ``τ`` in the config, so that learner
``sgd_drift`` adds MOON's model-contrastive term.
"""

from __future__ import annotations

from pydantic import Field

from flowerbed.core.registry import register
from flowerbed.methods.drift.algorithm_moon import TEMPERATURE
from flowerbed.methods.drift.learner import MOON_MESSAGE, MOON_MU, MOON_TEMPERATURE
from flowerbed.strategies.base import ServerContext
from flowerbed.strategies.fedavg import FedAvgParams, FedAvgStrategy
from flowerbed.strategies.federation import Federation


class MoonParams(FedAvgParams):
    """Client fractions and the contrastive term's weight and temperature."""

    mu: float = Field(1.0, ge=0, description="weight μ of the contrastive loss (paper: 1 or 5)")
    temperature: float = Field(TEMPERATURE, gt=0, description="temperature τ (paper: 0.5)")


@register("strategy", "moon", requires=((MOON_MESSAGE,),))
class MoonStrategy(FedAvgStrategy):
    """MOON: FedAvg whose clients add a model-contrastive loss on the representation."""

    Params = MoonParams

    def run(self, fed: Federation, ctx: ServerContext) -> dict[str, float]:
        """Run ``scenario.rounds`` FedAvg rounds with MOON clients; return test metrics."""
        from flowerbed.strategies.retyped_grid import retyped_federation

        p: MoonParams = self.params  # type: ignore[assignment]
        config = {MOON_MU: p.mu, MOON_TEMPERATURE: p.temperature}
        return super().run(retyped_federation(fed, MOON_MESSAGE, config), ctx)

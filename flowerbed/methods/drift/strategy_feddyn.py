"""FedDyn (Acar et al., ICLR 2021, arXiv:2111.04263): the server's state ``h`` and model.

Each round the server sends ``θ^{t-1}`` and ``alpha`` to a seeded cohort;
learner ``sgd_drift`` minimises FedDyn's local objective and replies ``θ_k^t``;
:func:`flowerbed.methods.drift.algorithm_feddyn.server_update` updates ``h`` and sets
``θ^t = mean θ_k^t - h/alpha``. Rounds, cohorts and records as ``fedavg``
(:mod:`flowerbed.methods.drift.strategy_rounds`).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from flowerbed.core.messages import Arrays, Payload, Replies
from flowerbed.core.registry import register
from flowerbed.methods.drift.learner import FEDDYN_ALPHA, FEDDYN_MESSAGE
from flowerbed.methods.drift.strategy_rounds import drift_learner, initial_arrays, run_rounds
from flowerbed.strategies.base import ServerContext, Strategy
from flowerbed.strategies.fedavg import FedAvgParams
from flowerbed.strategies.federation import Federation


class FedDynParams(FedAvgParams):
    """Client fractions and the regularisation strength."""

    alpha: float = Field(0.01, gt=0, description="dynamic-regulariser weight (paper: 0.01 - 0.1)")


@register("strategy", "feddyn", requires=((FEDDYN_MESSAGE,),))
class FedDynStrategy(Strategy):
    """FedDyn: local objectives dynamically regularised towards the server model."""

    Params = FedDynParams
    checkpointing = True

    def state_dict(self) -> dict[str, Any]:
        """The server's running sum ``h`` of the clients' drifts."""
        return {"h": self.h}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Put back what :meth:`state_dict` returned."""
        self.h = dict(state["h"])

    def run(self, fed: Federation, ctx: ServerContext) -> dict[str, float]:
        """Run ``scenario.rounds`` FedDyn rounds; return server-side test metrics."""
        from flowerbed.methods.drift import algorithm_feddyn as feddyn
        from flowerbed.methods.drift import algorithm_scaffold as scaffold

        p: FedDynParams = self.params  # type: ignore[assignment]
        learner = drift_learner(ctx, "feddyn")
        init = initial_arrays(ctx, learner)
        names = learner.parameter_names(ctx.data.dataset.meta)
        self.h = scaffold.zeros_like({k: init[k] for k in names})
        n = len(fed.partition_ids)

        def step(r: int, cohort: list[int], theta: Arrays) -> tuple[Arrays, Replies]:
            replies = fed.ask(
                FEDDYN_MESSAGE, Payload(arrays=theta, config={FEDDYN_ALPHA: p.alpha}), cohort,
                server_round=r, expected_arrays=theta,
            )  # fmt: skip
            if not replies.ok:
                return theta, replies
            local = [b.arrays for b in replies.ok.values()]
            theta, self.h = feddyn.server_update(self.h, theta, local, p.alpha, n)
            return theta, replies

        fractions = (p.fraction_train, p.fraction_evaluate)
        return run_rounds(fed, ctx, init, fractions, step, self)

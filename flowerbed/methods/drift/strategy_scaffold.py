"""SCAFFOLD (Karimireddy et al., ICML 2020, arXiv:1910.06378): the server and its control variate.

Each round the server sends the global model ``x`` and its control variate
``c`` (beside the weights, under
:data:`~flowerbed.methods.drift.learner.CONTROL_PREFIX`) to a seeded cohort;
learner ``sgd_drift`` runs the corrected local steps and replies ``y_i`` and
``Δc_i``; :func:`flowerbed.methods.drift.algorithm_scaffold.server_update` steps ``x`` and
``c``. Rounds, cohorts and records as ``fedavg``
(:mod:`flowerbed.methods.drift.strategy_rounds`).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from flowerbed.core.messages import Arrays, Payload, Replies
from flowerbed.core.registry import register
from flowerbed.methods.drift.learner import SCAFFOLD_MESSAGE, join_control, split_control
from flowerbed.methods.drift.strategy_rounds import drift_learner, initial_arrays, run_rounds
from flowerbed.strategies.base import ServerContext, Strategy
from flowerbed.strategies.fedavg import FedAvgParams
from flowerbed.strategies.federation import Federation


class ScaffoldParams(FedAvgParams):
    """Client fractions and the server step size."""

    global_lr: float = Field(1.0, gt=0, description="server step size η_g (the paper's: 1)")


@register("strategy", "scaffold", requires=((SCAFFOLD_MESSAGE,),))
class ScaffoldStrategy(Strategy):
    """SCAFFOLD: drift-corrected local SGD with server and client control variates."""

    Params = ScaffoldParams
    checkpointing = True

    def state_dict(self) -> dict[str, Any]:
        """The server control variate ``c``."""
        return {"c": self.c}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Put back what :meth:`state_dict` returned."""
        self.c = dict(state["c"])

    def run(self, fed: Federation, ctx: ServerContext) -> dict[str, float]:
        """Run ``scenario.rounds`` SCAFFOLD rounds; return server-side test metrics."""
        from flowerbed.methods.drift import algorithm_scaffold as scaffold

        p: ScaffoldParams = self.params  # type: ignore[assignment]
        learner = drift_learner(ctx, "scaffold")
        init = initial_arrays(ctx, learner)
        names = learner.parameter_names(ctx.data.dataset.meta)
        self.c = scaffold.zeros_like({k: init[k] for k in names})
        n = len(fed.partition_ids)

        def step(r: int, cohort: list[int], x: Arrays) -> tuple[Arrays, Replies]:
            sent = join_control(x, self.c)
            replies = fed.ask(
                SCAFFOLD_MESSAGE, Payload(arrays=sent), cohort, server_round=r,
                expected_arrays=sent,
            )  # fmt: skip
            if not replies.ok:
                return x, replies
            split = [split_control(b.arrays) for b in replies.ok.values()]
            delta_y = [{k: y[k] - x[k] for k in x} for y, _ in split]
            x, self.c = scaffold.server_update(
                x, self.c, delta_y, [dc for _, dc in split], n, p.global_lr
            )
            return x, replies

        fractions = (p.fraction_train, p.fraction_evaluate)
        return run_rounds(fed, ctx, init, fractions, step, self)

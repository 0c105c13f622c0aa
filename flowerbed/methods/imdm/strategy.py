"""``imdm_fedavg_distill``: FedAvg of an IMDM/MDLM denoiser, then server-side SDTT on a proxy set.

Method: "Infinite Mask Diffusion for Few-Step Distillation" (arXiv 2605.10518);
few-step distillation (IM-SDTT / SDTT) needs only the model and some
``x_t`` built from data, so the server can run it on the global model after federated
training, on a proxy set it holds. Here the proxy set is the first ``proxy_fraction`` of
the server's test rows; the distilled model and the FedAvg model are both scored on the
remaining rows (``ctx.extra_results``: ``server_sdtt`` and ``fedavg_same_rows``), beside
the usual ``federated`` row (FedAvg scored on every test row).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from flowerbed.core.messages import Arrays
from flowerbed.core.registry import SUPERVISED, register
from flowerbed.core.seeds import derive_seed
from flowerbed.strategies.base import ServerContext, Strategy
from flowerbed.strategies.fedavg import FedAvgParams, run_flower
from flowerbed.strategies.federation import Federation


class ImdmFedAvgDistillParams(FedAvgParams):
    """FedAvg fractions, the proxy share and the server-side SDTT schedule."""

    proxy_fraction: float = Field(0.5, gt=0, lt=1, description="share of the server's test "
                                  "rows used as its distillation proxy set")
    start_steps: int = Field(16, ge=2, description="teacher steps of the first SDTT phase")
    steps_per_phase: int = Field(50, ge=1)
    lr: float = Field(3e-4, gt=0)
    batch_size: int = Field(32, ge=1)


@register("strategy", "imdm_fedavg_distill", requires=(SUPERVISED,))
class ImdmFedAvgDistill(Strategy):
    """FedAvg of the denoiser, then SDTT / IM-SDTT of the global model on a server proxy set."""

    Params = ImdmFedAvgDistillParams

    def run(self, fed: Federation, ctx: ServerContext) -> dict[str, float]:
        """FedAvg rounds; distil the final global model; score both on the held-out rows."""
        p: ImdmFedAvgDistillParams = self.params  # type: ignore[assignment]
        learner: Any = ctx.learner
        if not callable(getattr(learner, "distill_arrays", None)):
            raise TypeError("strategy 'imdm_fedavg_distill' needs learner 'imdm'")
        last: dict[str, Arrays] = {}
        score = learner.score

        def recording_score(arrays: Arrays, *args: Any) -> dict[str, float]:
            last["arrays"] = arrays  # the global model of the latest server evaluation
            out: dict[str, float] = score(arrays, *args)
            return out

        learner.score = recording_score  # the server's own learner instance, this run only
        try:
            kwargs = {"fraction_train": p.fraction_train,
                      "fraction_evaluate": p.fraction_evaluate, "min_train_nodes": 1,
                      "min_evaluate_nodes": 1 if p.fraction_evaluate > 0 else 0}
            final = run_flower(self.scenario, fed, ctx, "FedAvg", kwargs)
        finally:
            learner.score = score
        ds = ctx.data.dataset
        cut = max(1, int(p.proxy_fraction * len(ds.x_test)))
        if cut >= len(ds.x_test):
            raise ValueError(f"proxy_fraction {p.proxy_fraction} leaves no test rows to score")
        distilled = learner.distill_arrays(
            last["arrays"], ds.x_test[:cut], ds.meta, derive_seed(self.scenario.seed, "sdtt"),
            start_steps=p.start_steps, steps_per_phase=p.steps_per_phase, lr=p.lr,
            batch_size=p.batch_size)
        rest_x, rest_y = ds.x_test[cut:], ds.y_test[cut:]
        for name, arrays in (("fedavg_same_rows", last["arrays"]), ("server_sdtt", distilled)):
            scores = score(arrays, rest_x, rest_y, ds.meta)
            ctx.extra_results[name] = {f"test/{k}": v for k, v in scores.items()}
        return final

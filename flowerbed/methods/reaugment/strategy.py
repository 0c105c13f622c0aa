"""ReAugment with a federated zoo (arXiv 2409.06282; RECONSTRUCTED).

1. FedAvg of the forecaster on the clients' real windows (arm ``none``, which is
   also the no-augmentation baseline), ``scenario.rounds`` rounds.
2. The **federated zoo**: the client models of the last rounds of step 1 (most
   recent first, up to ``zoo_size``), or ``zoo_size`` bootstrap aggregates of the
   last round's client models (``zoo: bootstrap``), broadcast to every client.
3. Each client scores its own training windows by zoo disagreement, pre-trains
   and fine-tunes its own VMAE with the zoo's backtest reward, and keeps ``D̃``
   per arm in its state folder (``train.reaugment_augment``).
4. For every other arm, FedAvg from the same initial weights on ``D + D̃_arm``.

Every round the global forecaster is scored on the clients' validation and test
windows (``evaluate.reaugment``); an arm's result is its test MSE / MAE / MASE
at the round with the lowest validation MSE (``test/mse@<arm>`` ...). Client →
server: forecaster weights and scalar metrics; server → client: weights.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field, field_validator

from flowerbed.core.messages import Arrays, Payload, Replies
from flowerbed.core.registry import Params, register
from flowerbed.core.seeds import derive_seed
from flowerbed.methods.reaugment import learner as keys
from flowerbed.methods.reaugment.learner import Arm, ReAugmentLearner
from flowerbed.strategies.base import ServerContext, Strategy
from flowerbed.strategies.federation import Federation
from flowerbed.strategies.oneshot_average import weighted_average

FEDERATED_ARMS: tuple[Arm, ...] = (
    "none",
    "jitter",
    "freq_mask",
    "vmae",
    "rl_random",
    "reaugment",
    "reaugment_v1",
)


class ReAugmentStrategyParams(Params):
    """Arms, local steps per round, and how the federated zoo is made."""

    arms: tuple[Arm, ...] = Field(FEDERATED_ARMS, min_length=1)
    local_steps: int = Field(25, ge=1, description="local Adam steps per round")
    zoo_size: int = Field(5, ge=2, description="K: members of the broadcast zoo")
    zoo: Literal["clients", "bootstrap"] = Field(
        "clients", description="last rounds' client models, or bootstrap aggregates"
    )

    @field_validator("arms")
    @classmethod
    def _no_gap(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if "reaugment_gap" in value:
            raise ValueError("reaugment_gap needs a K-fold zoo (use run_local / centralized)")
        return value


def weighted(replies: Replies, name: str, count: str) -> float:
    """Mean of metric ``name`` over clients weighted by their metric ``count``."""
    rows = [
        (r.metrics[name], r.metrics[count])
        for r in replies.ok.values()
        if name in r.metrics and r.metrics.get(count, 0) > 0
    ]
    total = sum(c for _, c in rows)
    return float(sum(v * c for v, c in rows) / total) if total else float("nan")


def bootstrap_zoo(models: list[Arrays], weights: list[float], size: int, seed: int) -> list[Arrays]:
    """``size`` weighted averages of bootstrap resamples (with replacement) of ``models``."""
    gen = np.random.default_rng(seed)
    out = []
    for _ in range(size):
        pick = gen.integers(0, len(models), size=len(models))
        out.append(weighted_average([models[i] for i in pick], [weights[i] for i in pick]))
    return out


@register(
    "strategy",
    "reaugment",
    requires=((keys.TRAIN_MESSAGE, keys.AUGMENT_MESSAGE, keys.EVAL_MESSAGE),),
)
class ReAugmentStrategy(Strategy):
    """ReAugment federated: FedAvg forecaster, broadcast zoo, local VMAE + RL augmentation."""

    Params = ReAugmentStrategyParams

    def run(self, fed: Federation, ctx: ServerContext) -> dict[str, float]:
        """Arm ``none``, the zoo broadcast and augmentation, then every other arm."""
        p: ReAugmentStrategyParams = self.params  # type: ignore[assignment]
        learner = ctx.learner
        if not isinstance(learner, ReAugmentLearner):
            raise TypeError(
                f"strategy reaugment needs learner reaugment, got {type(learner).__name__}"
            )
        init = learner.init_arrays(ctx.data.dataset.meta, derive_seed(self.scenario.seed, "init"))
        history: list[tuple[list[Arrays], list[float]]] = []
        final = self._fedavg(fed, ctx, "none", init, history)
        others: list[str] = [a for a in p.arms if a != "none"]
        if others:
            self._augment(fed, ctx, history, others)
        for arm in others:
            final.update(self._fedavg(fed, ctx, arm, init, None))
        return final

    def _fedavg(
        self,
        fed: Federation,
        ctx: ServerContext,
        arm: str,
        init: Arrays,
        keep: list[tuple[list[Arrays], list[float]]] | None,
    ) -> dict[str, float]:
        """FedAvg of one arm; its test metrics at the best validation round."""
        p: ReAugmentStrategyParams = self.params  # type: ignore[assignment]
        weights = init
        best: tuple[float, int, dict[str, float]] = (np.inf, 0, {})
        config = {keys.ARM: arm, keys.STEPS: p.local_steps}
        for r in range(1, self.scenario.rounds + 1):
            replies = fed.ask(
                keys.TRAIN_MESSAGE, Payload(arrays=weights, config=config), server_round=r
            )
            ok = list(replies.ok.values())
            weights = weighted_average([x.arrays for x in ok], [x.num_examples for x in ok])
            if keep is not None:  # the zoo source: the last rounds' client models
                keep.append(([x.arrays for x in ok], [float(x.num_examples) for x in ok]))
                del keep[: -p.zoo_size]
            scores = fed.ask(keys.EVAL_MESSAGE, Payload(arrays=weights), server_round=r)
            row = {m: weighted(scores, m, "n_test") for m in ("mse", "mae", "mase")}
            row["val_mse"] = weighted(scores, "val_mse", "n_val")
            ctx.recorder.metrics(r, f"reaugment_{arm}", {f"test/{k}": v for k, v in row.items()})
            if row["val_mse"] < best[0]:
                best = (row["val_mse"], r, row)
        out = {f"test/{k}@{arm}": v for k, v in best[2].items() if k != "val_mse"}
        out[f"test/val_mse@{arm}"] = float(best[0])
        out[f"test/best_round@{arm}"] = float(best[1])
        return out

    def _augment(
        self,
        fed: Federation,
        ctx: ServerContext,
        history: list[tuple[list[Arrays], list[float]]],
        arms: list[str],
    ) -> None:
        """Broadcast the zoo; every client builds ``D̃`` for ``arms`` and keeps it."""
        p: ReAugmentStrategyParams = self.params  # type: ignore[assignment]
        if p.zoo == "bootstrap":
            models, w = history[-1]
            zoo = bootstrap_zoo(models, w, p.zoo_size, derive_seed(self.scenario.seed, "zoo"))
        else:
            zoo = [m for models, _ in reversed(history) for m in models][: p.zoo_size]
        replies = fed.ask(
            keys.AUGMENT_MESSAGE,
            Payload(arrays=keys.zoo_arrays(zoo), config={keys.ARMS_KEY: list(arms)}),
            server_round=self.scenario.rounds + 1,
        )
        info: dict[str, float] = {"zoo/members": float(len(zoo))}
        for name in sorted({k for r in replies.ok.values() for k in r.metrics}):
            values = [r.metrics[name] for r in replies.ok.values() if name in r.metrics]
            info[name] = float(np.mean(values))
        ctx.recorder.metrics(self.scenario.rounds + 1, "reaugment_augment", info)

"""Baselines run inside the same run as the federation, on identical data and seeds."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from pydantic import Field

from flowerbed.clients.learner import SupervisedLearner
from flowerbed.core.registry import Params, register
from flowerbed.core.seeds import derive_seed

if TYPE_CHECKING:
    from flowerbed.strategies.base import ServerContext


class TrainingBaselineParams(Params):
    """Training budget of a baseline."""

    epochs: int | None = Field(
        None, ge=1, description="default: rounds x the learner's local epochs (same budget)"
    )


def _supervised(ctx: ServerContext, baseline: str) -> SupervisedLearner:
    learner = ctx.learner
    if not isinstance(learner, SupervisedLearner):
        raise TypeError(
            f"baseline {baseline!r} needs a learner with weights; "
            f"{type(learner).__name__} has none (the strategy reports its own baselines)"
        )
    return learner


def _epochs(params: TrainingBaselineParams, ctx: ServerContext, learner: SupervisedLearner) -> int:
    return params.epochs or ctx.scenario.rounds * learner.epochs_per_round()


@register("baseline", "centralized", params=TrainingBaselineParams)
def centralized(params: TrainingBaselineParams, *, ctx: ServerContext) -> dict[str, float]:
    """The learner trained on all clients' training data pooled, scored on the test split."""
    learner = _supervised(ctx, "centralized")
    data, seed = ctx.data, ctx.scenario.seed
    meta = data.dataset.meta
    x, y = data.pooled_train()
    init = learner.init_arrays(meta, derive_seed(seed, "init"))
    arrays, _ = learner.fit(
        init,
        x,
        y,
        meta,
        derive_seed(seed, "baseline", "centralized"),
        epochs=_epochs(params, ctx, learner),
    )
    scores = learner.score(arrays, data.dataset.x_test, data.dataset.y_test, meta)
    return {f"test/{k}": v for k, v in scores.items()}


@register("baseline", "local_only", params=TrainingBaselineParams)
def local_only(params: TrainingBaselineParams, *, ctx: ServerContext) -> dict[str, float]:
    """Each client trains alone on its own data; test metrics averaged over clients."""
    learner = _supervised(ctx, "local_only")
    data, seed = ctx.data, ctx.scenario.seed
    meta = data.dataset.meta
    init = learner.init_arrays(meta, derive_seed(seed, "init"))
    per_client: dict[str, list[float]] = {}
    for pid in range(ctx.scenario.num_clients):
        client = data.client(pid)
        if client.num_train == 0:
            continue
        arrays, _ = learner.fit(
            init,
            client.x_train,
            client.y_train,
            meta,
            derive_seed(seed, "baseline", "local_only", pid),
            epochs=_epochs(params, ctx, learner),
        )
        scores = learner.score(arrays, data.dataset.x_test, data.dataset.y_test, meta)
        for k, v in scores.items():
            per_client.setdefault(k, []).append(v)
    out: dict[str, float] = {}
    for k, values in per_client.items():
        out[f"test/{k}"] = float(np.mean(values))
        out[f"test/{k}_min"] = float(np.min(values))
        out[f"test/{k}_max"] = float(np.max(values))
    return out

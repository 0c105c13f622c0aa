"""Baselines run inside the same run as the federation, on identical data and seeds.

A baseline needs a capability of the learner, not a class: ``centralized`` and
``local_only`` work with a learner that has weights (``init_arrays``/``fit``/
``score``: trained on the pooled data, or on each client alone, and scored on
the global test split) and with a local task (``run_local``: run once on one
virtual client holding every client's rows, or on each client). A learner with
both is treated as a local task when the strategy is one that runs local tasks
(``local``), else by its weights. A scenario whose learner offers neither is
refused by ``flowerbed validate``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from pydantic import Field

from flowerbed.clients.learner import SupervisedLearner, is_local_task
from flowerbed.core import keys, registry
from flowerbed.core.messages import Payload, Replies
from flowerbed.core.registry import LOCAL_TASK, SUPERVISED, Params, register
from flowerbed.core.seeds import derive_seed
from flowerbed.strategies.local import LOCAL_ROUND, client_summary, save_local_arrays

if TYPE_CHECKING:
    from flowerbed.strategies.base import ServerContext


class TrainingBaselineParams(Params):
    """Training budget of a baseline."""

    epochs: int | None = Field(
        None, ge=1, description="default: rounds x the learner's local epochs (same budget)"
    )


_NEEDS = (SUPERVISED, LOCAL_TASK)


def _as_local_task(ctx: ServerContext) -> bool:
    """Run the learner's local task rather than train its weights."""
    if not is_local_task(ctx.learner):
        return False
    if not isinstance(ctx.learner, SupervisedLearner):
        return True
    strategy = registry.get("strategy", registry.name_of(ctx.scenario.strategy))
    return LOCAL_TASK in strategy.requires


def _supervised(ctx: ServerContext, baseline: str) -> SupervisedLearner:
    learner = ctx.learner
    if not isinstance(learner, SupervisedLearner):
        raise TypeError(
            f"baseline {baseline!r} needs a learner with weights; "
            f"{type(learner).__name__} has none (the strategy reports its own baselines)"
        )
    return learner


def _run_local(ctx: ServerContext, pid: int) -> Payload:
    """The learner's local task for client ``pid`` (-1: the pooled client), as a client runs it."""
    data = ctx.data.pooled_client() if pid < 0 else ctx.data.client(pid)
    task = ctx.task_context(pid, keys.LOCAL_TASK, LOCAL_ROUND)
    reply: Payload = ctx.learner.run_local(data, task)  # type: ignore[attr-defined]
    return reply


def centralized_local(ctx: ServerContext) -> dict[str, float]:
    """The local task once on the pooled data of all clients."""
    reply = _run_local(ctx, -1)
    save_local_arrays(ctx, "centralized", {-1: reply})
    return {k if "/" in k else f"test/{k}": float(v) for k, v in reply.metrics.items()}


def local_only_local(ctx: ServerContext) -> dict[str, float]:
    """The local task on each client: the ``local`` strategy's replies when it ran them."""
    payloads = ctx.local_results
    if payloads is None:
        payloads = {pid: _run_local(ctx, pid) for pid in range(ctx.scenario.num_clients)}
        ctx.recorder.replies("local_only", LOCAL_ROUND, Replies(ok=payloads))
        save_local_arrays(ctx, "local_only", payloads)
    return client_summary(payloads)


def _epochs(params: TrainingBaselineParams, ctx: ServerContext, learner: SupervisedLearner) -> int:
    return params.epochs or ctx.scenario.rounds * learner.epochs_per_round()


@register("baseline", "centralized", params=TrainingBaselineParams, requires=_NEEDS)
def centralized(params: TrainingBaselineParams, *, ctx: ServerContext) -> dict[str, float]:
    """The learner on all clients' data pooled (trained, or its local task run once)."""
    if _as_local_task(ctx):
        return centralized_local(ctx)
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


@register("baseline", "local_only", params=TrainingBaselineParams, requires=_NEEDS)
def local_only(params: TrainingBaselineParams, *, ctx: ServerContext) -> dict[str, float]:
    """Each client alone on its own data (trained, or its local task); metrics over clients."""
    if _as_local_task(ctx):
        return local_only_local(ctx)
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

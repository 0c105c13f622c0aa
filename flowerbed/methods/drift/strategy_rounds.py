"""The round loop of SCAFFOLD and FedDyn: seeded cohorts, server evaluation, records.

What :func:`flowerbed.strategies.fedavg.run_flower` gives Flower's strategies,
for a strategy whose server step Flower lacks: the cohort of round ``r`` is
``fed.sample(fraction_train, r)`` (the same for every strategy of a sweep),
replies come in partition-id order, the round's train metrics (weighted by
examples) are recorded as ``train/train/<metric>``, a ``fraction_evaluate``
share of clients scores the new model on its held-out split
(``evaluate/local_test/<metric>``), and the server scores it on the test split
in round 0, every ``metrics.eval_every`` rounds and the last
(``server_eval/test/<metric>``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flowerbed.core.messages import Arrays, Payload, Replies
from flowerbed.core.seeds import derive_seed
from flowerbed.methods.drift.learner import DriftSGDLearner
from flowerbed.strategies.base import ServerContext, Strategy
from flowerbed.strategies.federation import Federation

#: ``step(server_round, cohort, arrays) -> (new arrays, train replies)``.
RoundStep = Callable[[int, list[int], Arrays], tuple[Arrays, Replies]]


def drift_learner(ctx: ServerContext, strategy: str) -> DriftSGDLearner:
    """The scenario's learner, which must be ``sgd_drift``."""
    learner = ctx.learner
    if not isinstance(learner, DriftSGDLearner):
        raise TypeError(
            f"strategy {strategy} needs learner sgd_drift, got {type(learner).__name__}"
        )
    return learner


def initial_arrays(ctx: ServerContext, learner: DriftSGDLearner) -> Arrays:
    """The seeded initial weights every strategy of a sweep starts from (as ``fedavg``)."""
    return learner.init_arrays(ctx.data.dataset.meta, derive_seed(ctx.scenario.seed, "init"))


def weighted_metrics(replies: Replies) -> dict[str, float]:
    """Each metric's mean over the usable replies, weighted by ``num_examples``."""
    bodies = [b for b in replies.ok.values() if b.num_examples > 0]
    total = sum(b.num_examples for b in bodies)
    names = sorted({k for b in bodies for k in b.metrics})
    return {
        k: float(sum(b.metrics[k] * b.num_examples for b in bodies if k in b.metrics) / total)
        for k in names
    }


def server_evaluate(ctx: ServerContext, arrays: Arrays, server_round: int) -> dict[str, float]:
    """Score ``arrays`` on the test split and record ``server_eval/test/<metric>``."""
    data = ctx.data.dataset
    scores = ctx.learner.score(arrays, data.x_test, data.y_test, data.meta)  # type: ignore[attr-defined]
    named = {f"test/{k}": float(v) for k, v in scores.items()}
    ctx.recorder.metrics(server_round, "server_eval", named)
    return named


def run_rounds(
    fed: Federation,
    ctx: ServerContext,
    init: Arrays,
    fractions: tuple[float, float],
    step: RoundStep,
    strategy: Strategy,
) -> dict[str, float]:
    """``scenario.rounds`` rounds of ``step``; return the last server test metrics.

    ``fractions`` are ``(fraction_train, fraction_evaluate)``; a
    ``fraction_evaluate`` of 0 skips the clients' evaluation. Every
    ``checkpoint.every`` rounds the weights and ``strategy.state_dict()`` (the
    server's control variate or FedDyn's ``h``) are saved; a resumed run
    continues from the newest checkpoint.
    """
    fraction_train, fraction_evaluate = fractions
    checkpoints = ctx.checkpoints
    restored = checkpoints.restore() if checkpoints is not None else None
    if restored is None:
        start, arrays = 0, init
        final = server_evaluate(ctx, arrays, 0)
    else:
        start, state = restored
        arrays, final = state["arrays"], state["final"]
        strategy.load_state_dict(state["strategy"])
        ctx.recorder.event("resumed", round=start)
    for r in range(start + 1, ctx.scenario.rounds + 1):
        arrays, replies = step(r, fed.sample(fraction_train, r), arrays)
        if train := weighted_metrics(replies):
            ctx.recorder.metrics(r, "train", {f"train/{k}": v for k, v in train.items()})
        if fraction_evaluate > 0:
            cohort = fed.sample(fraction_evaluate, r, "evaluate")
            scored = fed.ask("evaluate", Payload(arrays=arrays), cohort, server_round=r)
            if local := weighted_metrics(scored):
                named = {f"local_test/{k}": v for k, v in local.items()}
                ctx.recorder.metrics(r, "evaluate", named)
        if ctx.should_evaluate(r):
            final = server_evaluate(ctx, arrays, r)
        if checkpoints is not None and checkpoints.due(r):
            saved: dict[str, Any] = {
                "arrays": arrays, "final": final, "strategy": strategy.state_dict()
            }
            checkpoints.save(r, saved)
    return final

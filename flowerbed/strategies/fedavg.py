"""FedAvg (McMahan et al., 2017) through Flower's own ``FedAvg`` strategy, seeded.

The Flower subclasses it runs on are in :mod:`flowerbed.strategies.flower_fedavg`.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from pydantic import Field

from flowerbed.clients.learner import SupervisedLearner
from flowerbed.core import registry
from flowerbed.core.messages import Payload
from flowerbed.core.registry import SUPERVISED, Params, register
from flowerbed.core.scenario import Scenario
from flowerbed.core.seeds import derive_seed
from flowerbed.strategies.base import ServerContext, Strategy
from flowerbed.strategies.federation import Federation

if TYPE_CHECKING:
    from flwr.app import ArrayRecord, ConfigRecord, MetricRecord
    from flwr.serverapp import Grid

    from flowerbed.strategies.flower_fedavg import SeededFedAvg


class FedAvgParams(Params):
    """Client fractions per round (Flower's FedAvg arguments)."""

    fraction_train: float = Field(1.0, gt=0, le=1)
    fraction_evaluate: float = Field(
        1.0, ge=0, le=1, description="clients evaluating on their held-out split; 0 skips"
    )


@contextmanager
def seeded_random(seed: int) -> Iterator[None]:
    """Seed Python's global ``random`` (which Flower samples with) for one block."""
    state = random.getstate()
    random.seed(seed)
    try:
        yield
    finally:
        random.setstate(state)


@register("strategy", "fedavg", requires=(SUPERVISED,))
class FedAvgStrategy(Strategy):
    """FedAvg: weighted average of client weights each round (Flower's implementation)."""

    Params = FedAvgParams
    checkpointing = True

    def run(self, fed: Federation, ctx: ServerContext) -> dict[str, float]:
        """Run ``scenario.rounds`` FedAvg rounds; return server-side test metrics."""
        p: FedAvgParams = self.params  # type: ignore[assignment]
        kwargs = {
            "fraction_train": p.fraction_train,
            "fraction_evaluate": p.fraction_evaluate,
            "min_train_nodes": 1,
            "min_evaluate_nodes": 1 if p.fraction_evaluate > 0 else 0,
        }
        return run_flower(self.scenario, fed, ctx, "FedAvg", kwargs)


def run_flower(
    scenario: Scenario,
    fed: Federation,
    ctx: ServerContext,
    flower_class: str,
    kwargs: dict[str, Any],
    wrap: Callable[[SeededFedAvg], Any] | None = None,
) -> dict[str, float]:
    """Run one of Flower's strategies (``flwr.serverapp.strategy.<flower_class>``), seeded.

    ``kwargs`` go to its constructor, besides ``min_available_nodes`` (every
    client); ``wrap``, when given, wraps the seeded strategy (a DP wrapper,
    :mod:`flowerbed.strategies.flower_dp`) and the wrapper runs instead.
    Cohorts come from the scenario seed, replies are aggregated in
    partition-id order and every round's metrics are recorded; the server
    evaluates the global model on the test split. Returns the last test metrics.
    """
    # Flower's strategy only once it runs: validating a scenario must stay light.
    from flwr.app import MetricRecord

    from flowerbed.strategies.flower_fedavg import FlowerGridView, seeded_strategy

    learner = ctx.learner
    if not isinstance(learner, SupervisedLearner):
        name = registry.name_of(scenario.component("strategy"))
        raise TypeError(f"{name} needs a learner with weights; {type(learner).__name__} has none")
    data = ctx.data
    meta = data.dataset.meta
    init = learner.init_arrays(meta, derive_seed(scenario.seed, "init"))
    view = FlowerGridView(fed)
    n = len(fed.partition_ids)
    strategy = seeded_strategy(flower_class)(
        scenario.seed, view, ctx, min_available_nodes=n, **kwargs
    )
    if wrap is not None:
        strategy = wrap(strategy)
    final: dict[str, float] = {}

    def evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord | None:
        if server_round and not ctx.should_evaluate(server_round):
            return None
        weights = Payload.from_record_arrays(arrays)
        scores = learner.score(weights, data.dataset.x_test, data.dataset.y_test, meta)
        named = {f"test/{k}": v for k, v in scores.items()}
        ctx.recorder.metrics(server_round, "server_eval", named)
        final.clear()
        final.update(named)
        return MetricRecord(scores)  # type: ignore[arg-type]

    drive(strategy, view, Payload(arrays=init).to_array_record(), ctx, evaluate, final)
    return final


def drive(
    strategy: SeededFedAvg,
    grid: Grid,
    initial: ArrayRecord,
    ctx: ServerContext,
    evaluate: Callable[[int, ArrayRecord], MetricRecord | None],
    final: dict[str, float],
    config: ConfigRecord | None = None,
) -> None:
    """Flower's round loop (``Strategy.start``), with checkpoints and resuming.

    The same calls in the same order as Flower's own loop: configure and
    aggregate training, configure and aggregate evaluation, then the server's
    evaluation; round 0 evaluates the initial weights. After every
    ``checkpoint.every`` rounds the global arrays, the strategy's
    ``state_dict()`` and the last server metrics are saved; a resumed run
    loads them and continues with the next round. ``config`` goes with every
    train and evaluate message (Flower's ``train_config`` / ``evaluate_config``).
    """
    from logging import INFO

    from flwr.app import ConfigRecord
    from flwr.common.logger import log

    scenario, checkpoints = ctx.scenario, ctx.checkpoints
    # Flower's own log lines of ``Strategy.start`` (shown with ``--verbose``).
    log(INFO, "Starting %s strategy:", type(strategy).__name__)
    strategy.summary()
    timeout = scenario.federation.timeout
    arrays, start = initial, 0
    restored = checkpoints.restore() if checkpoints is not None else None
    if restored is None:
        evaluate(0, arrays)
    else:
        start, state = restored
        strategy.load_state_dict(state["strategy"])
        arrays = Payload(arrays=state["arrays"]).to_array_record()
        final.update(state["final"])
        ctx.recorder.event("resumed", round=start)
    train_config = evaluate_config = ConfigRecord() if config is None else config
    for r in range(start + 1, scenario.rounds + 1):
        log(INFO, "[ROUND %s/%s]", r, scenario.rounds)
        replies = grid.send_and_receive(
            strategy.configure_train(r, arrays, train_config, grid), timeout=timeout
        )
        aggregated, _ = strategy.aggregate_train(r, replies)
        if aggregated is not None:
            arrays = aggregated
        replies = grid.send_and_receive(
            strategy.configure_evaluate(r, arrays, evaluate_config, grid), timeout=timeout
        )
        strategy.aggregate_evaluate(r, replies)
        evaluate(r, arrays)
        if checkpoints is not None and checkpoints.due(r):
            state = {
                "arrays": Payload.from_record_arrays(arrays),
                "strategy": strategy.state_dict(),
                "final": dict(final),
            }
            checkpoints.save(r, state)

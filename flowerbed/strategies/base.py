"""Server-side contract: a strategy drives the federation and returns final metrics."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from flowerbed.clients.learner import Learner, TaskContext, client_seed
from flowerbed.core import registry
from flowerbed.core.checkpoints import Checkpoints
from flowerbed.core.messages import Payload
from flowerbed.core.records import Recorder
from flowerbed.core.registry import Params as BaseParams
from flowerbed.core.scenario import Scenario
from flowerbed.data.federated import FederatedData, federated_data
from flowerbed.strategies.federation import Federation


@dataclass
class ServerContext:
    """What a strategy may use besides the federation.

    ``data`` gives the server the global test split (for server-side
    evaluation) and, in simulation, the pooled data that baselines use.
    """

    scenario: Scenario
    recorder: Recorder
    #: Comparison results a strategy computes from the same replies (e.g. naive
    #: averaging of local estimates), keyed by source name, shown beside
    #: ``federated`` and the registered baselines in the summary.
    extra_results: dict[str, dict[str, float]] = field(default_factory=dict)
    #: The run's client-state folder (see :mod:`flowerbed.clients.state`).
    state_root: Path | None = None
    #: Each client's ``run_local`` reply when strategy ``local`` ran them, so the
    #: ``local_only`` baseline reuses them instead of computing them again.
    local_results: dict[int, Payload] | None = None
    #: Where the strategy saves its checkpoints, and the one a resumed run starts from.
    checkpoints: Checkpoints | None = None
    #: What a row (``federated``, an ``extra_results`` source) or a metric of the
    #: summary means, in a few words each (``pooled_oracle``: "quantile
    #: regression on every client's rows pooled"); saved in ``summary.json``
    #: under ``legend`` and printed under the summary table.
    legend: dict[str, str] = field(default_factory=dict)

    def task_context(self, partition_id: int, message_type: str, server_round: int) -> TaskContext:
        """The context a client would get for this message (same seed, same state folder)."""
        seed = client_seed(self.scenario, partition_id, message_type, server_round)
        return TaskContext(self.scenario, partition_id, server_round, seed, self.state_root)

    @functools.cached_property
    def learner(self) -> Learner:
        """The scenario's learner, for server-side evaluation with the same code."""
        learner: Learner = registry.build(
            "learner", self.scenario.component("learner"), scenario=self.scenario
        )
        return learner

    @functools.cached_property
    def data(self) -> FederatedData:
        """The scenario's dataset and partition (built once per process)."""
        return federated_data(self.scenario)

    def should_evaluate(self, server_round: int) -> bool:
        """Server evaluation schedule: every ``metrics.eval_every`` rounds and the last."""
        every = self.scenario.metrics.eval_every
        return server_round % every == 0 or server_round == self.scenario.rounds


class Strategy:
    """A federated strategy driver.

    Subclasses implement :meth:`run`, talking to clients only through the
    :class:`Federation` and returning the final federated metrics, named
    ``<split>/<metric>`` (e.g. ``test/accuracy``), which the summary puts
    beside the baselines'. Per-round metrics go to ``ctx.recorder``.
    """

    Params: ClassVar[type[BaseParams]] = BaseParams
    #: Whether :meth:`run` saves ``ctx.checkpoints`` every ``checkpoint.every``
    #: rounds and resumes from them; a scenario asking a strategy that does
    #: not for checkpoints is refused before any work.
    checkpointing: ClassVar[bool] = False

    def __init__(self, params: BaseParams, *, scenario: Scenario) -> None:
        self.params = params
        self.scenario = scenario

    def run(self, fed: Federation, ctx: ServerContext) -> dict[str, float]:
        """Drive the federation to the end; return final metrics."""
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        """The server state a checkpoint saves (arrays, numbers, strings, nested dicts/lists).

        A strategy with :attr:`checkpointing` returns what its next round
        needs besides the global weights (optimiser moments, control variates,
        curves its summary is computed from); see :mod:`flowerbed.core.checkpoints`.
        """
        raise NotImplementedError(f"{type(self).__name__} does not save checkpoints")

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Put back what :meth:`state_dict` returned (a resumed run, before its next round)."""
        raise NotImplementedError(f"{type(self).__name__} does not save checkpoints")

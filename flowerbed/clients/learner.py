"""The learner contract: what runs on a client, routed by message type."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

from flowerbed.clients.state import ClientState, client_folder
from flowerbed.core import keys
from flowerbed.core.messages import Arrays, Payload
from flowerbed.core.registry import LOCAL_TASK, SUPERVISED
from flowerbed.core.registry import Params as BaseParams
from flowerbed.core.scenario import Scenario
from flowerbed.core.seeds import derive_seed
from flowerbed.data.base import ClientData, DatasetMeta

Handler = Callable[[ClientData, Payload, "TaskContext"], Payload]


class LocalTask(Protocol):
    """A learner with ``run_local``: the method on one client's data, reported as a payload."""

    def run_local(self, data: ClientData, ctx: TaskContext) -> Payload:
        """Run the method on ``data``; return metrics, optionally arrays and ``num_examples``."""
        ...


def is_local_task(learner: object) -> bool:
    """Whether ``learner`` offers ``run_local``."""
    return callable(getattr(learner, "run_local", None))


@dataclass(frozen=True)
class TaskContext:
    """What a learner may know about the message it is handling.

    ``seed`` is derived from the root seed, the partition id, the message type
    and the server round, so a learner that seeds everything from it is
    reproducible no matter which worker process runs it. ``state_root`` is the
    run's client-state folder (see :mod:`flowerbed.clients.state`); the
    platform sets it, and :meth:`client_state` is how a learner uses it.
    ``partition_id`` is -1 for the pooled virtual client of the
    ``centralized`` baseline.
    """

    scenario: Scenario
    partition_id: int
    server_round: int
    seed: int
    state_root: Path | None = None

    def client_state(self, name: str) -> ClientState:
        """The client's persistent folder ``name`` for the run (kept between rounds).

        Raises
        ------
        RuntimeError
            When the context was built without a state folder (a learner called
            outside a run, e.g. directly in a test, must pass ``state_root``).
        """
        if self.state_root is None:
            raise RuntimeError(
                f"client {self.partition_id}: no client state folder in this context "
                "(pass TaskContext(..., state_root=PATH) when calling a learner directly)"
            )
        return ClientState(client_folder(self.state_root, self.partition_id) / name)


def client_seed(scenario: Scenario, partition_id: int, message_type: str, server_round: int) -> int:
    """The seed of one client's handling of one message (the same on every engine)."""
    return derive_seed(scenario.seed, "client", partition_id, message_type, server_round)


class Learner:
    """Client-side logic of a method, independent of Flower.

    A learner exposes message handlers: a method ``train`` answers
    ``train`` / ``train.default`` messages, ``evaluate`` answers ``evaluate``,
    and ``query_<action>``, ``train_<action>``, ``evaluate_<action>`` answer
    ``<category>.<action>``. Each takes ``(data, payload, ctx)`` and returns a
    :class:`Payload`; it must not keep per-client state in ``self`` (the same
    instance serves many clients in one worker process): state that must
    outlive a message goes through ``ctx.client_state(name)``.

    A learner that defines ``run_local(data, ctx) -> Payload`` ("do the method
    on this data and report": metrics, optionally arrays) is a *local task*:
    strategy ``local`` runs it on every client, the ``centralized`` baseline
    once on the pooled data of all clients, ``local_only`` per client. It
    answers the ``train.local`` message.
    """

    Params: ClassVar[type[BaseParams]] = BaseParams
    #: Whether the learner trains the scenario's ``model:`` block (validation refuses
    #: a scenario without one instead of every client failing at setup).
    needs_model: ClassVar[bool] = False

    def __init__(self, params: BaseParams, *, scenario: Scenario) -> None:
        self.params = params
        self.scenario = scenario

    def warm(self) -> None:
        """Pay one-time costs before the first round (a worker calls it during setup).

        Libraries that load modules on first use (torch's optimisers import
        its compiler stack on the first step, ~4 s) would otherwise make
        round 1 many times as long as the rounds after it. Default: nothing.
        """

    @classmethod
    def capabilities(cls) -> set[str]:
        """What this learner offers, for validating strategies and baselines.

        ``supervised`` (weights: ``init_arrays``/``fit``/``score``),
        ``local_task`` (``run_local``), and every message type it answers.
        """
        caps = set(cls.actions())
        if issubclass(cls, SupervisedLearner):
            caps.add(SUPERVISED)
        if callable(getattr(cls, "run_local", None)):
            caps.add(LOCAL_TASK)
        return caps

    @classmethod
    def actions(cls) -> list[str]:
        """Message types this learner answers, e.g. ``["evaluate.default", "train.default"]``."""
        found = []
        if callable(getattr(cls, "run_local", None)):
            found.append(keys.LOCAL_TASK)
        for attr in dir(cls):
            if attr in ("train", "evaluate") and callable(getattr(cls, attr)):
                found.append(f"{attr}.default")
            for category in ("query", "train", "evaluate"):
                prefix = category + "_"
                if attr.startswith(prefix) and callable(getattr(cls, attr)):
                    found.append(f"{category}.{attr[len(prefix) :]}")
        return sorted(found)

    def handler(self, message_type: str) -> Handler:
        """The bound method answering ``message_type`` (``category[.action]``)."""
        category, _, action = message_type.partition(".")
        action = action or "default"
        name = category if action == "default" else f"{category}_{action}"
        if message_type == keys.LOCAL_TASK:
            return self._local_handler()
        fn = getattr(self, name, None)
        if fn is None or not callable(fn):
            raise ValueError(
                f"learner {type(self).__name__} has no handler for {message_type!r}; "
                f"it answers: {', '.join(self.actions())}"
            )
        result: Handler = fn
        return result

    def _local_handler(self) -> Handler:
        run_local = getattr(self, "run_local", None)
        if run_local is None:
            raise ValueError(
                f"learner {type(self).__name__} is not a local task (it has no run_local); "
                f"it answers: {', '.join(self.actions())}"
            )

        def handle(data: ClientData, payload: Payload, ctx: TaskContext) -> Payload:
            del payload  # a local task gets everything it needs from its data and ctx
            reply: Payload = run_local(data, ctx)
            return reply

        return handle


class SupervisedLearner(Learner):
    """A learner with trainable weights: enough for FedAvg-style strategies and baselines.

    Subclasses implement :meth:`init_arrays`, :meth:`fit` and :meth:`score`;
    the ``train`` and ``evaluate`` handlers are built from them, and the
    ``centralized`` and ``local_only`` baselines call them directly.
    """

    def init_arrays(self, meta: DatasetMeta, seed: int) -> Arrays:
        """Initial global weights for a dataset with this metadata."""
        raise NotImplementedError

    def fit(
        self,
        arrays: Arrays,
        x: Any,
        y: Any,
        meta: DatasetMeta,
        seed: int,
        epochs: int | None = None,
    ) -> tuple[Arrays, dict[str, float]]:
        """Train from ``arrays`` on ``(x, y)``; return new weights and training metrics."""
        raise NotImplementedError

    def score(self, arrays: Arrays, x: Any, y: Any, meta: DatasetMeta) -> dict[str, float]:
        """Metrics of the weights on ``(x, y)`` (e.g. ``loss``, ``accuracy``)."""
        raise NotImplementedError

    def epochs_per_round(self) -> int:
        """Local epochs one ``train`` message runs (baselines scale by rounds)."""
        return 1

    def train(self, data: ClientData, payload: Payload, ctx: TaskContext) -> Payload:
        """Local training from the received global weights."""
        arrays, metrics = self.fit(payload.arrays, data.x_train, data.y_train, data.meta, ctx.seed)
        return Payload(arrays=arrays, metrics=metrics, num_examples=data.num_train)

    def evaluate(self, data: ClientData, payload: Payload, ctx: TaskContext) -> Payload:
        """Metrics of the received weights on the client's held-out split."""
        del ctx
        if len(data.y_test) == 0:
            return Payload(num_examples=0)
        metrics = self.score(payload.arrays, data.x_test, data.y_test, data.meta)
        return Payload(metrics=metrics, num_examples=len(data.y_test))

"""Federated XGBoost by Flower's FedXgbBagging and FedXgbCyclic, seeded.

The bagging and cyclic training of Ma, Qiu & Lane, "Gradient-less Federated
Gradient Boosting Trees with Learnable Learning Rates" (EuroMLSys 2023,
arXiv:2304.07537), as Flower implements them (``flwr.serverapp.strategy``):

- ``fedxgb_bagging``: every sampled client boosts trees on top of the global
  booster and replies with its new trees only; Flower's ``aggregate_bagging``
  appends each reply's trees to the global model (the union of the trees).
- ``fedxgb_cyclic``: one client per round, round-robin, boosts on top of the
  global booster and its whole booster becomes the next global model. The
  round-robin order is the order Flower's first (seeded) sampling lists the
  clients in: round ``r`` trains client ``order[(r - 1) % n]``.

They run on :func:`flowerbed.strategies.fedavg.run_flower` like every Flower
strategy: cohorts from the scenario seed, replies in partition-id order,
every round recorded, the global booster scored on the test split by the
server (``server_eval/test/accuracy``, ``.../auc`` for two classes). The
client side is learner ``xgboost`` (:mod:`flowerbed.clients.xgboost_learner`).

Examples
--------
>>> registry.get("strategy", "fedxgb_cyclic").params(name="fedxgb_cyclic").fraction_evaluate
1.0
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from typing import Any, ClassVar, cast

from pydantic import Field, field_validator

from flowerbed.clients.xgboost_learner import MODEL, NEW_TREES, XGBoostLearner
from flowerbed.core import registry
from flowerbed.core.messages import Arrays, Replies
from flowerbed.core.registry import SUPERVISED, name_of, register
from flowerbed.strategies.base import ServerContext, Strategy
from flowerbed.strategies.federation import Federation
from flowerbed.strategies.flower_strategies import PLATFORM_SET, FlowerParams


class FedXgbParams(FlowerParams):
    """Base of the two schemas: both need learner ``xgboost`` and two clients or more."""

    #: What a client's train reply carries (read by learner ``xgboost``).
    booster_reply: ClassVar[str] = MODEL

    def scenario_problems(self, scenario: Any) -> list[str]:
        """The minimum cohorts, the learner, and Flower's least of two sampled clients."""
        found = super().scenario_problems(scenario)
        learner = name_of(scenario.learner)
        if not issubclass(registry.get("learner", learner).target, XGBoostLearner):
            found.append(
                f"name: {name_of(self)} aggregates XGBoost boosters; it needs learner "
                f"xgboost, not {learner!r}"
            )
        if scenario.num_clients < 2:
            found.append(f"name: {name_of(self)} samples 2 clients or more; num_clients=1")
        return found


class FedXgbBaggingParams(FedXgbParams):
    """Parameters of Flower's FedXgbBagging (FedAvg's sampling), with its defaults."""

    booster_reply: ClassVar[str] = NEW_TREES

    fraction_train: float = Field(1.0, gt=0, le=1, description="share of clients per round")
    fraction_evaluate: float = Field(
        1.0, ge=0, le=1, description="share of clients evaluating per round; 0 skips"
    )
    min_train_nodes: int = Field(2, ge=1, description="fewest clients asked to train")
    min_evaluate_nodes: int = Field(2, ge=0, description="fewest clients asked to evaluate")

    def scenario_problems(self, scenario: Any) -> list[str]:
        """Flower's bagging takes one boosting round per reply: ``num_local_round`` must be 1."""
        found = super().scenario_problems(scenario)
        rounds = getattr(scenario.learner, "num_local_round", 1)
        if rounds != 1:
            found.append(
                "name: Flower's FedXgbBagging appends one boosting round (num_parallel_tree "
                f"trees) of each reply; learner.num_local_round={rounds} would lose the "
                "others: set it to 1"
            )
        return found


class FedXgbCyclicParams(FedXgbParams):
    """Parameters of Flower's FedXgbCyclic (its ``fraction_train`` is fixed at 1)."""

    fraction_evaluate: float = Field(
        1.0, description="1: the round's client also evaluates the new model; 0: none"
    )

    @field_validator("fraction_evaluate")
    @classmethod
    def _zero_or_one(cls, value: float) -> float:
        if value not in (0.0, 1.0):
            raise ValueError("Flower's FedXgbCyclic takes fraction_evaluate 0 or 1 only")
        return value


class _AnyBoosterSize:
    """The federation, with train replies not held to the shape of what was sent.

    A booster's JSON grows every round (and bagging replies carry only new
    trees), so the check that a reply's arrays match the sent model's shapes
    does not apply; every other check (errors, non-finite metrics) does.
    """

    def __init__(self, fed: Federation) -> None:
        self._fed = fed

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fed, name)

    def sort_replies(
        self, raw: Iterable[Any], asked: list[int], expected: Arrays | None = None,
        sent: Iterable[Any] = (),
    ) -> Replies:  # fmt: skip
        """:meth:`Federation.sort_replies` without the shape check."""
        del expected
        return self._fed.sort_replies(raw, asked, None, sent=sent)


class FedXgbStrategy(Strategy):
    """Runs Flower's :attr:`flower_class` on boosters from learner ``xgboost``."""

    flower_class: ClassVar[str] = "FedXgbBagging"
    checkpointing = True  # Flower's strategy state, the global booster's bytes included

    def run(self, fed: Federation, ctx: ServerContext) -> dict[str, float]:
        """Run ``scenario.rounds`` rounds; return the global booster's test metrics."""
        import flwr.serverapp.strategy as flower

        from flowerbed.strategies.fedavg import run_flower

        name = name_of(self.params)
        if not isinstance(ctx.learner, XGBoostLearner):
            raise TypeError(f"{name} needs learner xgboost, not {type(ctx.learner).__name__}")
        meta = ctx.data.dataset.meta
        if self.flower_class == "FedXgbBagging" and meta.num_classes > 2:
            raise ValueError(
                f"{name}: Flower's aggregate_bagging appends num_parallel_tree trees of each "
                "reply, all for class 0, so it cannot aggregate a booster of one tree per class "
                f"per round ({meta.name!r} has {meta.num_classes} classes); use fedxgb_cyclic "
                "or a two-class or regression dataset"
            )
        kwargs = self.params.model_dump(exclude={"name"})
        accepted = inspect.signature(getattr(flower, self.flower_class).__init__).parameters
        kwargs.update({k: v for k, v in PLATFORM_SET.items() if k in accepted and v is not None})
        view = cast(Federation, _AnyBoosterSize(fed))
        return run_flower(self.scenario, view, ctx, self.flower_class, kwargs)


@register("strategy", "fedxgb_bagging", requires=(SUPERVISED,))
class FedXgbBaggingStrategy(FedXgbStrategy):
    """Federated XGBoost bagging (Ma et al., 2023): the union of the clients' new trees."""

    Params = FedXgbBaggingParams
    flower_class = "FedXgbBagging"


@register("strategy", "fedxgb_cyclic", requires=(SUPERVISED,))
class FedXgbCyclicStrategy(FedXgbStrategy):
    """Federated XGBoost cyclic (Ma et al., 2023): one client per round boosts, round-robin."""

    Params = FedXgbCyclicParams
    flower_class = "FedXgbCyclic"

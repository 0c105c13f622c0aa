"""Flower's message-API strategies by name (``flwr.serverapp.strategy``), seeded.

One generic driver, :class:`FlowerStrategy`, runs any of them the way
``fedavg`` runs Flower's FedAvg (:func:`flowerbed.strategies.fedavg.run_flower`):
cohorts drawn from the scenario seed, replies aggregated in partition-id order,
metrics recorded per round, the same numbers on every engine. Each strategy's
parameters are a strict schema built from :mod:`flowerbed.strategies.flower_catalog`,
a table generated from Flower's constructor signatures (one source of truth for
names, types and defaults; a test keeps it equal to the installed Flower).

Examples
--------
>>> FedAdamParams = registry.get("strategy", "fedadam").params
>>> FedAdamParams(name="fedadam").eta, FedAdamParams(name="fedadam").beta_2
(0.1, 0.99)
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field, create_model

from flowerbed.core import keys, registry
from flowerbed.core.registry import SUPERVISED, Params, register
from flowerbed.strategies.base import ServerContext, Strategy
from flowerbed.strategies.federation import Federation
from flowerbed.strategies.flower_catalog import FLOWER_VERSION, REQUIRED, STRATEGIES

#: Constructor parameters the platform sets (record keys, every client online).
PLATFORM_SET: dict[str, Any] = {
    "weighted_by_key": keys.NUM_EXAMPLES,
    "arrayrecord_key": keys.ARRAYS,
    "configrecord_key": keys.CONFIG,
    "train_loss_key": "loss",  # what every weight learner reports after training
    "min_available_nodes": None,  # the number of clients, set by run_flower
}
_TYPES: dict[str, Any] = {"float": float, "int": int, "str": str, "bool": bool}
#: Valid ranges and one-line descriptions, by parameter name (Flower's docstrings).
_FIELDS: dict[str, dict[str, Any]] = {
    "fraction_train": {"gt": 0, "le": 1, "description": "share of clients training per round"},
    "fraction_evaluate": {
        "ge": 0, "le": 1, "description": "share of clients evaluating per round; 0 skips",
    },
    "min_train_nodes": {"ge": 1, "description": "fewest clients asked to train"},
    "min_evaluate_nodes": {"ge": 0, "description": "fewest clients asked to evaluate"},
    "proximal_mu": {"ge": 0, "description": "μ of the clients' proximal term μ/2‖w - wᵗ‖²"},
    "server_learning_rate": {"gt": 0, "description": "server step on the averaged update"},
    "server_momentum": {"ge": 0, "lt": 1, "description": "server momentum β"},
    "eta": {"gt": 0, "description": "server learning rate η"},
    "eta_l": {"gt": 0, "description": "client learning rate η_l (kept by Flower, unused)"},
    "beta_1": {"ge": 0, "lt": 1, "description": "first-moment decay β₁"},
    "beta_2": {"ge": 0, "lt": 1, "description": "second-moment decay β₂"},
    "tau": {"gt": 0, "description": "adaptivity τ (added to √v)"},
    "client_learning_rate": {"gt": 0, "description": "clients' learning rate (L = 1/lr)"},
    "q": {"ge": 0, "description": "fairness q (0 is FedAvg-like)"},
    "num_malicious_nodes": {"ge": 0, "description": "assumed Byzantine clients f"},
    "num_nodes_to_select": {"ge": 1, "description": "updates averaged after scoring (m)"},
    "beta": {"ge": 0, "lt": 0.5, "description": "share trimmed at each end, per coordinate"},
}  # fmt: skip
#: Names Flower has that flowerbed does not run, with the reason (none at present:
#: the XGBoost pair runs in :mod:`flowerbed.strategies.flower_xgb`).
UNSUPPORTED: dict[str, str] = {}


class FlowerParams(Params):
    """Base of the Flower strategies' schemas: checks against the rest of the scenario."""

    def scenario_problems(self, scenario: Any) -> list[str]:
        """Minimum cohorts larger than the federation (Flower would wait forever)."""
        n = scenario.num_clients
        return [
            f"{field}: {getattr(self, field)} is more than num_clients={n}"
            for field in ("min_train_nodes", "min_evaluate_nodes")
            if getattr(self, field, 0) > n
        ]


def strategy_params(name: str) -> type[Params]:
    """The strict schema of Flower strategy ``name``: its constructor, less what the platform sets.

    Fields, types and defaults come from the catalog; a parameter without a
    default is required. Callables (custom metric aggregation) are not exposed.
    """
    cls_name, table = STRATEGIES[name]
    fields: dict[str, Any] = {}
    for pname, ptype, default in table:
        if ptype == "callable" or pname in PLATFORM_SET:
            continue
        if ptype not in _TYPES:
            raise TypeError(f"{cls_name}.{pname}: no schema type for {ptype!r}")
        value = ... if default == REQUIRED else default
        fields[pname] = (_TYPES[ptype], Field(value, **_FIELDS.get(pname, {})))
    model: type[Params] = create_model(f"{cls_name}Params", __base__=FlowerParams, **fields)
    model.__doc__ = f"Parameters of Flower {FLOWER_VERSION}'s {cls_name}, with its defaults."
    return model


def flower_kwargs(params: Params) -> tuple[str, dict[str, Any]]:
    """The Flower class and constructor arguments of a Flower strategy's params.

    ``params`` is a :func:`strategy_params` model with a ``name``; what the
    platform sets (:data:`PLATFORM_SET`) is added where the class accepts it.
    """
    name = registry.name_of(params)
    cls_name, table = STRATEGIES[name]
    kwargs = params.model_dump(exclude={"name"})
    accepted = {p for p, _, _ in table}
    kwargs.update({k: v for k, v in PLATFORM_SET.items() if k in accepted and v is not None})
    return cls_name, kwargs


class FlowerStrategy(Strategy):
    """Runs the Flower strategy :attr:`flower_class` with the scenario's parameters."""

    flower_class: ClassVar[str] = "FedAvg"
    checkpointing = True

    def run(self, fed: Federation, ctx: ServerContext) -> dict[str, float]:
        """Run ``scenario.rounds`` rounds of the strategy; return server-side test metrics."""
        from flowerbed.strategies.fedavg import run_flower

        _, kwargs = flower_kwargs(self.params)
        return run_flower(self.scenario, fed, ctx, self.flower_class, kwargs)


def _driver(name: str, summary: str) -> type[FlowerStrategy]:
    """The registered class of strategy ``name``: :class:`FlowerStrategy` for its Flower class."""
    cls_name = STRATEGIES[name][0]
    attrs = {
        "__doc__": f"{summary} (Flower's {cls_name}).",
        "__module__": __name__,
        "flower_class": cls_name,
        "Params": strategy_params(name),
    }
    return type(f"{cls_name}Strategy", (FlowerStrategy,), attrs)


_NEEDS = (SUPERVISED,)
register("strategy", "fedprox", requires=_NEEDS)(
    _driver("fedprox", "FedProx (Li et al., 2020): clients add μ/2‖w - wᵗ‖² to their loss")
)
register("strategy", "fedavgm", requires=_NEEDS)(
    _driver("fedavgm", "FedAvgM (Hsu et al., 2019): FedAvg with server momentum")
)
register("strategy", "fedadam", requires=_NEEDS)(
    _driver("fedadam", "FedAdam (Reddi et al., 2021): Adam on the averaged update, server side")
)
register("strategy", "fedyogi", requires=_NEEDS)(
    _driver("fedyogi", "FedYogi (Reddi et al., 2021): Yogi on the averaged update, server side")
)
register("strategy", "fedadagrad", requires=_NEEDS)(
    _driver("fedadagrad", "FedAdagrad (Reddi et al., 2021): Adagrad on the averaged update")
)
register("strategy", "qfedavg", requires=_NEEDS)(
    _driver("qfedavg", "q-FedAvg (Li et al., 2020): updates reweighted by loss^q for fairness")
)
register("strategy", "krum", requires=_NEEDS)(
    _driver("krum", "Krum (Blanchard et al., 2017): the update closest to its neighbours")
)
register("strategy", "multikrum", requires=_NEEDS)(
    _driver("multikrum", "Multi-Krum (Blanchard et al., 2017): mean of the m best Krum scores")
)
register("strategy", "bulyan", requires=_NEEDS)(
    _driver("bulyan", "Bulyan (El Mhamdi et al., 2018): Krum selection, then a trimmed mean")
)
register("strategy", "fedmedian", requires=_NEEDS)(
    _driver("fedmedian", "FedMedian (Yin et al., 2018): coordinate-wise median of the updates")
)
register("strategy", "fedtrimmedavg", requires=_NEEDS)(
    _driver("fedtrimmedavg", "FedTrimmedAvg (Yin et al., 2018): coordinate-wise trimmed mean")
)

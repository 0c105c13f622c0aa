"""Flower's differential-privacy wrappers by name, around any Flower strategy, with ε.

Central DP of DP-FedAvg (McMahan et al., "Learning Differentially Private
Recurrent Language Models", ICLR 2018, https://arxiv.org/abs/1710.06963): each
update is clipped to norm C, the mean of the m sampled updates gets Gaussian
noise of std z·C/m. ``dp_server_fixed`` / ``dp_client_fixed`` clip to a fixed C
on the server or on the clients (Flower's ``fixedclipping_mod``, applied by
:mod:`flowerbed.clients.dp_mods`); ``dp_server_adaptive`` / ``dp_client_adaptive``
adapt C to a quantile of the update norms (Andrew et al., "Differentially
Private Learning with Adaptive Clipping", NeurIPS 2021,
https://arxiv.org/abs/1905.03871). The wrappers are Flower's own classes; their
parameters are a strict schema read from their signatures
(:data:`flowerbed.strategies.flower_catalog.WRAPPERS`), plus ``inner`` (any
Flower strategy by name) and, for fixed clipping, ``delta``.

ε: fixed clipping with ``delta`` set reports ε at that δ after every round
(``privacy/rdp/epsilon`` in the metrics, ``results.privacy`` in the summary),
from the RDP curve of the composed Gaussian releases
(:mod:`flowerbed.algorithms.dp_accounting`, no amplification by sampling, as
Flower's accounted mode). That needs an inner strategy whose aggregate is
FedAvg's plain mean (``fedavg``, ``fedprox``): noise of std z·C/m covers the
mean's sensitivity C/m, not that of a median, Krum or a server optimiser's step.
The adaptive variants report no ε (Flower ships no accountant for them; see
``docs/strategies/dp.md``).

Examples
--------
>>> from flowerbed.core import registry
>>> P = registry.get("strategy", "dp_server_fixed").params
>>> p = P(name="dp_server_fixed", noise_multiplier=1.0, clipping_norm=0.5, num_sampled_clients=4)
>>> p.inner.name, p.delta
('fedavg', 1e-05)
"""

from __future__ import annotations

import functools
from typing import Annotated, Any, ClassVar, Literal, Union, cast

from pydantic import Field, create_model

from flowerbed.core.registry import SUPERVISED, Params, register
from flowerbed.strategies.base import ServerContext, Strategy
from flowerbed.strategies.federation import Federation
from flowerbed.strategies.flower_catalog import (
    FLOWER_VERSION,
    MEAN_AGGREGATING,
    REQUIRED,
    STRATEGIES,
    WRAPPERS,
)
from flowerbed.strategies.flower_strategies import flower_kwargs, strategy_params

#: Wrapper parameters the platform sets: the inner strategy and the accountant.
PLATFORM_SET = frozenset({"strategy", "accountant"})
_TYPES: dict[str, Any] = {"float": float, "int": int, "float | None": float | None}
#: Valid ranges and descriptions, by parameter name (Flower's docstrings).
_FIELDS: dict[str, dict[str, Any]] = {
    "noise_multiplier": {"ge": 0, "description": "z: noise std is z·C/m on the mean update"},
    "clipping_norm": {"gt": 0, "description": "C: L2 norm each update is clipped to"},
    "num_sampled_clients": {"ge": 1, "description": "m: clients sampled per round"},
    "initial_clipping_norm": {"gt": 0, "description": "C of round 1 (then adapted)"},
    "target_clipped_quantile": {"ge": 0, "le": 1, "description": "quantile C adapts to"},
    "clip_norm_lr": {"gt": 0, "description": "step of C's geometric update"},
    "clipped_count_stddev": {"ge": 0, "description": "noise std on the clipped count"},
}  # fmt: skip
#: Default δ of the accounted variants (ε is reported at it; null: not accounted).
DEFAULT_DELTA = 1e-5


@functools.cache
def _inner_model(name: str) -> type[Params]:
    """Flower strategy ``name``'s schema as an ``inner`` block (``name`` its discriminator)."""
    literal: Any = Literal[name]  # type: ignore[valid-type]
    base: Any = strategy_params(name)
    model: Any = create_model(
        f"Inner{STRATEGIES[name][0]}Params", __base__=base, name=(literal, name)
    )
    return cast("type[Params]", model)


#: Any Flower strategy run by name, as the wrapped one.
InnerStrategy: Any = Annotated[
    Union[tuple(_inner_model(n) for n in STRATEGIES)],  # noqa: UP007
    Field(discriminator="name"),
]


class DPParams(Params):
    """Base of the DP wrappers' schemas: checks against the inner strategy and the scenario."""

    def scenario_problems(self, scenario: Any) -> list[str]:
        """Cohort size ≠ m, an inner strategy ε does not cover, noise Flower cannot split."""
        p: Any = self
        inner = p.inner
        found = [f"inner.{line}" for line in inner.scenario_problems(scenario)]
        n = scenario.num_clients
        cohort = max(int(n * inner.fraction_train), inner.min_train_nodes)
        if cohort != p.num_sampled_clients:
            found.append(
                f"num_sampled_clients: {p.num_sampled_clients}, but {inner.name} samples "
                f"{cohort} of num_clients={n} per round (max(int(n·fraction_train), "
                "min_train_nodes)); the noise std z·C/m is calibrated to m"
            )
        if getattr(p, "delta", None) is not None:
            if p.noise_multiplier == 0:
                found.append("delta: noise_multiplier 0 adds no noise (ε is infinite); "
                             "set delta: null to run without accounting")  # fmt: skip
            if inner.name not in MEAN_AGGREGATING:
                found.append(
                    f"delta: ε is accounted only around a plain mean "
                    f"({', '.join(MEAN_AGGREGATING)}), not {inner.name}; "
                    "set delta: null to run it without ε"
                )
        stddev = getattr(p, "clipped_count_stddev", "fixed")
        if stddev != "fixed" and p.noise_multiplier > 0:
            sigma_b = p.num_sampled_clients / 20 if stddev is None else stddev
            if p.noise_multiplier >= 2 * sigma_b:
                found.append(
                    f"noise_multiplier: {p.noise_multiplier} is not below 2·clipped_count_stddev"
                    f" = {2 * sigma_b:g} (Flower splits z between the update sum and the "
                    "clipped count only then); raise clipped_count_stddev"
                )
        return found


def dp_params(name: str) -> type[Params]:
    """The strict schema of DP wrapper ``name``: its constructor, less what the platform sets."""
    cls_name, table = WRAPPERS[name]
    fields: dict[str, Any] = {
        "inner": (InnerStrategy, Field(default_factory=_default_inner,
                                       description="the wrapped Flower strategy")),
    }  # fmt: skip
    for pname, ptype, default in table:
        if pname in PLATFORM_SET:
            continue
        if ptype not in _TYPES:
            raise TypeError(f"{cls_name}.{pname}: no schema type for {ptype!r}")
        value = ... if default == REQUIRED else default
        fields[pname] = (_TYPES[ptype], Field(value, **_FIELDS.get(pname, {})))
    if "accountant" in {row[0] for row in table}:
        fields["delta"] = (
            float | None,
            Field(DEFAULT_DELTA, gt=0, lt=1, description="δ of the ε reported; null: no ε"),
        )
    model: type[Params] = create_model(f"{cls_name}Params", __base__=DPParams, **fields)
    model.__doc__ = f"Parameters of Flower {FLOWER_VERSION}'s {cls_name}, with its defaults."
    return model


def _default_inner() -> Any:
    model: Any = _inner_model("fedavg")
    return model(name="fedavg")


class DPStrategy(Strategy):
    """Runs Flower's DP wrapper :attr:`flower_class` around the ``inner`` strategy."""

    flower_class: ClassVar[str] = "DifferentialPrivacyServerSideFixedClipping"
    checkpointing = True  # the wrapper, its inner strategy and the accountant (SeededDP)

    def run(self, fed: Federation, ctx: ServerContext) -> dict[str, float]:
        """Run ``scenario.rounds`` rounds; return server-side test metrics."""
        from flowerbed.strategies.fedavg import run_flower
        from flowerbed.strategies.flower_dp_seeded import dp_wrapper

        p: Any = self.params
        inner_class, inner_kwargs = flower_kwargs(p.inner)
        kwargs = p.model_dump(exclude={"name", "inner", "delta"})
        delta = getattr(p, "delta", None)
        wrap = functools.partial(
            dp_wrapper, self.flower_class, kwargs, delta, self.scenario.num_clients
        )
        return run_flower(self.scenario, fed, ctx, inner_class, inner_kwargs, wrap=wrap)


def _driver(name: str, summary: str) -> type[DPStrategy]:
    """The registered class of DP strategy ``name``."""
    cls_name = WRAPPERS[name][0]
    attrs = {
        "__doc__": f"{summary} (Flower's {cls_name}).",
        "__module__": __name__,
        "flower_class": cls_name,
        "Params": dp_params(name),
    }
    return type(f"{cls_name}Strategy", (DPStrategy,), attrs)


_NEEDS = (SUPERVISED,)
register("strategy", "dp_server_fixed", requires=_NEEDS)(
    _driver("dp_server_fixed", "Central DP, fixed clipping on the server (McMahan et al., 2018)")
)
register("strategy", "dp_client_fixed", requires=_NEEDS)(
    _driver("dp_client_fixed", "Central DP, fixed clipping on the clients (McMahan et al., 2018)")
)
register("strategy", "dp_server_adaptive", requires=_NEEDS)(
    _driver("dp_server_adaptive", "Central DP, adaptive clipping on the server (Andrew et al.)")
)
register("strategy", "dp_client_adaptive", requires=_NEEDS)(
    _driver("dp_client_adaptive", "Central DP, adaptive clipping on the clients (Andrew et al.)")
)

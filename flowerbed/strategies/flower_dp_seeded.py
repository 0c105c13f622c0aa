"""The Flower subclasses behind the DP strategies of :mod:`flowerbed.strategies.flower_dp`.

Kept apart from the registered strategies and their params, which a scenario's
validation imports, so that only running a strategy imports Flower.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import flwr.serverapp.strategy as flower
import numpy as np
from flwr.app import ArrayRecord, Message, MetricRecord
from flwr.serverapp.strategy import Strategy
from flwr.supercore.differential_privacy import compute_stdv
from flwr.supercore.privacy_accounting import (
    GaussianPrivacyEvent,
    NeighboringRelation,
    PrivacyConfig,
    PrivacySpent,
    SamplingMethod,
)

from flowerbed.algorithms.dp_accounting import GaussianAccountant
from flowerbed.core.seeds import derive_seed
from flowerbed.strategies.flower_fedavg import SeededFedAvg, from_state, instance_state

#: Row phase of the per-round privacy metrics (``privacy/rdp/epsilon``, ...).
PHASE = "privacy"


class RdpAccountant:
    """Flower's ``PrivacyAccountant`` protocol over :class:`GaussianAccountant`.

    Flower's own ``RdpAccountant`` wraps Google's ``dp-accounting`` (the
    ``flwr[dp]`` extra, not installed); this one computes the same RDP curve
    for the only sampling Flower's fixed-clipping wrappers account,
    ``NO_AMPLIFICATION``, so the wrappers' own accounting code runs unchanged.
    """

    def __init__(self, config: PrivacyConfig) -> None:
        if config.sampling_method is not SamplingMethod.NO_AMPLIFICATION:
            raise ValueError("only sampling_method='no-amplification' is accounted")
        self._config = config
        self._curve = GaussianAccountant()
        self._events: list[tuple[float, int]] = []

    @property
    def config(self) -> PrivacyConfig:
        """The privacy configuration (δ, population, relation, sampling)."""
        return self._config

    @property
    def num_releases(self) -> int:
        """Private releases composed so far."""
        return self._curve.releases

    def compose(self, event: GaussianPrivacyEvent, count: int = 1) -> None:
        """Add ``count`` Gaussian releases with the event's noise multiplier."""
        if event.population_size != self._config.population_size:
            raise ValueError("the event's population_size differs from the config's")
        self._curve.compose(event.noise_multiplier, count)
        self._events.append((event.noise_multiplier, count))

    def get_epsilon(self, delta: float) -> float:
        """ε spent so far at ``delta``."""
        return self._curve.epsilon(delta)[0]

    def get_delta(self, epsilon: float) -> float:
        """Not provided: flowerbed reports ε at a fixed δ."""
        raise NotImplementedError("flowerbed's accountant reports ε at a given δ only")

    def get_privacy_spent(self, delta: float | None = None) -> PrivacySpent:
        """ε at ``delta`` (the config's by default), with the releases and order."""
        target = self._config.target_delta if delta is None else delta
        epsilon, order = self._curve.epsilon(target)
        return PrivacySpent(epsilon, target, self.num_releases, "rdp", order)

    def would_exceed(
        self, event: GaussianPrivacyEvent, max_epsilon: float | None = None, count: int = 1
    ) -> bool:
        """Whether ``count`` more releases would take ε past the limit (nothing is composed)."""
        limit = self._config.max_epsilon if max_epsilon is None else max_epsilon
        if limit is None:
            raise ValueError("no max_epsilon to compare with")
        projected = GaussianAccountant()
        projected.rdp = self._curve.rdp.copy()
        projected.releases = self._curve.releases
        projected.compose(event.noise_multiplier, count)
        return projected.epsilon(self._config.target_delta)[0] > limit

    def state_dict(self) -> dict[str, object]:
        """The composed events, from which the curve is rebuilt."""
        return {"events": [list(e) for e in self._events]}

    def load_state_dict(self, state: dict[str, object]) -> None:
        """Rebuild the curve from :meth:`state_dict`'s events."""
        self._curve, self._events = GaussianAccountant(), []
        for z, count in state["events"]:  # type: ignore[attr-defined]
            self._curve.compose(float(z), int(count))
            self._events.append((float(z), int(count)))


@contextmanager
def seeded_numpy(seed: int) -> Iterator[None]:
    """Seed NumPy's global generator (which Flower's DP noise draws from) for one block."""
    state = np.random.get_state()
    np.random.seed(seed % 2**32)
    try:
        yield
    finally:
        np.random.set_state(state)


class SeededDP(Strategy):
    """A Flower DP wrapper with seeded noise, equal client weights and privacy metrics.

    Put before the Flower wrapper in the MRO (:func:`seeded_dp`). Each round's
    noise (and the adaptive variants' noisy clipped count) is drawn from a
    seed derived from the scenario seed and the round; every sampled client
    weighs 1 in the mean, the sensitivity ``C/m`` that Flower's noise std
    ``z·C/m`` is calibrated to; the row ``privacy/...`` records the noise std
    added, the clipping norm used and, when accounted, ε at δ.
    """

    strategy: SeededFedAvg
    clipping_norm: float
    noise_multiplier: float
    num_sampled_clients: int
    accountant: RdpAccountant | None

    def state_dict(self) -> dict[str, Any]:
        """The inner strategy's state, the wrapper's own (the adaptive clipping norm), ε so far.

        As ``SeededFedAvg.state_dict``: every non-callable attribute Flower's
        wrapper holds, so nothing it carries from one round to the next is lost.
        """
        own = instance_state(self, frozenset({"strategy", "accountant"}))
        state: dict[str, Any] = {"inner": self.strategy.state_dict(), "own": own}
        if getattr(self, "accountant", None) is not None:
            state["accountant"] = self.accountant.state_dict()  # type: ignore[union-attr]
        if PHASE in self.strategy.ctx.extra_results:
            state["privacy"] = dict(self.strategy.ctx.extra_results[PHASE])
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Put back what :meth:`state_dict` returned."""
        self.strategy.load_state_dict(state["inner"])
        for k, v in state["own"].items():
            setattr(self, k, from_state(v))
        if "accountant" in state:
            self.accountant.load_state_dict(state["accountant"])  # type: ignore[union-attr]
        if "privacy" in state:
            self.strategy.ctx.extra_results[PHASE] = dict(state["privacy"])

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Flower's clipped, noised aggregate, seeded, then the round's privacy row."""
        inner = self.strategy
        replies = equal_weights(list(replies), inner.weighted_by_key)
        used = self.clipping_norm
        with seeded_numpy(derive_seed(inner.root_seed, "dp", "noise", server_round)):
            arrays, metrics = super().aggregate_train(server_round, replies)  # type: ignore[safe-super]
        if arrays is not None:
            self._record(server_round, used)
        return arrays, metrics

    def _record(self, server_round: int, used: float) -> None:
        """The noise std Flower added (from its norm now), the norm clipped to, ε so far."""
        std = compute_stdv(self.noise_multiplier, self.clipping_norm, self.num_sampled_clients)
        values = {"noise/std": std, "clip/norm": used}
        if getattr(self, "accountant", None) is not None:
            spent = self.accountant.get_privacy_spent()  # type: ignore[union-attr]
            account = {"rdp/epsilon": spent.epsilon, "rdp/delta": spent.delta}
            values.update(account)
            self.strategy.ctx.extra_results[PHASE] = {
                **account, "rdp/releases": float(spent.num_releases),
            }  # fmt: skip
        self.strategy.ctx.recorder.metrics(server_round, PHASE, values)


def equal_weights(replies: list[Message], key: str) -> list[Message]:
    """Set every reply's weight ``key`` to 1 (in place), so the mean is unweighted."""
    for reply in replies:
        if reply.has_error():
            continue
        for record in reply.content.metric_records.values():
            if key in record:
                record[key] = 1
    return replies


@functools.cache
def seeded_dp(flower_class: str) -> type[SeededDP]:
    """:class:`SeededDP` on top of Flower's DP wrapper ``flower_class``.

    Examples
    --------
    >>> [c.__name__ for c in seeded_dp("DifferentialPrivacyClientSideFixedClipping").__mro__[:3]]
    ['SeededDifferentialPrivacyClientSideFixedClipping', 'SeededDP', \
'DifferentialPrivacyClientSideFixedClipping']
    """
    base = getattr(flower, flower_class)
    name = f"Seeded{flower_class}"
    return type(name, (SeededDP, base), {"__module__": __name__})


def dp_wrapper(
    flower_class: str,
    kwargs: dict[str, Any],
    delta: float | None,
    population: int,
    inner: SeededFedAvg,
) -> SeededDP:
    """Flower's ``flower_class`` around ``inner``; an accountant at ``delta`` when given.

    The accountant is attached after Flower's constructor, which accepts one
    only around an unsubclassed ``FedAvg.aggregate_train``: flowerbed's
    seeded subclasses add recording around it, and the scenario check
    (``MEAN_AGGREGATING``) keeps the accounted inner strategies to the ones
    whose Flower class aggregates with it.
    """
    cls: Any = seeded_dp(flower_class)
    wrapper: SeededDP = cls(inner, **kwargs)
    if delta is not None:
        config = PrivacyConfig(
            target_delta=delta,
            population_size=population,
            neighboring_relation=NeighboringRelation.ADD_OR_REMOVE_ONE,
            sampling_method=SamplingMethod.NO_AMPLIFICATION,
        )
        wrapper.accountant = RdpAccountant(config)
    return wrapper

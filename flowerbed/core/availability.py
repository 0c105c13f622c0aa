"""Client availability in virtual time: per-round dropout and straggler latency.

A pure module: who drops and who is late in a round depends only on
``(params, root seed, round, partition id)``. Each client's draws use their own
derived seed, so a client's fate does not depend on which other clients were
sampled, and every strategy in a sweep sees the same failures. Nothing sleeps:
latencies are virtual seconds that a caller compares with the deadline.

Examples
--------
>>> params = AvailabilityParams(dropout=0.2, latency="lognormal", deadline=2.0)
>>> r = round_availability(params, root_seed=0, server_round=1, partition_ids=range(10))
>>> sorted(r.dropped + r.late + r.on_time) == list(range(10))
True
>>> round_availability(AvailabilityParams(), 0, 1, [3, 4]).on_time
(3, 4)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import Field

from flowerbed.core.registry import Params
from flowerbed.core.seeds import rng


class AvailabilityParams(Params):
    """Dropout and straggler profile of the clients (defaults: always available, instant).

    Attributes
    ----------
    dropout
        Probability that a sampled client fails to reply in a round
        (independent across clients and rounds).
    latency
        ``none``: every reply takes 0 virtual seconds. ``lognormal``: a reply
        takes ``latency_median * speed_i * exp(latency_sigma * z)`` seconds,
        ``z ~ N(0, 1)`` fresh each round.
    latency_median, latency_sigma
        Median (virtual seconds) and per-round log-spread of the latency.
    client_speed_sigma
        Log-spread of a persistent per-client slowness factor
        ``speed_i = exp(client_speed_sigma * z_i)`` (0: all clients alike).
    deadline
        Replies slower than this many virtual seconds are late (stragglers);
        ``None`` waits for everyone.
    """

    dropout: float = Field(0.0, ge=0, le=1)
    latency: Literal["none", "lognormal"] = "none"
    latency_median: float = Field(1.0, gt=0)
    latency_sigma: float = Field(0.5, ge=0)
    client_speed_sigma: float = Field(0.0, ge=0)
    deadline: float | None = Field(None, gt=0)


@dataclass(frozen=True)
class RoundAvailability:
    """Outcome of one round for the asked clients.

    Attributes
    ----------
    server_round
        The round these draws belong to.
    dropped
        Clients that do not reply at all (in the order given).
    late
        Clients that reply after the deadline (stragglers).
    on_time
        Clients whose reply arrives in time.
    latency
        Virtual seconds to reply, for every client that did not drop.
    deadline
        The deadline the round used (``None``: none).
    """

    server_round: int
    dropped: tuple[int, ...]
    late: tuple[int, ...]
    on_time: tuple[int, ...]
    latency: Mapping[int, float]
    deadline: float | None

    @property
    def round_time(self) -> float:
        """Virtual duration of the round: the deadline if anyone was late, else the slowest."""
        if self.late and self.deadline is not None:
            return self.deadline
        return max((self.latency[p] for p in self.on_time), default=0.0)


def client_speed(params: AvailabilityParams, root_seed: int, partition_id: int) -> float:
    """Persistent slowness factor of a client (1.0 when ``client_speed_sigma`` is 0)."""
    if params.client_speed_sigma == 0:
        return 1.0
    z = rng(root_seed, "availability", "speed", partition_id).standard_normal()
    return float(np.exp(params.client_speed_sigma * z))


def client_round(
    params: AvailabilityParams, root_seed: int, server_round: int, partition_id: int
) -> tuple[bool, float]:
    """``(dropped, latency)`` of one client in one round, from its own derived seed."""
    gen = rng(root_seed, "availability", server_round, partition_id)
    dropped = bool(gen.random() < params.dropout)
    if params.latency == "none":
        return dropped, 0.0
    z = gen.standard_normal()
    speed = client_speed(params, root_seed, partition_id)
    return dropped, float(params.latency_median * speed * np.exp(params.latency_sigma * z))


def round_availability(
    params: AvailabilityParams,
    root_seed: int,
    server_round: int,
    partition_ids: Iterable[int],
) -> RoundAvailability:
    """Which of ``partition_ids`` drop, which are late, and everyone's virtual latency."""
    dropped: list[int] = []
    late: list[int] = []
    on_time: list[int] = []
    latency: dict[int, float] = {}
    for pid in partition_ids:
        gone, seconds = client_round(params, root_seed, server_round, int(pid))
        if gone:
            dropped.append(int(pid))
            continue
        latency[int(pid)] = seconds
        is_late = params.deadline is not None and seconds > params.deadline
        (late if is_late else on_time).append(int(pid))
    return RoundAvailability(
        server_round, tuple(dropped), tuple(late), tuple(on_time), latency, params.deadline
    )

"""RDP accounting of composed Gaussian releases (Mironov, 2017), ε by Canonne et al. (2020).

Mironov, "Rényi Differential Privacy", CSF 2017 (https://arxiv.org/abs/1702.07476):
the Gaussian mechanism whose noise std is ``z`` times the L2 sensitivity is
(λ, λ / (2 z²))-RDP at every order λ > 1 (Proposition 7), and RDP composes by
adding the curves (Proposition 1). The curve is turned into (ε, δ)-DP with the
conversion of Canonne, Kamath & Steinke, "The Discrete Gaussian for Differential
Privacy", NeurIPS 2020 (https://arxiv.org/abs/2004.00010, Proposition 12):
ε = min over λ of  r(λ) + log(1 - 1/λ) - log(δ λ) / (λ - 1),  never worse than
Mironov's ``r(λ) + log(1/δ) / (λ - 1)``.

Releases are not amplified by sampling: a flowerbed cohort is a function of the
scenario's (public) seed, so the sampling is no secret, and every round counts
as one full Gaussian release (Flower's ``SamplingMethod.NO_AMPLIFICATION``).

Examples
--------
>>> acc = GaussianAccountant()
>>> acc.compose(noise_multiplier=1.0, count=10)
>>> round(acc.epsilon(1e-5)[0], 3)
19.054
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

#: Rényi orders the curve is kept at: 1.1 to 10.9 by 0.1, 11 to 63, then 128 to 1024
#: (the grid Google's ``dp-accounting`` uses, so the two report the same ε).
DEFAULT_ORDERS: tuple[float, ...] = (
    *(1 + k / 10 for k in range(1, 100)),
    *(float(a) for a in range(11, 64)),
    128.0,
    256.0,
    512.0,
    1024.0,
)


def gaussian_rdp(
    noise_multiplier: float, orders: Sequence[float] = DEFAULT_ORDERS, count: int = 1
) -> np.ndarray:
    """RDP curve ``count · λ / (2 z²)`` of ``count`` Gaussian releases with multiplier ``z``."""
    if noise_multiplier <= 0:
        raise ValueError("the noise multiplier must be positive to account for it")
    return count * np.asarray(orders, dtype=float) / (2.0 * noise_multiplier**2)


def epsilon_from_rdp(
    rdp: Sequence[float] | np.ndarray, orders: Sequence[float], delta: float
) -> tuple[float, float]:
    """The smallest ε (and its order) an RDP curve gives at ``delta`` (Canonne et al., Prop. 12).

    An order whose divergence already satisfies ``δ² ≥ 1 - exp(-r)`` gives ε = 0:
    r(λ) bounds the KL divergence, and the Bretagnolle-Huber inequality bounds the
    total variation (the δ of ε = 0) by √(1 - exp(-KL)). Orders at or below
    1.01 are skipped (the bound is unstable there and never the minimum).
    """
    if not 0 < delta < 1:
        raise ValueError(f"delta must lie in (0, 1), got {delta}")
    if len(rdp) != len(orders):
        raise ValueError("rdp and orders must have the same length")
    best, best_order = math.inf, float(orders[0])
    for alpha, r in zip(orders, rdp, strict=True):
        if alpha <= 1:
            raise ValueError(f"Rényi orders must exceed 1, got {alpha}")
        if delta**2 + math.expm1(-float(r)) > 0:
            eps = 0.0
        elif alpha > 1.01:
            eps = float(r) + math.log1p(-1 / alpha) - math.log(delta * alpha) / (alpha - 1)
        else:
            continue
        if eps < best:
            best, best_order = eps, float(alpha)
    return max(0.0, best), best_order


@dataclass
class GaussianAccountant:
    """Running RDP curve of the Gaussian releases made so far.

    Contract: :meth:`epsilon` after ``k`` calls of :meth:`compose` is the ε of
    their composition at the given δ; the curve only grows.
    """

    orders: tuple[float, ...] = DEFAULT_ORDERS
    rdp: np.ndarray = field(init=False)
    releases: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.rdp = np.zeros(len(self.orders))

    def compose(self, noise_multiplier: float, count: int = 1) -> None:
        """Add ``count`` releases of the Gaussian mechanism with multiplier ``noise_multiplier``."""
        self.rdp = self.rdp + gaussian_rdp(noise_multiplier, self.orders, count)
        self.releases += count

    def epsilon(self, delta: float) -> tuple[float, float]:
        """ε spent so far at ``delta``, and the order that attains it."""
        if not self.releases:
            return 0.0, float(self.orders[0])
        return epsilon_from_rdp(self.rdp, self.orders, delta)

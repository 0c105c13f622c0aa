"""Lorentz (hyperboloid) model of hyperbolic space with curvature ``-c``, for HFM.

Points are rows ``x = (x_0, x_s)`` of ``R^{n+1}`` with ``<x, x>_L = -1/c`` and
``x_0 > 0``, where ``<x, y>_L = -x_0 y_0 + <x_s, y_s>``; the origin is
``o = (1/sqrt c, 0)``. Tangent vectors at ``x`` satisfy ``<x, v>_L = 0``. The
maps (MERU, Desai et al. 2023; Nickel & Kiela 2018), with ``a = -c <x, y>_L``:

- ``d(x, y) = arccosh(a) / sqrt c``;
- ``exp_x(v) = cosh(sqrt c |v|) x + sinh(sqrt c |v|) v / (sqrt c |v|)``, ``|v|`` the
  Lorentz norm ``sqrt <v, v>_L``;
- ``log_x(y) = arccosh(a) / sqrt(a^2 - 1) (y - a x)`` (the same vector as
  ``d(x, y) P / |P|_L`` with ``P = y + c <x, y>_L x``, written without the
  0/0 at ``y = x``);
- ``gamma_{x->y}(t) = exp_x(t log_x(y))`` and its velocity
  ``sqrt c d sinh(sqrt c t d) x + cosh(sqrt c t d) log_x(y)`` (``d = d(x, y)``);
- ``proj_x(v) = v + c <x, v>_L x`` (onto the tangent space at ``x``).

Every function is vectorised over leading dimensions (they broadcast), clamps
``arccosh`` at 1 and uses series expansions where a ratio tends to 0/0, so it
is exact to rounding in float64 and safe in float32. Pure torch.
"""

from __future__ import annotations

import math

import torch

#: Below this, ``sinh(z)/z`` and ``arccosh(a)/sqrt(a^2-1)`` use their series.
_SMALL = 1e-4


def inner(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Lorentzian inner product ``-x_0 y_0 + <x_s, y_s>`` over the last dimension."""
    prod = x * y
    return prod[..., 1:].sum(-1) - prod[..., 0]


def origin(dim: int, c: float = 1.0, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """The origin ``(1/sqrt c, 0, ..., 0)`` of ``L^dim`` (a vector of ``dim + 1`` entries)."""
    o = torch.zeros(dim + 1, dtype=dtype)
    o[0] = 1.0 / math.sqrt(c)
    return o


def lift(space: torch.Tensor, c: float = 1.0) -> torch.Tensor:
    """The point of the hyperboloid with space part ``space``: ``x_0 = sqrt(1/c + |x_s|^2)``."""
    x0 = torch.sqrt(1.0 / c + (space * space).sum(-1, keepdim=True))
    return torch.cat([x0, space], dim=-1)


def _sinhc(z: torch.Tensor) -> torch.Tensor:
    """``sinh(z) / z``, 1 at 0."""
    small = z.abs() < _SMALL
    safe = torch.where(small, torch.ones_like(z), z)
    return torch.where(small, 1.0 + z * z / 6.0, torch.sinh(safe) / safe)


def _acosh_ratio(a: torch.Tensor) -> torch.Tensor:
    """``arccosh(a) / sqrt(a^2 - 1)`` for ``a >= 1`` (1 at ``a = 1``)."""
    a = a.clamp_min(1.0)
    e = a - 1.0
    small = e < _SMALL
    safe = torch.where(small, torch.full_like(a, 2.0), a)
    ratio = torch.arccosh(safe) / torch.sqrt(safe * safe - 1.0)
    return torch.where(small, 1.0 - e / 3.0, ratio)


def _safe_sqrt(s: torch.Tensor) -> torch.Tensor:
    """``sqrt(max(s, eps))`` (``eps`` the dtype's): a finite gradient where ``s <= 0``.

    ``sqrt`` (like ``arccosh`` at 1) has an infinite derivative at 0, and a
    clamp's zero gradient times it is NaN; flooring at ``eps`` keeps both finite.
    """
    return s.clamp_min(torch.finfo(s.dtype).eps).sqrt()


def tangent_norm(v: torch.Tensor) -> torch.Tensor:
    """Lorentz norm ``sqrt <v, v>_L`` of tangent vectors (spacelike), floored at ``sqrt eps``."""
    return _safe_sqrt(inner(v, v))


def dist(x: torch.Tensor, y: torch.Tensor, c: float = 1.0) -> torch.Tensor:
    """Geodesic distance ``arccosh(-c <x, y>_L) / sqrt c``.

    Computed as ``2 asinh(sqrt(c <x - y, x - y>_L) / 2) / sqrt c`` (the same value,
    since ``<x - y, x - y>_L = 2 (a - 1) / c`` on the hyperboloid and
    ``arccosh a = 2 asinh sqrt((a - 1) / 2)``), which keeps its precision and a
    finite gradient for nearby points, where ``arccosh`` of a rounded ``a <= 1``
    has neither. Floored at about ``sqrt eps`` (3e-4 in float32, 1e-8 in float64).
    """
    diff = x - y
    return 2.0 * torch.asinh(0.5 * _safe_sqrt(c * inner(diff, diff))) / math.sqrt(c)


def dist_to_origin(x: torch.Tensor, c: float = 1.0) -> torch.Tensor:
    """``d(o, x) = arccosh(sqrt c x_0) / sqrt c``."""
    a = math.sqrt(c) * x[..., 0]
    return torch.arccosh(a.clamp_min(1.0 + torch.finfo(a.dtype).eps)) / math.sqrt(c)


def proj_tangent(x: torch.Tensor, v: torch.Tensor, c: float = 1.0) -> torch.Tensor:
    """Project ambient ``v`` onto the tangent space at ``x``: ``v + c <x, v>_L x``."""
    return v + c * inner(x, v).unsqueeze(-1) * x


def expmap(x: torch.Tensor, v: torch.Tensor, c: float = 1.0) -> torch.Tensor:
    """``exp_x(v)`` for a tangent vector ``v`` at ``x``."""
    z = math.sqrt(c) * tangent_norm(v).unsqueeze(-1)
    return torch.cosh(z) * x + _sinhc(z) * v


def logmap(x: torch.Tensor, y: torch.Tensor, c: float = 1.0) -> torch.Tensor:
    """``log_x(y)``: the tangent vector at ``x`` of length ``d(x, y)`` pointing to ``y``."""
    a = (-c * inner(x, y)).clamp_min(1.0).unsqueeze(-1)
    return _acosh_ratio(a) * (y - a * x)


def expmap0(u: torch.Tensor, c: float = 1.0) -> torch.Tensor:
    """``exp_o((0, u))`` for a space-part tangent vector ``u`` at the origin."""
    r = math.sqrt(c) * u.norm(dim=-1, keepdim=True)
    return torch.cat([torch.cosh(r) / math.sqrt(c), _sinhc(r) * u], dim=-1)


def logmap0(x: torch.Tensor, c: float = 1.0) -> torch.Tensor:
    """Space part of ``log_o(x)``: ``arccosh(sqrt c x_0)/sqrt c * x_s/|x_s|``."""
    a = (math.sqrt(c) * x[..., :1]).clamp_min(1.0)
    return _acosh_ratio(a) * x[..., 1:]


def geodesic(x: torch.Tensor, y: torch.Tensor, t: torch.Tensor, c: float = 1.0) -> torch.Tensor:
    """``gamma_{x->y}(t) = exp_x(t log_x(y))``; ``t`` broadcasts against ``x[..., :1]``."""
    return expmap(x, t * logmap(x, y, c), c)


def geodesic_velocity(
    x: torch.Tensor, y: torch.Tensor, t: torch.Tensor, c: float = 1.0
) -> torch.Tensor:
    """``d/dt gamma_{x->y}(t) = sqrt c d sinh(sqrt c t d) x + cosh(sqrt c t d) log_x(y)``.

    Equal to ``log_{gamma(t)}(y) / (1 - t)`` for ``t < 1`` (the target velocity of
    geodesic flow matching), but without the division, so it is defined up to
    and including ``t = 1``.
    """
    u = logmap(x, y, c)
    d = tangent_norm(u).unsqueeze(-1)
    z = math.sqrt(c) * t * d
    return math.sqrt(c) * d * torch.sinh(z) * x + torch.cosh(z) * u

"""HIPE: hippocampus-inspired multi-scale positional embedding (Zhou & Chen, arXiv 2506.04943).

HIPE is rotary embedding (RoPE, Su et al., arXiv 2104.09864) whose queries and
keys are first multiplied, per head ``h`` and frequency ``omega_i``, by a fixed
gain ``a_{h,i} = sqrt(g(omega_i; sigma_h))`` (grid-to-place weights decaying
with frequency), globally normalised so that the mean of ``a**2`` over all heads
and dimensions is 1. For ``q = k = 1`` the logit between positions ``m`` and
``n`` is the place field ``K_h(m - n) = sum_j a_{h,j}**2 cos(omega_j (m - n))``,
of width proportional to ``sigma_h`` (half-width at half-maximum about
``1.18 sigma`` for the Gaussian decay); different ``sigma_h`` per head make the
attention multi-scale. The gains are buffers, not parameters.

Decays ``g`` (the leading ``omega`` is the Jacobian of the log-spaced RoPE
frequencies, so sums over them approximate integrals over ``omega``):

* ``gaussian``: ``omega exp(-sigma^2 omega^2 / 2)``
* ``exp``:      ``omega / (1 + sigma^2 omega^2)``  (exponential field in position)
* ``power``:    ``omega exp(-sigma omega)``         (Cauchy field in position)

Layout is rotate-half: dimensions ``i`` and ``i + d/2`` share ``omega_i``. Pure
torch; imports neither Flower nor Ray. Each function imports torch itself, so
that the model params naming a :data:`Decay` validate without it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import torch

Decay = Literal["gaussian", "exp", "power"]


def rope_frequencies(head_dim: int, theta: float = 10_000.0) -> torch.Tensor:
    """``omega_i = theta^(-2i / head_dim)``, ``i = 0..head_dim/2 - 1`` (float64)."""
    import torch

    if head_dim <= 0 or head_dim % 2:
        raise ValueError(f"rotary head dimension must be even and positive, got {head_dim}")
    i = torch.arange(head_dim // 2, dtype=torch.float64)
    return theta ** (-2.0 * i / head_dim)


def decay_weights(omega: torch.Tensor, sigma: torch.Tensor, decay: Decay) -> torch.Tensor:
    """Grid-to-place weights ``g(omega; sigma)``, broadcast over both arguments."""
    import torch

    if decay == "gaussian":
        return omega * torch.exp(-(sigma**2) * omega**2 / 2)
    if decay == "exp":
        return omega / (1 + sigma**2 * omega**2)
    if decay == "power":
        return omega * torch.exp(-sigma * omega)
    raise ValueError(f"unknown HIPE decay {decay!r}; known: gaussian, exp, power")


def hipe_gains(
    head_dim: int,
    sigmas: Sequence[float],
    theta: float = 10_000.0,
    decay: Decay = "gaussian",
) -> torch.Tensor:
    """Per-head gains ``a``, shape ``(len(sigmas), head_dim)``, with ``mean(a**2) == 1``.

    Examples
    --------
    >>> import torch
    >>> a = hipe_gains(8, [1.0, 4.0])
    >>> tuple(a.shape), round(float((a**2).mean()), 6)
    ((2, 8), 1.0)
    >>> bool(torch.equal(a[:, :4], a[:, 4:]))
    True
    """
    import torch

    if not sigmas or min(sigmas) < 0:
        raise ValueError(f"HIPE sigmas must be a non-empty list of values >= 0, got {sigmas}")
    omega = rope_frequencies(head_dim, theta)
    sigma = torch.tensor(list(sigmas), dtype=torch.float64)[:, None]
    half = torch.sqrt(decay_weights(omega[None, :], sigma, decay))
    full = torch.cat([half, half], dim=-1)
    return full / torch.sqrt((full**2).mean())


def rotary_tables(
    positions: torch.Tensor, omega: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``cos``/``sin`` of ``position * omega``, rotate-half layout, ``(L, 2 * len(omega))``."""
    import torch

    angles = positions.to(torch.float64)[:, None] * omega[None, :]
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """``[x1, x2] -> [-x2, x1]`` on the last dimension (multiplication by ``i`` per pair)."""
    import torch

    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def apply_rotary(
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    gain: torch.Tensor | None = None,
) -> torch.Tensor:
    """Rotate ``x`` (``(..., heads, L, head_dim)``) by position; HIPE first scales by ``gain``.

    ``gain`` has shape ``(heads, head_dim)``; ``None`` is plain RoPE.
    """
    if gain is not None:
        x = x * gain[:, None, :].to(x.dtype)
    return x * cos.to(x.dtype) + rotate_half(x) * sin.to(x.dtype)


def sinusoidal_table(length: int, dim: int, theta: float = 10_000.0) -> torch.Tensor:
    """Absolute sinusoidal embedding (Vaswani et al. 2017), ``[sin | cos]`` halves, ``(L, dim)``.

    Row dot products depend only on the offset:
    ``P[m] . P[n] = sum_i cos(omega_i (m - n))`` with ``omega = rope_frequencies(dim)``.
    """
    import torch

    omega = rope_frequencies(dim, theta)
    angles = torch.arange(length, dtype=torch.float64)[:, None] * omega[None, :]
    return torch.cat([angles.sin(), angles.cos()], dim=-1)


def place_field(
    gains: torch.Tensor, offsets: torch.Tensor, theta: float = 10_000.0
) -> torch.Tensor:
    """``K_h(delta) = sum_j a_{h,j}**2 cos(omega_j delta)``, shape ``(heads, len(offsets))``.

    The HIPE logit for ``q = k = 1`` (all ones) at offset ``delta = m - n``.
    """
    import torch

    head_dim = gains.shape[-1]
    omega = rope_frequencies(head_dim, theta)
    omega = torch.cat([omega, omega])
    waves = torch.cos(offsets.to(torch.float64)[:, None] * omega[None, :])
    return (gains.to(torch.float64) ** 2) @ waves.T


def half_width(kernel: torch.Tensor, offsets: torch.Tensor) -> float:
    """Offset where a kernel (sampled at increasing ``offsets >= 0``) first falls to half its peak.

    Linear interpolation between samples; ``inf`` if it never does.
    """
    import torch

    k = kernel / kernel[0]
    below = torch.nonzero(k <= 0.5)
    if len(below) == 0:
        return float("inf")
    j = int(below[0])
    x0, x1, y0, y1 = offsets[j - 1], offsets[j], k[j - 1], k[j]
    return float(x0 + (0.5 - y0) * (x1 - x0) / (y1 - y0))

# SPDX-License-Identifier: Apache-2.0
"""Lottery Prior's synthesis network (Wu et al., ICML 2026; LotteryCodec, ICML 2025).

The architecture follows LotteryCodec (eedavidwu/LotteryCodec, ``models/model.py``,
read for this port; the code here is our own):

- a **frozen random MLP** on 2-D pixel coordinates, widths ``2 → 32 → 24 → 16 → C``,
  no biases, GELU, output ``(tanh(·) + 1) / 2``; its weights come from a seed
  (LotteryCodec's "FFN" Fourier-basis weights ``W = Λ B``, or scaled Kaiming) and
  never receive a gradient;
- a learned **top-k supermask** over those weights (scores, straight-through
  gradient), one global budget ``round(keep · #weights)`` as in LotteryCodec's
  ``compute_rate`` (or a per-layer budget);
- **hierarchical latent grids** (one channel per level, level ``i`` at ``1/2^i``
  resolution, encoder gain 16), quantised by soft-round + Kumaraswamy noise while
  training and hard rounding at test (Cool-chic / C3), upsampled by one learned
  2x transposed convolution initialised to the Keys cubic kernel;
- **ModConv** modulation: 1x1 conv ``L → 48``, 1x1 ``48 → 3``, two residual 3x3
  convs ``3 → 3``, whose 6-, 9- and 57-channel concatenations are appended to the
  inputs of MLP layers 2, 3 and 4;
- a Laplace **entropy model** of the integer latents: factorised (one Laplace
  per level; the default, as the issue asks, and the cheaper code for small
  pictures) or LotteryCodec's auto-regressive ARM (the 24 nearest causal
  neighbours, two residual hidden layers of width 24, scale
  ``exp(clip(s - 4, -4.6, 5))``), probabilities floored at ``2^-16``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

WeightInit = Literal["ffn", "kaiming"]
EntropyModel = Literal["arm", "factorized"]
BudgetScope = Literal["global", "layer"]

#: No symbol costs more than 16 bits (LotteryCodec / Cool-chic floor).
MIN_PROBA = 2.0**-16
#: MLP widths after the coordinate input, and the ModConv widths (LotteryCodec).
HIDDEN = (32, 24, 16)
MOD_HIDDEN, MOD_OUT = 48, 3
#: Modulation channels appended to MLP layers 1, 2, 3 (0-based): 6, 9, 57.
MOD_WIDTHS = (2 * MOD_OUT, 3 * MOD_OUT, 3 * MOD_OUT + MOD_HIDDEN)
ARM_CONTEXT, ARM_RADIUS = 24, 4


@dataclass(frozen=True)
class NetConfig:
    """Shape and randomness of one synthesis network (defaults: LotteryCodec's)."""

    height: int
    width: int
    channels: int = 1
    levels: int = 7
    keep: float = 0.7
    budget: BudgetScope = "global"
    weight_init: WeightInit = "ffn"
    entropy_model: EntropyModel = "factorized"
    gain: float = 16.0
    upsampling_kernel: int = 8


# --------------------------------------------------------------------------- frozen weights
def fourier_basis_weight(
    out_features: int,
    in_features: int,
    gen: np.random.Generator,
    low: int = 64,
    high: int = 64,
    phases: int = 32,
    alpha: float = 0.05,
) -> np.ndarray:
    """LotteryCodec's "FFN" weights ``W = Λ B`` (``out x in``, float64).

    ``B`` has one row per (frequency, phase): ``alpha cos(f t_j + φ)`` sampled at
    ``in_features`` points ``t`` evenly spread over the longest period, with
    ``low`` frequencies ``k/low`` and ``high`` frequencies ``k`` (``k = 1..``) and
    ``phases`` phases ``2πp/phases``; ``Λ_{oi} ~ U(±sqrt(6/m)/‖B_i‖)``, so
    ``Var W ≈ 2/in`` (He scale) whatever ``alpha``.
    """
    freqs = np.concatenate([np.arange(1, low + 1) / low, np.arange(1, high + 1, dtype=float)])
    phi = 2 * np.pi * np.arange(phases) / phases
    period = 2 * np.pi / freqs.min()
    t = np.linspace(-period / 2, period / 2, in_features)
    bases = alpha * np.cos(freqs[:, None, None] * t[None, None, :] + phi[None, :, None])
    bases = bases.reshape(-1, in_features)
    m = len(bases)
    bound = np.sqrt(6.0 / m) / np.linalg.norm(bases, axis=1)
    lam = gen.uniform(-1.0, 1.0, size=(out_features, m)) * bound[None, :]
    return np.asarray(lam @ bases)


def frozen_weights(cfg: NetConfig, seed: int) -> list[np.ndarray]:
    """The four frozen MLP weight matrices of the network drawn from ``seed``."""
    gen = np.random.default_rng(np.random.SeedSequence([seed, 0x1077E7]))
    shapes = layer_shapes(cfg.channels)
    if cfg.weight_init == "ffn":
        return [fourier_basis_weight(o, i, gen) for o, i in shapes]
    # LotteryCodec's scaled Kaiming normal: std = sqrt(0.1 / fan_in)
    return [gen.normal(0.0, math.sqrt(0.1 / i), size=(o, i)) for o, i in shapes]


def layer_shapes(channels: int) -> list[tuple[int, int]]:
    """``(out, in)`` of each masked layer: 2→32, (32+6)→24, (24+9)→16, (16+57)→C."""
    outs = (*HIDDEN, channels)
    ins = (2, HIDDEN[0] + MOD_WIDTHS[0], HIDDEN[1] + MOD_WIDTHS[1], HIDDEN[2] + MOD_WIDTHS[2])
    return list(zip(outs, ins, strict=True))


# --------------------------------------------------------------------------- top-k supermask
class _TopK(torch.autograd.Function):
    """Forward: per row, 1 on the ``k`` largest scores, 0 elsewhere. Backward: straight through."""

    @staticmethod
    def forward(ctx: object, scores: Tensor, k: int) -> Tensor:  # type: ignore[override]
        del ctx
        mask = torch.zeros_like(scores)
        if k > 0:
            mask.scatter_(-1, torch.topk(scores, k, dim=-1, sorted=False).indices, 1.0)
        return mask

    @staticmethod
    def backward(ctx: object, *grads: Tensor) -> tuple[Tensor, None]:  # type: ignore[override]
        del ctx
        return grads[0], None


def topk_masks(scores: list[Tensor], keep: float, scope: BudgetScope = "global") -> list[Tensor]:
    """Binary masks from scores ``(B, out, in)`` per layer, keeping exactly ``round(keep · N)``.

    ``N`` is every weight of the member (``global``, LotteryCodec's budget) or
    of each layer (``layer``). Gradients reach ``scores`` unchanged
    (straight-through estimator).
    """
    if scope == "layer":
        return [
            _TopK.apply(s.flatten(1), round(keep * s[0].numel())).view_as(s)  # type: ignore[no-untyped-call]
            for s in scores
        ]
    flat = torch.cat([s.flatten(1) for s in scores], dim=1)
    mask = _TopK.apply(flat, round(keep * flat.shape[1]))  # type: ignore[no-untyped-call]
    parts = mask.split([s[0].numel() for s in scores], dim=1)
    return [m.view_as(s) for m, s in zip(parts, scores, strict=True)]


def mask_bits(num_weights: int, keep: float) -> float:
    """Bits of a mask with ``keep`` share of ones: ``N · h(keep)`` (LotteryCodec's count)."""
    if keep <= 0 or keep >= 1:
        return 0.0
    return float(num_weights * -(keep * math.log2(keep) + (1 - keep) * math.log2(1 - keep)))


# --------------------------------------------------------------------------- quantisation
def soft_round(x: Tensor, t: float) -> Tensor:
    """Agustsson & Theis soft rounding with temperature ``t`` (→ round as t → 0)."""
    floor = torch.floor(x)
    delta = x - floor - 0.5
    return floor + 0.5 * torch.tanh(delta / t) / math.tanh(1 / (2 * t)) + 0.5


def kumaraswamy_noise(u: Tensor, a: float) -> Tensor:
    """Kumaraswamy(a, b) noise in (-1/2, 1/2) with mode 1/2 of the unshifted law (a=1: uniform)."""
    b = (2**a * (a - 1) + 1) / a
    return (1 - (1 - u) ** (1 / b)) ** (1 / a) - 0.5


def quantize(
    x: Tensor, mode: str, temperature: float, noise: float, gen: torch.Generator | None
) -> Tensor:
    """``hard``: round; ``soft``: softround(softround(x) + noise); ``soft_alone``: softround."""
    if mode == "hard":
        return torch.round(x)
    if mode == "soft_alone":
        return soft_round(x, temperature)
    u = torch.rand(x.shape, generator=gen, dtype=x.dtype)
    return soft_round(soft_round(x, temperature) + kumaraswamy_noise(u, noise), temperature)


# --------------------------------------------------------------------------- entropy models
def laplace_cdf(x: Tensor, mu: Tensor, scale: Tensor) -> Tensor:
    """CDF of Laplace(mu, scale) at ``x``."""
    d = x - mu
    return 0.5 - 0.5 * torch.sign(d) * torch.expm1(-d.abs() / scale)


def laplace_bits(z: Tensor, mu: Tensor, scale: Tensor) -> Tensor:
    """Code length (bits) of each value of ``z`` on the unit integer grid under Laplace(mu, scale).

    ``-log2 max(F(z + 1/2) - F(z - 1/2), 2^-16)``; for integer ``z`` this is the
    ideal (arithmetic-coder) length of ``z`` under the discretised Laplace.
    """
    p = laplace_cdf(z + 0.5, mu, scale) - laplace_cdf(z - 0.5, mu, scale)
    return -torch.log2(torch.clamp_min(p, MIN_PROBA))


def causal_offsets(count: int = ARM_CONTEXT, radius: int = 4) -> list[tuple[int, int]]:
    """The ``count`` nearest already-decoded neighbours in raster order, ``(drow, dcol)``.

    Candidates are the rows above and the pixels to the left within a
    ``(2·radius+1)²`` window, ranked by Euclidean distance (ties by raster order).
    For 24 this is LotteryCodec's 24-pixel context.
    """
    cand = [(dr, dc) for dr in range(-radius, 1) for dc in range(-radius, radius + 1)
            if dr < 0 or dc < 0]
    cand.sort(key=lambda o: (o[0] ** 2 + o[1] ** 2, o[0], o[1]))
    return sorted(cand[:count])


def _window_index(offsets: list[tuple[int, int]], radius: int = ARM_RADIUS) -> list[int]:
    """Row-major positions of ``offsets`` in the causal window ending on the pixel's row.

    The window spans rows ``-radius..0`` and columns ``-radius..radius``.
    """
    k = 2 * radius + 1
    return [(dr + radius) * k + (dc + radius) for dr, dc in offsets]


def _uniform(gen: np.random.Generator, fan_in: int, shape: tuple[int, ...]) -> np.ndarray:
    """PyTorch's default ``Linear``/``Conv`` initialisation, ``U(±1/sqrt(fan_in))``."""
    bound = 1.0 / math.sqrt(fan_in)
    return gen.uniform(-bound, bound, size=shape)


def member_init(cfg: NetConfig, seed: int) -> dict[str, np.ndarray]:
    """Initial values of one member's learned arrays (scores, ModConv, upsampler, entropy model).

    Drawn from ``seed`` alone, so a member is the same whatever family it is batched in.
    """
    gen = np.random.default_rng(np.random.SeedSequence([seed, 0x5C0E5]))
    out: dict[str, np.ndarray] = {}
    for i, (o, n_in) in enumerate(layer_shapes(cfg.channels)):
        out[f"score_{i}"] = gen.uniform(-1, 1, size=(o, n_in)) / math.sqrt(o * n_in)
    levels = cfg.levels
    for name, (o, n_in, k) in {
        "c1": (MOD_HIDDEN, levels, 1), "c2": (MOD_OUT, MOD_HIDDEN, 1),
        "c3": (MOD_OUT, MOD_OUT, 3), "c4": (MOD_OUT, MOD_OUT, 3),
    }.items():
        fan = n_in * k * k
        out[f"{name}_w"] = _uniform(gen, fan, (o, n_in, k, k))
        out[f"{name}_b"] = _uniform(gen, fan, (o,))
    out["up_w"] = keys_cubic_kernel(cfg.upsampling_kernel)[None]
    if cfg.entropy_model == "arm":
        c = ARM_CONTEXT
        for name, o in (("a1", c), ("a2", c), ("ao", 2)):
            out[f"{name}_w"] = _uniform(gen, c, (o, c))
            out[f"{name}_b"] = _uniform(gen, c, (o,))
    else:
        out["mu"] = np.zeros(levels)
        out["log_scale"] = np.zeros(levels)
    return out

# --------------------------------------------------------------------------- upsampling, ModConv
def keys_cubic_kernel(size: int = 8, a: float = -0.75) -> np.ndarray:
    """``size x size`` separable kernel of 2x Keys cubic interpolation (zero beyond 4 taps)."""
    def w(x: float) -> float:
        x = abs(x)
        if x <= 1:
            return (a + 2) * x**3 - (a + 3) * x**2 + 1
        if x < 2:
            return a * x**3 - 5 * a * x**2 + 8 * a * x - 4 * a
        return 0.0

    taps = np.array([w(abs(t - (size - 1) / 2) / 2) for t in range(size)])
    return np.asarray(np.outer(taps, taps))


# --------------------------------------------------------------------------- the family
def level_shapes(height: int, width: int, levels: int) -> list[tuple[int, int]]:
    """Latent grid sizes, finest first: ``ceil(H / 2^i) x ceil(W / 2^i)``."""
    return [(-(-height // 2**i), -(-width // 2**i)) for i in range(levels)]


def coordinates(height: int, width: int) -> Tensor:
    """``(H·W, 2)`` pixel coordinates ``(x, y)`` in ``[-1, 1]``, raster order."""
    ys, xs = torch.meshgrid(
        torch.linspace(-1, 1, height), torch.linspace(-1, 1, width), indexing="ij"
    )
    return torch.stack([xs.reshape(-1), ys.reshape(-1)], dim=1)


def upsample2x(x: Tensor, kernels: Tensor) -> Tensor:
    """2x upsampling of ``x`` ``(B, c, h, w)`` with member ``b``'s kernel ``kernels[b, 0]``.

    Replicate padding, transposed convolution of stride 2, crop: output
    ``(B, c, 2h+1, 2w+1)`` whose pixels ``2i`` and ``2i+1`` sit at input
    positions ``i - 1/4`` and ``i + 1/4`` (with the Keys kernel: cubic interpolation).
    """
    b, c, h, w = x.shape
    k = kernels.shape[-1]
    flat = F.pad(x.reshape(1, b * c, h, w), (k // 2,) * 4, mode="replicate")
    up = F.conv_transpose2d(
        flat, kernels.repeat_interleave(c, dim=0), stride=2, output_padding=1, groups=b * c
    )
    crop = (3 * k - 2) // 2
    up = up[..., crop : up.shape[-2] - crop, crop : up.shape[-1] - crop]
    return up.reshape(b, c, *up.shape[-2:])


class LotteryFamily(nn.Module):
    """``B`` members of the lottery-prior family, trained side by side in one batch.

    Member ``b`` is a frozen random MLP drawn from ``seeds[b]`` plus its own
    learned code (scores, latents, ModConv, upsampler, entropy model). Members
    share nothing: every parameter has the member on its leading axis (``B`` or
    ``B·k`` rows, member-major), the loss is a sum over members, and Adam is
    elementwise, so batching changes only speed.

    Contract: the frozen weights are buffers (no gradient; never changed by
    training) and depend only on ``(config, seed)``. ``forward`` returns the
    images ``(B, C, H, W)`` in ``[0, 1]`` and the bits of every latent pixel
    ``(B, N)``; ``quant_mode`` picks the latent quantiser (``soft`` while
    training, ``soft_alone`` to polish, ``hard`` for the coded image).
    """

    def __init__(self, cfg: NetConfig, seeds: list[int]) -> None:
        super().__init__()
        self.cfg, self.seeds, self.B = cfg, list(seeds), len(seeds)
        self.shapes = level_shapes(cfg.height, cfg.width, cfg.levels)
        frozen = [frozen_weights(cfg, s) for s in seeds]
        self.num_layers = len(frozen[0])
        for i in range(self.num_layers):
            w = np.stack([f[i] for f in frozen])
            self.register_buffer(f"frozen_{i}", torch.tensor(w, dtype=torch.float32))
        inits = [member_init(cfg, s) for s in seeds]

        def stacked(name: str) -> nn.Parameter:
            arr = np.concatenate([m[name][None] for m in inits])
            return nn.Parameter(torch.tensor(arr, dtype=torch.float32))

        self.scores = nn.ParameterList(stacked(f"score_{i}") for i in range(self.num_layers))
        self.latents = nn.ParameterList(
            nn.Parameter(torch.zeros(self.B, *s)) for s in self.shapes
        )
        self.psi = nn.ParameterDict(
            {k: stacked(k) for k in inits[0] if not k.startswith("score_")}
        )
        self.register_buffer("coords", coordinates(cfg.height, cfg.width))
        self.register_buffer(
            "context_index", torch.tensor(_window_index(causal_offsets()), dtype=torch.long)
        )
        self.quant_mode, self.temperature, self.noise = "soft", 0.3, 2.0
        self.gens = [torch.Generator().manual_seed(s % 2**63) for s in seeds]

    # -- pieces ------------------------------------------------------------------------
    def frozen(self) -> list[Tensor]:
        """Frozen weights per layer, ``(B, out, in)``."""
        return [getattr(self, f"frozen_{i}") for i in range(self.num_layers)]

    def masks(self) -> list[Tensor]:
        """Binary masks per layer ``(B, out, in)``; straight-through to the scores."""
        return topk_masks(list(self.scores), self.cfg.keep, self.cfg.budget)

    def quantized_latents(self) -> list[Tensor]:
        """``Q(gain · z)`` per level ``(B, h, w)``, each member with its own noise stream."""
        out = []
        for z in self.latents:
            x = self.cfg.gain * z
            if self.quant_mode == "soft":
                u = torch.stack([torch.rand(x.shape[1:], generator=g) for g in self.gens])
                x = soft_round(soft_round(x, self.temperature)
                               + kumaraswamy_noise(u, self.noise), self.temperature)
            else:
                x = quantize(x, self.quant_mode, self.temperature, self.noise, None)
            out.append(x)
        return out

    def dense(self, zq: list[Tensor]) -> Tensor:
        """All levels upsampled to full resolution, ``(B, L, H, W)`` (finest level first)."""
        acc = zq[-1][:, None]
        for target in reversed(zq[:-1]):
            up = upsample2x(acc, self.psi["up_w"])[..., : target.shape[1], : target.shape[2]]
            acc = torch.cat([target[:, None], up], dim=1)
        return acc

    def modulation(self, dense: Tensor) -> list[Tensor]:
        """ModConv maps ``(B, H·W, c)`` for MLP layers 2, 3, 4 (c = 6, 9, 57)."""
        p, b = self.psi, self.B
        h, w = dense.shape[-2:]
        flat = dense.reshape(b, dense.shape[1], -1)
        o0 = F.gelu(torch.bmm(p["c1_w"][..., 0, 0], flat) + p["c1_b"][..., None])
        o1 = F.gelu(torch.bmm(p["c2_w"][..., 0, 0], o0) + p["c2_b"][..., None])

        def conv3(x: Tensor, name: str) -> Tensor:
            y = F.conv2d(
                x.reshape(1, -1, h, w), p[f"{name}_w"].flatten(0, 1),
                p[f"{name}_b"].flatten(), padding=1, groups=b,
            )
            return y.reshape(b, MOD_OUT, -1)

        o2 = F.gelu(conv3(o1, "c3") + o1)
        o3 = F.gelu(conv3(o2, "c4") + o2)
        maps = [(o3, o2), (o3, o2, o1), (o3, o2, o1, o0)]
        return [torch.cat(m, dim=1).transpose(1, 2) for m in maps]

    def latent_bits(self, zq: list[Tensor]) -> Tensor:
        """Code length (bits) of every latent pixel, ``(B, N)``, levels finest first."""
        flat = torch.cat([z.reshape(self.B, -1) for z in zq], dim=1)
        p = self.psi
        if self.cfg.entropy_model == "factorized":
            sizes = [z[0].numel() for z in zq]
            mu = torch.repeat_interleave(p["mu"], torch.tensor(sizes), dim=1)
            log_s = torch.repeat_interleave(p["log_scale"], torch.tensor(sizes), dim=1)
            return laplace_bits(flat, mu, torch.exp(torch.clamp(log_s, -4.6, 5.0)))
        r = ARM_RADIUS
        index: Tensor = self.context_index  # type: ignore[assignment]
        ctx = torch.cat([  # causal window: rows -r..0, columns -r..r
            F.unfold(F.pad(z[:, None], (r, r, r, 0)), (r + 1, 2 * r + 1)).index_select(1, index)
            for z in zq
        ], dim=2).transpose(1, 2)
        h = ctx
        for name in ("a1", "a2"):
            h = F.gelu(torch.bmm(h, p[f"{name}_w"].transpose(1, 2)) + p[f"{name}_b"][:, None] + h)
        raw = torch.bmm(h, p["ao_w"].transpose(1, 2)) + p["ao_b"][:, None]
        scale = torch.exp(torch.clamp(raw[..., 1] - 4, min=-4.6, max=5.0))
        return laplace_bits(flat, raw[..., 0], scale)

    def forward(self) -> tuple[Tensor, Tensor]:
        """``(images (B, C, H, W) in [0, 1], latent bits (B, N))``."""
        zq = self.quantized_latents()
        mods = self.modulation(self.dense(zq))
        coords: Tensor = self.coords  # type: ignore[assignment]
        h = coords.expand(self.B, -1, -1)
        for i, (w, m) in enumerate(zip(self.frozen(), self.masks(), strict=True)):
            if i > 0:
                h = torch.cat([h, mods[i - 1]], dim=2)
            h = torch.bmm(h, (w * m).transpose(1, 2))
            h = (torch.tanh(h) + 1) / 2 if i == self.num_layers - 1 else F.gelu(h)
        c, hh, ww = self.cfg.channels, self.cfg.height, self.cfg.width
        return h.transpose(1, 2).reshape(self.B, c, hh, ww), self.latent_bits(zq)

# SPDX-License-Identifier: Apache-2.0
"""Lottery Prior: randomized neural compression for zero-shot inverse problems (ICML 2026).

Wu, You, Dragotti, Gündüz, https://eedavidwu.github.io/LotteryPrior/ . From one
degraded image ``y = A x + n`` (``n ~ N(0, sigma²)``), with no training data:

1. for each seed ``s`` draw a frozen random synthesis network (LotteryCodec,
   :mod:`flowerbed.methods.lottery_prior.algorithm_net`) and learn its code — top-k
   mask, quantised latent grids ``ẑ`` and small modulation/entropy modules ``ψ``
   — by minimising the compression-based maximum-likelihood objective

   ``L_s = ‖y - A ĝ_s‖² / m  +  λ_R · (R(ẑ) + rho · C(ψ)) / n``,

   ``m`` the observed entries, ``n`` the pixels, ``R`` the latent bits under the
   Laplace entropy model, ``C`` the bits of ``ψ`` (complexity term, ``rho = λ_C/λ_R``);
2. choose ``λ_R`` by the discrepancy principle: a per-member controller moves
   ``log λ_R`` until the data term settles at ``τ sigma²`` (starting from the
   minimum-description-length value ``2 ln 2 · sigma² · n / m``);
3. average the members (``x̂ = mean_s ĝ_s``), or weight them by data fit.

What is stated and what is reconstructed is in ``docs/methods/lottery_prior.md``.
The forward operators (identity, ``s``-fold average pooling, binary keep-mask)
come with exact adjoints.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np
import torch
from torch import Tensor

from flowerbed.methods.lottery_prior.algorithm_net import (
    LotteryFamily,
    NetConfig,
    laplace_bits,
    mask_bits,
)

OperatorKind = Literal["identity", "downsample", "mask"]
LambdaRule = float | Literal["discrepancy"]
LN2 = math.log(2.0)


# --------------------------------------------------------------------------- operators
@dataclass(frozen=True)
class Operator:
    """A linear degradation ``A`` on images ``(..., C, H, W)``.

    ``identity``; ``downsample``: ``scale``-fold average pooling (``H``, ``W``
    divisible by ``scale``), adjoint = nearest-neighbour upsampling divided by
    ``scale²``; ``mask``: multiplication by a binary keep-mask ``(H, W)`` shared
    by the channels (self-adjoint; the observation is stored at full size with
    zeros where nothing was observed).
    """

    kind: OperatorKind = "identity"
    scale: int = 1
    keep: np.ndarray | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.kind == "downsample" and self.scale < 1:
            raise ValueError(f"operator: scale must be >= 1, got {self.scale}")
        if self.kind == "mask" and self.keep is None:
            raise ValueError("operator: kind 'mask' needs a keep-mask")

    def _keep(self, like: Tensor) -> Tensor:
        assert self.keep is not None
        return torch.as_tensor(self.keep, dtype=like.dtype)

    def apply(self, x: Tensor) -> Tensor:
        """``A x``."""
        if self.kind == "identity":
            return x
        if self.kind == "mask":
            return x * self._keep(x)
        lead, (c, h, w) = x.shape[:-3], x.shape[-3:]
        s = self.scale
        if h % s or w % s:
            raise ValueError(f"operator: image {h}x{w} is not divisible by scale {s}")
        y = x.reshape(-1, c, h // s, s, w // s, s).mean(dim=(3, 5))
        return y.reshape(*lead, c, h // s, w // s)

    def adjoint(self, v: Tensor) -> Tensor:
        """``Aᵀ v``."""
        if self.kind == "identity":
            return v
        if self.kind == "mask":
            return v * self._keep(v)
        s = self.scale
        up = v.repeat_interleave(s, dim=-2).repeat_interleave(s, dim=-1)
        return up / s**2

    def observed(self, channels: int, height: int, width: int) -> int:
        """Number ``m`` of observed entries for an image ``(channels, height, width)``."""
        if self.kind == "identity":
            return channels * height * width
        if self.kind == "mask":
            assert self.keep is not None
            return channels * int(np.count_nonzero(self.keep))
        return channels * (height // self.scale) * (width // self.scale)


def data_fit(pred: Tensor, y: Tensor, op: Operator) -> Tensor:
    """``‖y - A pred‖² / m`` per leading index (``pred`` ``(B, C, H, W)``)."""
    c, h, w = pred.shape[-3:]
    res = op.apply(pred) - (op.apply(y) if op.kind == "mask" else y)
    return (res**2).flatten(1).sum(dim=1) / op.observed(c, h, w)


def mdl_lambda(sigma: float, pixels: int, observed: int) -> float:
    """λ_R of the two-part code: ``m·D/(2sigma² ln 2) + R`` bits, rescaled to ``D + λ_R R/n``."""
    return 2 * LN2 * sigma**2 * pixels / observed


# --------------------------------------------------------------------------- code lengths
def psi_bits(family: LotteryFamily, step: float) -> Tensor:
    """Bits of each member's modules ψ on a grid of ``step``, ``(B,)``.

    Each tensor is coded with a zero-mean discretised Laplace whose scale is its
    own mean magnitude (32 bits of side information per tensor); evaluated at
    ψ itself while training (a differentiable proxy) and at the quantised ψ
    after :func:`quantize_psi`.
    """
    total = torch.zeros(family.B)
    for p in family.psi.values():
        v = p.reshape(family.B, -1) / step
        scale = v.detach().abs().mean(dim=1, keepdim=True).clamp_min(0.5)
        total = total + laplace_bits(v, torch.zeros(()), scale).sum(dim=1) + 32
    return total


@torch.no_grad()
def quantize_psi(family: LotteryFamily, step: float) -> None:
    """Round every module parameter to the grid ``step`` (in place)."""
    for p in family.psi.values():
        p.copy_(torch.round(p / step) * step)


def frozen_count(cfg: NetConfig) -> int:
    """Weights of the frozen MLP (each member)."""
    from flowerbed.methods.lottery_prior.algorithm_net import layer_shapes

    return sum(o * i for o, i in layer_shapes(cfg.channels))


# --------------------------------------------------------------------------- fitting
@dataclass(frozen=True)
class FitConfig:
    """Optimisation of one family (defaults: LotteryCodec's where it states them)."""

    iters: int = 300
    polish_iters: int = 30
    lr: float = 1e-2
    score_lr: float = 1e-1
    polish_lr: float = 1e-4
    complexity_ratio: float = 1.0
    psi_step: float = 2.0**-8
    tau: float = 1.0
    controller_rate: float = 0.02
    warmup: float = 0.1
    temperature: tuple[float, float] = (0.3, 0.1)
    noise: tuple[float, float] = (2.0, 1.0)
    grad_clip: float = 10.0
    track_every: int = 0


@dataclass
class MemberResult:
    """One member's restoration and code."""

    seed: int
    rule: LambdaRule
    image: np.ndarray
    data_fit: float
    latent_bits: float
    psi_bits: float
    mask_bits: float
    lambda_rate: float
    curve: list[tuple[int, float]] = field(default_factory=list)

    @property
    def total_bits(self) -> float:
        """Everything needed to rebuild the image: seed, mask, latents, ψ."""
        return 32.0 + self.mask_bits + self.latent_bits + self.psi_bits


def _clip_per_member(family: LotteryFamily, max_norm: float) -> None:
    """Clip each member's gradient norm to ``max_norm`` (members stay independent).

    Every parameter has the member on its leading axis.
    """
    grads = [p.grad for p in family.parameters() if p.grad is not None]
    sq = torch.stack([g.reshape(family.B, -1).pow(2).sum(dim=1) for g in grads]).sum(dim=0)
    factor = (max_norm / (sq.sqrt() + 1e-12)).clamp(max=1.0)
    for g in grads:
        g.mul_(factor.reshape(-1, *([1] * (g.dim() - 1))))


def _psnr(pred: Tensor, ref: Tensor) -> Tensor:
    mse = ((pred - ref) ** 2).flatten(1).mean(dim=1)
    return 10 * torch.log10(1.0 / mse.clamp_min(1e-12))


def _objective(
    family: LotteryFamily, y: Tensor, op: Operator, lam: Tensor, cfg: FitConfig
) -> tuple[Tensor, Tensor, Tensor]:
    """``Σ_members D + λ_R (R + rho·C) / n``, the data terms and the images."""
    img, bits = family()
    fit = data_fit(img, y, op)
    n = family.cfg.height * family.cfg.width
    code = bits.sum(dim=1)
    if cfg.complexity_ratio:
        code = code + cfg.complexity_ratio * psi_bits(family, cfg.psi_step)
    return (fit + lam * code / n).sum(), fit.detach(), img.detach()


def fit_family(
    y: np.ndarray,
    op: Operator,
    sigma: float,
    net: NetConfig,
    members: list[tuple[int, LambdaRule]],
    cfg: FitConfig = FitConfig(),
    reference: np.ndarray | None = None,
) -> list[MemberResult]:
    """Fit one member per ``(seed, λ rule)`` to the observation ``y`` ``(C, H', W')``.

    A rule is a fixed ``λ_R`` (``0`` disables the rate and complexity terms) or
    ``"discrepancy"``. ``reference`` (the clean image) is used only to record
    the PSNR curve every ``cfg.track_every`` iterations, never by the fit.
    """
    family = LotteryFamily(net, [s for s, _ in members])
    yt = torch.as_tensor(y, dtype=torch.float32)
    ref = None if reference is None else torch.as_tensor(reference, dtype=torch.float32)
    n = net.height * net.width
    m = op.observed(net.channels, net.height, net.width)
    lam0 = mdl_lambda(sigma, n, m)
    adaptive = torch.tensor([r == "discrepancy" for _, r in members])
    log_lam = torch.tensor([math.log(lam0) if r == "discrepancy" else
                            (math.log(r) if float(r) > 0 else -math.inf) for _, r in members])
    target = cfg.tau * sigma**2
    scores = list(family.scores)
    others = [p for p in family.parameters() if all(p is not s for s in scores)]
    opt = torch.optim.Adam([{"params": others, "lr": cfg.lr},
                            {"params": scores, "lr": cfg.score_lr}])
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(cfg.iters, 1))
    curves: list[list[tuple[int, float]]] = [[] for _ in members]
    ema = torch.full((family.B,), float("nan"))
    for step in range(cfg.iters):
        frac = step / max(cfg.iters - 1, 1)
        family.quant_mode = "soft"
        family.temperature = cfg.temperature[0] + frac * (cfg.temperature[1] - cfg.temperature[0])
        family.noise = cfg.noise[0] + frac * (cfg.noise[1] - cfg.noise[0])
        loss, fit, _ = _objective(family, yt, op, log_lam.exp(), cfg)
        opt.zero_grad()
        loss.backward()
        _clip_per_member(family, cfg.grad_clip)
        opt.step()
        sched.step()
        ema = torch.where(ema.isnan(), fit, 0.9 * ema + 0.1 * fit)
        if frac >= cfg.warmup:
            delta = torch.log(target / ema.clamp_min(1e-12)).clamp(-1.0, 1.0)
            log_lam = torch.where(adaptive, log_lam + cfg.controller_rate * delta, log_lam)
            log_lam = torch.where(adaptive, log_lam.clamp(math.log(lam0) - 12,
                                                          math.log(lam0) + 6), log_lam)
        if ref is not None and cfg.track_every and (step + 1) % cfg.track_every == 0:
            _track(family, ref, step + 1, curves)
    _polish(family, yt, op, log_lam.exp(), cfg)
    return _finish(family, yt, op, members, log_lam.exp(), cfg, curves, ref)


def _track(family: LotteryFamily, ref: Tensor, step: int, curves: list[list[tuple[int, float]]]
           ) -> None:
    mode = family.quant_mode
    family.quant_mode = "hard"
    with torch.no_grad():
        img, _ = family()
    family.quant_mode = mode
    for b, v in enumerate(_psnr(img, ref[None]).tolist()):
        curves[b].append((step, v))


def _polish(family: LotteryFamily, y: Tensor, op: Operator, lam: Tensor, cfg: FitConfig) -> None:
    """LotteryCodec's second stage: soft-round alone (t = 1e-4), small learning rate, λ fixed."""
    if cfg.polish_iters <= 0:
        return
    family.quant_mode, family.temperature = "soft_alone", 1e-4
    opt = torch.optim.Adam(family.parameters(), lr=cfg.polish_lr)
    for _ in range(cfg.polish_iters):
        loss, _, _ = _objective(family, y, op, lam, cfg)
        opt.zero_grad()
        loss.backward()
        _clip_per_member(family, cfg.grad_clip)
        opt.step()


def _finish(
    family: LotteryFamily, y: Tensor, op: Operator, members: list[tuple[int, LambdaRule]],
    lam: Tensor, cfg: FitConfig, curves: list[list[tuple[int, float]]], ref: Tensor | None,
) -> list[MemberResult]:
    """The coded image: hard-rounded latents and ψ on its grid; bits of each part."""
    quantize_psi(family, cfg.psi_step)
    family.quant_mode = "hard"
    with torch.no_grad():
        img, bits = family()
        fit = data_fit(img, y, op)
        pbits = psi_bits(family, cfg.psi_step)
    if ref is not None and cfg.track_every:
        final = _psnr(img, ref[None]).tolist()
        for b in range(family.B):
            curves[b].append((cfg.iters + cfg.polish_iters, final[b]))
    kept = mask_bits(frozen_count(family.cfg), family.cfg.keep)
    return [
        MemberResult(
            seed=seed, rule=rule, image=img[b].numpy().astype(np.float64),
            data_fit=float(fit[b]), latent_bits=float(bits[b].sum()),
            psi_bits=float(pbits[b]), mask_bits=kept, lambda_rate=float(lam[b]),
            curve=curves[b],
        )
        for b, (seed, rule) in enumerate(members)
    ]


# --------------------------------------------------------------------------- ensembles
def ensemble(images: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """Weighted mean over the first axis (members); uniform when ``weights`` is None."""
    images = np.asarray(images, dtype=float)
    if weights is None:
        return np.asarray(images.mean(axis=0))
    w = np.asarray(weights, dtype=float)
    if w.shape != images.shape[:1] or np.any(w < 0) or not np.isclose(w.sum(), 1.0):
        raise ValueError("ensemble: weights must be non-negative, one per member, summing to 1")
    return np.asarray(np.tensordot(w, images, axes=1))


def fit_weights(fits: np.ndarray, observed: int, sigma: float) -> np.ndarray:
    """Gaussian-likelihood weights ``∝ exp(-m·D_s / (2 sigma²))`` of members with data fit D_s."""
    logw = -observed * (np.asarray(fits, dtype=float)) / (2 * sigma**2)
    w = np.exp(logw - logw.max())
    return np.asarray(w / w.sum())


def mdl_weights(fits: np.ndarray, bits: np.ndarray, observed: int, sigma: float) -> np.ndarray:
    """Two-part-code weights ``∝ 2^-L_s``, ``L_s = m·D_s/(2 sigma² ln 2) + bits_s``.

    Bayesian model averaging over the members' codes.
    """
    length = observed * np.asarray(fits, dtype=float) / (2 * sigma**2 * LN2) + np.asarray(bits)
    w = np.exp2(-(length - length.min()))
    return np.asarray(w / w.sum())


# --------------------------------------------------------------------------- convenience
@dataclass(frozen=True)
class Restoration:
    """Members, their ensemble, and the ablations fitted beside them."""

    members: list[MemberResult]
    ablations: list[MemberResult]
    image: np.ndarray
    weighted: np.ndarray


def lottery_prior(
    y: np.ndarray,
    op: Operator,
    sigma: float,
    net: NetConfig,
    seed: int,
    ensemble_size: int = 4,
    rule: LambdaRule = "discrepancy",
    ablate_rate: bool = True,
    cfg: FitConfig = FitConfig(),
    reference: np.ndarray | None = None,
) -> Restoration:
    """The method on one observation: ``ensemble_size`` members (seeds derived from ``seed``).

    With ``ablate_rate`` a λ_R = 0 twin of member 0 (same frozen network, same
    initial code) is fitted in the same batch. ``weighted`` is the
    data-fit-weighted ensemble (:func:`fit_weights`).
    """
    from flowerbed.core.seeds import derive_seed

    seeds = [derive_seed(seed, "lottery_prior", s) for s in range(ensemble_size)]
    spec: list[tuple[int, LambdaRule]] = [(s, rule) for s in seeds]
    if ablate_rate:
        spec.append((seeds[0], 0.0))
    out = fit_family(y, op, sigma, net, spec, cfg, reference)
    members, ablations = out[:ensemble_size], out[ensemble_size:]
    imgs = np.stack([mr.image for mr in members])
    m = op.observed(net.channels, net.height, net.width)
    w = fit_weights(np.array([mr.data_fit for mr in members]), m, sigma)
    return Restoration(members, ablations, ensemble(imgs), ensemble(imgs, w))


def with_size(net: NetConfig, channels: int, height: int, width: int) -> NetConfig:
    """``net`` resized to an image (levels capped so the coarsest grid is at least 1x1)."""
    levels = min(net.levels, 1 + math.floor(math.log2(max(1, min(height, width)))))
    return replace(net, channels=channels, height=height, width=width, levels=levels)

# SPDX-License-Identifier: Apache-2.0
"""Learner ``lottery_prior``: each client restores its own degraded pictures, zero-shot.

Method: "Lottery Prior: Randomized Neural Compression for Zero-Shot Inverse
Problems" (Wu, You, Dragotti, Gündüz, ICML 2026); maths in
:mod:`flowerbed.methods.lottery_prior.algorithm`. A local task: under ``strategy:
local`` every client (an image owner, dataset ``skimage_images``) degrades
each of its pictures with the scenario's seeded degradation (``task``,
``sigma``...), restores it with Lottery Prior — an ensemble of
``ensemble_size`` randomly seeded networks, λ_R by the discrepancy principle —
and with the baselines named in ``baselines`` (scikit-image's classical
restorers, BM3D if installed, Deep Image Prior), and reports PSNR/SSIM
against the clean picture. The restored pictures stay in the client's state
folder; only metrics leave the client. The ``centralized`` baseline runs the
same on every picture; the degradations are seeded by the root seed and the
picture, so it sees exactly the clients' observations.

Metrics (means over the client's pictures): ``psnr_<m>``/``ssim_<m>`` for
``lp`` (the ensemble), ``lp_weighted`` (data-fit-weighted ensemble),
``lp_members`` (mean over members), ``lp_single`` (member 0 alone: the S = 1
ablation), ``lp_no_rate`` (member 0's twin with λ_R = 0), every baseline, and
``dip`` (last iterate) / ``dip_oracle`` (best iterate, chosen with the clean
picture), ``deep_decoder`` (Deep Decoder, last iterate; ``deep_decoder_oracle`` its
best iterate, a diagnostic); ``lp_bits``, ``lp_bpp`` (the code of one member: seed, mask, latents,
modules), ``lp_lambda``, ``lp_fit_ratio`` (‖y - A x̂‖²/m over sigma²),
``seconds_lp``, ``seconds_dip``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import numpy as np
from pydantic import Field, field_validator

from flowerbed.clients.learner import Learner, TaskContext
from flowerbed.core.messages import Payload
from flowerbed.core.registry import Params, register
from flowerbed.core.seeds import derive_seed
from flowerbed.data.base import ClientData

if TYPE_CHECKING:
    from flowerbed.methods.lottery_prior.data import Observation

Baseline = Literal[
    "input", "tv", "nlm", "wavelet", "bm3d", "bicubic", "biharmonic", "dip", "deep_decoder"
]
CLASSICAL_DEFAULT: tuple[Baseline, ...] = (
    "input", "tv", "nlm", "wavelet", "bm3d", "bicubic", "biharmonic",
)  # fmt: skip


class LotteryPriorParams(Params):
    """Degradation, Lottery Prior's settings (defaults: LotteryCodec's), baselines."""

    task: Literal["denoise", "sr", "inpaint"] = Field(
        "denoise", description="denoise; sr: noisy s-fold average-pool downsampling; "
        "inpaint: random keep-mask plus noise"
    )
    sigma: float = Field(25.0, gt=0, le=255, description="noise std on the 0..255 scale")
    scale: int = Field(2, ge=2, le=8, description="sr: downsampling factor")
    keep_pixels: float = Field(0.5, gt=0, lt=1, description="inpaint: share of observed pixels")
    ensemble_size: int = Field(4, ge=1, le=32, description="seeds S of the ensemble")
    iters: int = Field(300, ge=1, description="Adam iterations (cosine schedule)")
    polish_iters: int = Field(30, ge=0, description="second stage: soft-round alone, lr 1e-4")
    keep: float = Field(0.7, gt=0, le=1, description="share of frozen weights the mask keeps")
    budget: Literal["global", "layer"] = Field("global", description="one mask budget or per layer")
    levels: int = Field(7, ge=1, le=12, description="latent grids (full, 1/2, 1/4... resolution)")
    entropy_model: Literal["factorized", "arm"] = Field(
        "factorized", description="factorized: one Laplace per latent level; arm: LotteryCodec's "
        "auto-regressive model (24 causal neighbours; ~1250 more parameters to code)"
    )
    weight_init: Literal["ffn", "kaiming"] = "ffn"
    lambda_rate: Literal["discrepancy"] | float = Field(
        "discrepancy", description="λ_R: 'discrepancy' (residual settles at sigma²) or a number ≥ 0"
    )
    complexity_ratio: float = Field(1.0, ge=0, description="λ_C / λ_R (1: one code length)")
    ablate_rate: bool = Field(True, description="also fit member 0 with λ_R = 0")
    baselines: tuple[Baseline, ...] = Field(
        CLASSICAL_DEFAULT, description="those not meant for the task are skipped"
    )
    dip_iters: int = Field(600, ge=1, description="Deep Image Prior iterations")
    dip_width: int = Field(16, ge=1, description="channels per U-Net level")
    dd_iters: int = Field(1000, ge=1, description="Deep Decoder iterations (Adam, lr 0.01)")
    dd_width: int | None = Field(
        None, ge=1, description="Deep Decoder channels k; None: the paper's weights per pixel"
    )

    @field_validator("lambda_rate")
    @classmethod
    def _non_negative(cls, value: str | float) -> str | float:
        if not isinstance(value, str) and value < 0:
            raise ValueError(f"must be >= 0 or 'discrepancy', got {value}")
        return value


@dataclass
class ImageResult:
    """Everything measured on one picture (images kept for plots and the client's state)."""

    metrics: dict[str, float]
    images: dict[str, np.ndarray] = field(default_factory=dict)
    curves: dict[str, list[tuple[int, float]]] = field(default_factory=dict)


def quality(clean: np.ndarray, est: np.ndarray) -> tuple[float, float]:
    """PSNR and SSIM (scikit-image, data range 1) of ``est`` against ``clean`` ``(C, H, W)``."""
    from skimage.metrics import peak_signal_noise_ratio, structural_similarity

    est = np.clip(est, 0.0, 1.0)
    psnr = float(peak_signal_noise_ratio(clean, est, data_range=1.0))
    if clean.shape[0] == 1:
        ssim = float(structural_similarity(clean[0], est[0], data_range=1.0))
    else:
        ssim = float(structural_similarity(clean, est, data_range=1.0, channel_axis=0))
    return psnr, ssim


def observe(p: LotteryPriorParams, clean: np.ndarray, root_seed: int, name: str) -> Observation:
    """The client's observation of picture ``name``: seeded by the root seed and the picture."""
    from flowerbed.methods.lottery_prior.data import degrade

    seed = derive_seed(root_seed, "lottery_prior", "degrade", name)
    return degrade(clean, p.task, p.sigma / 255.0, seed, scale=p.scale, keep=p.keep_pixels)


def restore_image(
    p: LotteryPriorParams, clean: np.ndarray, obs: Observation, seed: int, track_every: int = 0
) -> ImageResult:
    """Lottery Prior, its ablations and the baselines on one observation of ``clean``."""
    from flowerbed.methods.lottery_prior import algorithm as lp
    from flowerbed.methods.lottery_prior.algorithm_net import NetConfig

    c, h, w = clean.shape
    net = lp.with_size(
        NetConfig(1, 1, levels=p.levels, keep=p.keep, budget=p.budget,
                  weight_init=p.weight_init, entropy_model=p.entropy_model), c, h, w,
    )
    cfg = lp.FitConfig(iters=p.iters, polish_iters=p.polish_iters,
                       complexity_ratio=p.complexity_ratio, track_every=track_every)
    start = time.perf_counter()
    rest = lp.lottery_prior(obs.y, obs.op, obs.sigma, net, seed, p.ensemble_size,
                            p.lambda_rate, p.ablate_rate, cfg, reference=clean)
    seconds = time.perf_counter() - start
    first = rest.members[0]
    out = ImageResult({}, {"lp": rest.image, "lp_single": first.image})
    out.images["lp_weighted"] = rest.weighted
    if rest.ablations:
        out.images["lp_no_rate"] = rest.ablations[0].image
        out.curves["lp_no_rate"] = rest.ablations[0].curve
    out.curves["lp_single"] = first.curve
    for name, img in out.images.items():
        out.metrics[f"psnr_{name}"], out.metrics[f"ssim_{name}"] = quality(clean, img)
    member_q = np.array([quality(clean, m.image) for m in rest.members])
    out.metrics["psnr_lp_members"], out.metrics["ssim_lp_members"] = member_q.mean(axis=0)
    bits = float(np.mean([m.total_bits for m in rest.members]))
    out.metrics.update(
        lp_bits=bits, lp_bpp=bits / (h * w), seconds_lp=seconds,
        lp_latent_bits=float(np.mean([m.latent_bits for m in rest.members])),
        lp_psi_bits=float(np.mean([m.psi_bits for m in rest.members])),
        lp_mask_bits=first.mask_bits,
        lp_lambda=float(np.mean([m.lambda_rate for m in rest.members])),
        lp_fit_ratio=float(np.mean([m.data_fit for m in rest.members])) / obs.sigma**2,
    )
    _baselines(p, clean, obs, seed, out, track_every)
    return out


def _baselines(
    p: LotteryPriorParams, clean: np.ndarray, obs: Observation, seed: int, out: ImageResult,
    track_every: int,
) -> None:
    from flowerbed.methods.lottery_prior import algorithm_baselines as bl

    names = tuple(b for b in p.baselines if b not in ("dip", "deep_decoder"))
    for name, img in bl.classical(p.task, obs.y, obs.op, obs.sigma, names).items():
        out.images[name] = img
        out.metrics[f"psnr_{name}"], out.metrics[f"ssim_{name}"] = quality(clean, img)
    if "deep_decoder" in p.baselines:
        _deep_decoder(p, clean, obs, seed, out, track_every)
    if "dip" not in p.baselines:
        return
    import torch

    from flowerbed.methods.lottery_prior.model_dip import DipUNet, parameter_count

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(derive_seed(seed, "dip") % 2**63)
        unet = DipUNet(32, clean.shape[0], width=p.dip_width, depth=_depth(clean.shape[1:]))
        start = time.perf_counter()
        res = bl.fit_dip(unet, obs.y, obs.op, clean.shape, clean, iters=p.dip_iters,
                         seed=derive_seed(seed, "dip", "noise"),
                         track_every=track_every or 10)
    out.metrics["seconds_dip"] = time.perf_counter() - start
    out.metrics["dip_params"] = float(parameter_count(unet))
    out.metrics["dip_oracle_iter"] = float(res.best_iter)
    out.images["dip"], out.images["dip_oracle"] = res.final, res.best
    out.curves["dip"] = res.curve
    for name in ("dip", "dip_oracle"):
        out.metrics[f"psnr_{name}"], out.metrics[f"ssim_{name}"] = quality(clean, out.images[name])


def _deep_decoder(
    p: LotteryPriorParams, clean: np.ndarray, obs: Observation, seed: int, out: ImageResult,
    track_every: int,
) -> None:
    """Deep Decoder (last iterate; the oracle-best iterate as a diagnostic)."""
    import torch

    from flowerbed.methods.lottery_prior import algorithm_baselines as bl
    from flowerbed.methods.lottery_prior.model_deep_decoder import for_size
    from flowerbed.methods.lottery_prior.model_dip import parameter_count

    c, h, w = clean.shape
    if h != w:
        raise ValueError(f"learner lottery_prior: deep_decoder needs square pictures, got {h}x{w}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(derive_seed(seed, "deep_decoder") % 2**63)
        net = for_size(h, c, p.dd_width)
        start = time.perf_counter()
        res = bl.fit_deep_decoder(net, obs.y, obs.op, clean, iters=p.dd_iters,
                                  seed=derive_seed(seed, "deep_decoder", "input"),
                                  track_every=track_every or 10)
    out.metrics["seconds_deep_decoder"] = time.perf_counter() - start
    out.metrics["deep_decoder_params"] = float(parameter_count(net))
    out.images["deep_decoder"], out.images["deep_decoder_oracle"] = res.final, res.best
    out.curves["deep_decoder"] = res.curve
    for name in ("deep_decoder", "deep_decoder_oracle"):
        out.metrics[f"psnr_{name}"], out.metrics[f"ssim_{name}"] = quality(clean, out.images[name])


def _depth(hw: tuple[int, ...]) -> int:
    """U-Net levels: up to 4, as long as the side stays divisible."""
    depth = 0
    while depth < 4 and all(s % 2 ** (depth + 1) == 0 and s // 2 ** (depth + 1) >= 4 for s in hw):
        depth += 1
    return max(depth, 1)


@register("learner", "lottery_prior")
class LotteryPriorLearner(Learner):
    """Zero-shot restoration of each client's own pictures (Lottery Prior + baselines)."""

    Params = LotteryPriorParams

    def run_local(self, data: ClientData, ctx: TaskContext) -> Payload:
        """Degrade, restore and score every picture the client holds (train and test rows)."""
        p: LotteryPriorParams = self.params  # type: ignore[assignment]
        shape = data.meta.input_shape
        if data.meta.name != "skimage_images" or len(shape) != 3:
            raise ValueError(
                f"learner lottery_prior: dataset {data.meta.name!r} holds no pictures; "
                "use dataset: skimage_images"
            )
        if p.task == "sr" and (shape[1] % p.scale or shape[2] % p.scale):
            raise ValueError(
                f"learner lottery_prior: scale {p.scale} does not divide the picture size "
                f"{shape[1]}x{shape[2]} (set dataset.size to a multiple of it)"
            )
        rows = np.concatenate([data.x_train, data.x_test])
        labels = np.concatenate([data.y_train, data.y_test])
        per_image: list[dict[str, float]] = []
        state = ctx.client_state("lottery_prior") if ctx.state_root is not None else None
        for row, label in zip(rows, labels, strict=True):
            name = data.meta.class_names[int(label)]
            clean = np.asarray(row, dtype=float).reshape(shape)
            obs = observe(p, clean, ctx.scenario.seed, name)
            res = restore_image(p, clean, obs, derive_seed(ctx.seed, "image", name))
            per_image.append(res.metrics)
            if state is not None:
                state.save_array(f"restored_{name}", res.images["lp"].astype(np.float32))
        keys = sorted(set().union(*per_image)) if per_image else []
        metrics = {k: float(np.mean([m[k] for m in per_image if k in m])) for k in keys}
        return Payload(metrics=metrics, num_examples=len(per_image))

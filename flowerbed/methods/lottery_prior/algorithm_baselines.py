# SPDX-License-Identifier: Apache-2.0
"""Baselines beside Lottery Prior: scikit-image's classical restorers, BM3D, DIP, Deep Decoder.

None of the classical methods is written here: TV (Chambolle), non-local means,
wavelet shrinkage (BayesShrink), biharmonic inpainting and bicubic rescaling
are scikit-image's, BM3D is the ``bm3d`` package (optional). Their settings
use the known sigma and nothing of the clean image: NL-means ``h = 0.8 sigma``
(scikit-image's recommendation with ``fast_mode``), wavelet shrinkage with
``sigma = sigma``, BM3D with ``sigma``, and the TV weight chosen by the same
discrepancy principle as Lottery Prior's λ_R (bisection until
``‖u - y‖²/m = sigma²``). Deep Image Prior (Ulyanov et al., 2018) fits an
untrained network (``flowerbed.methods.lottery_prior.model_dip``) to ``y`` through the forward
operator, with input-noise regularisation; its best iteration is picked with
the clean image (an *oracle* early stop, reported as such). Deep Decoder
(Heckel & Hand, 2019; ``flowerbed.methods.lottery_prior.model_deep_decoder``) fits
its under-parameterised decoder the same way, without input noise and without
early stopping (its last iterate is the method).

Images are ``(C, H, W)`` float arrays in ``[0, 1]``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from flowerbed.methods.lottery_prior.algorithm import Operator, data_fit

#: Classical baselines, by task.
CLASSICAL = {
    "denoise": ("input", "tv", "nlm", "wavelet", "bm3d"),
    "sr": ("bicubic",),
    "inpaint": ("input", "biharmonic"),
}


def _hwc(x: np.ndarray) -> tuple[np.ndarray, int | None]:
    """``(C, H, W)`` → scikit-image layout: ``(H, W)`` for grey, ``(H, W, C)`` for colour."""
    return (x[0], None) if x.shape[0] == 1 else (np.moveaxis(x, 0, -1), -1)


def _chw(x: np.ndarray, channels: int) -> np.ndarray:
    return x[None] if channels == 1 else np.moveaxis(x, -1, 0)


def installed(module: str) -> bool:
    """Whether an optional package (``bm3d``, ``pywt``) is installed."""
    import importlib.util

    return importlib.util.find_spec(module) is not None


#: Baselines that need an optional package (skipped without it).
NEEDS = {"bm3d": "bm3d", "wavelet": "pywt"}


def tv_discrepancy(y: np.ndarray, sigma: float, tau: float = 1.0, steps: int = 30) -> np.ndarray:
    """Chambolle TV denoising with the weight bisected (log scale) to ``‖u - y‖²/m = τsigma²``."""
    from skimage.restoration import denoise_tv_chambolle

    img, axis = _hwc(y)

    def run(weight: float) -> np.ndarray:
        return np.asarray(denoise_tv_chambolle(img, weight=weight, channel_axis=axis))

    lo, hi = math.log(1e-4), math.log(10.0)
    target = tau * sigma**2
    for _ in range(steps):
        mid = (lo + hi) / 2
        if float(np.mean((run(math.exp(mid)) - img) ** 2)) > target:
            hi = mid
        else:
            lo = mid
    return _chw(run(math.exp((lo + hi) / 2)), y.shape[0])


def classical(
    task: str, y: np.ndarray, op: Operator, sigma: float, names: tuple[str, ...] | None = None
) -> dict[str, np.ndarray]:
    """Every classical baseline of ``task`` (or those in ``names``) on the observation ``y``.

    ``y`` is ``(C, H', W')``: low resolution for ``sr``; full size with zeros at
    the missing pixels for ``inpaint``. BM3D and wavelet shrinkage are skipped when
    ``bm3d`` / PyWavelets are not installed (``pip install flowerbed[restoration]``).
    """
    from skimage import restoration, transform

    c = y.shape[0]
    img, axis = _hwc(y)
    wanted = CLASSICAL[task] if names is None else tuple(n for n in names if n in CLASSICAL[task])
    makers: dict[str, Callable[[], np.ndarray]] = {
        "input": lambda: np.clip(img, 0, 1),
        "tv": lambda: _hwc(tv_discrepancy(y, sigma))[0],
        "nlm": lambda: restoration.denoise_nl_means(
            img, h=0.8 * sigma, sigma=sigma, fast_mode=True, patch_size=5, patch_distance=6,
            channel_axis=axis),
        "wavelet": lambda: restoration.denoise_wavelet(
            img, sigma=sigma, method="BayesShrink", mode="soft", rescale_sigma=True,
            channel_axis=axis),
        "bm3d": lambda: _bm3d(img, sigma),
        "bicubic": lambda: transform.rescale(img, op.scale, order=3, mode="edge",
                                             channel_axis=axis),
        "biharmonic": lambda: restoration.inpaint_biharmonic(
            img, _missing(op, img.shape[:2]), channel_axis=axis),
    }
    out = {}
    for name in wanted:
        if name in NEEDS and not installed(NEEDS[name]):
            continue
        out[name] = np.clip(_chw(np.asarray(makers[name](), dtype=float), c), 0, 1)
    return out


def _missing(op: Operator, shape: tuple[int, ...]) -> np.ndarray:
    assert op.keep is not None and op.keep.shape == shape
    return ~np.asarray(op.keep, dtype=bool)


def _bm3d(img: np.ndarray, sigma: float) -> np.ndarray:
    import bm3d

    if img.ndim == 3:
        return np.asarray(bm3d.bm3d_rgb(img, sigma))
    return np.asarray(bm3d.bm3d(img, sigma))


# --------------------------------------------------------------------------- Deep Image Prior
@dataclass
class DipResult:
    """DIP's last iterate, its oracle-best iterate, and the PSNR curve."""

    final: np.ndarray
    best: np.ndarray
    best_iter: int
    best_psnr: float
    final_psnr: float
    curve: list[tuple[int, float]] = field(default_factory=list)


def fit_dip(
    net: nn.Module,
    y: np.ndarray,
    op: Operator,
    shape: tuple[int, int, int],
    reference: np.ndarray,
    iters: int = 1200,
    lr: float = 0.01,
    input_depth: int = 32,
    reg_noise: float = 1.0 / 30,
    seed: int = 0,
    track_every: int = 10,
) -> DipResult:
    """Fit ``net(z) ≈`` the image behind ``y`` by minimising ``‖y - A net(z + ε_t)‖²/m``.

    ``z ~ U(0, 0.1)`` with ``input_depth`` channels is fixed; ``ε_t ~ N(0,
    reg_noise²)`` is redrawn each iteration (DIP's regulariser for noisy
    inputs). ``reference`` picks the best iterate (oracle early stopping) and
    draws the curve; it never enters the loss.
    """
    _, h, w = shape
    gen = torch.Generator().manual_seed(seed % 2**63)
    z = torch.rand((1, input_depth, h, w), generator=gen) * 0.1
    return _fit_fixed_input(net, z, y, op, reference, iters, lr, gen, reg_noise, track_every)


# --------------------------------------------------------------------------- Deep Decoder
def fit_deep_decoder(
    net: nn.Module,
    y: np.ndarray,
    op: Operator,
    reference: np.ndarray,
    iters: int = 1000,
    lr: float = 0.01,
    seed: int = 0,
    track_every: int = 10,
) -> DipResult:
    """Fit a Deep Decoder ``net(B_0) ≈`` the image behind ``y``: Adam on ``‖y - A net(B_0)‖²/m``.

    ``B_0 ~ U(0, 0.1)`` (shape ``net.input_shape``) is fixed; no input noise
    and no early stopping (the network is smaller than the picture). The
    result's ``final`` is the last iterate (the method); ``best`` is the
    oracle-best iterate chosen with ``reference``, reported only as a
    diagnostic (``reference`` never enters the loss).
    """
    gen = torch.Generator().manual_seed(seed % 2**63)
    shape: tuple[int, ...] = net.input_shape  # type: ignore[assignment]
    z = torch.rand(shape, generator=gen) * 0.1
    return _fit_fixed_input(net, z, y, op, reference, iters, lr, gen, 0.0, track_every)


def _fit_fixed_input(
    net: nn.Module,
    z: torch.Tensor,
    y: np.ndarray,
    op: Operator,
    reference: np.ndarray,
    iters: int,
    lr: float,
    gen: torch.Generator,
    reg_noise: float,
    track_every: int,
) -> DipResult:
    """Adam on ``‖y - A net(z + ε_t)‖²/m`` (``ε_t ~ N(0, reg_noise²)``, none at 0) from ``gen``."""
    yt = torch.as_tensor(y, dtype=torch.float32)
    ref = torch.as_tensor(reference, dtype=torch.float32)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    best, best_iter, best_psnr = None, 0, -math.inf
    curve: list[tuple[int, float]] = []
    for step in range(1, iters + 1):
        noisy = z + reg_noise * torch.randn(z.shape, generator=gen) if reg_noise else z
        out = net(noisy)
        loss = data_fit(out, yt, op).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % track_every == 0 or step == iters:
            with torch.no_grad():
                psnr = float(10 * torch.log10(1 / ((out[0] - ref) ** 2).mean()))
            curve.append((step, psnr))
            if psnr > best_psnr:
                best, best_iter, best_psnr = out[0].detach().clone(), step, psnr
    with torch.no_grad():
        final = net(z)[0]
        final_psnr = float(10 * torch.log10(1 / ((final - ref) ** 2).mean()))
    assert best is not None
    return DipResult(final.numpy().astype(float), best.numpy().astype(float), best_iter,
                     best_psnr, final_psnr, curve)

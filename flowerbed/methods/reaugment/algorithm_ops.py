"""Forecaster training, forecast metrics and the classic augmentations ReAugment is compared with.

Part of ReAugment (Yuan et al., arXiv 2409.06282; :mod:`flowerbed.methods.reaugment.algorithm`).
Windows are float arrays ``(n, T + H, C)``; an augmentation transforms whole
windows (lookback and horizon together, as FrAug and the ReAugment augmenter do).

Classic operations (Um et al., ICMI 2017; Le Guennec et al., 2016): ``jitter``
(additive Gaussian noise), ``scaling`` (one Gaussian factor per window and
channel), ``magnitude_warp`` (multiplication by a smooth random curve: a cubic
spline through ``knots + 2`` values ~ N(1, σ²)), ``window_warp`` (a random slice of
``ratio * L`` steps stretched by 0.5 or 2, the window resampled to its length).
Frequency-domain operations (FrAug, Chen et al., 2023): ``freq_mask`` (zero random
rFFT components of the window) and ``freq_mix`` (swap random rFFT components with
another training window). ``tsaug`` implements noise and time warping but not
scaling, magnitude warping, window warping or FrAug, so all six are written here.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

ModelFactory = Callable[[], nn.Module]
#: Windows per forward pass when predicting (bounds memory on long test sets).
CHUNK = 1024


@dataclass(frozen=True)
class TrainConfig:
    """Adam on the MSE: ``steps`` mini-batches; early stopping on validation MSE.

    Every ``eval_every`` steps the validation MSE is measured; training stops after
    ``patience`` evaluations without improvement and the best weights are kept.
    """

    steps: int
    batch_size: int
    lr: float
    eval_every: int
    patience: int


def adam(params: Iterable[nn.Parameter], lr: float) -> torch.optim.Adam:
    """Adam with torch's defaults, stepping all parameters in one ``foreach`` call.

    On CPU the ``foreach`` path applies the same element-wise update as the
    per-tensor loop (bit-identical weights, ``tests/methods/test_reaugment.py``) with one
    Python dispatch per step instead of one per parameter tensor.
    """
    return torch.optim.Adam(params, lr=lr, foreach=True)


def seeded_model(make: ModelFactory, seed: int) -> nn.Module:
    """``make()`` with torch's generator seeded, so equal seeds give equal initial weights."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return make()


def as_tensor(windows: np.ndarray) -> torch.Tensor:
    """Windows as a float32 tensor."""
    return torch.as_tensor(np.asarray(windows, dtype=np.float32))


@torch.no_grad()
def predict(model: nn.Module, windows: np.ndarray | torch.Tensor, lookback: int) -> torch.Tensor:
    """Forecasts ``(n, H, C)`` of the lookbacks of ``windows`` (eval mode, no gradient)."""
    w = windows if isinstance(windows, torch.Tensor) else as_tensor(windows)
    was_training = model.training
    model.eval()
    out = torch.cat([model(w[i : i + CHUNK, :lookback]) for i in range(0, len(w), CHUNK)])
    model.train(was_training)
    return out


def window_mse(model: nn.Module, windows: np.ndarray | torch.Tensor, lookback: int) -> np.ndarray:
    """MSE of each window's forecast over its horizon and channels, ``(n,)``."""
    w = windows if isinstance(windows, torch.Tensor) else as_tensor(windows)
    err = predict(model, w, lookback) - w[:, lookback:]
    return (err**2).mean(dim=(1, 2)).numpy().astype(np.float64)


def forecast_metrics(
    model: nn.Module, windows: np.ndarray, lookback: int, scale: np.ndarray | None = None
) -> dict[str, float]:
    """Test ``mse`` and ``mae`` (normalised units) and, given MASE scales ``(n, C)``, ``mase``.

    MASE is each window's mean absolute error per channel divided by that channel's
    scale, averaged over windows and channels.
    """
    w = as_tensor(windows)
    err = (predict(model, w, lookback) - w[:, lookback:]).numpy().astype(np.float64)
    out = {"mse": float(np.mean(err**2)), "mae": float(np.mean(np.abs(err)))}
    if scale is not None:
        out["mase"] = float(np.mean(np.abs(err).mean(axis=1) / scale))
    return out


def train_forecaster(
    model: nn.Module,
    train: np.ndarray,
    lookback: int,
    cfg: TrainConfig,
    seed: int,
    val: np.ndarray | None = None,
) -> tuple[nn.Module, dict[str, float]]:
    """Fit ``model`` in place on ``train`` windows; return it with ``steps`` / ``best_val``.

    Mini-batches are drawn from a fresh seeded permutation every epoch. Without
    ``val`` all ``cfg.steps`` steps run and the last weights are kept.
    """
    data = as_tensor(train)
    gen = torch.Generator().manual_seed(seed)
    opt = adam(model.parameters(), cfg.lr)
    best, best_state, bad, step = np.inf, None, 0, 0
    val_t = None if val is None or len(val) == 0 else as_tensor(val)
    model.train()
    while step < cfg.steps:
        for batch in torch.randperm(len(data), generator=gen).split(cfg.batch_size):
            w = data[batch]
            loss = ((model(w[:, :lookback]) - w[:, lookback:]) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            if val_t is not None and (step % cfg.eval_every == 0 or step == cfg.steps):
                v = float(window_mse(model, val_t, lookback).mean())
                if v < best - 1e-7:
                    best, best_state, bad = v, copy.deepcopy(model.state_dict()), 0
                else:
                    bad += 1
            if step >= cfg.steps or bad >= cfg.patience:
                break
        if bad >= cfg.patience:
            break
    if best_state is not None:
        model.load_state_dict(best_state)
    model.eval()
    return model, {"steps": float(step), "best_val": float(best)}


# --- classic and frequency-domain augmentations ---------------------------------------------


def jitter(w: np.ndarray, rng: np.random.Generator, sigma: float = 0.03) -> np.ndarray:
    """``w + ε``, ε ~ N(0, σ²) per value."""
    return w + rng.normal(0.0, sigma, size=w.shape)


def scaling(w: np.ndarray, rng: np.random.Generator, sigma: float = 0.1) -> np.ndarray:
    """``w · a``, one factor a ~ N(1, σ²) per window and channel."""
    return w * rng.normal(1.0, sigma, size=(len(w), 1, w.shape[2]))


def magnitude_warp(
    w: np.ndarray, rng: np.random.Generator, sigma: float = 0.2, knots: int = 4
) -> np.ndarray:
    """``w`` times a cubic spline through ``knots + 2`` evenly spaced N(1, σ²) values."""
    from scipy.interpolate import CubicSpline

    n, length, channels = w.shape
    where = np.linspace(0, length - 1, knots + 2)
    values = rng.normal(1.0, sigma, size=(n, knots + 2, channels))
    curve = CubicSpline(where, values, axis=1)(np.arange(length))
    return w * curve


def window_warp(
    w: np.ndarray,
    rng: np.random.Generator,
    ratio: float = 0.1,
    scales: tuple[float, ...] = (0.5, 2.0),
) -> np.ndarray:
    """Stretch a random slice of ``ratio · L`` steps by a random scale; resample to length L."""
    n, length, channels = w.shape
    size = max(2, int(np.ceil(ratio * length)))
    out = np.empty_like(w, dtype=np.float64)
    for i in range(n):
        start = int(rng.integers(0, length - size + 1))
        scale = float(rng.choice(scales))
        # new time axis: identity before the slice, slope `scale` inside, identity after
        steps = np.ones(length - 1)
        steps[start : start + size - 1] = scale
        warped_t = np.concatenate([[0.0], np.cumsum(steps)])
        grid = np.linspace(0.0, warped_t[-1], length)
        for c in range(channels):
            out[i, :, c] = np.interp(grid, warped_t, w[i, :, c])
    return out


def freq_mask(w: np.ndarray, rng: np.random.Generator, rate: float = 0.2) -> np.ndarray:
    """Zero each non-constant rFFT component of the window with probability ``rate``."""
    spec = np.fft.rfft(w, axis=1)
    drop = rng.random(spec.shape) < rate
    drop[:, 0] = False
    spec[drop] = 0
    return np.fft.irfft(spec, n=w.shape[1], axis=1)


def freq_mix(
    w: np.ndarray, rng: np.random.Generator, pool: np.ndarray, rate: float = 0.2
) -> np.ndarray:
    """Replace each rFFT component with probability ``rate`` by a random pool window's."""
    spec = np.fft.rfft(w, axis=1)
    other = np.fft.rfft(pool[rng.integers(0, len(pool), size=len(w))], axis=1)
    swap = rng.random(spec.shape) < rate
    spec[swap] = other[swap]
    return np.fft.irfft(spec, n=w.shape[1], axis=1)


#: Classic arms: name -> transform of source windows (``pool``: all training windows).
CLASSIC: dict[str, Callable[[np.ndarray, np.random.Generator, np.ndarray], np.ndarray]] = {
    "jitter": lambda w, rng, pool: jitter(w, rng),
    "scaling": lambda w, rng, pool: scaling(w, rng),
    "magnitude_warp": lambda w, rng, pool: magnitude_warp(w, rng),
    "window_warp": lambda w, rng, pool: window_warp(w, rng),
    "freq_mask": lambda w, rng, pool: freq_mask(w, rng),
    "freq_mix": lambda w, rng, pool: freq_mix(w, rng, pool),
}

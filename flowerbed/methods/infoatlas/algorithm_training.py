"""InfoAtlas pre-training: synthetic episodes with known MI and the training loop.

Companion of :mod:`flowerbed.methods.infoatlas.algorithm` (the network and the
estimator). The authors' generator is not public, so the episode families here
are a reconstruction (see ``docs/methods/infoatlas.md``): Gaussian, Gaussian
mixtures, ``y = f(x) + noise``, discrete/count/mixed and categorical labels,
each seen through random MI-preserving maps. Pure numpy/torch; no Flower, no Ray.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from scipy import stats
from torch import nn

from flowerbed.methods.infoatlas.algorithm import (
    InfoAtlasNet,
    NetConfig,
    context_of,
    dv_bound,
    estimate_many,
)
from flowerbed.methods.infoatlas.algorithm_prep import prepare
from flowerbed.methods.infoatlas.algorithm_reference import (
    correlated_gaussian,
    correlation_for_mi,
    gaussian_mi_from_correlations,
    monotone_map,
    random_rotation,
)

# --------------------------------------------------------------------------- episodes
EPISODE_FAMILIES = ("gaussian", "mixture", "functional", "discrete", "conditional")


def _gaussian(n: int, dx: int, dy: int, gen: np.random.Generator) -> tuple[np.ndarray, ...]:
    r = int(gen.integers(1, min(dx, dy) + 1))
    total = gen.uniform(0.0, 3.5)
    rhos = correlation_for_mi(total * gen.dirichlet(np.ones(r)))
    return correlated_gaussian(n, dx, dy, rhos, gen)


def _mixture(n: int, dx: int, dy: int, gen: np.random.Generator) -> tuple[np.ndarray, ...]:
    d, k = dx + dy, int(gen.integers(2, 7))
    means = gen.normal(0, gen.uniform(0.5, 3.0), (k, d))
    comp = gen.integers(0, k, n)
    out = np.empty((n, d))
    for c in range(k):
        a = gen.standard_normal((d, d)) / math.sqrt(d)
        rows = comp == c
        out[rows] = means[c] + gen.standard_normal((int(rows.sum()), d)) @ (a + 0.3 * np.eye(d))
    return out[:, :dx], out[:, dx:]


def _functional(n: int, dx: int, dy: int, gen: np.random.Generator) -> tuple[np.ndarray, ...]:
    x = gen.standard_normal((n, dx)) if gen.random() < 0.5 else gen.uniform(-2, 2, (n, dx))
    a = gen.standard_normal((dx, dy)) / math.sqrt(dx)
    u = x @ a
    kind = gen.integers(4)
    if kind == 0:
        w1, w2 = gen.standard_normal((dy, 16)), gen.standard_normal((16, dy)) / 4
        f = np.tanh(u @ w1) @ w2
    elif kind == 1:
        f = np.sin(gen.uniform(0.5, 3.0) * u)
    elif kind == 2:
        f = u + gen.uniform(-1, 1) * u**2 + gen.uniform(-0.3, 0.3) * u**3
    else:
        f = np.abs(u) if gen.random() < 0.5 else np.exp(-(u**2))
    f = f / (f.std(axis=0) + 1e-9)
    noise = math.exp(gen.uniform(math.log(0.05), math.log(3.0)))
    return x, f + noise * gen.standard_normal((n, dy))


def _discrete(n: int, dx: int, dy: int, gen: np.random.Generator) -> tuple[np.ndarray, ...]:
    kind = gen.integers(4)
    d = min(dx, dy)
    x = gen.standard_normal((n, dx))
    y = gen.standard_normal((n, dy))
    if kind == 0:  # correlated Bernoulli
        q = gen.uniform(0.5, 1.0, d)
        x[:, :d] = gen.integers(0, 2, (n, d))
        y[:, :d] = np.where(gen.random((n, d)) < q, x[:, :d], 1 - x[:, :d])
    elif kind == 1:  # shared Poisson component
        u = gen.poisson(gen.uniform(0.2, 5.0, d), (n, d))
        x[:, :d] = u + gen.poisson(gen.uniform(0.2, 5.0, d), (n, d))
        y[:, :d] = u + gen.poisson(gen.uniform(0.2, 5.0, d), (n, d))
    elif kind == 2:  # categorical copied with prob q, else uniform
        c = int(gen.integers(2, 10))
        x[:, :d] = gen.integers(0, c, (n, d))
        keep = gen.random((n, d)) < gen.uniform(0.0, 1.0)
        y[:, :d] = np.where(keep, x[:, :d], gen.integers(0, c, (n, d)))
    else:  # mixed: continuous x, quantised noisy y
        levels = int(gen.integers(2, 8))
        y[:, :d] = np.floor(levels * stats.norm.cdf(x[:, :d] + gen.uniform(0.1, 2.0) * y[:, :d]))
    return x, y


def _conditional(n: int, dx: int, dy: int, gen: np.random.Generator) -> tuple[np.ndarray, ...]:
    """A label-like side: y categorical, x | y Gaussian with class-dependent mean and/or sd."""
    c = int(gen.integers(2, 7))
    labels = gen.integers(0, c, n)
    mean = gen.normal(0, gen.uniform(0, 1.5), (c, dx)) * (gen.random(dx) < 0.7)
    log_sd = gen.normal(0, gen.uniform(0, 0.8), (c, dx)) * (gen.random(dx) < 0.5)
    x = mean[labels] + np.exp(log_sd[labels]) * gen.standard_normal((n, dx))
    y = gen.standard_normal((n, dy))
    y[:, 0] = labels
    if dy > 1 and gen.random() < 0.5:
        y[:, 1:] += gen.normal(0, 1, (c, dy - 1))[labels]
    if dx == dy and gen.random() < 0.5:
        return y, x
    return x, y


_SAMPLERS: dict[str, Callable[..., tuple[np.ndarray, ...]]] = {
    "conditional": _conditional,
    "gaussian": _gaussian,
    "mixture": _mixture,
    "functional": _functional,
    "discrete": _discrete,
}


def episode(
    n: int, dx: int, dy: int, gen: np.random.Generator, family: str | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """One synthetic training dataset, seen through random MI-preserving maps per side."""
    name = family or str(gen.choice(EPISODE_FAMILIES))
    x, y = _SAMPLERS[name](n, dx, dy, gen)
    if name not in ("discrete", "conditional"):
        x = monotone_map(x, gen) if gen.random() < 0.5 else x
        y = monotone_map(y, gen) if gen.random() < 0.5 else y
    x = x @ random_rotation(dx, gen) if gen.random() < 0.5 else x
    y = y @ random_rotation(dy, gen) if gen.random() < 0.5 else y
    if gen.random() < 0.15:
        y = y[gen.permutation(n)]
    return x, y


def draw_dims(gen: np.random.Generator, max_dim: int) -> tuple[int, int]:
    """Log-uniform dims per side; equal in half of the episodes."""
    top = math.log(max_dim + 1)
    dx = int(math.exp(gen.uniform(0, top)))
    dy = dx if gen.random() < 0.5 else int(math.exp(gen.uniform(0, top)))
    return min(max(dx, 1), max_dim), min(max(dy, 1), max_dim)


# --------------------------------------------------------------------------- training
@dataclass(frozen=True)
class TrainConfig:
    """Pre-training schedule; the default fits ~10 minutes on one CPU core."""

    steps: int = 1500
    batch: int = 16
    n_min: int = 64
    n_max: int = 1024
    lr: float = 1e-3
    seed: int = 0
    validate_every: int = 250


def training_batch(
    gen: np.random.Generator, cfg: NetConfig, batch: int, n: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(build, score, context)``: each episode's 2n samples prepared, split in halves."""
    build, score, ctx = [], [], []
    for _ in range(batch):
        dx, dy = draw_dims(gen, cfg.max_dim)
        x, y = episode(2 * n, dx, dy, gen)
        z = prepare(x, y, cfg.max_dim).z[gen.permutation(2 * n)]
        build.append(z[:n])
        score.append(z[n:])
        ctx.append(context_of(n, dx, dy, cfg.max_dim))
    as_t = lambda a: torch.as_tensor(np.stack(a), dtype=torch.float32)  # noqa: E731
    return as_t(build), as_t(score), torch.tensor(ctx, dtype=torch.float32)


def validation_tasks(
    seed: int, max_dim: int, count: int = 24
) -> list[tuple[np.ndarray, np.ndarray, float]]:
    """Held-out Gaussian tasks (rotated, monotone-mapped) with known MI."""
    gen = np.random.default_rng(seed)
    tasks = []
    for i in range(count):
        d = [1, 2, 4, 8, 16][i % 5] if max_dim >= 16 else int(gen.integers(1, max_dim + 1))
        n = int([128, 512, 2048][i % 3])
        rhos = correlation_for_mi(gen.uniform(0, 2.5) * gen.dirichlet(np.ones(d)))
        x, y = correlated_gaussian(n, d, d, rhos, gen)
        x, y = monotone_map(x @ random_rotation(d, gen), gen), y @ random_rotation(d, gen)
        tasks.append((x, y, gaussian_mi_from_correlations(rhos)))
    return tasks


def validate(net: InfoAtlasNet, tasks: list[tuple[np.ndarray, np.ndarray, float]]) -> float:
    """Mean absolute error (nats) on known-MI tasks."""
    est = estimate_many(net, [(x, y) for x, y, _ in tasks])
    return float(np.mean(np.abs(est - np.array([t for *_, t in tasks]))))


def pretrain(
    net_cfg: NetConfig,
    train_cfg: TrainConfig,
    progress: Callable[[int, dict[str, float]], None] | None = None,
) -> tuple[InfoAtlasNet, dict[str, float]]:
    """Train a fresh network by maximising the cross-fitted DV bound; return it and metrics."""
    torch.manual_seed(train_cfg.seed)
    gen = np.random.default_rng(train_cfg.seed)
    tgen = torch.Generator().manual_seed(train_cfg.seed)
    net = InfoAtlasNet(net_cfg)
    opt = torch.optim.Adam(net.parameters(), lr=train_cfg.lr)
    sched = torch.optim.lr_scheduler.OneCycleLR(
        opt, max_lr=train_cfg.lr, total_steps=train_cfg.steps, pct_start=0.05
    )
    tasks = validation_tasks(train_cfg.seed + 1, net_cfg.max_dim)
    start, recent = time.perf_counter(), []
    metrics: dict[str, float] = {}
    lo, hi = math.log(train_cfg.n_min), math.log(train_cfg.n_max)
    for step in range(1, train_cfg.steps + 1):
        n = int(math.exp(gen.uniform(lo, hi)))
        build, score, ctx = training_batch(gen, net_cfg, train_cfg.batch, n)
        perms = torch.stack([torch.randperm(n, generator=tgen) for _ in range(net_cfg.negatives)])
        loss = -dv_bound(net, net(build, ctx), score, perms).mean()
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()
        sched.step()
        recent.append(float(loss.detach()))
        if step % train_cfg.validate_every == 0 or step == train_cfg.steps:
            net.eval()
            metrics = {
                "step": float(step),
                "train_dv": -float(np.mean(recent)),
                "val_mae_gaussian": validate(net, tasks),
                "seconds": time.perf_counter() - start,
            }
            net.train()
            recent = []
            if progress is not None:
                progress(step, metrics)
    net.eval()
    return net, metrics



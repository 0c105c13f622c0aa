"""``flowerbed pretrain dna_generator``: the local image generators DNA's fakes come from.

DNA (arXiv 2601.22515) is evaluated on images of many generators; none can be had
offline, so four families are trained here on the real images' generator part
(:func:`flowerbed.methods.dna.data.real_images`): ``vae`` (conditional convolutional
VAE), ``tconv_ae`` (autoencoder with a transposed-convolution decoder; its fakes are
reconstructions of real images it never trained on), ``flow`` (conditional flow
matching in the latent space of a pixel-shuffle autoencoder, Euler sampling) and
``pca`` (per-class PCA-Gaussian sampler, no training). The artefact is a bank of
generated 28x28 images with their semantic classes (``images`` uint8, ``labels``),
cached under ``cache_dir()/dna/`` by a hash of the parameters, built on first use; the
networks are in :mod:`flowerbed.methods.dna.model_generator_nets`.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import Field

from flowerbed.core.artefacts import PretrainTarget
from flowerbed.core.cache import cached_file
from flowerbed.core.registry import Params
from flowerbed.core.seeds import derive_seed, rng
from flowerbed.data.image_data import FASHION_DIR
from flowerbed.methods.dna.data import Family, Source, real_images, semantic_names
from flowerbed.models.vlm import params_hash, save_atomic

logger = logging.getLogger("flowerbed.pretrain")

#: Training steps per family when ``steps`` is not given (for ``flow``: its autoencoder).
DEFAULT_STEPS = {"vae": 2000, "tconv_ae": 2000, "flow": 2000, "pca": 0}
ARTEFACT_FORMAT = 1


class DnaGeneratorParams(Params):
    """Everything that determines a generator's bank (its cache key)."""

    family: Family = "vae"
    source: Source = "fashion_mnist"
    steps: int | None = Field(None, ge=0, description="optimiser steps (default per family)")
    batch_size: int = Field(64, ge=2)
    lr: float = Field(1e-3, gt=0)
    width: int = Field(16, ge=4, description="channels of the first convolution")
    latent: int = Field(16, ge=2, description="latent width")
    flow_steps: int = Field(4000, ge=0, description="flow: steps of the latent velocity MLP")
    pca_components: int = Field(40, ge=1)
    train_rows: int = Field(20000, ge=16, description="generator-part images trained on")
    bank_size: int = Field(3000, ge=10, description="generated images kept")
    sample_steps: int = Field(50, ge=1, description="flow: Euler steps")
    seed: int = 0
    data_path: str = Field(FASHION_DIR, description="Fashion-MNIST folder")


def _steps(p: DnaGeneratorParams) -> int:
    return DEFAULT_STEPS[p.family] if p.steps is None else p.steps


def _pca_bank(x: np.ndarray, y: np.ndarray, labels: np.ndarray, p: DnaGeneratorParams
              ) -> np.ndarray:
    """Per class: Gaussian coefficients on the top principal components, reconstructed."""
    out = np.zeros((len(labels), x.shape[1] * x.shape[2]), np.float32)
    gen = rng(p.seed, "dna_generator", "pca")
    for c in np.unique(labels):
        rows = x[y == c].reshape(int((y == c).sum()), -1).astype(np.float64)
        mean = rows.mean(axis=0)
        _, s, vt = np.linalg.svd(rows - mean, full_matrices=False)
        k = min(p.pca_components, len(s))
        sd = s[:k] / np.sqrt(max(len(rows) - 1, 1))
        want = labels == c
        coef = gen.standard_normal((int(want.sum()), k)) * sd
        out[want] = mean + coef @ vt[:k]
    return np.clip(out, 0.0, 1.0).reshape(len(labels), x.shape[1], x.shape[2])


def _train(net: Any, x: Any, y: Any, steps: int, p: DnaGeneratorParams, batch: int) -> list[float]:
    """``steps`` Adam steps (cosine schedule) on random batches of tensors ``(x, y)``."""
    import torch

    opt = torch.optim.Adam(net.parameters(), lr=p.lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(steps, 1))
    batches = rng(p.seed, "dna_generator", "batches", type(net).__name__)
    losses, start = [], time.perf_counter()
    for step in range(steps):
        b = torch.as_tensor(batches.integers(0, len(x), size=batch))
        loss = net.loss(x[b], y[b])
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
        if (step + 1) % 500 == 0:
            logger.warning("dna_generator %s: %s step %d/%d, loss %.4f (%.0f s)", p.family,
                           type(net).__name__, step + 1, steps, np.mean(losses[-100:]),
                           time.perf_counter() - start)
    net.eval()
    return losses


def _latent_flow(p: DnaGeneratorParams, xt: Any, yt: Any, labels: np.ndarray, gen: Any
                 ) -> tuple[Any, list[float]]:
    """Train the flow family (autoencoder, then latent velocity field); sample ``labels``."""
    import torch

    from flowerbed.methods.dna import model_generator_nets as nets

    classes = len(semantic_names(p.source))
    ae = nets.ShuffleAE(p.latent, p.width)
    losses = _train(ae, xt, yt, _steps(p), p, p.batch_size)
    with torch.no_grad():
        z = torch.cat([ae.enc(xt[i : i + 1000]) for i in range(0, len(xt), 1000)])
    mu, sd = z.mean(0), z.std(0).clamp_min(1e-6)
    flow = nets.LatentFlow(p.latent, classes)
    losses += _train(flow, (z - mu) / sd, yt, p.flow_steps, p, 256)
    out = []
    with torch.no_grad():
        for i in range(0, len(labels), 500):
            c = torch.as_tensor(labels[i : i + 500])
            out.append(ae.decode(flow.sample(c, gen, p.sample_steps, p.latent) * sd + mu))
    return torch.cat(out), losses


def make_bank(p: DnaGeneratorParams) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
    """Train the generator of ``p`` and return its bank ``(images in [0, 1], labels)``."""
    x, y = real_images(p.source, "generator", p.train_rows, p.seed, p.data_path)
    classes = len(semantic_names(p.source))
    labels = np.arange(p.bank_size) % classes
    metrics: dict[str, float] = {"train_images": float(len(x))}
    start = time.perf_counter()
    if p.family == "pca":
        return _pca_bank(x, y, labels, p), labels, metrics
    if p.family == "tconv_ae":
        # Reconstructions of real images the autoencoder never saw.
        rec, labels = real_images(p.source, "reconstruct", p.bank_size, p.seed, p.data_path)
        if len(rec) < p.bank_size:
            raise ValueError(f"dna_generator tconv_ae: the reconstruct part has {len(rec)} "
                             f"images, bank_size={p.bank_size}")
    import torch

    from flowerbed.methods.dna import model_generator_nets as nets

    xt, yt = torch.as_tensor(x[:, None]), torch.as_tensor(y)
    with torch.random.fork_rng():
        torch.manual_seed(derive_seed(p.seed, "dna_generator", p.family) % 2**63)
        gen = torch.Generator().manual_seed(derive_seed(p.seed, "dna_generator", "sample") % 2**63)
        if p.family == "flow":
            made, losses = _latent_flow(p, xt, yt, labels, gen)
        else:
            net: Any = (nets.CondVAE(p.latent, classes, p.width) if p.family == "vae"
                        else nets.TconvAE(p.latent, p.width))
            losses = _train(net, xt, yt, _steps(p), p, p.batch_size)
            parts = []
            with torch.no_grad():
                for i in range(0, p.bank_size, 500):
                    if p.family == "vae":
                        parts.append(net.sample(torch.as_tensor(labels[i : i + 500]), gen))
                    else:
                        parts.append(net(torch.as_tensor(rec[i : i + 500, None])))
            made = torch.cat(parts)
    images = made[:, 0].numpy()
    metrics |= {"train_s": time.perf_counter() - start,
                "final_loss": float(np.mean(losses[-100:])) if losses else float("nan")}
    return images, np.asarray(labels, dtype=np.int64), metrics


def pretrain(p: DnaGeneratorParams, out: Path) -> dict[str, float]:
    """Train, generate the bank and write it (uint8 images, labels, params, metrics)."""
    images, labels, metrics = make_bank(p)
    blob = {"images": np.round(np.clip(images, 0, 1) * 255).astype(np.uint8),
            "labels": labels, "format": np.array(ARTEFACT_FORMAT),
            "params": np.array(p.model_dump_json()), "metrics": np.array(json.dumps(metrics))}

    def write(tmp: Path) -> None:
        with tmp.open("wb") as fh:
            np.savez_compressed(fh, **blob)

    save_atomic(out, write)
    return metrics


def default_path(p: DnaGeneratorParams) -> Path:
    """``cache_dir()/dna/<family>-<source>-<params hash>.npz``."""
    return cached_file("dna", f"{p.family}-{p.source}-{params_hash(p)}.npz")


PRETRAIN_TARGET = PretrainTarget(
    name="dna_generator", params=DnaGeneratorParams, run=pretrain, default_path=default_path,
    help="a local image generator (vae, tconv_ae, flow, pca) and its bank of fakes for DNA",
)

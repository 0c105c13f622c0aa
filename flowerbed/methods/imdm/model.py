"""IMDM denoiser parameters, builder and the MDLM text pre-training artefact ``imdm_mdlm``.

Method: "Infinite Mask Diffusion for Few-Step Distillation" (arXiv 2605.10518). Light to
import: the network is :mod:`flowerbed.methods.imdm.model_denoiser`, loaded on build. The
artefact is the paper's starting point: an MDLM (no ε-MLP) trained with the ELBO on
byte-level text windows (``text_corpus``: WordNet glosses + fortunes), which IMDM then
inherits with a zero-initialised ε-MLP (``flowerbed pretrain imdm_mdlm``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from flowerbed.core.artefacts import PretrainTarget
from flowerbed.core.cache import cached_file
from flowerbed.core.registry import Params

if TYPE_CHECKING:
    from flowerbed.methods.imdm.model_denoiser import Denoiser

logger = logging.getLogger("flowerbed.pretrain")
ARTEFACT_FORMAT = 1


class DenoiserParams(Params):
    """Architecture of the bidirectional transformer denoiser and of its ε-mask."""

    hidden: int = Field(64, ge=8, description="model width d")
    layers: int = Field(2, ge=1)
    heads: int = Field(4, ge=1)
    imdm: bool = Field(True, description="add the zero-init ε-MLP (false: plain MDLM)")
    noise_type: Literal["rand", "randn", "learnable"] = Field(
        "rand", description="ε ~ U(-1,1)^D·scale, N(0, scale²), or μ + sigma·N(0, I) learned")
    noise_dim: int = Field(64, ge=1, description="D (the paper: the hidden size)")
    noise_scale: float = Field(1.0, gt=0)
    num_mask: int = Field(0, ge=0, description="finite-state ablation: K mask states (0: ∞)")
    softcap: float | None = Field(None, gt=0, description="tanh logit cap (LM1B SDTT: 50)")


def build_denoiser(p: DenoiserParams, vocab_size: int, seq_len: int, seed: int) -> Denoiser:
    """The denoiser for ``p`` over ``vocab_size`` tokens and ``seq_len`` positions."""
    from flowerbed.methods.imdm import model_denoiser as net

    cfg = net.DenoiserConfig(
        vocab_size=vocab_size, seq_len=seq_len, hidden=p.hidden, layers=p.layers,
        heads=p.heads, imdm=p.imdm, noise_type=p.noise_type, noise_dim=p.noise_dim,
        noise_scale=p.noise_scale, num_mask=p.num_mask, softcap=p.softcap)
    return net.build_denoiser(cfg, seed)


class MdlmPretrainParams(Params):
    """MDLM pre-training on byte windows of WordNet glosses and fortunes."""

    denoiser: DenoiserParams = Field(
        DenoiserParams(hidden=128, layers=4, heads=4, imdm=False, noise_dim=128),
        description="architecture (imdm is forced off: the checkpoint is an MDLM)")
    length: int = Field(32, ge=2, le=512, description="bytes per sequence")
    n_train: int = Field(20000, ge=16, description="training windows")
    steps: int = Field(1500, ge=1)
    batch_size: int = Field(64, ge=1)
    lr: float = Field(1e-3, gt=0)
    seed: int = 0


def default_path(p: MdlmPretrainParams) -> Path:
    """Cache file of the checkpoint (keyed by ``p``)."""
    key = json.dumps({"format": ARTEFACT_FORMAT, **p.model_dump()}, sort_keys=True)
    return cached_file("imdm", f"mdlm-{hashlib.sha1(key.encode()).hexdigest()[:10]}.pt")


def text_windows(length: int, n_train: int, n_test: int, seed: int) -> tuple:  # type: ignore[type-arg]
    """``(train, test)`` int64 byte windows ``(n, length)`` of glosses + fortunes."""
    from flowerbed.data.text_data_corpus import CorpusParams, text_corpus

    ds = text_corpus(CorpusParams(sources=("glosses", "fortunes"), window=length - 1,
                                  n_train=n_train, n_test=n_test), seed=seed)
    return ds.x_train, ds.x_test


def train_mdlm(p: MdlmPretrainParams, out: Path) -> dict[str, float]:
    """Train the MDLM with the ELBO and save ``{"config", "state", "metrics"}`` atomically."""
    import torch

    from flowerbed.methods.imdm import algorithm as imdm
    from flowerbed.methods.imdm import algorithm_distill as imdm_distill

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    start = last = time.perf_counter()
    try:
        arch = p.denoiser.model_copy(update={"imdm": False})
        tr, te = text_windows(p.length, p.n_train, 512, p.seed)
        model = build_denoiser(arch, 256, p.length, p.seed)
        gen = torch.Generator().manual_seed(p.seed)

        def tick(step: int, loss: float) -> None:
            nonlocal last
            if time.perf_counter() - last > 30 or step == p.steps - 1:
                last = time.perf_counter()
                logger.warning("imdm_mdlm: step %d/%d  elbo %.3f  %.0f s", step + 1, p.steps,
                               loss, last - start)

        train_loss = imdm_distill.fit_steps(
            model, torch.as_tensor(tr), lambda m, b, g: imdm.elbo_loss(m, b, g),  # type: ignore[arg-type]
            p.steps, p.batch_size, p.lr, gen, progress=tick)
        with torch.no_grad():
            g = torch.Generator().manual_seed(1)
            test = sum(float(imdm.elbo_loss(model, torch.as_tensor(te), g)) for _ in range(4)) / 4
    finally:
        torch.set_num_threads(threads)
    metrics = {"train_elbo": train_loss, "test_elbo": test,
               "seconds": time.perf_counter() - start}
    tmp = out.with_name(f".{out.name}.tmp{os.getpid()}")
    torch.save({"config": arch.model_dump(), "length": p.length,
                "state": model.state_dict(), "metrics": metrics}, tmp)
    os.replace(tmp, out)
    return metrics


PRETRAIN_TARGET = PretrainTarget(
    name="imdm_mdlm",
    params=MdlmPretrainParams,
    run=train_mdlm,
    default_path=default_path,
    help="MDLM denoiser (ELBO) on byte windows of WordNet glosses + fortunes, for IMDM",
)

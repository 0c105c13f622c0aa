"""SparseSSM's Mamba (arXiv 2506.09613): building, pre-training and loading (torch, transformers).

The light half (parameters, the pretrain target) is
:mod:`flowerbed.methods.sparsessm.model`.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from flowerbed.core.records import publish_folder
from flowerbed.core.seeds import rng
from flowerbed.methods.sparsessm.algorithm_scan import model_logits, perplexity
from flowerbed.methods.sparsessm.data import SparseSsmTextParams, sparsessm_text
from flowerbed.methods.sparsessm.model import SparseSsmPretrainParams
from flowerbed.models.lm import LmError

logger = logging.getLogger("flowerbed.sparsessm")


def build_mamba(p: SparseSsmPretrainParams, seed: int | None = None) -> Any:
    """A randomly initialised byte-level ``MambaForCausalLM`` of ``p``'s shape (seeded)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import MambaConfig, MambaForCausalLM

    cfg = MambaConfig(
        vocab_size=256, hidden_size=p.hidden, state_size=p.state, num_hidden_layers=p.layers,
        expand=p.expand, conv_kernel=p.conv, pad_token_id=0, bos_token_id=0, eos_token_id=0,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(p.seed if seed is None else seed)
        return MambaForCausalLM(cfg).float()


def load_folder(folder: Path) -> Any:
    """A Mamba-1 ``MambaForCausalLM`` from a local folder, float32, eval mode, offline."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoConfig, MambaForCausalLM

    cfg = AutoConfig.from_pretrained(str(folder), local_files_only=True)
    if getattr(cfg, "model_type", None) != "mamba":
        raise LmError(f"sparsessm: {folder} holds a {cfg.model_type!r} model; give a Mamba-1 "
                      "(model_type 'mamba') folder")
    model = MambaForCausalLM.from_pretrained(str(folder), local_files_only=True)
    return model.float().eval()


def ngram_perplexities(train: np.ndarray, test: np.ndarray) -> dict[str, float]:
    """Held-out per-byte perplexity of add-one unigram and bigram byte models."""
    uni = np.bincount(train[:, 1:].ravel(), minlength=256) + 1.0
    lp_uni = np.log(uni / uni.sum())
    big = np.ones((256, 256))
    np.add.at(big, (train[:, :-1].ravel(), train[:, 1:].ravel()), 1.0)
    lp_big = np.log(big / big.sum(1, keepdims=True))
    return {"unigram_ppl": float(np.exp(-lp_uni[test[:, 1:]].mean())),
            "bigram_ppl": float(np.exp(-lp_big[test[:, :-1], test[:, 1:]].mean()))}


def pretrain(p: SparseSsmPretrainParams, out: Path) -> dict[str, float]:
    """Train the byte Mamba on the training block and save it to ``out`` atomically."""
    import torch
    import torch.nn.functional as F

    data = sparsessm_text(SparseSsmTextParams(window=p.window, n_train=p.n_train,
                                              n_test=p.n_test), seed=p.seed)
    model = build_mamba(p)
    gen = rng(p.seed, "sparsessm.pretrain")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    start = last = time.perf_counter()
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(p.seed)
            opt = torch.optim.AdamW(model.parameters(), lr=p.lr, weight_decay=p.weight_decay)
            warm = max(1, p.steps // 20)
            sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warm) * (
                0.5 * (1 + np.cos(np.pi * min(s, p.steps) / p.steps)) * 0.9 + 0.1))
            model.train()
            for step in range(1, p.steps + 1):
                ids = torch.as_tensor(data.x_train[gen.integers(0, len(data.x_train),
                                                                p.batch_size)])
                logits = model_logits(model, ids[:, :-1])
                loss = F.cross_entropy(logits.reshape(-1, 256), ids[:, 1:].reshape(-1))
                opt.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                sched.step()
                if time.perf_counter() - last > 30 or step == p.steps:
                    last = time.perf_counter()
                    logger.warning("sparsessm_mamba: step %d/%d  loss %.3f (ppl %.2f)  %.0f s",
                                   step, p.steps, loss.item(), np.exp(loss.item()), last - start)
            model.eval()
            metrics = {"test_ppl": perplexity(model, data.x_test),
                       **ngram_perplexities(data.x_train, data.x_test),
                       "seconds": time.perf_counter() - start,
                       "params": float(sum(q.numel() for q in model.parameters()))}
    finally:
        torch.set_num_threads(threads)
    publish_folder(out, lambda tmp: model.save_pretrained(str(tmp)),
                   {"params": p.model_dump(), "metrics": metrics})
    logger.warning("sparsessm_mamba: held-out ppl %.3f (unigram %.2f, bigram %.2f) -> %s",
                   metrics["test_ppl"], metrics["unigram_ppl"], metrics["bigram_ppl"], out)
    return metrics

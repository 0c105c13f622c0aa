"""``fv_toy``: a tiny GPT-2 trained on synthetic permutation ICL tasks (the spec's probe).

The spec's mechanism test for function vectors: 16 symbols, 6 tasks (each a
permutation, in 3 pairs agreeing on 8 inputs, so those demonstrations are
ambiguous; :func:`flowerbed.methods.function_vectors.data.permutation_tasks`).
A training sequence is ``BOS x1>y1;x2>y2;...x9>y9;`` for one task drawn
uniformly, with 9 distinct inputs; the loss is the cross-entropy of every
``y`` given what precedes it, so the model learns 0- to 8-shot task inference
at once. The tokenizer is the byte tokenizer (one token per symbol).

Model: transformers' GPT-2 (learned absolute positions) with 2 blocks,
width 96, 4 heads, through the ``tiny`` backend; AdamW (lr 1e-3), batch 64,
3,000 steps (about 5 minutes on one idle core). ``flowerbed pretrain fv_toy``
trains it once into the artefact cache; the ``lm`` backend ``fv_toy`` loads it
(training it on first use). The random-init control is the ``tiny`` backend
with the same shape (:func:`tiny_spec` with another seed).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import Field

from flowerbed.core.artefacts import PretrainTarget, ensure_artefact
from flowerbed.core.cache import cached_file
from flowerbed.core.records import publish_folder
from flowerbed.core.registry import Params, register, register_hint
from flowerbed.methods.function_vectors.data import (
    ARROW,
    SEP,
    TASK_SEED,
    permutation_tasks,
    sample_sequences,
)
from flowerbed.models.lm import LM_EXTRA_HINT, LmError, LmParams, lm_extra_installed

if TYPE_CHECKING:
    import numpy as np
    import torch

    from flowerbed.models.lm_tiny import TinyLmParams
    from flowerbed.models.lm_transformers import TransformersLM

logger = logging.getLogger("flowerbed.lm.fv_toy")
ARTEFACT_FORMAT = 1


class FvToyPretrainParams(Params):
    """The tasks, the model's shape and the training run (the artefact's cache key)."""

    task_seed: int = Field(TASK_SEED, ge=0, description="seed of the permutation tasks")
    num_symbols: int = Field(16, ge=2, le=26)
    num_pairs: int = Field(3, ge=1, description="pairs of tasks (2 tasks each)")
    shared: int = Field(8, ge=0, description="inputs on which the two tasks of a pair agree")
    pairs_per_sequence: int = Field(9, ge=2, description="demonstrations + query per sequence")
    hidden: int = Field(96, ge=8)
    layers: int = Field(2, ge=1)
    heads: int = Field(4, ge=1)
    steps: int = Field(3000, ge=1)
    batch_size: int = Field(64, ge=1)
    lr: float = Field(1e-3, gt=0)
    weight_decay: float = Field(0.01, ge=0)
    seed: int = Field(0, ge=0, description="initialisation and data order")


class FvToyParams(LmParams):
    """The trained folder (default: the cache, trained on first use)."""

    folder: str | None = Field(None, description="a folder written by `flowerbed pretrain fv_toy`")
    pretrain: FvToyPretrainParams = FvToyPretrainParams()


def tiny_spec(p: FvToyPretrainParams, seed: int | None = None) -> TinyLmParams:
    """The ``tiny`` (GPT-2) spec of the toy model's shape; with ``seed``, its random init."""
    from flowerbed.models.lm_tiny import TinyLmParams

    return TinyLmParams(
        arch="gpt2", hidden=p.hidden, layers=p.layers, heads=p.heads,
        max_positions=max(8, 2 + 4 * p.pairs_per_sequence), seed=p.seed if seed is None else seed,
    )


def default_path(p: FvToyPretrainParams) -> Path:
    """Cache folder of the trained model (keyed by ``p``)."""
    key = json.dumps({"format": ARTEFACT_FORMAT, **p.model_dump()}, sort_keys=True)
    return cached_file("lm", f"fv_toy-{hashlib.sha1(key.encode()).hexdigest()[:10]}")


def encode_sequences(inputs: np.ndarray, outputs: np.ndarray, bos: int) -> torch.Tensor:
    """``BOS x1>y1;x2>y2;...`` as byte ids ``(n, 1 + 4 * pairs)`` (symbol ``i`` is letter ``i``)."""
    import numpy as np
    import torch

    n, k = inputs.shape
    ids = np.empty((n, 1 + 4 * k), dtype=np.int64)
    ids[:, 0] = bos
    ids[:, 1::4] = inputs + ord("a")
    ids[:, 2::4] = ord(ARROW)
    ids[:, 3::4] = outputs + ord("a")
    ids[:, 4::4] = ord(SEP)
    return torch.from_numpy(ids)


def answer_loss(module: torch.nn.Module, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean cross-entropy of every answer symbol given its prefix, and per-answer correctness.

    The answer of pair ``i`` sits at column ``3 + 4 i`` and is predicted from
    column ``2 + 4 i`` (the arrow).
    """
    import torch

    logits = module(input_ids=ids).logits
    where = torch.arange(2, ids.shape[1], 4)
    pred = logits[:, where]
    gold = ids[:, where + 1]
    loss = torch.nn.functional.cross_entropy(pred.reshape(-1, pred.shape[-1]), gold.reshape(-1))
    return loss, (pred.argmax(-1) == gold)


def train(p: FvToyPretrainParams, out: Path) -> dict[str, float]:
    """Train the toy model and save it (byte tokenizer recorded) to ``out``, atomically."""
    import torch

    from flowerbed.core.seeds import rng
    from flowerbed.models.lm import ByteTokenizer
    from flowerbed.models.lm_tiny import build_tiny

    if p.pairs_per_sequence > p.num_symbols:
        raise ValueError(f"pairs_per_sequence ({p.pairs_per_sequence}) exceeds num_symbols")
    tasks = permutation_tasks(p.task_seed, p.num_symbols, p.num_pairs, p.shared)
    lm = build_tiny(tiny_spec(p))
    module, bos = lm.module, int(ByteTokenizer.bos_id or 0)
    gen = rng(p.seed, "fv_toy.train")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    start, last = time.perf_counter(), time.perf_counter()
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(p.seed)
            opt = torch.optim.AdamW(module.parameters(), lr=p.lr, weight_decay=p.weight_decay)
            module.train()
            for step in range(1, p.steps + 1):
                _, x, y = sample_sequences(tasks, p.batch_size, p.pairs_per_sequence, gen)
                loss, _ = answer_loss(module, encode_sequences(x, y, bos))
                opt.zero_grad()
                loss.backward()
                opt.step()
                if time.perf_counter() - last > 30 or step == p.steps:
                    last = time.perf_counter()
                    logger.warning("fv_toy: step %d/%d  loss %.3f  %.0f s", step, p.steps,
                                   float(loss), last - start)
            module.eval()
            with torch.no_grad():
                _, x, y = sample_sequences(tasks, 2000, p.pairs_per_sequence, rng(p.seed, "eval"))
                loss, hit = answer_loss(module, encode_sequences(x, y, bos))
    finally:
        torch.set_num_threads(threads)
    metrics = {f"accuracy_{k}shot": float(hit[:, k].float().mean()) for k in range(hit.shape[1])}
    metrics.update(loss=float(loss), seconds=time.perf_counter() - start)
    publish_folder(out, lm.save, {"params": p.model_dump(), "metrics": metrics})
    return metrics


PRETRAIN_TARGET = PretrainTarget(
    name="fv_toy",
    params=FvToyPretrainParams,
    run=train,
    default_path=default_path,
    help="tiny GPT-2 trained on synthetic permutation ICL tasks (function-vector probe)",
)


def build_fv_toy(params: FvToyParams, seed: int | None = None) -> TransformersLM:
    """The trained toy model (byte tokenizer; trained into the cache on first use)."""
    del seed  # trained weights: nothing random
    from flowerbed.models.lm import require_lm_extra

    require_lm_extra("fv_toy")
    if params.folder is not None:
        folder = Path(params.folder).expanduser()
        if not (folder / "config.json").is_file():
            raise LmError(f"lm 'fv_toy': {folder} holds no trained model (config.json)")
    else:
        folder = ensure_artefact("fv_toy", params.pretrain)
    from flowerbed.models.lm_transformers import load_folder

    return load_folder(folder, params.dtype, tokenizer="bytes")


if lm_extra_installed():
    register("lm", "fv_toy", params=FvToyParams)(build_fv_toy)
else:
    register_hint("lm", "fv_toy", LM_EXTRA_HINT)

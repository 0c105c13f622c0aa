"""``ti_pair``: a base and a reasoning model sharing the byte tokenizer, trained here (§2).

No base/reasoning pair sharing a tokenizer ships offline
(``shared/specs/llm_feasibility.md`` §5), so the pair is trained from scratch
on the traces of :mod:`flowerbed.data.token_intervention_data`, same size, same
tokenizer:

- ``task: toy``: the base on traces whose two plan tokens are random (it
  executes well and plans at chance), the reasoner on correct traces,
  fine-tuned from the base (it keeps the base's execution and learns the plan
  rules); ``sloppy`` is trained from scratch on correct traces for fewer steps
  (a weaker executor: the spec's case where the entropy trigger can surpass R);
- ``task: arith``: the base on answer-only traces (with ``base_cot_share`` of
  chain-of-thought traces mixed in), the reasoner on chain-of-thought traces.

The loss is the next-token cross-entropy of the response and its end token
(the prompt is not predictable). Model: transformers' GPT-2 through the
``tiny`` backend. ``flowerbed pretrain ti_pair [--set task=arith]`` trains the
pair once into the artefact cache (``base/`` and ``reasoner/`` folders); the
``lm`` backend ``ti_pair`` (``role: base | reasoner``) loads one of them,
training the pair on first use.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from flowerbed.core.artefacts import PretrainTarget, ensure_artefact
from flowerbed.core.cache import cached_file
from flowerbed.core.registry import Params, register, register_hint
from flowerbed.data.token_intervention_data import Task
from flowerbed.models.lm import LM_EXTRA_HINT, LmError, LmParams, lm_extra_installed

if TYPE_CHECKING:
    import numpy as np
    import torch

    from flowerbed.models.lm_transformers import TransformersLM

logger = logging.getLogger("flowerbed.lm.ti_pair")
ARTEFACT_FORMAT = 1


class TiPairPretrainParams(Params):
    """The task, the shape the models share and the training runs (the cache key)."""

    task: Task = Field("toy", description="toy (plan-then-execute) or arith (word problems)")
    hidden: int = Field(64, ge=8)
    layers: int = Field(2, ge=1)
    heads: int = Field(4, ge=1)
    base_steps: int = Field(1200, ge=1, description="spec toy: 1,500")
    reasoner_steps: int = Field(
        150, ge=1, description="spec toy: 300 from scratch; here fine-tuned from the base")
    sloppy_steps: int = Field(
        600, ge=0, description="also train a sloppy reasoner (role sloppy), always from "
        "scratch on correct traces, for this many steps (spec toy: 120; 0: none)")
    reasoner_init: Literal["scratch", "base"] = Field(
        "base", description="the reasoner from scratch (spec toy) or fine-tuned from the base "
        "(the post-training analogue)")
    base_cot_share: float = Field(
        0.0, ge=0, le=1, description="arith: share of chain-of-thought traces in the base's data")
    batch_size: int = Field(64, ge=1, description="spec toy: 64")
    lr: float = Field(3e-3, gt=0, description="spec toy: 2e-3")
    weight_decay: float = Field(0.01, ge=0)
    seed: int = Field(0, ge=0, description="initialisation and data order")


class TiPairParams(LmParams):
    """Which model of the pair, from which folder (default: the cache, trained on first use)."""

    role: Literal["base", "reasoner", "sloppy"] = Field(
        "base", description="sloppy: the under-trained reasoner (pretrain.sloppy_steps > 0)")
    folder: str | None = Field(None, description="a folder written by `flowerbed pretrain ti_pair`")
    pretrain: TiPairPretrainParams = TiPairPretrainParams()


def default_path(p: TiPairPretrainParams) -> Path:
    """Cache folder of the trained pair (keyed by ``p``)."""
    key = json.dumps({"format": ARTEFACT_FORMAT, **p.model_dump()}, sort_keys=True)
    return cached_file("lm", f"ti_pair-{p.task}-{hashlib.sha1(key.encode()).hexdigest()[:10]}")


def training_texts(p: TiPairPretrainParams, role: str, n: int,
                   gen: np.random.Generator) -> list[tuple[str, str]]:
    """``n`` (prompt, response) training pairs for one role.

    Arithmetic batches are all chain-of-thought or all direct (the base's batch is
    chain-of-thought with probability ``base_cot_share``), so no batch pads short
    direct traces to the length of a worked one.
    """
    from flowerbed.data import token_intervention_data as td

    out = []
    cot = role != "base" or gen.random() < p.base_cot_share
    for _ in range(n):
        if p.task == "toy":
            prompt = td.toy_prompt(gen)
            kind: Literal["base", "reasoner"] = "base" if role == "base" else "reasoner"
            out.append((prompt, td.toy_trace(prompt, kind, gen)))
            continue
        a, b = td.arith_numbers(gen)
        prompt = td.arith_prompt(a, b, gen)
        out.append((prompt, td.arith_cot(a, b) if cot else td.arith_direct(a, b)))
    return out


def encode_batch(pairs: list[tuple[str, str]]) -> tuple[torch.Tensor, torch.Tensor]:
    """``BOS prompt response EOS`` byte ids (right-padded) and the response-token loss mask."""
    import torch

    from flowerbed.models.lm import ByteTokenizer

    tok = ByteTokenizer()
    rows, masks = [], []
    for prompt, response in pairs:
        head = [int(tok.bos_id or 0), *tok.encode(prompt)]
        tail = [*tok.encode(response), int(tok.eos_id or 0)]
        rows.append(head + tail)
        masks.append([0] * len(head) + [1] * len(tail))
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), tok.pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.float32)
    for i, (r, m) in enumerate(zip(rows, masks, strict=True)):
        ids[i, :len(r)] = torch.tensor(r)
        mask[i, :len(m)] = torch.tensor(m, dtype=torch.float32)
    return ids, mask


def response_loss(module: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of the response tokens (position ``t`` predicts ``t + 1``)."""
    import torch

    # right padding under a causal mask: no real token attends to a pad, no mask needed
    logits = module(input_ids=ids).logits[:, :-1]
    nll = torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), reduction="none")
    w = mask[:, 1:].reshape(-1)
    return (nll * w).sum() / w.sum()


def _train_one(p: TiPairPretrainParams, role: str, steps: int,
               init: TransformersLM | None = None) -> tuple[TransformersLM, float]:
    """Train ``role`` for ``steps`` (from a copy of ``init`` when given, else from scratch)."""
    import copy

    import torch

    from flowerbed.core.seeds import derive_seed, rng
    from flowerbed.models.lm_tiny import TinyLmParams, build_tiny

    if init is not None:
        lm = copy.deepcopy(init)
    else:
        lm = build_tiny(TinyLmParams(arch="gpt2", hidden=p.hidden, layers=p.layers,
                                     heads=p.heads, max_positions=160,
                                     seed=derive_seed(p.seed, "ti_pair", role)))
    module = lm.module
    gen = rng(p.seed, "ti_pair.train", role)
    start = last = time.perf_counter()
    loss = torch.tensor(float("nan"))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(derive_seed(p.seed, "ti_pair.torch", role))
        opt = torch.optim.AdamW(module.parameters(), lr=p.lr, weight_decay=p.weight_decay)
        module.train()
        for step in range(1, steps + 1):
            ids, mask = encode_batch(training_texts(p, role, p.batch_size, gen))
            loss = response_loss(module, ids, mask)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if time.perf_counter() - last > 20 or step == steps:
                last = time.perf_counter()
                logger.warning("ti_pair %s %s: step %d/%d  loss %.3f  %.0f s", p.task, role,
                               step, steps, float(loss.detach()), last - start)
        module.eval()
    return lm, float(loss.detach())


def train(p: TiPairPretrainParams, out: Path) -> dict[str, float]:
    """Train the base and the reasoner(s); save them (byte tokenizer) under ``out``, atomically."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    tmp = out.with_name(f".{out.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    metrics: dict[str, float] = {}
    start = time.perf_counter()
    try:
        tmp.mkdir(parents=True)
        base, metrics["base_loss"] = _train_one(p, "base", p.base_steps)
        base.save(tmp / "base")
        init = base if p.reasoner_init == "base" else None
        runs = [("reasoner", p.reasoner_steps, init)] + ([("sloppy", p.sloppy_steps, None)]
                                                          if p.sloppy_steps else [])
        for role, steps, start_from in runs:
            lm, metrics[f"{role}_loss"] = _train_one(p, role, steps, start_from)
            lm.save(tmp / role)
        metrics["seconds"] = time.perf_counter() - start
        (tmp / "flowerbed_source.json").write_text(
            json.dumps({"params": p.model_dump(), "metrics": metrics}, indent=1) + "\n")
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    finally:
        torch.set_num_threads(threads)
        shutil.rmtree(tmp, ignore_errors=True)
    return metrics


PRETRAIN_TARGET = PretrainTarget(
    name="ti_pair",
    params=TiPairPretrainParams,
    run=train,
    default_path=default_path,
    help="base + reasoning tiny GPT-2 pair sharing the byte tokenizer (token intervention)",
)


def build_ti_pair(params: TiPairParams, seed: int | None = None) -> TransformersLM:
    """One model of the trained pair (byte tokenizer; the pair is trained on first use)."""
    del seed  # trained weights: nothing random
    from flowerbed.models.lm import require_lm_extra

    require_lm_extra("ti_pair")
    if params.folder is not None:
        root = Path(params.folder).expanduser()
    else:
        root = ensure_artefact("ti_pair", params.pretrain)
    folder = root / params.role
    if not (folder / "config.json").is_file():
        raise LmError(f"lm 'ti_pair': {folder} holds no trained model (config.json)")
    from flowerbed.models.lm_transformers import load_folder

    return load_folder(folder, params.dtype, tokenizer="bytes")


if lm_extra_installed():
    register("lm", "ti_pair", params=TiPairParams)(build_ti_pair)
else:
    register_hint("lm", "ti_pair", LM_EXTRA_HINT)

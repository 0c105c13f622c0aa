"""``ti_pair``: a base and a reasoning model sharing the byte tokenizer, trained here.

No base/reasoning pair sharing a tokenizer ships offline (a feasibility probe made
before this implementation found none), so the pair is trained from scratch
on the traces of :mod:`flowerbed.methods.token_intervention.data`, same size, same
tokenizer:

- ``task: toy``: the base on traces whose two plan tokens are random (it
  executes well and plans at chance), the reasoner on correct traces,
  fine-tuned from the base (it keeps the base's execution and learns the plan
  rules); ``sloppy`` is trained from scratch on correct traces for fewer steps
  (a weaker executor: the spec's case where the entropy trigger can surpass R);
- ``task: arith``: the base on answer-only traces (with ``base_cot_share`` of
  chain-of-thought traces mixed in), the reasoner on chain-of-thought traces;
- ``task: carry`` (the setup the pre-implementation feasibility probe measured): 3-digit
  addition ``687+646=`` answered by a per-column chain of thought with explicit
  carries, then the answer (``7+6=13,8+4+1=13,6+6+1=13|1333``), on a 16-symbol
  vocabulary of its own (:class:`CarryTokenizer`, shared by both models). The
  base is trained on traces whose two carry *decisions* (does column 2 / 3 take
  a carry?) are coin flips, executed consistently with the choice; the reasoner
  is the base fine-tuned on correct traces. The decision tokens
  (:func:`carry_decision_mask`) are the character after ``x+y`` of columns 2
  and 3, ``+`` (carry) or ``=`` (none): the only tokens where a base trace and
  the correct trace part.

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
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from flowerbed.core.artefacts import PretrainTarget, ensure_artefact
from flowerbed.core.cache import cached_file
from flowerbed.core.registry import Params, register, register_hint
from flowerbed.models.lm import (
    LM_EXTRA_HINT,
    ByteTokenizer,
    LmError,
    LmParams,
    TextTokenizer,
    lm_extra_installed,
)

if TYPE_CHECKING:
    import numpy as np
    import torch

    from flowerbed.models.lm_transformers import TransformersLM

logger = logging.getLogger("flowerbed.lm.ti_pair")
ARTEFACT_FORMAT = 1
PairTask = Literal["toy", "arith", "carry"]


# --- the carry task (the feasibility probe's setup) ---------------------------------------

#: The carry task's symbols (ids 0..13); ``bos`` is 14, ``eos`` 15 (also the padding).
CARRY_SYMBOLS = "0123456789+=,|"
#: Marker file of a saved carry-task model (its tokenizer is :class:`CarryTokenizer`).
CARRY_TOKENIZER_FILE = "flowerbed_carry_tokenizer.json"
#: Longest carry response: ``9+9=18,9+9+1=19,9+9+1=19|1998`` (29 symbols) + end, with room.
CARRY_MAX_NEW_TOKENS = 34


class CarryTokenizer:
    """The 16-symbol vocabulary of the carry task: 14 characters, then ``bos``, ``eos``.

    One character per token; ``pad`` is ``eos`` (padding is masked). Text with
    any other character is refused (the models never saw one).

    >>> CarryTokenizer().encode("7+6=13|")
    [7, 10, 6, 11, 1, 3, 13]
    >>> CarryTokenizer().decode([14, 7, 10, 6, 15], skip_special=False)
    '<bos>7+6<eos>'
    """

    bos_id: int | None = len(CARRY_SYMBOLS)
    eos_id: int | None = len(CARRY_SYMBOLS) + 1
    pad_id: int = len(CARRY_SYMBOLS) + 1
    vocab_size: int = len(CARRY_SYMBOLS) + 2

    def encode(self, text: str) -> list[int]:
        """One id per character of ``text``."""
        bad = sorted(set(text) - set(CARRY_SYMBOLS))
        if bad:
            raise LmError(f"carry tokenizer: characters outside {CARRY_SYMBOLS!r}: {bad}")
        return [CARRY_SYMBOLS.index(ch) for ch in text]

    def decode(self, ids: Sequence[int], skip_special: bool = True) -> str:
        """The characters of ``ids`` (``bos``/``eos`` dropped, or shown as ``<bos>``/``<eos>``)."""
        names = {self.bos_id: "<bos>", self.eos_id: "<eos>"}
        out = []
        for i in ids:
            if 0 <= i < len(CARRY_SYMBOLS):
                out.append(CARRY_SYMBOLS[i])
            elif not skip_special:
                out.append(names.get(int(i), f"<{int(i)}>"))
        return "".join(out)


def carry_numbers(gen: np.random.Generator) -> tuple[int, int]:
    """Two 3-digit numbers."""
    a, b = gen.integers(100, 1000, size=2)
    return int(a), int(b)


def carry_prompt(a: int, b: int) -> str:
    """``a+b=``."""
    return f"{a}+{b}="


def carry_carries(a: int, b: int) -> tuple[bool, ...]:
    """The correct carry into columns 2 and 3 (tens, hundreds) of ``a + b``."""
    da, db = str(a)[::-1], str(b)[::-1]
    out, carry = [], 0
    for x, y in zip(da[:-1], db[:-1], strict=True):
        carry = (int(x) + int(y) + carry) // 10
        out.append(bool(carry))
    return tuple(out)


def carry_trace(a: int, b: int, carries: Sequence[bool] | None = None) -> str:
    """Per-column addition, ones first, then ``|`` and the answer the columns give.

    ``carries``: whether columns 2 and 3 take a carry (default: the correct
    ones). Execution is consistent with the choice: each column sums its digits
    and the chosen carry, and the answer is the last column's sum followed by
    the other columns' last digits, so a wrong choice gives a wrong answer.

    >>> carry_trace(687, 646)
    '7+6=13,8+4+1=13,6+6+1=13|1333'
    >>> carry_trace(687, 646, (False, True))
    '7+6=13,8+4=12,6+6+1=13|1323'
    """
    da, db = str(a)[::-1], str(b)[::-1]
    chosen = carry_carries(a, b) if carries is None else tuple(carries)
    if len(chosen) != len(da) - 1:
        raise ValueError(f"carries: one per column after the first ({len(da) - 1})")
    cols, sums = [], []
    for i, (x, y) in enumerate(zip(da, db, strict=True)):
        c = i > 0 and chosen[i - 1]
        s = int(x) + int(y) + int(c)
        cols.append(f"{x}+{y}" + ("+1" if c else "") + f"={s}")
        sums.append(s)
    answer = str(sums[-1]) + "".join(str(s % 10) for s in reversed(sums[:-1]))
    return ",".join(cols) + "|" + answer


def carry_problems(n: int, gen: np.random.Generator) -> tuple[list[str], list[str]]:
    """``n`` prompts and their correct traces."""
    prompts, refs = [], []
    for _ in range(n):
        a, b = carry_numbers(gen)
        prompts.append(carry_prompt(a, b))
        refs.append(carry_trace(a, b))
    return prompts, refs


def carry_answer(response: str) -> str | None:
    """The digits after the last ``|`` (``None`` when there are none)."""
    _, sep, tail = response.rpartition("|")
    digits = ""
    for ch in tail if sep else "":
        if not ch.isdigit():
            break
        digits += ch
    return digits or None


def carry_correct(response: str, reference: str) -> bool:
    """The final answer equals the reference's (the trace itself is not scored)."""
    got = carry_answer(response)
    return got is not None and got == carry_answer(reference)


def carry_decision_mask(response: str) -> np.ndarray:
    """One flag per character: the carry decisions (the symbol after ``x+y`` of columns 2+).

    A column ``x+y=s`` or ``x+y+1=s`` starts after a ``,``; its fourth symbol is
    ``=`` (no carry taken) or ``+`` (a carry taken): the decision. The first
    column takes no carry and holds none; the answer after ``|`` is execution.
    """
    import numpy as np

    mask = np.zeros(len(response), dtype=bool)
    work = response.split("|", 1)[0]
    start = 0
    for i, col in enumerate(work.split(",")):
        if i > 0 and len(col) > 3:
            mask[start + 3] = True
        start += len(col) + 1
    return mask


def _carry_config(p: TiPairPretrainParams) -> object:
    """GPT-2 config of the carry models (16 outputs, learned positions)."""
    import transformers

    tok = CarryTokenizer()
    return transformers.GPT2Config(
        vocab_size=tok.vocab_size, n_embd=p.hidden, n_layer=p.layers, n_head=p.heads,
        n_inner=4 * p.hidden, n_positions=64, tie_word_embeddings=True, resid_pdrop=0.0,
        embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=tok.bos_id, eos_token_id=tok.eos_id,
        pad_token_id=tok.pad_id)


def _save(lm: TransformersLM, folder: Path, task: str) -> None:
    """``lm`` into ``folder``; a carry model records its own tokenizer instead of bytes'."""
    from flowerbed.models.lm_transformers import BYTE_TOKENIZER_FILE

    lm.save(folder)
    if task == "carry":
        (folder / BYTE_TOKENIZER_FILE).unlink(missing_ok=True)
        (folder / CARRY_TOKENIZER_FILE).write_text(
            json.dumps({"type": "carry", "symbols": CARRY_SYMBOLS}) + "\n")


def _load_carry(folder: Path, dtype: str) -> TransformersLM:
    """A saved carry-task model with :class:`CarryTokenizer`."""
    from transformers import AutoModelForCausalLM

    from flowerbed.models.lm_transformers import PROBE_ATTENTION, TransformersLM, torch_dtype

    model = AutoModelForCausalLM.from_pretrained(
        str(folder), attn_implementation=PROBE_ATTENTION, dtype=torch_dtype(dtype),
        local_files_only=True)
    return TransformersLM(model, CarryTokenizer())


class TiPairPretrainParams(Params):
    """The task, the shape the models share and the training runs (the cache key)."""

    task: PairTask = Field("toy", description="toy (plan-then-execute), arith (word "
                           "problems) or carry (per-column addition, as in the "
                           "feasibility probe)")
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
    direct traces to the length of a worked one. Carry: the base's carry
    decisions are fair coin flips, the other roles' are correct.
    """
    from flowerbed.methods.token_intervention import data as td

    out = []
    cot = role != "base" or gen.random() < p.base_cot_share
    for _ in range(n):
        if p.task == "carry":
            a, b = carry_numbers(gen)
            flips = tuple(bool(f) for f in gen.random(2) < 0.5) if role == "base" else None
            out.append((carry_prompt(a, b), carry_trace(a, b, flips)))
            continue
        if p.task == "toy":
            prompt = td.toy_prompt(gen)
            kind: Literal["base", "reasoner"] = "base" if role == "base" else "reasoner"
            out.append((prompt, td.toy_trace(prompt, kind, gen)))
            continue
        a, b = td.arith_numbers(gen)
        prompt = td.arith_prompt(a, b, gen)
        out.append((prompt, td.arith_cot(a, b) if cot else td.arith_direct(a, b)))
    return out


def encode_batch(pairs: list[tuple[str, str]], tok: TextTokenizer | None = None,
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """``BOS prompt response EOS`` ids (right-padded) and the response-token loss mask.

    ``tok``: the pair's tokenizer (default :class:`ByteTokenizer`).
    """
    import torch

    tok = tok or ByteTokenizer()
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
    from flowerbed.models.lm_transformers import from_config

    if init is not None:
        lm = copy.deepcopy(init)
    elif p.task == "carry":
        lm = from_config(_carry_config(p), CarryTokenizer(), "float32",
                         derive_seed(p.seed, "ti_pair", role))
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
            ids, mask = encode_batch(training_texts(p, role, p.batch_size, gen), lm.tokenizer)
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
    """Train the base and the reasoner(s); save them and their tokenizer under ``out``."""
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
        _save(base, tmp / "base", p.task)
        init = base if p.reasoner_init == "base" else None
        runs = [("reasoner", p.reasoner_steps, init)] + ([("sloppy", p.sloppy_steps, None)]
                                                          if p.sloppy_steps else [])
        for role, steps, start_from in runs:
            lm, metrics[f"{role}_loss"] = _train_one(p, role, steps, start_from)
            _save(lm, tmp / role, p.task)
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
    help="base + reasoning tiny GPT-2 pair sharing a tokenizer (token intervention)",
)


def build_ti_pair(params: TiPairParams, seed: int | None = None) -> TransformersLM:
    """One model of the trained pair (byte or carry tokenizer; trained on first use)."""
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
    if (folder / CARRY_TOKENIZER_FILE).is_file():
        return _load_carry(folder, params.dtype)
    from flowerbed.models.lm_transformers import load_folder

    return load_folder(folder, params.dtype, tokenizer="bytes")


if lm_extra_installed():
    register("lm", "ti_pair", params=TiPairParams)(build_ti_pair)
else:
    register_hint("lm", "ti_pair", LM_EXTRA_HINT)

"""Tasks of the base-reasoning token-intervention study: prompts and traces.

Two tasks, both in one-byte-per-token text (the byte tokenizer of the ``tiny``
backend), each with two trace generators so a *base* and a *reasoning* model
sharing the tokenizer can be trained from scratch on different traces:

- ``toy`` (the spec's plan-then-execute toy): prompt ``x1..x8|`` (8 digits);
  correct response ``p1 body p2 ans``: ``p1 = A`` if ``x1 < x8`` else ``D``,
  ``body`` the 8 digits copied forward (``A``) or reversed (``D``); ``p2 = X``
  if ``x2`` is even else ``Y``; ``ans = x1`` (``X``) or ``x8`` (``Y``). The two
  plan tokens are the decisions, every other token is execution. *Base* traces
  draw both plan tokens at random and execute the drawn plan; *reasoning*
  traces are correct.
- ``arith`` (a natural-language multi-step task): a word problem adding two
  3-digit numbers (``Ann has 347 pens and gets 586 more. How many?``).
  A *direct* trace answers at once (``So 933.``); a *chain-of-thought* trace
  adds column by column with the carries (``First 7+6=13. Then 4+8+1=13. Then
  3+5+1=9. So 933.``). The reasoning model is trained on CoT traces only; the
  base on direct traces, with a share ``base_cot_share`` of CoT traces (0: the
  answer-only base; a small share plays a pretrained base that has seen some
  worked solutions but answers directly).

The registered dataset ``ti_prompts`` holds prompts (``text_*``) and the
correct response (``refs_*``) of one task; ``groups_train`` gives each client
its own prompts (``natural_id``).

Examples
--------
>>> toy_response("31415926")
'A31415926Y6'
>>> arith_cot(347, 586)
'First 7+6=13. Then 4+8+1=13. Then 3+5+1=9. So 933.'
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from flowerbed.core.registry import Params, register
from flowerbed.core.seeds import rng
from flowerbed.data.base import Dataset, DatasetMeta

Task = Literal["toy", "arith"]
#: Separator ending a toy prompt.
TOY_SEP = "|"
#: Discourse / plan words of the arithmetic traces (the planning lexicon of the analysis).
PLAN_WORDS = ("First", "Then", "So")
NAMES = ("Ann", "Bob", "Cy", "Dee", "Eve", "Flo", "Gus", "Hal")
ITEMS = ("pens", "cups", "eggs", "maps", "hats", "nuts", "rocks", "coins")


# --- toy -----------------------------------------------------------------------------------


def toy_prompt(gen: np.random.Generator) -> str:
    """Eight random digits and the separator."""
    return "".join(str(int(d)) for d in gen.integers(0, 10, size=8)) + TOY_SEP


def toy_execute(digits: str, p1: str, p2: str) -> str:
    """The response executing plan ``(p1, p2)`` on ``digits`` (8 digits)."""
    body = digits if p1 == "A" else digits[::-1]
    return p1 + body + p2 + (digits[0] if p2 == "X" else digits[-1])


def toy_response(digits: str) -> str:
    """The correct response: both plan tokens decided from the digits."""
    digits = digits.rstrip(TOY_SEP)
    p1 = "A" if digits[0] < digits[-1] else "D"
    p2 = "X" if int(digits[1]) % 2 == 0 else "Y"
    return toy_execute(digits, p1, p2)


def toy_trace(prompt: str, kind: Literal["base", "reasoner"], gen: np.random.Generator) -> str:
    """A training response: correct (``reasoner``) or with random plan tokens (``base``)."""
    if kind == "reasoner":
        return toy_response(prompt)
    p1, p2 = gen.choice(["A", "D"]), gen.choice(["X", "Y"])
    return toy_execute(prompt.rstrip(TOY_SEP), str(p1), str(p2))


def toy_plan_mask(response_len: int) -> np.ndarray:
    """Planning positions of a toy response (``p1`` at 0, ``p2`` at 9)."""
    mask = np.zeros(response_len, dtype=bool)
    mask[[i for i in (0, 9) if i < response_len]] = True
    return mask


# --- arithmetic word problems --------------------------------------------------------------


def arith_numbers(gen: np.random.Generator) -> tuple[int, int]:
    """Two 3-digit numbers."""
    a, b = gen.integers(100, 1000, size=2)
    return int(a), int(b)


def arith_prompt(a: int, b: int, gen: np.random.Generator) -> str:
    """A one-sentence word problem asking for ``a + b``."""
    name, item = NAMES[int(gen.integers(len(NAMES)))], ITEMS[int(gen.integers(len(ITEMS)))]
    return f"{name} has {a} {item} and gets {b} more. How many? "


def arith_direct(a: int, b: int) -> str:
    """The answer-only trace."""
    return f"So {a + b}."


def arith_cot(a: int, b: int) -> str:
    """Column-by-column addition with explicit carries, then the answer."""
    da, db = str(a)[::-1], str(b)[::-1]
    steps, carry = [], 0
    for i, (x, y) in enumerate(zip(da, db, strict=True)):
        s = int(x) + int(y) + carry
        term = f"{x}+{y}" + ("+1" if carry else "") + f"={s}"
        steps.append(("First " if i == 0 else "Then ") + term + ".")
        carry = s // 10
    return " ".join(steps) + f" So {a + b}."


def arith_answer(response: str) -> str | None:
    """The number after the last ``So `` of a response (``None`` when there is none)."""
    head, sep, tail = response.rpartition("So ")
    del head
    if not sep:
        return None
    digits = ""
    for ch in tail:
        if not ch.isdigit():
            break
        digits += ch
    return digits or None


def plan_mask(text: str) -> np.ndarray:
    """One flag per byte of ``text``: inside a word of :data:`PLAN_WORDS`."""
    mask = np.zeros(len(text.encode("utf-8")), dtype=bool)
    for word in PLAN_WORDS:
        start = text.find(word)
        while start >= 0:
            before = start == 0 or not text[start - 1].isalpha()
            end = start + len(word)
            after = end == len(text) or not text[end].isalpha()
            if before and after:
                mask[start:end] = True
            start = text.find(word, end)
    return mask


# --- problems and scoring ------------------------------------------------------------------


def problems(task: Task, n: int, gen: np.random.Generator) -> tuple[list[str], list[str]]:
    """``n`` prompts and their correct (reasoner-format) responses."""
    prompts, answers = [], []
    for _ in range(n):
        if task == "toy":
            p = toy_prompt(gen)
            prompts.append(p)
            answers.append(toy_response(p))
        else:
            a, b = arith_numbers(gen)
            prompts.append(arith_prompt(a, b, gen))
            answers.append(arith_cot(a, b))
    return prompts, answers


def is_correct(task: Task, response: str, reference: str) -> bool:
    """Toy: the whole response; arithmetic: the final number (any trace format)."""
    if task == "toy":
        return response == reference
    got = arith_answer(response)
    return got is not None and got == arith_answer(reference)


class TiPromptsParams(Params):
    """Which task, how many prompts per client, and the test prompts."""

    task: Task = Field("toy", description="toy (plan-then-execute) or arith (word problems)")
    num_clients: int = Field(3, ge=1, description="clients, each with its own prompts")
    rows_per_client: int = Field(40, ge=1)
    n_test: int = Field(100, ge=1)


@register("dataset", "ti_prompts", params=TiPromptsParams)
def ti_prompts(params: TiPromptsParams, *, seed: int) -> Dataset:
    """Prompts and correct responses of a token-intervention task (one client key each)."""
    gen = rng(seed, "ti_prompts", params.task)
    n = params.num_clients * params.rows_per_client
    train, train_refs = problems(params.task, n, gen)
    test, test_refs = problems(params.task, params.n_test, gen)
    keys = np.repeat([f"client {k:02d}" for k in range(params.num_clients)],
                     params.rows_per_client)
    meta = DatasetMeta(
        name="ti_prompts", task="classification", num_features=1, num_classes=1,
        feature_names=("row",), class_names=("prompt",),
        source=f"token-intervention task {params.task} (synthetic)", license="synthetic",
    )
    return Dataset(
        np.arange(n, dtype=np.float32)[:, None], np.zeros(n, dtype=np.int64),
        np.arange(params.n_test, dtype=np.float32)[:, None],
        np.zeros(params.n_test, dtype=np.int64), meta, groups_train=keys,
        text_train=tuple(train), text_test=tuple(test),
        refs_train=tuple((r,) for r in train_refs), refs_test=tuple((r,) for r in test_refs),
    )

"""Coreset ICL plumbing: texts to embeddings, per-query demonstration prompts, LM scoring.

Used by the ``coreset_icl`` learner (and the benchmark). Prompts are written
with :class:`flowerbed.models.icl.Template` (one demonstration per selected
example, the query cut before its label); each query has its own
demonstrations (retrieved from the bank or drawn from it). A prediction ranks
the task's label words: by the log-prob of the first token after the prompt
when every label word is one distinct token (one forward pass, only the last
position's logits computed for a transformers model), else by the summed
log-prob of the whole word (:meth:`~flowerbed.models.lm.CausalLM.score_ids`).

Two scorers give the same numbers (to float rounding; the same predictions):
:func:`score`, the reference (length-sorted left-padded batches; only queries
with one identical prefix share its KV cache), and :func:`score_shared`, the
default, which finds the token prefixes that prompts share (the first
retrieved demonstrations, a random draw, vote-k's first-stage bank), feeds
each once into a batched KV cache and the rest of every prompt after it, and
memoises scores per token row.

Embeddings: ``minilm`` (:mod:`flowerbed.models.minilm`, unit-norm 384-d) or
``lm_mean`` (the LM's hidden states at one layer, averaged over the text's
tokens, unit norm). Both are memoised per text in the process.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal, cast

import numpy as np

from flowerbed.models.icl import Example, Template

if TYPE_CHECKING:
    import torch

    from flowerbed.models.lm import CausalLM

Embedding = Literal["minilm", "lm_mean"]

_MEMO: dict[tuple[str, ...], dict[str, np.ndarray]] = {}


def clean(text: str, max_words: int) -> str:
    r"""Whitespace runs to one space, at most ``max_words`` words (``0``: all).

    Examples
    --------
    >>> clean("a  quote\n  over two lines", 3)
    'a quote over'
    """
    words = re.split(r"\s+", text.strip())
    return " ".join(words[:max_words] if max_words > 0 else words)


def label_words(class_names: Sequence[str], override: Sequence[str] = ()) -> list[str]:
    """What each class is written as: ``override``, else the name after its last ``.``.

    Examples
    --------
    >>> label_words(["noun.animal", "noun.food"])
    ['animal', 'food']
    """
    if override:
        if len(override) != len(class_names):
            raise ValueError(
                f"label_words has {len(override)} entries for "
                f"{len(class_names)} classes {list(class_names)}"
            )
        return list(override)
    return [c.rsplit(".", 1)[-1].replace("_", " ") for c in class_names]


# --- texts through messages ------------------------------------------------------------------


def pack_texts(texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """UTF-8 bytes of all texts (uint8) and the ``len + 1`` offsets (int64)."""
    raw = [t.encode("utf-8") for t in texts]
    offsets = np.concatenate([[0], np.cumsum([len(r) for r in raw], dtype=np.int64)])
    return np.frombuffer(b"".join(raw), dtype=np.uint8).copy(), offsets.astype(np.int64)


def unpack_texts(data: np.ndarray, offsets: np.ndarray) -> list[str]:
    """Inverse of :func:`pack_texts`."""
    raw = np.asarray(data, dtype=np.uint8).tobytes()
    return [raw[int(a) : int(b)].decode("utf-8") for a, b in itertools.pairwise(offsets)]


# --- embeddings ------------------------------------------------------------------------------


def embed(
    texts: Sequence[str],
    kind: Embedding,
    lm: CausalLM | None = None,
    layer: int = -1,
    key: str = "",
) -> np.ndarray:
    """``(n, d)`` unit-norm float32 embeddings, memoised per text (``key`` names the LM)."""
    memo = _MEMO.setdefault((kind, key, str(layer)), {})
    todo = sorted({t for t in texts if t not in memo})
    if todo:
        if kind == "minilm":
            from flowerbed.models.minilm import load_sentence_encoder

            vecs = load_sentence_encoder().encode(todo).numpy()
        else:
            if lm is None:
                raise ValueError("embedding lm_mean needs the language model")
            vecs = _lm_mean(lm, todo, layer)
        memo.update(zip(todo, vecs.astype(np.float32), strict=True))
    if not texts:
        return np.zeros((0, 1), dtype=np.float32)
    return np.stack([memo[t] for t in texts])


def _lm_mean(lm: CausalLM, texts: Sequence[str], layer: int, batch: int = 16) -> np.ndarray:
    """Mean over each text's tokens of the residual stream after block ``layer``, unit norm."""
    import torch

    ids = [lm.encode(t) or [lm.bos_id or 0] for t in texts]
    out = []
    for i in range(0, len(ids), batch):
        rows = ids[i : i + batch]
        h = lm.hidden_states(rows, padding="right")[layer if layer < 0 else layer + 1]
        mask = torch.zeros(h.shape[:2])
        for b, r in enumerate(rows):
            mask[b, : len(r)] = 1.0
        mean = (h * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
        out.append(torch.nn.functional.normalize(mean, dim=-1).numpy())
    return np.concatenate(out)


# --- scoring ---------------------------------------------------------------------------------


def prompts(
    template: Template,
    instruction: str,
    bank_x: Sequence[str],
    bank_words: Sequence[str],
    demos: Sequence[Sequence[int]],
    queries: Sequence[str],
) -> list[tuple[str, str]]:
    """Per query: (instruction + its demonstrations (a row of ``demos``), the query)."""
    out = []
    for q, row in zip(queries, demos, strict=True):
        shown = [Example(bank_x[int(i)], (bank_words[int(i)],)) for i in row]
        out.append((instruction + template.prefix(shown), template.query(q)))
    return out


def fill_demos(
    lm: CausalLM,
    template: Template,
    instruction: str,
    bank_x: Sequence[str],
    bank_words: Sequence[str],
    bank_emb: np.ndarray,
    queries: Sequence[str],
    query_emb: np.ndarray,
    limit: int,
) -> list[np.ndarray]:
    """Most similar demonstrations per query until the prompt fills ``limit`` LM tokens.

    A demonstration costs the tokens of its written form, a query those of the
    instruction plus its own (:func:`~flowerbed.methods.coreset_icl.algorithm_demos.
    fill_context`; most similar last).
    """
    from flowerbed.methods.coreset_icl.algorithm_demos import fill_context

    demo_tokens = [
        len(lm.encode(template.demo(Example(x, (w,)))))
        for x, w in zip(bank_x, bank_words, strict=True)
    ]
    head = len(lm.encode(instruction)) if instruction else 0
    query_tokens = [head + len(lm.encode(template.query(q))) for q in queries]
    return fill_context(
        bank_emb, query_emb, np.asarray(demo_tokens), np.asarray(query_tokens), limit
    )


def _single_tokens(lm: CausalLM, candidates: Sequence[str]) -> list[int] | None:
    ids = [lm.encode(c) for c in candidates]
    firsts = [r[0] for r in ids if len(r) == 1]
    return firsts if len(firsts) == len(ids) and len(set(firsts)) == len(ids) else None


def last_logprobs(lm: CausalLM, rows: Sequence[Sequence[int]]) -> torch.Tensor:
    """``(B, V)`` next-token log-probs after each row (left-padded, one pass).

    For a transformers model only the last position's logits are computed
    (``logits_to_keep=1``); any other backend goes through
    :meth:`~flowerbed.models.lm.CausalLM.next_token_logprobs`. Same numbers.
    """
    import torch

    from flowerbed.models.lm_transformers import TransformersLM

    if not isinstance(lm, TransformersLM):
        return lm.next_token_logprobs(rows)
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), lm.pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for b, r in enumerate(rows):
        ids[b, width - len(r) :] = torch.as_tensor(list(r), dtype=torch.long)
        mask[b, width - len(r) :] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    dev = lm.device
    with torch.no_grad():
        out = lm.module(
            input_ids=ids.to(dev),
            attention_mask=mask.to(dev),
            position_ids=positions.to(dev),
            use_cache=False,
            logits_to_keep=1,
        )
    return torch.log_softmax(out.logits[:, -1].float(), dim=-1).cpu()


def score(
    lm: CausalLM, pairs: Sequence[tuple[str, str]], candidates: Sequence[str], batch_size: int = 16
) -> np.ndarray:
    """``(n, C)`` log-prob of each candidate (with its leading separator) after each prompt.

    A prompt is ``(prefix, query)``, tokenized apart and fed as one row. With
    single distinct candidate tokens the first-token log-probs are read, and
    queries sharing a prefix reuse its KV cache (prefilled once, expanded per
    batch); otherwise whole candidates are scored
    (:meth:`~flowerbed.models.lm.CausalLM.score_ids`).
    """
    out = np.zeros((len(pairs), len(candidates)))
    if not pairs:
        return out
    enc: dict[str, list[int]] = {}

    def ids(text: str) -> list[int]:
        if text not in enc:
            enc[text] = lm.encode(text)
        return enc[text]

    single = _single_tokens(lm, candidates)
    groups: dict[str, list[int]] = {}
    for i, (prefix, _) in enumerate(pairs):
        groups.setdefault(prefix, []).append(i)
    alone: list[int] = []
    for prefix, members in groups.items():
        if single is not None and len(members) > 1 and ids(prefix):
            state = lm.start([ids(prefix)])
            for s in range(0, len(members), batch_size):
                chunk = members[s : s + batch_size]
                rows = [ids(pairs[i][1]) for i in chunk]
                _, after = lm.extend(lm.expand(state, len(chunk)), rows)
                out[chunk] = after.logprobs[:, single].numpy()
        else:
            alone += members
    rows_all = {i: (ids(pairs[i][0]) + ids(pairs[i][1])) or [lm.bos_id or 0] for i in alone}
    order = sorted(alone, key=lambda i: len(rows_all[i]))
    cand_ids = [lm.encode(c) for c in candidates]
    for s in range(0, len(order), batch_size):
        chunk = order[s : s + batch_size]
        rows = [rows_all[i] for i in chunk]
        if single is not None:
            out[chunk] = last_logprobs(lm, rows)[:, single].numpy()
            continue
        flat = lm.score_ids(
            [r for r in rows for _ in cand_ids], [c for _ in rows for c in cand_ids]
        )
        out[chunk] = np.asarray([x.total for x in flat]).reshape(len(rows), len(cand_ids))
    return out


# --- the shared-prefix scorer ----------------------------------------------------------------

#: Per-group overhead of the shared-prefix scorer, in tokens (the prefix's padding in its
#: batch, its cache copies): a prefix is shared only where that saves more tokens.
GROUP_COST = 4

Scoring = Literal["shared", "reference"]

_SCORES: dict[tuple[int, tuple[int, ...]], dict[tuple[int, ...], np.ndarray]] = {}


def _lcp(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _groups(rows: Sequence[Sequence[int]], start: int) -> list[tuple[int, int, int]]:
    """Contiguous groups ``(a, b, shared)`` of lexicographically sorted ``rows``.

    Every row already shares its first ``start`` tokens with the others; a group
    ``rows[a:b]`` (``b - a >= 2``) additionally shares ``shared >= 1`` tokens, at most
    its shortest row's length minus one (each row keeps a token whose logits are
    read). Chosen by dynamic programming to minimise the tokens fed plus
    :data:`GROUP_COST` per group; rows left out are ``(a, a + 1, 0)``.
    """
    n = len(rows)
    lcp = [_lcp(rows[i][start:], rows[i + 1][start:]) for i in range(n - 1)]
    size = [len(r) - start for r in rows]
    best = [0.0] * (n + 1)
    cut: list[tuple[int, int]] = [(0, 0)] * (n + 1)
    for b in range(1, n + 1):
        best[b], cut[b] = best[b - 1] + size[b - 1], (b - 1, 0)
        common, shortest, total = 1 << 30, size[b - 1], size[b - 1]
        for a in range(b - 2, -1, -1):
            common, shortest = min(common, lcp[a]), min(shortest, size[a])
            total += size[a]
            shared = min(common, shortest - 1)
            if shared < 1:
                break
            cost = best[a] + GROUP_COST + shared + total - (b - a) * shared
            if cost < best[b]:
                best[b], cut[b] = cost, (a, shared)
    out = []
    b = n
    while b > 0:
        a, shared = cut[b]
        out.append((a, b, shared))
        b = a
    return out[::-1]


def _cache_kw(lm: CausalLM, cache: Any) -> dict[str, Any]:
    """The KV-cache keyword of the model's forward (``cache``, or ``past_key_values``)."""
    import inspect

    params = inspect.signature(lm.module.forward).parameters
    return {"cache" if "cache" in params else "past_key_values": cache, "use_cache": True}


def _prefill(lm: CausalLM, prefixes: Sequence[Sequence[int]]) -> tuple[Any, torch.Tensor]:
    """A KV cache of the left-padded ``prefixes`` (one pass, on the model's device) and its mask.

    Only the last position reaches the LM head (its logits are not used).
    """
    import torch

    from flowerbed.models.lm_transformers import DynamicCache

    width = max(len(r) for r in prefixes)
    ids = torch.full((len(prefixes), width), lm.pad_id, dtype=torch.long)
    mask = torch.zeros((len(prefixes), width), dtype=torch.long)
    for b, r in enumerate(prefixes):
        ids[b, width - len(r) :] = torch.as_tensor(list(r), dtype=torch.long)
        mask[b, width - len(r) :] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache(config=cast(Any, lm.module).config)
    dev = lm.device
    with torch.no_grad():
        lm.module(
            input_ids=ids.to(dev),
            attention_mask=mask.to(dev),
            position_ids=positions.to(dev),
            logits_to_keep=1,
            **_cache_kw(lm, cache),
        )
    return cache, mask


def _suffix_logprobs(
    lm: CausalLM,
    cache: Any,
    mask: torch.Tensor,
    which: Sequence[int],
    rows: Sequence[Sequence[int]],
) -> torch.Tensor:
    """``(B, V)`` next-token log-probs after prefix ``which[b]`` of ``cache`` + ``rows[b]``.

    ``cache``/``mask``: :func:`_prefill`'s (left-padded). Each row (at least one
    token) is right-padded after a copy of its prefix's cache rows; its positions
    continue its own prefix's; only its last position reaches the LM head.
    """
    import copy

    import torch

    pick = torch.as_tensor(list(which), dtype=torch.long)
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), lm.pad_id, dtype=torch.long)
    new = torch.zeros((len(rows), width), dtype=torch.long)
    for b, r in enumerate(rows):
        ids[b, : len(r)] = torch.as_tensor(list(r), dtype=torch.long)
        new[b, : len(r)] = 1
    before = mask[pick]
    positions = before.sum(-1, keepdim=True) + torch.arange(width)[None, :]
    last = torch.as_tensor([[len(r) - 1] for r in rows], dtype=torch.long)
    dev = lm.device
    mine = copy.deepcopy(cache)
    mine.reorder_cache(pick.to(dev))
    with torch.no_grad():
        out = lm.module(
            input_ids=ids.to(dev),
            attention_mask=torch.cat([before, new], dim=1).to(dev),
            position_ids=positions.to(dev),
            logits_to_keep=last.to(dev),
            **_cache_kw(lm, mine),
        )
    return torch.log_softmax(out.logits[:, 0].float(), dim=-1).cpu()


def _score_grouped(
    lm: CausalLM, rows: list[tuple[int, ...]], single: list[int], batch_size: int
) -> dict[tuple[int, ...], np.ndarray]:
    """First-token log-probs of ``single`` after each distinct token row, sharing prefixes.

    The sorted rows are cut into groups sharing a prefix (:func:`_groups`). The
    groups' prefixes are prefilled in length-sorted, left-padded batches of
    ``batch_size`` (one KV cache per batch); then their rows' remainders run
    after their own prefix's cache rows, in suffix-length-sorted batches. Rows
    in no group run whole, in length-sorted left-padded batches
    (:func:`last_logprobs`). Few, full forward passes: each pass reads all the
    weights, so many small ones would cost more than the shared tokens save.
    """
    out: dict[tuple[int, ...], np.ndarray] = {}
    rows = sorted(rows)
    groups = []
    alone: list[tuple[int, ...]] = []
    for a, b, shared in _groups(rows, 0):
        if shared:
            groups.append((rows[a][:shared], rows[a:b]))
        else:
            alone.append(rows[a])

    def put(chunk: Sequence[tuple[int, ...]], lp: torch.Tensor) -> None:
        for r, v in zip(chunk, lp[:, single].numpy(), strict=True):
            out[r] = v

    groups.sort(key=lambda g: len(g[0]))
    for s in range(0, len(groups), batch_size):
        part = groups[s : s + batch_size]
        cache, mask = _prefill(lm, [g[0] for g in part])
        members = sorted(((len(r) - len(g[0]), j, r) for j, g in enumerate(part) for r in g[1]))
        for t in range(0, len(members), batch_size):
            batch = members[t : t + batch_size]
            lp = _suffix_logprobs(
                lm,
                cache,
                mask,
                [j for _, j, _ in batch],
                [r[len(part[j][0]) :] for _, j, r in batch],
            )
            put([r for _, _, r in batch], lp)
    alone.sort(key=len)
    for s in range(0, len(alone), batch_size):
        chunk = alone[s : s + batch_size]
        put(chunk, last_logprobs(lm, chunk))
    return out


def score_shared(
    lm: CausalLM, pairs: Sequence[tuple[str, str]], candidates: Sequence[str], batch_size: int = 16
) -> np.ndarray:
    """:func:`score`'s numbers (to float rounding), feeding each shared token prefix once.

    Prompts are tokenized as :func:`score` does (prefix and query apart) and
    their distinct token rows scored by :func:`_score_grouped`, so demonstrations
    that several queries start with (the same first retrieved demos, one random
    draw, vote-k's first-stage bank) pass the model once; only last positions
    reach the LM head. Scores are memoised per (model, candidates, token row)
    in the process, so an identical prompt in a later cell is not run again.
    Falls back to :func:`score` unless the model is a transformers one and
    every candidate is one distinct token.
    """
    from flowerbed.models.lm_transformers import TransformersLM

    single = _single_tokens(lm, candidates) if pairs else None
    if single is None or not isinstance(lm, TransformersLM):
        return score(lm, pairs, candidates, batch_size)
    enc: dict[str, list[int]] = {}

    def ids(text: str) -> list[int]:
        if text not in enc:
            enc[text] = lm.encode(text)
        return enc[text]

    rows = [tuple(ids(p) + ids(q)) or (lm.bos_id or 0,) for p, q in pairs]
    memo = _SCORES.setdefault((id(lm), tuple(single)), {})
    todo = sorted({r for r in rows if r not in memo})
    if todo:
        memo.update(_score_grouped(lm, todo, single, batch_size))
    return np.stack([memo[r] for r in rows]).astype(np.float64)


def clear_memo() -> None:
    """Forget :func:`score_shared`'s memoised scores (for timing it from cold)."""
    _SCORES.clear()


def predict(
    lm: CausalLM,
    pairs: Sequence[tuple[str, str]],
    candidates: Sequence[str],
    batch_size: int = 16,
    scoring: Scoring = "shared",
) -> tuple[np.ndarray, np.ndarray]:
    """Predicted candidate index and its probability normalised over the candidates.

    ``scoring``: ``shared`` (:func:`score_shared`) or ``reference`` (:func:`score`).
    """
    if not pairs:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    fn = score_shared if scoring == "shared" else score
    s = fn(lm, pairs, candidates, batch_size)
    z = s - s.max(axis=1, keepdims=True)
    p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    return s.argmax(axis=1), p.max(axis=1)

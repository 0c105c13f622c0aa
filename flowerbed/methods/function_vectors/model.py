"""Function vectors on a :class:`~flowerbed.models.lm.CausalLM`: prompts, activations, patching.

The model-facing half of the function-vector analysis (the maths is in
:mod:`flowerbed.methods.function_vectors.algorithm` and
:mod:`flowerbed.methods.function_vectors.algorithm_decomp`), written only against the
LM layer's public interface (``forward``, ``start``/``expand``/``step``,
``hooks`` on ``heads.L`` / ``attn.L`` / ``resid.L`` / ``embed``,
``head_contributions``), so any backend with hooks works:

- :class:`Prompter` writes prompts with one token span per demonstration: each
  demonstration and the query are tokenized apart and concatenated, so the
  spans are exact and a demonstration has the same tokens in the n-shot and in
  its 1-shot prompt;
- :func:`last_head_outputs`: per-head outputs before the output projection at
  the last token (Todd's activations);
- :func:`head_patch_effects`: the indirect-effect scan, batched: the corrupted
  prompt minus its last token is prefilled once, its KV cache repeated for a
  chunk of rows, and one decoding step runs the last token with row ``r``
  patching head ``r``'s last-token output (row 0 unpatched). Patching the last
  token only leaves the cached prefix exact;
- :func:`next_logprobs` with an FV added to the residual stream at the last
  token (the intervention);
- :func:`head_activations`: each FV head's attention row at the last token and
  its value vectors at every position. Values are read through the hooks alone:
  in a second row of the same prompt each FV layer attends with the identity
  matrix (every position to itself), so its per-head output at position ``k``
  is the value vector at ``k``; those outputs are kept and then overwritten
  with the plain row's, so later layers (and their values) stay clean. One
  extra row per prompt serves every FV layer.

Examples
--------
>>> from flowerbed.models.icl import Example, Template
>>> from flowerbed.models.lm import CausalLM, ByteTokenizer
>>> class Bytes(CausalLM):
...     tokenizer = ByteTokenizer()
>>> p = Prompter(Bytes(), Template("{x}>{y};"), bos=True).build([Example("a", ("b",))],
...                                                              Example("c", ("d",)))
>>> p.ids, p.spans, sorted(p.targets)
((256, 97, 62, 98, 59, 99, 62), ((1, 5),), [100])
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from flowerbed.core.seeds import rng
from flowerbed.models.icl import Example, Template
from flowerbed.models.lm import CausalLM, LmError, Site

Head = tuple[int, int]
Span = tuple[int, int]


@dataclass(frozen=True)
class Prompt:
    """Token ids of a prompt, its demonstrations' spans, and the acceptable first answer tokens."""

    ids: tuple[int, ...]
    spans: tuple[Span, ...]
    targets: frozenset[int]
    demos: tuple[Example, ...]
    query: Example


class Prompter:
    """Writes prompts with a template.

    Every prompt starts with the model's start-of-text ids
    (:attr:`~flowerbed.models.lm.CausalLM.prefix_ids`: SmolLM2's
    ``<|endoftext|>``, as Todd et al.'s code prepends for tokenizers without a
    bos token); ``bos`` puts the tokenizer's bos token before them.
    """

    def __init__(self, lm: CausalLM, template: Template, bos: bool) -> None:
        if bos and lm.bos_id is None:
            raise LmError("bos: true, but the model's tokenizer has no bos token")
        self.lm = lm
        self.template = template
        bos_ids = (int(lm.bos_id),) if bos and lm.bos_id is not None else ()
        self.head: tuple[int, ...] = bos_ids + tuple(lm.prefix_ids)

    def targets(self, refs: Sequence[str]) -> frozenset[int]:
        """First token of each acceptable answer, written after the separator."""
        firsts = [self.lm.encode(self.template.separator + r)[:1] for r in refs]
        return frozenset(int(f[0]) for f in firsts if f)

    def build(self, demos: Sequence[Example], query: Example) -> Prompt:
        """Demonstrations then the query, with the demonstrations' token spans."""
        ids, spans = list(self.head), []
        for d in demos:
            seg = self.lm.encode(self.template.demo(d))
            spans.append((len(ids), len(ids) + len(seg)))
            ids += seg
        ids += self.lm.encode(self.template.query(query.x))
        if not ids:
            raise LmError(f"empty prompt for query {query.x!r}")
        return Prompt(tuple(ids), tuple(spans), self.targets(query.y), tuple(demos), query)

    def isolated(self, prompt: Prompt, i: int) -> Prompt:
        """The 1-shot prompt ``(e_i, query)``; its one span has e_i's tokens."""
        return self.build([prompt.demos[i]], prompt.query)

    def zero_shot(self, prompt: Prompt) -> Prompt:
        """The query alone (after the prompter's head: bos and the model's prefix)."""
        return self.build([], prompt.query)

    def shuffled(self, prompt: Prompt, seed: int) -> Prompt:
        """The same demonstrations with their shown answers permuted among them."""
        order = rng(seed, "fv.shuffle").permutation(len(prompt.demos))
        demos = [Example(d.x, (prompt.demos[j].y[0],)) for d, j in zip(prompt.demos, order,
                                                                       strict=True)]
        return self.build(demos, prompt.query)


def distinct_examples(pool: Sequence[Example]) -> tuple[list[Example], np.ndarray]:
    """The pool's distinct inputs (first occurrence) and how often each occurs."""
    first: dict[str, int] = {}
    counts: dict[str, int] = {}
    for i, e in enumerate(pool):
        first.setdefault(e.x, i)
        counts[e.x] = counts.get(e.x, 0) + 1
    keys = list(first)
    return [pool[first[k]] for k in keys], np.array([counts[k] for k in keys], dtype=float)


def sample_prompts(
    prompter: Prompter,
    pool: Sequence[Example],
    n: int,
    shots: int,
    seed: int,
    queries: Sequence[Example] | None = None,
) -> list[Prompt]:
    """``n`` prompts of ``shots`` demonstrations with distinct inputs drawn from ``pool``.

    Inputs are drawn without replacement with probability proportional to how
    often they occur in ``pool`` (a client's rows); the query is one more such
    draw, or, when ``queries`` is given, ``queries[i % len(queries)]`` for prompt
    ``i`` (so ``n = len(queries)`` uses each query once), never an input of the
    prompt's demonstrations.
    """
    uniq, weight = distinct_examples(pool)
    need = shots + (0 if queries is not None else 1)
    if len(uniq) < need:
        raise ValueError(f"{shots}-shot prompts need {need} distinct inputs; the pool has "
                         f"{len(uniq)}")
    gen = rng(seed, "fv.prompts")
    out = []
    for k in range(n):
        if queries is None:
            pick = gen.choice(len(uniq), size=shots + 1, replace=False, p=weight / weight.sum())
            demos, query = [uniq[i] for i in pick[:-1]], uniq[pick[-1]]
        else:
            query = queries[k % len(queries)]
            keep = np.array([e.x != query.x for e in uniq])
            if keep.sum() < shots:
                raise ValueError(f"{shots}-shot prompts: too few inputs besides {query.x!r}")
            idx = np.flatnonzero(keep)
            w = weight[idx] / weight[idx].sum()
            demos = [uniq[i] for i in gen.choice(idx, size=shots, replace=False, p=w)]
        out.append(prompter.build(demos, query))
    return out


# --- forward passes ------------------------------------------------------------------------


def _batches(n: int, size: int) -> list[range]:
    return [range(i, min(i + size, n)) for i in range(0, n, size)]


def last_head_outputs(
    lm: CausalLM, prompts: Sequence[Prompt], layers: Sequence[int], batch_size: int
) -> np.ndarray:
    """``(N, len(layers), heads, head_dim)`` per-head outputs at each prompt's last token."""
    sites = [Site("heads", layer, (-1,)) for layer in layers]
    out = []
    for rows in _batches(len(prompts), batch_size):
        with lm.hooks(read=sites) as rec:
            lm.forward([prompts[i].ids for i in rows])
        out.append(torch.stack([rec[s][:, 0] for s in sites], dim=1))
    return torch.cat(out).double().numpy()


@dataclass(frozen=True)
class Filtered:
    """Prompts the model answers correctly in context, out of ``drawn`` evaluated.

    ``correct``: how many of the ``drawn`` were right (``len(prompts)`` is at most
    ``n``); ``heads`` ``(len(prompts), L, heads, head_dim)``: their last-token
    head outputs, when asked for (read in the same forward pass as the answer).
    """

    prompts: list[Prompt]
    drawn: int
    correct: int
    heads: np.ndarray | None = None

    @property
    def survival(self) -> float:
        """Share of the evaluated candidates the model answered correctly."""
        return self.correct / self.drawn if self.drawn else float("nan")


def answered_correctly(
    lm: CausalLM,
    candidates: Sequence[Prompt],
    n: int,
    batch_size: int,
    read_heads: bool = False,
) -> Filtered:
    """The first ``n`` of ``candidates`` whose top-1 next token is an acceptable answer.

    Todd et al. compute mean activations, indirect effects and accuracies over
    prompts the model gets right with its demonstrations; this keeps those,
    evaluating candidates batch by batch until ``n`` are found (or none are left).
    """
    layers = range(lm.num_layers)
    sites = [Site("heads", layer, (-1,)) for layer in layers] if read_heads else []
    kept: list[Prompt] = []
    acts: list[torch.Tensor] = []
    drawn = correct = 0
    for rows in _batches(len(candidates), batch_size):
        if len(kept) >= n:
            break
        batch = [candidates[i] for i in rows]
        with lm.hooks(read=sites) as rec:
            logprobs = lm.next_token_logprobs([p.ids for p in batch])
        ok = top1_correct(logprobs, batch)
        drawn, correct = drawn + len(batch), correct + int(ok.sum())
        for j in np.flatnonzero(ok)[: n - len(kept)]:
            kept.append(batch[j])
            if read_heads:
                acts.append(torch.stack([rec[s][j, 0] for s in sites]))
    heads = torch.stack(acts).double().numpy() if acts else None
    return Filtered(kept, drawn, correct, heads)


def mean_head_activations(
    lm: CausalLM, prompts: Sequence[Prompt], batch_size: int
) -> np.ndarray:
    """``(L, heads, head_dim)``: Todd's mean last-token head outputs over clean prompts."""
    acts = last_head_outputs(lm, prompts, range(lm.num_layers), batch_size)
    return np.asarray(acts.mean(axis=0))


def target_probability(logprobs: torch.Tensor, prompts: Sequence[Prompt]) -> np.ndarray:
    """``(N,)`` probability mass of each prompt's acceptable first tokens."""
    probs = logprobs.double().exp()
    return np.array([float(probs[b, sorted(p.targets)].sum()) for b, p in enumerate(prompts)])


def top1_correct(logprobs: torch.Tensor, prompts: Sequence[Prompt]) -> np.ndarray:
    """``(N,)`` whether each row's most likely next token is an acceptable first token."""
    best = logprobs.argmax(dim=-1)
    return np.array([int(best[b]) in p.targets for b, p in enumerate(prompts)])


def _head_patch(rows: list[int], heads: list[int], value: torch.Tensor) -> Callable[..., Any]:
    def patch(selected: torch.Tensor) -> torch.Tensor:  # (B, 1, heads, head_dim)
        out = selected.clone()
        out[rows, 0, heads] = value.to(out.dtype)
        return out

    return patch


def head_patch_effects(
    lm: CausalLM,
    prompts: Sequence[Prompt],
    mean_heads: np.ndarray,
    chunk: int,
    heads: Sequence[Head] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Probability of the answer with each head's last-token output set to its mean.

    Returns ``(patched (N, L, H), corrupt (N,))``: for prompt ``n``, the target
    probability with head ``(l, h)`` patched (nan for heads outside ``heads``)
    and without any patch. ``chunk`` heads share one decoding step.
    """
    todo = list(heads) if heads is not None else [
        (layer, h) for layer in range(lm.num_layers) for h in range(lm.num_heads)]
    means = torch.as_tensor(np.asarray(mean_heads), dtype=torch.float32)
    patched = np.full((len(prompts), lm.num_layers, lm.num_heads), np.nan)
    corrupt = np.zeros(len(prompts))
    for n, prompt in enumerate(prompts):
        if len(prompt.ids) < 2:
            raise LmError("a prompt for the head scan needs at least two tokens")
        state = lm.start([list(prompt.ids[:-1])])
        for part in _batches(len(todo), chunk):
            group = [todo[i] for i in part]
            patches: dict[Site | str, Any] = {}
            for layer in sorted({lay for lay, _ in group}):
                rows = [1 + j for j, (lay, _) in enumerate(group) if lay == layer]
                hs = [h for lay, h in group if lay == layer]
                patches[Site("heads", layer, (-1,))] = _head_patch(rows, hs, means[layer, hs])
            expanded = lm.expand(state, len(group) + 1)
            with lm.hooks(patch=patches):
                logprobs, _ = lm.step(expanded, [prompt.ids[-1]] * (len(group) + 1))
            p = target_probability(logprobs, [prompt] * (len(group) + 1))
            corrupt[n] = p[0]
            for j, (layer, h) in enumerate(group):
                patched[n, layer, h] = p[1 + j]
    return patched, corrupt


def inject_site(layer: int) -> Site:
    """Where an FV is added: the output of block ``layer`` (``-1``: the embeddings), last token."""
    if layer < -1:
        raise LmError(f"injection layer must be >= -1 (-1: the embeddings), got {layer}")
    return Site("embed", 0, (-1,)) if layer == -1 else Site("resid", layer, (-1,))


def next_logprobs(
    lm: CausalLM,
    prompts: Sequence[Prompt],
    batch_size: int,
    fv: np.ndarray | None = None,
    layer: int = -1,
) -> torch.Tensor:
    """``(N, V)`` next-token log-probs, with ``fv`` ((d,) or one per prompt) added if given."""
    out = []
    vec = None if fv is None else torch.as_tensor(np.asarray(fv), dtype=torch.float32)
    for rows in _batches(len(prompts), batch_size):
        batch = [prompts[i].ids for i in rows]
        if vec is None:
            out.append(lm.next_token_logprobs(batch))
            continue
        add = vec if vec.ndim == 1 else vec[list(rows)]

        def patch(selected: torch.Tensor, add: torch.Tensor = add) -> torch.Tensor:
            shift = add[None, None, :] if add.ndim == 1 else add[:, None, :]
            return selected + shift.to(selected.dtype)

        with lm.hooks(patch={inject_site(layer): patch}):
            out.append(lm.next_token_logprobs(batch))
    return torch.cat(out)


# --- the FV heads --------------------------------------------------------------------------


def output_matrices(lm: CausalLM, heads: Sequence[Head]) -> np.ndarray:
    """``(A, d, head_dim)``: each head's slice of its layer's output projection."""
    out = []
    for layer, h in heads:
        basis = torch.zeros(lm.head_dim, lm.num_heads, lm.head_dim)
        basis[:, h, :] = torch.eye(lm.head_dim)
        with torch.no_grad():
            mapped = lm.head_contributions(layer, basis)  # (head_dim, heads, d)
        out.append(mapped[:, h, :].T.double())
    return torch.stack(out).numpy()


def function_vector(w_o: np.ndarray, mean_heads: np.ndarray, heads: Sequence[Head]) -> np.ndarray:
    """Todd's FV: ``sum_(l,h) W_O^(l,h) mean_heads[l, h]`` (``(d,)``; no output bias)."""
    acts = np.stack([mean_heads[layer, h] for layer, h in heads])
    return np.asarray(np.einsum("adh,ah->d", w_o, acts))


def prompt_vectors(
    lm: CausalLM,
    prompts: Sequence[Prompt],
    heads: Sequence[Head],
    w_o: np.ndarray,
    batch_size: int,
) -> np.ndarray:
    """``(N, d)``: each prompt's own FV ``v(P)`` from its last-token head outputs."""
    layers = sorted({layer for layer, _ in heads})
    acts = last_head_outputs(lm, prompts, layers, batch_size)
    z = np.stack([acts[:, layers.index(layer), h] for layer, h in heads], axis=1)
    return np.asarray(np.einsum("adh,nah->nd", w_o, z))


@dataclass(frozen=True)
class HeadActivations:
    """For one prompt and the FV heads, at its last token.

    ``alpha`` ``(A, K)``: attention rows; ``values`` ``(A, K, head_dim)``: value
    vectors at every position; ``z`` ``(A, head_dim)``: the heads' outputs.
    """

    alpha: np.ndarray
    values: np.ndarray
    z: np.ndarray


def _attention_patch(rows: list[int], hide: torch.Tensor | None) -> Callable[..., Any]:
    """Hide keys (``hide`` ``(B, T)``: masked, then renormalised) and give ``rows`` identity."""

    def patch(probs: torch.Tensor) -> torch.Tensor:  # (B, heads, T, keys)
        out = probs
        if hide is not None:
            h = hide.to(probs.device)
            keep = ~(h[:, None, :, None].logical_not() & h[:, None, None, :])  # (B, 1, T, K)
            out = out * keep.to(out.dtype)
            total = out.sum(-1, keepdim=True)
            out = torch.where(total > 0, out / total.clamp_min(1e-30), probs)
        if rows:
            out = out.clone()
            out[rows] = torch.eye(out.shape[-2], out.shape[-1], dtype=out.dtype,
                                  device=out.device)
        return out

    return patch


def _value_stash(rows: list[int], clean: list[int], store: dict[int, torch.Tensor],
                 layer: int) -> Callable[..., Any]:
    def patch(heads: torch.Tensor) -> torch.Tensor:  # (B, T, heads, head_dim)
        store[layer] = heads[rows].detach().clone()  # identity attention: the values
        out = heads.clone()
        out[rows] = heads[clean]  # the clean outputs again: later layers stay clean
        return out

    return patch


def _hidden_columns(prompts: Sequence[Prompt], hide: Sequence[Sequence[Span]],
                    width: int) -> torch.Tensor:
    """``(2N, width)`` bool: each prompt's hidden spans in left-padded columns (two rows each)."""
    out = torch.zeros((2 * len(prompts), width), dtype=torch.bool)
    for j, (prompt, spans) in enumerate(zip(prompts, hide, strict=True)):
        pad = width - len(prompt.ids)
        for s, e in spans:
            out[2 * j : 2 * j + 2, pad + s : pad + e] = True
    return out


def head_activations(
    lm: CausalLM,
    prompts: Sequence[Prompt],
    heads: Sequence[Head],
    max_rows: int,
    hide: Sequence[Sequence[Span]] | None = None,
) -> list[HeadActivations]:
    """Attention rows, values and outputs of the FV heads at each prompt's last token.

    Each prompt runs as two rows: the plain prompt (attention rows and outputs)
    and a value row. In the value row every FV layer attends with the identity
    matrix, its per-head outputs (the values at every position) are kept, and
    they are then replaced by the plain row's outputs, so every later layer sees
    the clean residual stream and its own values are the clean ones too.
    ``max_rows`` bounds the rows of one forward pass.

    ``hide`` (one list of spans per prompt) removes those tokens from the
    prompt as seen by every other position, in every layer: their keys get
    probability zero and each attention row is renormalised, which is the
    softmax over the remaining keys. The rest of the prompt keeps its token
    positions, so hiding every demonstration but ``e_i`` is the 1-shot prompt
    ``(e_i, query)`` with ``e_i`` and the query at their n-shot positions (the
    spec's "isolated, positions realigned").
    """
    layers = sorted({layer for layer, _ in heads})
    step = max(1, max_rows // 2)
    out: list[HeadActivations] = []
    for group in _batches(len(prompts), step):
        rows = [prompts[i].ids for i in group for _ in range(2)]
        clean, vrows = list(range(0, len(rows), 2)), list(range(1, len(rows), 2))
        width = max(len(r) for r in rows)
        hidden = None if hide is None else _hidden_columns(
            [prompts[i] for i in group], [hide[i] for i in group], width)
        store: dict[int, torch.Tensor] = {}
        patches: dict[Site | str, Any] = {}
        for layer in range(lm.num_layers) if hide is not None else layers:
            fv_layer = layer in layers
            patches[Site("attn", layer)] = _attention_patch(vrows if fv_layer else [], hidden)
            if fv_layer:
                patches[Site("heads", layer)] = _value_stash(vrows, clean, store, layer)
        reads = [Site("heads", layer, (-1,)) for layer in layers] + [
            Site("attn", layer, (-1,)) for layer in layers]
        with lm.hooks(read=reads, patch=patches) as rec:
            lm.forward(rows)
        for j, i in enumerate(group):
            pad = width - len(prompts[i].ids)
            alpha = [rec[f"attn.{layer}"][2 * j, h, 0, pad:] for layer, h in heads]
            values = [store[layer][j, pad:, h] for layer, h in heads]
            z = [rec[f"heads.{layer}"][2 * j, 0, h] for layer, h in heads]
            out.append(HeadActivations(torch.stack(alpha).double().numpy(),
                                       torch.stack(values).double().numpy(),
                                       torch.stack(z).double().numpy()))
    return out


def aligned_isolated(
    lm: CausalLM, prompt: Prompt, heads: Sequence[Head], max_rows: int
) -> list[HeadActivations]:
    """One run per demonstration ``e_i``: the prompt with every other demonstration hidden.

    Each run sees the prefix, ``e_i`` and the query at their positions in the
    n-shot prompt (:func:`head_activations` with ``hide``), so contextualised and
    isolated weights and values sit at the same positions.
    """
    n = len(prompt.spans)
    hide = [[sp for j, sp in enumerate(prompt.spans) if j != i] for i in range(n)]
    return head_activations(lm, [prompt] * n, heads, max_rows, hide)


def random_like(lm: CausalLM, seed: int) -> CausalLM:
    """A randomly initialised model of ``lm``'s architecture and tokenizer (negative control)."""
    from flowerbed.models.lm_transformers import from_config

    config = getattr(lm.module, "config", None)
    if config is None:
        raise LmError(f"{type(lm).__name__}: no transformers config to re-initialise from")
    control = from_config(config, lm.tokenizer, "float32", seed)
    control.prefix_ids = lm.prefix_ids  # the same prompts, token for token
    if lm.device != control.device:
        control.to_device(lm.device)
    return control


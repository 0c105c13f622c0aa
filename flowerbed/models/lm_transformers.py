"""The :class:`~flowerbed.models.lm.CausalLM` interface over a ``transformers`` causal LM.

Implementation module of the ``hf``, ``smollm2`` and ``tiny`` backends, imported
when one is built (it imports torch and transformers at import time).

How the hooks reach inside the model:

- ``embed`` / ``resid``: a forward pre-hook on the first decoder block and a
  forward hook on each block (the ``nn.ModuleList`` of ``num_hidden_layers``
  blocks, found by shape, so Llama, Qwen3, GPT-2 and most decoder-only models
  work without a table);
- ``heads``: a forward pre-hook on the attention's output projection
  (``o_proj``, GPT-2's ``c_proj``, ``out_proj`` or ``dense``), whose input is
  the concatenation of the heads' outputs, viewed as ``(B, T, heads, head_dim)``;
- ``attn``: models are loaded with the attention implementation
  :data:`PROBE_ATTENTION`, registered with transformers' ``AttentionInterface``:
  it runs the model's own eager attention (so results equal ``eager``) and,
  while a hook is active on that module, hands the probabilities to it and,
  when they were patched, recomputes ``probs @ values``.

Offline only: ``HF_HUB_OFFLINE`` is set before transformers is imported and
every load passes ``local_files_only=True``.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import json
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch
from torch import nn
from transformers import AttentionInterface, DynamicCache
from transformers.masking_utils import AttentionMaskInterface, eager_mask

from flowerbed.models.lm import (
    ByteTokenizer,
    CausalLM,
    DecodeState,
    ForwardOutput,
    LmError,
    Padding,
    Recording,
    Site,
    TextTokenizer,
    TokenBatch,
    parse_site,
)

#: Attention implementation name models are loaded with (eager, plus probes).
PROBE_ATTENTION = "flowerbed_eager"
#: File marking a saved folder whose tokenizer is :class:`ByteTokenizer`.
BYTE_TOKENIZER_FILE = "flowerbed_tokenizer.json"

Probe = Callable[[torch.Tensor], torch.Tensor]
#: ``id(attention module)`` -> probes active on it (innermost last).
_PROBES: dict[int, list[Probe]] = {}
_EAGER: dict[type, Callable[..., tuple[torch.Tensor, torch.Tensor]]] = {}


def _eager_for(module: nn.Module) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    """The eager attention function of the module's own modeling file."""
    cls = type(module)
    if cls not in _EAGER:
        fn = getattr(sys.modules[cls.__module__], "eager_attention_forward", None)
        if fn is None:
            raise LmError(f"{cls.__name__}: its modeling file has no eager attention to run")
        _EAGER[cls] = fn
    return _EAGER[cls]


def _probe_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Eager attention; active probes see (and may replace) the probabilities."""
    out, weights = _eager_for(module)(module, query, key, value, attention_mask, **kwargs)
    probes = _PROBES.get(id(module))
    if not probes:
        return out, weights
    new = weights
    for probe in probes:
        new = probe(new)
    if new is weights:
        return out, weights
    groups = query.shape[1] // value.shape[1]
    v = value.repeat_interleave(groups, dim=1) if groups > 1 else value
    out = torch.matmul(new.to(v.dtype), v).transpose(1, 2).contiguous()
    return out, new


AttentionInterface.register(PROBE_ATTENTION, _probe_attention)
AttentionMaskInterface.register(PROBE_ATTENTION, eager_mask)


# --- tokenizers --------------------------------------------------------------------------------


class HfTokenizer:
    """A transformers tokenizer behind :class:`~flowerbed.models.lm.TextTokenizer`."""

    def __init__(self, tok: Any) -> None:
        self.tok = tok
        self.bos_id: int | None = tok.bos_token_id
        self.eos_id: int | None = tok.eos_token_id
        pad = tok.pad_token_id if tok.pad_token_id is not None else self.eos_id
        self.pad_id: int = int(pad) if pad is not None else 0
        self.vocab_size: int = len(tok)

    def encode(self, text: str) -> list[int]:
        """Ids of ``text`` without special tokens."""
        return list(self.tok.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int], skip_special: bool = True) -> str:
        """Text of ``ids``."""
        return str(self.tok.decode(list(ids), skip_special_tokens=skip_special))


# --- finding the parts -------------------------------------------------------------------------

_ATTENTION_NAMES = ("self_attn", "attn", "attention", "self_attention")
_OUT_PROJ_NAMES = ("o_proj", "c_proj", "out_proj", "dense")


@dataclass(frozen=True)
class _Anatomy:
    layers: nn.ModuleList
    attention: tuple[nn.Module, ...]
    out_proj: tuple[nn.Module, ...]


def _anatomy(model: nn.Module, num_layers: int) -> _Anatomy:
    layers = next(
        (m for m in model.modules() if isinstance(m, nn.ModuleList) and len(m) == num_layers),
        None,
    )
    if layers is None:
        raise LmError(f"{type(model).__name__}: no list of {num_layers} decoder blocks found")
    attention, out_proj = [], []
    for block in layers:
        attn = next((getattr(block, n) for n in _ATTENTION_NAMES if hasattr(block, n)), None)
        proj = next((getattr(attn, n) for n in _OUT_PROJ_NAMES if hasattr(attn, n)), None)
        if attn is None or proj is None:
            raise LmError(f"{type(block).__name__}: no attention module with an output projection")
        attention.append(attn)
        out_proj.append(proj)
    return _Anatomy(layers, tuple(attention), tuple(out_proj))


def _out_weight(proj: nn.Module) -> torch.Tensor:
    """``(out, in)`` weight of a Linear or of GPT-2's Conv1D (which stores ``(in, out)``)."""
    w = cast(torch.Tensor, proj.weight)
    return w if isinstance(proj, nn.Linear) else w.t()


# --- decoding state ----------------------------------------------------------------------------


class _State(DecodeState):
    def __init__(
        self, cache: Any, mask: torch.Tensor, lengths: list[int], logprobs: torch.Tensor
    ) -> None:
        self.cache = cache
        self.mask = mask
        self.lengths = lengths
        self.logprobs = logprobs
        self.spent = False


# --- the model ---------------------------------------------------------------------------------


class TransformersLM(CausalLM):
    """A transformers ``*ForCausalLM`` (eval mode) and its tokenizer as a :class:`CausalLM`."""

    def __init__(self, model: nn.Module, tokenizer: TextTokenizer) -> None:
        model.eval()
        self.model = model
        self.tokenizer = tokenizer
        cfg = cast(Any, model).config
        self.num_layers = int(cfg.num_hidden_layers)
        self.num_heads = int(cfg.num_attention_heads)
        self.hidden_size = int(cfg.hidden_size)
        self.head_dim = int(getattr(cfg, "head_dim", None) or self.hidden_size // self.num_heads)
        self.probes_attention = cfg._attn_implementation == PROBE_ATTENTION
        self._parts = _anatomy(model, self.num_layers)
        params = inspect.signature(model.forward).parameters
        self._cache_arg = "cache" if "cache" in params else "past_key_values"
        self._keeps_logits = "logits_to_keep" in params
        out = cast(Any, model).get_output_embeddings()
        self._vocab = int(out.weight.shape[0]) if out is not None else tokenizer.vocab_size
        if tokenizer.vocab_size > self._vocab:
            raise LmError(
                f"tokenizer has {tokenizer.vocab_size} ids but the model only {self._vocab} outputs"
            )

    @property
    def module(self) -> nn.Module:
        """The transformers model."""
        return self.model

    def to_device(self, device: str) -> None:
        """Move the weights to ``device`` (``cpu`` or ``cuda``); results stay on the CPU."""
        if device == "cuda" and not torch.cuda.is_available():
            raise LmError("lm device 'cuda': torch sees no CUDA device here; use device: cpu")
        self.model.to(device)
        self.device = device

    @property
    def vocab_size(self) -> int:
        """Size of the model's output distribution (at least the tokenizer's)."""
        return self._vocab

    def save(self, folder: str | Path) -> Path:
        """Write weights, config and tokenizer so the ``hf`` backend loads the folder."""
        out = Path(folder)
        cast(Any, self.model).save_pretrained(out)
        if isinstance(self.tokenizer, HfTokenizer):
            self.tokenizer.tok.save_pretrained(out)
        else:
            (out / BYTE_TOKENIZER_FILE).write_text(json.dumps({"type": "bytes"}) + "\n")
        return out

    # -- running -----------------------------------------------------------------------------

    def _pad(self, batch: TokenBatch, padding: Padding) -> tuple[torch.Tensor, torch.Tensor]:
        if len(batch) == 0:
            raise LmError("empty batch")
        width = max(len(r) for r in batch)
        ids = torch.full((len(batch), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for b, row in enumerate(batch):
            n = len(row)
            if n == 0:
                continue
            cols = slice(width - n, width) if padding == "left" else slice(0, n)
            ids[b, cols] = torch.as_tensor(list(row), dtype=torch.long)
            mask[b, cols] = 1
        if int(ids.max()) >= self._vocab or int(ids.min()) < 0:
            raise LmError(f"token ids must lie in 0..{self._vocab - 1}")
        return ids, mask

    def _run(
        self,
        ids: torch.Tensor,
        mask: torch.Tensor,
        positions: torch.Tensor,
        cache: Any,
        keep: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Log-softmax of the logits, ``(B, T, V)`` float32.

        With ``keep``, ``(B, len(keep), V)`` at those sequence positions only: the output
        layer and the softmax skip the others (a third of a 256-token SmolLM2 prefill).
        """
        kwargs: dict[str, Any] = {self._cache_arg: cache, "use_cache": cache is not None}
        if keep is not None and self._keeps_logits:
            kwargs["logits_to_keep"] = keep.to(self.device)
        dev = self.device
        with torch.no_grad():
            out = self.model(
                input_ids=ids.to(dev),
                attention_mask=mask.to(dev),
                position_ids=positions.to(dev),
                **kwargs,
            )
            logits = out.logits
            if keep is not None and not self._keeps_logits:
                logits = logits[:, keep.to(logits.device)]
            return torch.log_softmax(logits.float(), dim=-1).cpu()

    def forward(self, batch: TokenBatch, padding: Padding = "left") -> ForwardOutput:
        """One pass over the padded batch; hooks apply."""
        ids, mask = self._pad(batch, padding)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        return ForwardOutput(self._run(ids, mask, positions, None), mask, padding)

    # -- KV cache ----------------------------------------------------------------------------

    def _new_cache(self) -> Any:
        return DynamicCache(config=cast(Any, self.model).config)

    def _live(self, state: DecodeState) -> _State:
        if not isinstance(state, _State):
            raise LmError(f"not a decoding state of this model: {type(state).__name__}")
        if state.spent:
            raise LmError("this decoding state was already advanced; fork() it to branch")
        return state

    def start(self, prompts: TokenBatch, padding: Padding = "left") -> DecodeState:
        """Prefill a fresh cache with ``prompts``."""
        if any(len(p) == 0 for p in prompts):
            raise LmError("empty prompt: give at least one token (e.g. the bos id)")
        ids, mask = self._pad(prompts, padding)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        cache = self._new_cache()
        lengths = [len(p) for p in prompts]
        ends = torch.tensor(lengths) - 1 if padding == "right" else torch.full((len(prompts),), -1)
        ends = ends % ids.shape[1]
        keep, where = torch.unique(ends, return_inverse=True)
        lp = self._run(ids, mask, positions, cache, keep)
        return _State(cache, mask, lengths, lp[torch.arange(len(prompts)), where])

    def step(
        self, state: DecodeState, tokens: Sequence[int]
    ) -> tuple[torch.Tensor, DecodeState]:
        """One token per row."""
        st = self._live(state)
        if len(tokens) != st.batch_size:
            raise LmError(f"{len(tokens)} tokens for a batch of {st.batch_size}")
        ids = torch.as_tensor(list(tokens), dtype=torch.long)[:, None]
        mask = torch.cat([st.mask, torch.ones_like(ids)], dim=1)
        positions = torch.as_tensor(st.lengths, dtype=torch.long)[:, None]
        lp = self._run(ids, mask, positions, st.cache)[:, 0]
        st.spent = True
        return lp, _State(st.cache, mask, [n + 1 for n in st.lengths], lp)

    def extend(
        self, state: DecodeState, rows: TokenBatch
    ) -> tuple[torch.Tensor, DecodeState]:
        """A right-padded ragged chunk per row."""
        st = self._live(state)
        if len(rows) != st.batch_size:
            raise LmError(f"{len(rows)} rows for a batch of {st.batch_size}")
        width = max((len(r) for r in rows), default=0)
        if width == 0:
            return torch.zeros((st.batch_size, 0)), st
        ids, new_mask = self._pad(rows, "right")
        mask = torch.cat([st.mask, new_mask], dim=1)
        start = torch.as_tensor(st.lengths, dtype=torch.long)[:, None]
        positions = start + torch.arange(width)[None, :]
        lp = self._run(ids, mask, positions, st.cache)
        # log p(token t | before): the previous distribution for t = 0, this pass's after.
        prev = torch.cat([st.logprobs[:, None], lp[:, :-1]], dim=1)
        fed = prev.gather(2, ids[:, :, None])[:, :, 0] * new_mask
        lengths = [len(r) for r in rows]
        last = st.logprobs.clone()
        for b, n in enumerate(lengths):
            if n:
                last[b] = lp[b, n - 1]
        st.spent = True
        total = [a + n for a, n in zip(st.lengths, lengths, strict=True)]
        return fed, _State(st.cache, mask, total, last)

    def fork(self, state: DecodeState) -> DecodeState:
        """A deep copy (cache included)."""
        st = self._live(state)
        return _State(
            copy.deepcopy(st.cache), st.mask.clone(), list(st.lengths), st.logprobs.clone()
        )

    def expand(self, state: DecodeState, n: int) -> DecodeState:
        """Each row repeated ``n`` times, in a new cache."""
        if n < 1:
            raise LmError(f"expand needs n >= 1, got {n}")
        st = cast(_State, self.fork(state))
        st.cache.batch_repeat_interleave(n)
        return _State(
            st.cache,
            st.mask.repeat_interleave(n, dim=0),
            [x for x in st.lengths for _ in range(n)],
            st.logprobs.repeat_interleave(n, dim=0),
        )

    # -- hooks -------------------------------------------------------------------------------

    def head_contributions(self, layer: int, heads: torch.Tensor) -> torch.Tensor:
        """``(..., heads, head_dim)`` -> ``(..., heads, hidden)`` through the output projection."""
        w = _out_weight(self._parts.out_proj[self._layer(layer)])
        w = w.reshape(w.shape[0], self.num_heads, self.head_dim).to(heads.device, heads.dtype)
        return torch.einsum("...nd,hnd->...nh", heads, w)

    def out_proj_bias(self, layer: int) -> torch.Tensor | None:
        """Bias of the attention output projection of ``layer``."""
        bias = getattr(self._parts.out_proj[self._layer(layer)], "bias", None)
        return None if bias is None else cast(torch.Tensor, bias).detach().cpu()

    def _layer(self, layer: int) -> int:
        if not -self.num_layers <= layer < self.num_layers:
            raise LmError(f"layer {layer} out of range for {self.num_layers} blocks")
        return layer % self.num_layers

    @contextlib.contextmanager
    def hooks(
        self,
        read: Sequence[Site | str] = (),
        patch: Mapping[Site | str, Any] | None = None,
    ) -> Iterator[Recording]:
        """Read and patch sites in every forward pass inside the block."""
        rec = Recording()
        groups: dict[tuple[str, int], _Edit] = {}
        for raw, value in (patch or {}).items():
            site = self._resolve(parse_site(raw))
            groups.setdefault((site.kind, site.layer), _Edit(site.kind, rec)).patches.append(
                (site, value)
            )
        for raw in read:
            site = self._resolve(parse_site(raw))
            groups.setdefault((site.kind, site.layer), _Edit(site.kind, rec)).reads.append(site)
        undo: list[Callable[[], None]] = []
        try:
            for (kind, layer), edit in groups.items():
                undo.append(self._install(kind, layer, edit))
            yield rec
        finally:
            for fn in reversed(undo):
                fn()

    def _resolve(self, site: Site) -> Site:
        if site.kind == "embed":
            return Site("embed", 0, site.positions)
        if site.kind == "attn" and not self.probes_attention:
            raise LmError(
                "attention-probability hooks need the model loaded with the "
                f"{PROBE_ATTENTION!r} attention implementation (this one was not)"
            )
        return Site(site.kind, self._layer(site.layer), site.positions)

    def _install(self, kind: str, layer: int, edit: _Edit) -> Callable[[], None]:
        parts = self._parts
        if kind == "embed":
            handle = parts.layers[0].register_forward_pre_hook(edit.block_input, with_kwargs=True)
        elif kind == "resid":
            handle = parts.layers[layer].register_forward_hook(edit.block_output)
        elif kind == "heads":
            handle = parts.out_proj[layer].register_forward_pre_hook(
                edit.heads_input(self.num_heads, self.head_dim)
            )
        else:
            key = id(parts.attention[layer])
            _PROBES.setdefault(key, []).append(edit.apply)

            def remove() -> None:
                _PROBES[key].remove(edit.apply)
                if not _PROBES[key]:
                    del _PROBES[key]

            return remove
        return handle.remove


class _Edit:
    """Patches then reads at one ``(kind, layer)``, applied to the full activation."""

    def __init__(self, kind: str, rec: Recording) -> None:
        self.pos_dim = 2 if kind == "attn" else 1
        self.rec = rec
        self.patches: list[tuple[Site, Any]] = []
        self.reads: list[Site] = []

    def _index(self, positions: tuple[int, ...] | None) -> tuple[Any, ...]:
        if positions is None:
            return (slice(None),)
        return (slice(None),) * self.pos_dim + (list(positions),)

    def apply(self, value: torch.Tensor) -> torch.Tensor:
        out = value
        on_cpu = out.device.type == "cpu"
        for site, patch in self.patches:
            idx = self._index(site.positions)
            # A patch sees and returns CPU tensors wherever the model computes.
            selected = out[idx] if on_cpu else out[idx].cpu()
            new = patch(selected) if callable(patch) else patch
            if new is None:  # edited in place: a view (all positions) already changed ``out``
                if site.positions is not None or not on_cpu:
                    out = out.clone()
                    out[idx] = selected.to(out.device)
                continue
            out = out.clone()
            out[idx] = torch.as_tensor(new).to(out.device, out.dtype)
        for site in self.reads:
            self.rec.add(site.key, out[self._index(site.positions)].detach().cpu().clone())
        return out

    def block_input(
        self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        del module
        if args:
            return (self.apply(args[0]), *args[1:]), kwargs
        return args, {**kwargs, "hidden_states": self.apply(kwargs["hidden_states"])}

    def block_output(self, module: nn.Module, args: tuple[Any, ...], output: Any) -> Any:
        del module, args
        if isinstance(output, torch.Tensor):
            return self.apply(output)
        return (self.apply(output[0]), *output[1:])

    def heads_input(
        self, num_heads: int, head_dim: int
    ) -> Callable[[nn.Module, tuple[Any, ...]], tuple[Any, ...]]:
        def hook(module: nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...]:
            del module
            x = args[0]
            heads = x.reshape(*x.shape[:-1], num_heads, head_dim)
            return (self.apply(heads).reshape(x.shape), *args[1:])

        return hook


# --- loading -----------------------------------------------------------------------------------

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def torch_dtype(name: str) -> torch.dtype:
    """``"float32"`` / ``"bfloat16"`` -> the torch dtype."""
    return _DTYPES[name]


def load_folder(path: Path, dtype: str, tokenizer: str = "auto") -> TransformersLM:
    """A saved causal LM folder (``save_pretrained`` layout), offline.

    ``tokenizer``: ``auto`` reads the folder's tokenizer files (or the
    :data:`BYTE_TOKENIZER_FILE` marker); ``bytes`` forces :class:`ByteTokenizer`.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if tokenizer == "bytes" or (path / BYTE_TOKENIZER_FILE).is_file():
        tok: TextTokenizer = ByteTokenizer()
    else:
        try:
            tok = HfTokenizer(AutoTokenizer.from_pretrained(str(path), local_files_only=True))
        except (OSError, ValueError) as exc:
            raise LmError(
                f"no usable tokenizer in {path} ({type(exc).__name__}); save one beside the "
                "weights (tokenizer.save_pretrained) or set tokenizer: bytes"
            ) from None
    kwargs = {"dtype": torch_dtype(dtype), "local_files_only": True}
    try:
        model = AutoModelForCausalLM.from_pretrained(
            str(path), attn_implementation=PROBE_ATTENTION, **kwargs
        )
    except (ValueError, KeyError):
        # An architecture outside transformers' attention interface: no attn probes.
        model = AutoModelForCausalLM.from_pretrained(
            str(path), attn_implementation="eager", **kwargs
        )
    return TransformersLM(model, tok)


def from_config(config: Any, tokenizer: TextTokenizer, dtype: str, seed: int) -> TransformersLM:
    """A randomly initialised model for a transformers config, seeded (global RNG untouched)."""
    from transformers import AutoModelForCausalLM

    cfg = copy.deepcopy(config)  # from_config writes the attention choice into its config
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(
            cfg, attn_implementation=PROBE_ATTENTION, dtype=torch_dtype(dtype)
        )
    return TransformersLM(model, tokenizer)

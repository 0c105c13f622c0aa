"""Vision-language models (registry kind ``vlm``) shared by the CLIP-style methods.

A VLM maps images and texts into one L2-normalised embedding space where the
cosine ``<f, t>`` scores image ``f`` against text ``t``. Implementations:

- ``open_clip``: any open_clip architecture with weights from a local checkpoint;
- ``two_tower``: frozen ImageNet EfficientNet-Lite0 + frozen MiniLM sentence
  encoder with projection heads aligned contrastively on local data (the default
  that runs offline).

Everything here is frozen: methods learn prototypes, heads or prompt context on
top of the features, never the towers.

Encoding images is the expensive step of every CLIP-style run, so
:meth:`VisionLanguageModel.encode_images` caches its output on disk (under
``flowerbed.core.cache.cache_dir()``), keyed by the model's parameters, its
weights' identity and a hash of the rows themselves: a repeated run or a sweep
over method settings encodes each client's rows once. Subclasses implement
:meth:`VisionLanguageModel.encode_images_uncached`.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import Field

from flowerbed.core import registry
from flowerbed.core.cache import cached_file
from flowerbed.core.registry import Params
from flowerbed.data.base import DatasetMeta

logger = logging.getLogger("flowerbed.vlm")

#: CLIP-style prompt templates used to build class text features (averaged).
DEFAULT_TEMPLATES: tuple[str, ...] = ("a photo of a {}.",)


class VlmParams(Params):
    """Settings every VLM shares: whether encoded images are cached on disk."""

    feature_cache: bool = Field(
        True, description="cache encoded image features on disk (keyed by params and rows)"
    )


def params_hash(params: Params, exclude: frozenset[str] = frozenset()) -> str:
    """12 hex digits identifying ``params`` (its JSON, minus ``exclude`` fields)."""
    data = params.model_dump_json(exclude=set(exclude) or None)
    return hashlib.sha1(data.encode()).hexdigest()[:12]


def array_hash(x: np.ndarray) -> str:
    """16 hex digits identifying an array's dtype, shape and bytes."""
    a = np.ascontiguousarray(x)
    h = hashlib.sha1(f"{a.dtype.str}{a.shape}".encode())
    h.update(a.data)
    return h.hexdigest()[:16]


def file_identity(path: str | Path) -> str:
    """``path``, size and modification time: changes when a weights file is replaced."""
    stat = Path(path).stat()
    return f"{Path(path).resolve()}:{stat.st_size}:{stat.st_mtime_ns}"


def save_atomic(path: Path, write: Callable[[Path], None]) -> None:
    """``write(tmp)`` to a temporary file next to ``path``, then rename it onto ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def cached_array(
    folder: str, key: str, x: np.ndarray, compute: Callable[[], np.ndarray]
) -> np.ndarray:
    """``compute()``, stored once under ``cache_dir()/folder/key-<hash of x>.npy``."""
    path = cached_file(folder, f"{key}-{array_hash(x)}.npy")
    if path.is_file():
        try:
            out: np.ndarray = np.load(path)
            return out
        except (OSError, ValueError):
            logger.warning("unreadable feature cache %s; recomputing", path)
    out = compute()

    def write(tmp: Path) -> None:
        with tmp.open("wb") as fh:
            np.save(fh, out)

    save_atomic(path, write)
    return out


class VisionLanguageModel:
    """A frozen image tower and text tower into one normalised space.

    Contract
    --------
    - :meth:`encode_images` and :meth:`encode_texts` are deterministic, return
      ``float32`` arrays of shape ``(n, dim)`` with unit-norm rows, never train;
    - :meth:`prompt_text_features` is differentiable with respect to ``context``
      (CoOp-style learnable context vectors placed before each class name) and
      returns unit-norm rows;
    - ``logit_scale`` is the fixed temperature inverse used for zero-shot logits
      ``logit_scale * f @ t.T``.
    """

    dim: int
    context_dim: int
    logit_scale: float = 100.0
    #: Params fields that do not change image features (left out of the cache key).
    cache_ignore: frozenset[str] = frozenset({"feature_cache"})

    def __init__(self, params: Params) -> None:
        self.params = params

    def encode_images(self, x: np.ndarray, meta: DatasetMeta) -> np.ndarray:
        """Unit-norm features of image rows ``x`` (flattened, as the data layer stores them).

        Served from the on-disk feature cache when ``params.feature_cache`` is on
        and these exact rows were encoded before by a model with the same
        parameters and weights; otherwise :meth:`encode_images_uncached`.
        """
        if not getattr(self.params, "feature_cache", False) or len(x) == 0:
            return self.encode_images_uncached(x, meta)
        key = "-".join([
            str(getattr(self.params, "name", type(self).__name__)),
            params_hash(self.params, self.cache_ignore),
            hashlib.sha1(f"{self.weights_identity()}|{meta.name}|{meta.input_shape}".encode())
            .hexdigest()[:8],
        ])
        return cached_array("vlm_features", key, x, lambda: self.encode_images_uncached(x, meta))

    def encode_images_uncached(self, x: np.ndarray, meta: DatasetMeta) -> np.ndarray:
        """Subclasses: the features of :meth:`encode_images`, computed."""
        raise NotImplementedError

    def weights_identity(self) -> str:
        """Text that changes when the weights behind the same params change (cache key)."""
        return ""

    def encode_texts(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-norm features of ``texts``."""
        raise NotImplementedError

    def init_context(self, n_ctx: int, seed: int) -> Any:
        """Initial CoOp context vectors, a ``torch.Tensor`` of shape ``(n_ctx, context_dim)``."""
        raise NotImplementedError

    def prompt_text_features(self, context: Any, class_names: Sequence[str]) -> Any:
        """``(C, dim)`` unit-norm features of "[context] [class name]." (torch, differentiable)."""
        raise NotImplementedError

    def context_from_text(self, text: str) -> Any:
        """Context vectors spelling ``text`` (CoOp's "a photo of a" initialisation).

        ``prompt_text_features(context_from_text("a photo of a"), names)`` equals
        ``encode_texts([f"a photo of a {n}." for n in names])``.
        """
        raise NotImplementedError

    def class_text_features(
        self, class_names: Sequence[str], templates: Sequence[str] = DEFAULT_TEMPLATES
    ) -> np.ndarray:
        """Zero-shot class features: mean of normalised template embeddings, renormalised."""
        rows = []
        for name in class_names:
            emb = self.encode_texts([t.format(name) for t in templates]).astype(np.float64)
            emb /= np.linalg.norm(emb, axis=1, keepdims=True)
            mean = emb.mean(axis=0)
            rows.append(mean / np.linalg.norm(mean))
        return np.asarray(rows, dtype=np.float32)


def build_vlm(spec: Params) -> VisionLanguageModel:
    """The VLM a validated spec names."""
    vlm: VisionLanguageModel = registry.build("vlm", spec)
    return vlm


def vlm_spec_type() -> Any:
    """Discriminated union (on ``name``) of every registered VLM's params."""
    return registry.spec_union("vlm")

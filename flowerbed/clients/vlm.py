"""Vision-language models (registry kind ``vlm``) shared by the CLIP-style methods.

A VLM maps images and texts into one L2-normalised embedding space where the
cosine ``<f, t>`` scores image ``f`` against text ``t``. Implementations:

- ``open_clip``: any open_clip architecture with weights from a local checkpoint;
- ``two_tower``: frozen ImageNet EfficientNet-Lite0 + frozen MiniLM sentence
  encoder with projection heads aligned contrastively on local data (the default
  that runs offline).

Everything here is frozen: methods learn prototypes, heads or prompt context on
top of the features, never the towers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Union

import numpy as np
from pydantic import Field

from flowerbed.data.base import DatasetMeta
from flowerbed.platform import registry
from flowerbed.platform.registry import Params

#: CLIP-style prompt templates used to build class text features (averaged).
DEFAULT_TEMPLATES: tuple[str, ...] = ("a photo of a {}.",)


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

    def __init__(self, params: Params) -> None:
        self.params = params

    def encode_images(self, x: np.ndarray, meta: DatasetMeta) -> np.ndarray:
        """Unit-norm features of image rows ``x`` (flattened, as the data layer stores them)."""
        raise NotImplementedError

    def encode_texts(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-norm features of ``texts``."""
        raise NotImplementedError

    def init_context(self, n_ctx: int, seed: int) -> Any:
        """Initial CoOp context vectors, a ``torch.Tensor`` of shape ``(n_ctx, context_dim)``."""
        raise NotImplementedError

    def prompt_text_features(self, context: Any, class_names: Sequence[str]) -> Any:
        """``(C, dim)`` unit-norm features of "[context] [class name]." (torch, differentiable)."""
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
    models = [e.params for e in registry.entries("vlm")]
    return Annotated[Union[tuple(models)], Field(discriminator="name")]  # noqa: UP007

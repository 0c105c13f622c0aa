"""Prompted branches of a frozen VLM for ManiPT and its baselines (torch; built on use).

A branch exposes both towers with learnable prompts (the protocol
:class:`flowerbed.methods.manipt.algorithm.Branch`):

- ``text(ctx, names)``: ``(C, D)`` unit-norm features of "[ctx] <name>." (CoOp's
  context vectors through the frozen text tower; ``vlm.prompt_text_features``);
- ``image(inputs, tokens)``: ``(B, D)`` unit-norm image features with visual
  prompt tokens ``(n, visual_dim)`` inserted in the frozen image tower, or the
  frozen features when ``tokens`` is ``None``.

Where the prompts go depends on the tower:

- ``open_clip`` ViT: the mean token is added to every token after ``ln_pre``
  (depth 1), then the frozen transformer, pooling and projection run;
- ``two_tower``'s EfficientNet (a CNN has no tokens): the mean token is a
  per-channel additive prompt on the last MBConv block's output map, which then
  goes through the frozen 1x1 head convolution, BatchNorm, ReLU6, pooling and
  projection head; so the correction depends on the image. ``inputs`` are those
  block maps, computed once per image and cached on disk.

MaPLe (Khattak et al., 2023, arXiv 2210.03117) *appends* its coupled visual
tokens; an appended zero token still changes attention, so the prompted branch
would not start at the frozen one. The additive form starts exactly there (zero
coupling, zero prompt) on both towers, which ManiPT's incremental-correction
view needs; this is a deviation from MaPLe, stated in docs/methods/manipt.md.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from flowerbed.data.base import DatasetMeta
from flowerbed.models.encoders import IMAGENET_MEAN, IMAGENET_STD, to_image_batch
from flowerbed.models.vlm import VisionLanguageModel, cached_array


@functools.cache
def _efficientnet() -> Any:
    """The frozen ImageNet EfficientNet-Lite0, loaded once per process."""
    from flowerbed.models.efficientnet_lite import load_pretrained

    return load_pretrained()


def efficientnet_block_maps(
    x: np.ndarray, meta: DatasetMeta, image_size: int, batch_size: int = 64
) -> np.ndarray:
    """EfficientNet-Lite0 output of the last MBConv block, ``(n, 320, h, w)`` float32."""
    net = _efficientnet()
    mean = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
    parts = []
    with torch.no_grad():
        for i in range(0, len(x), batch_size):
            img = (to_image_batch(x[i : i + batch_size], meta, image_size, 1.0) - mean) / std
            h = F.relu6(net._bn0(net._conv_stem(img)))
            for block in net._blocks:
                h = block(h)
            parts.append(h.float())
    return torch.cat(parts).numpy() if parts else np.zeros((0, 320, 1, 1), np.float32)


def cached_block_maps(x: np.ndarray, meta: DatasetMeta, image_size: int) -> np.ndarray:
    """:func:`efficientnet_block_maps`, stored once per rows under the feature cache."""
    key = f"effl0-maps-{image_size}-{meta.name}-{'x'.join(map(str, meta.input_shape))}"
    return cached_array("vlm_features", key, x,
                        lambda: efficientnet_block_maps(x, meta, image_size))


class MapHead(nn.Module):
    """The frozen tail of EfficientNet-Lite0: ``relu6(bn(conv1x1(maps + prompt)))`` pooled."""

    def __init__(self) -> None:
        super().__init__()
        net = _efficientnet()
        self.conv, self.bn = net._conv_head, net._bn1

    def forward(self, maps: torch.Tensor, prompt: torch.Tensor | None = None) -> torch.Tensor:
        """Pooled 1280-d features; ``prompt`` ``(320,)`` is added to every position."""
        h = maps if prompt is None else maps + prompt.view(1, -1, 1, 1)
        return F.relu6(self.bn(self.conv(h))).mean(dim=(2, 3))  # type: ignore[no-any-return]


class TwoTowerBranch:
    """``two_tower`` with CoOp text context and a channel prompt on EfficientNet's last block."""

    visual_dim = 320

    def __init__(self, vlm: VisionLanguageModel) -> None:
        self.vlm = vlm
        self.context_dim = vlm.context_dim
        self.tail = MapHead()
        for q in self.tail.parameters():
            q.requires_grad_(False)
        self.tail.eval()

    def inputs(self, x: np.ndarray, meta: DatasetMeta) -> torch.Tensor:
        """Cached block maps of image rows ``x``."""
        size = self.vlm.recipe.image_size  # type: ignore[attr-defined]
        return torch.as_tensor(cached_block_maps(x, meta, size))

    def text(self, ctx: torch.Tensor, names: Sequence[str]) -> torch.Tensor:
        """Prompted class features (MiniLM + text head)."""
        out: torch.Tensor = self.vlm.prompt_text_features(ctx, names)
        return out

    def image(self, inputs: torch.Tensor, tokens: torch.Tensor | None) -> torch.Tensor:
        """Image features; ``tokens`` ``(n, 320)`` act through their mean."""
        prompt = None if tokens is None else tokens.mean(dim=0)
        out: torch.Tensor = self.vlm.heads.embed_image(  # type: ignore[attr-defined]
            self.tail(inputs, prompt))
        return out


class OpenClipBranch:
    """``open_clip`` ViT with CoOp text context and an additive visual prompt."""

    def __init__(self, vlm: VisionLanguageModel) -> None:
        self.vlm = vlm
        self.context_dim = vlm.context_dim
        self.visual = vlm.model.visual  # type: ignore[attr-defined]
        if not hasattr(self.visual, "_embeds") or not hasattr(self.visual, "_pool"):
            raise NotImplementedError("manipt: visual prompts need an open_clip "
                                      "VisionTransformer image tower (this one is not)")
        self.visual_dim = int(self.visual.class_embedding.shape[-1])

    def inputs(self, x: np.ndarray, meta: DatasetMeta) -> torch.Tensor:
        """Images resized to the model's size and CLIP-normalised."""
        v: Any = self.vlm
        img = to_image_batch(x, meta, v.image_size, 1.0)
        mean = torch.tensor(v.mean).view(1, 3, 1, 1)
        std = torch.tensor(v.std).view(1, 3, 1, 1)
        return (img - mean) / std

    def text(self, ctx: torch.Tensor, names: Sequence[str]) -> torch.Tensor:
        """Prompted class features (the text transformer)."""
        out: torch.Tensor = self.vlm.prompt_text_features(ctx, names)
        return out

    def image(self, inputs: torch.Tensor, tokens: torch.Tensor | None) -> torch.Tensor:
        """ViT features; the mean of ``tokens`` is added to every token after ``ln_pre``."""
        vis = self.visual
        x = vis._embeds(inputs)
        if tokens is not None:
            x = x + tokens.mean(dim=0).to(x.dtype)
        x = vis.transformer(x)
        pooled, _ = vis._pool(x)
        if vis.proj is not None:
            pooled = pooled @ vis.proj
        return F.normalize(pooled.float(), dim=-1)


def build_branch(vlm: VisionLanguageModel) -> TwoTowerBranch | OpenClipBranch:
    """The prompted branch of a ``two_tower``-style or ``open_clip`` VLM."""
    if hasattr(vlm, "heads") and hasattr(vlm, "recipe"):
        return TwoTowerBranch(vlm)
    if hasattr(vlm, "model") and hasattr(vlm.model, "visual"):
        return OpenClipBranch(vlm)
    raise NotImplementedError(f"manipt: no prompted branch for vlm {type(vlm).__name__} "
                              "(supported: two_tower, two_tower_concepts, open_clip)")

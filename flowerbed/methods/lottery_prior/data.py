# SPDX-License-Identifier: Apache-2.0
"""Bundled pictures for zero-shot restoration (Lottery Prior), and their seeded degradations.

Dataset ``skimage_images``: scikit-image's ``skimage.data`` photos, scikit-learn's
sample images (``china``, ``flower``) and matplotlib's ``grace_hopper``, each a
centre crop of ``crop`` pixels area-averaged down to ``size`` pixels, grey or
colour, in ``[0, 1]``. One row per picture (the flattened ``(C, size, size)``
image), label = picture index, ``groups_train`` = picture name, so
``partition: natural_id`` makes every picture its own client (an image owner)
and ``iid`` deals pictures out. Nothing is downloaded: every picture ships
with an installed package.

:func:`degrade` makes the observation a client restores — ``denoise``
(``y = x + n``), ``sr`` (``s``-fold average pooling, then noise) or
``inpaint`` (a keep-mask of exactly ``round(keep · H·W)`` pixels, noise on the
kept ones) — from a seed, so the federated clients and the pooled
``centralized`` client see exactly the same degraded pictures.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import Field, model_validator

from flowerbed.core.registry import Params
from flowerbed.data.base import Dataset, DatasetMeta, DataSourceError, require
from flowerbed.data.extras import register_with_extra

if TYPE_CHECKING:
    from flowerbed.methods.lottery_prior.algorithm import Operator

Task = Literal["denoise", "sr", "inpaint"]

#: scikit-learn's two sample photos and matplotlib's one, beside skimage.data's.
SKLEARN_IMAGES = ("china", "flower")
MATPLOTLIB_IMAGES = ("grace_hopper",)
DEFAULT_IMAGES = (
    "camera", "astronaut", "coffee", "chelsea", "coins", "moon", "brick", "text",
    "china", "flower", "grace_hopper",
)  # fmt: skip


class ImagesParams(Params):
    """Which pictures, how they are cropped and scaled, grey or colour."""

    images: tuple[str, ...] = Field(DEFAULT_IMAGES, min_length=1)
    crop: int = Field(128, ge=2, description="side of the centre crop, in original pixels")
    size: int = Field(64, ge=2, description="side after area-averaging; divides crop")
    grey: bool = Field(True, description="convert colour pictures to grey (else RGB)")

    @model_validator(mode="after")
    def _divides(self) -> ImagesParams:
        if self.crop % self.size:
            raise ValueError(f"size {self.size} must divide crop {self.crop}")
        return self


def load_picture(name: str) -> np.ndarray:
    """A bundled picture as ``uint8`` ``(H, W)`` or ``(H, W, 3)``."""
    if name in SKLEARN_IMAGES:
        from sklearn.datasets import load_sample_image

        return np.asarray(load_sample_image(f"{name}.jpg"))
    if name in MATPLOTLIB_IMAGES:
        import matplotlib.cbook
        from PIL import Image

        fh: Any = matplotlib.cbook.get_sample_data(f"{name}.jpg")
        with fh, Image.open(fh) as im:
            return np.asarray(im.convert("RGB"))
    ski: Any = require("skimage.data", "scikit-image", "skimage_images")
    loader = getattr(ski, name, None)
    if loader is None or name.startswith("_") or not callable(loader):
        raise DataSourceError(
            f"skimage_images: unknown picture {name!r}; use skimage.data names, "
            f"{', '.join(SKLEARN_IMAGES + MATPLOTLIB_IMAGES)}"
        )
    img = np.asarray(loader())
    if img.ndim not in (2, 3) or img.dtype == object:
        raise DataSourceError(f"skimage_images: skimage.data.{name} is not a single picture")
    return img


def prepare(img: np.ndarray, crop: int, size: int, grey: bool, name: str = "") -> np.ndarray:
    """Centre crop, area-average to ``size``, grey or RGB: ``(C, size, size)`` in ``[0, 1]``."""
    from skimage import color, transform, util

    h, w = img.shape[:2]
    if crop > min(h, w):
        raise DataSourceError(
            f"skimage_images: crop {crop} is larger than picture {name!r} ({h}x{w})"
        )
    x = util.img_as_float(img)
    if x.ndim == 3:
        x = x[..., :3]
        x = color.rgb2gray(x) if grey else x
    elif not grey:
        x = np.repeat(x[..., None], 3, axis=-1)
    top, left = (h - crop) // 2, (w - crop) // 2
    x = x[top : top + crop, left : left + crop]
    f = crop // size
    x = transform.downscale_local_mean(x, (f, f) if x.ndim == 2 else (f, f, 1))
    x = np.clip(x, 0.0, 1.0)
    return x[None] if x.ndim == 2 else np.moveaxis(x, -1, 0)


@register_with_extra("skimage_images", ImagesParams, "skimage", "scikit-image")
def skimage_images(params: ImagesParams, *, seed: int) -> Dataset:
    """Bundled pictures (skimage, scikit-learn, matplotlib), one per row, for restoration."""
    del seed  # the pictures are fixed; degradations are seeded by the learner's task
    pics = np.stack([
        prepare(load_picture(n), params.crop, params.size, params.grey, n) for n in params.images
    ])
    shape = tuple(int(v) for v in pics.shape[1:])
    x = pics.reshape(len(pics), -1).astype(np.float32)
    y = np.arange(len(pics), dtype=np.int64)
    meta = DatasetMeta(
        name="skimage_images", task="classification", num_features=x.shape[1],
        num_classes=len(pics), class_names=params.images, input_shape=shape,
        source="skimage.data, sklearn.datasets.load_sample_image, matplotlib sample_data "
        f"(centre {params.crop}px crops averaged to {params.size}px)",
        license="per picture, see skimage.data / scikit-learn / matplotlib docs",
    )
    return Dataset(x, y, x[:0], y[:0], meta, groups_train=np.asarray(params.images))


# --------------------------------------------------------------------------- degradations
@dataclass(frozen=True)
class Observation:
    """What a client holds: the degraded picture ``y``, the operator and the noise level."""

    y: np.ndarray
    op: Operator
    sigma: float


def degrade(
    clean: np.ndarray, task: Task, sigma: float, seed: int, scale: int = 2, keep: float = 0.5
) -> Observation:
    """Seeded degradation of ``clean`` ``(C, H, W)``; ``sigma`` on the ``[0, 1]`` scale."""
    import torch

    from flowerbed.methods.lottery_prior.algorithm import Operator

    gen = np.random.default_rng(seed)
    _, h, w = clean.shape
    if task == "denoise":
        op = Operator("identity")
    elif task == "sr":
        if h % scale or w % scale:
            raise ValueError(f"task sr: image {h}x{w} is not divisible by scale {scale}")
        op = Operator("downsample", scale=scale)
    else:
        mask = np.zeros(h * w, dtype=bool)
        mask[gen.permutation(h * w)[: round(keep * h * w)]] = True
        op = Operator("mask", keep=mask.reshape(h, w))
    ax = op.apply(torch.as_tensor(clean, dtype=torch.float64)).numpy()
    noisy = ax + sigma * gen.standard_normal(ax.shape)
    if op.keep is not None:
        noisy = noisy * op.keep
    return Observation(noisy, op, sigma)

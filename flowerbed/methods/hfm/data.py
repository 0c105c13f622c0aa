"""HFM's controlled set: hierarchical "image" features with a knob for path entanglement.

``supers`` super-classes of ``per_super`` classes each (5 x 10 by default, the
spec's hierarchical mixture). Super-class
centres ``s_k`` are seeded unit vectors; class centres
``u_c = normalise(s_k + sibling * g_c)`` with ``g_c ~ N(0, I/dim)``, so
``sibling`` sets how far apart the classes of one super-class are: small values
crowd siblings together and their image-to-text paths entangle. Image features
are ``normalise(u_c + noise * e / sqrt(dim))``; the matching text feature of
class ``c`` (the ``hfm_hierarchy`` vlm, :mod:`flowerbed.methods.hfm.model_vlm`) is
``normalise(u_c + text_noise * r_c / sqrt(dim))``, which sets how good zero-shot
is. Class names ``h<world>-s<k>-c<j>`` tell the vlm which centre to rebuild.
(The spec also passes the inputs through a fixed random MLP; that is left out:
the features here are already on the unit sphere, like CLIP's.)
"""

from __future__ import annotations

import re

import numpy as np
from pydantic import Field

from flowerbed.core.registry import Params, register
from flowerbed.core.seeds import rng
from flowerbed.data.base import Dataset, DatasetMeta

_NAME = re.compile(r"h(\d+)-s(\d+)-c(\d+)")


def class_name(world: int, k: int, j: int) -> str:
    """Name of class ``j`` of super-class ``k`` (parsed back by :func:`parse_name`)."""
    return f"h{world}-s{k}-c{j}"


def parse_name(text: str) -> tuple[int, int, int] | None:
    """``(world, super, class)`` named in ``text``, or ``None``."""
    found = _NAME.search(text)
    return None if found is None else (int(found[1]), int(found[2]), int(found[3]))


def class_centre(world: int, k: int, j: int, dim: int, sibling: float) -> np.ndarray:
    """Unit class centre ``normalise(s_k + sibling g_{k,j})``."""
    s = rng(world, "hfm-hierarchy", "super", k).standard_normal(dim)
    g = rng(world, "hfm-hierarchy", "class", k, j).standard_normal(dim) / np.sqrt(dim)
    u = s / np.linalg.norm(s) + sibling * g
    return u / np.linalg.norm(u)


def text_feature(world: int, k: int, j: int, dim: int, sibling: float, text_noise: float
                 ) -> np.ndarray:
    """Unit text feature of a class: ``normalise(u_c + text_noise r_c / sqrt(dim))``."""
    r = rng(world, "hfm-hierarchy", "text", k, j).standard_normal(dim) / np.sqrt(dim)
    z = class_centre(world, k, j, dim, sibling) + text_noise * r
    return z / np.linalg.norm(z)


class HierarchyParams(Params):
    """Hierarchy sizes, the entanglement knob ``sibling``, noise and split sizes."""

    world: int = Field(0, ge=0, description="seed of the centres (shared with the vlm)")
    supers: int = Field(5, ge=1)
    per_super: int = Field(10, ge=1, description="classes per super-class")
    dim: int = Field(64, ge=2)
    sibling: float = Field(0.5, ge=0, description="spread of classes within a super-class; "
                           "small = entangled")
    noise: float = Field(1.2, ge=0, description="within-class noise (norm, about)")
    train_per_class: int = Field(32, ge=1)
    test_per_class: int = Field(40, ge=1)


@register("dataset", "hfm_hierarchy", params=HierarchyParams)
def hfm_hierarchy(params: HierarchyParams, *, seed: int) -> Dataset:
    """Hierarchical unit-norm image features (supers x per_super classes), for HFM."""
    pairs = [(k, j) for k in range(params.supers) for j in range(params.per_super)]
    centres = np.stack([class_centre(params.world, k, j, params.dim, params.sibling)
                        for k, j in pairs])

    def draw(per_class: int, split: str) -> tuple[np.ndarray, np.ndarray]:
        y = np.repeat(np.arange(len(pairs)), per_class)
        e = rng(seed, "hfm-hierarchy", split).standard_normal((len(y), params.dim))
        x = centres[y] + params.noise * e / np.sqrt(params.dim)
        return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32), y

    (x_tr, y_tr), (x_te, y_te) = draw(params.train_per_class, "train"), \
        draw(params.test_per_class, "test")
    meta = DatasetMeta(
        name="hfm_hierarchy", task="classification", num_features=params.dim,
        num_classes=len(pairs),
        class_names=tuple(class_name(params.world, k, j) for k, j in pairs),
        source="synthetic hierarchical CLIP-like features (pair with the hfm_hierarchy vlm)",
        license="generated",
    )
    return Dataset(x_tr, y_tr.astype(np.int64), x_te, y_te.astype(np.int64), meta)


# --- the few-shot protocol: validation rows and augmented views ---------------------------


def validation_rows(y: np.ndarray, num_classes: int, shots: int, exclude: np.ndarray,
                    seed: int, cap: int = 4) -> np.ndarray:
    """``min(shots, cap)`` rows of each class of ``y`` outside ``exclude`` (the shots).

    The few-shot validation split of CoOp's protocol, which FMA's code keeps (a
    ``min(num_shots, 4)``-shot draw from the training pool): it is drawn from the
    same pool as the shots, never from the test rows, and shares no row with
    ``exclude``. Seeded per class.
    """
    taken = np.zeros(len(y), dtype=bool)
    taken[np.asarray(exclude, dtype=np.int64)] = True
    per_class = min(shots, cap)
    rows = []
    for c in range(num_classes):
        pool = np.flatnonzero((y == c) & ~taken)
        if len(pool) < per_class:
            raise ValueError(f"validation needs {per_class} rows of class {c} outside the "
                             f"shots; the pool has {len(pool)}")
        rows.append(rng(seed, "hfm", "validation", c).choice(pool, per_class, replace=False))
    return np.sort(np.concatenate(rows)) if rows else np.zeros(0, dtype=np.int64)


def crop_box(gen: np.random.Generator, height: int, width: int,
             scale: tuple[float, float], ratio: tuple[float, float]) -> tuple[int, int, int, int]:
    """``(top, left, h, w)`` of a random-resized crop: area share in ``scale``, aspect in ``ratio``.

    The usual rule: up to 10 draws of (area, log-uniform aspect) until the box fits,
    else the whole image.
    """
    area = height * width
    for _ in range(10):
        target = area * gen.uniform(*scale)
        aspect = float(np.exp(gen.uniform(np.log(ratio[0]), np.log(ratio[1]))))
        w = round(float(np.sqrt(target * aspect)))
        h = round(float(np.sqrt(target / aspect)))
        if 0 < w <= width and 0 < h <= height:
            return int(gen.integers(0, height - h + 1)), int(gen.integers(0, width - w + 1)), h, w
    return 0, 0, height, width


def augment_views(x: np.ndarray, shape: tuple[int, int], views: int, seed: int,
                  scale: tuple[float, float] = (0.5, 1.0),
                  ratio: tuple[float, float] = (3 / 4, 4 / 3), flip: float = 0.5) -> np.ndarray:
    """``(views, N, H*W)``: random-resized crops (bilinear back to ``shape``) and flips.

    The training augmentation of CLIP few-shot adapters that FMA re-applies every
    epoch; here ``views`` crops per image are drawn once (seeded by ``seed`` and
    the view index) and a training epoch samples one of them per image
    (:func:`flowerbed.methods.hfm.algorithm.train`).
    """
    import torch
    from torch.nn import functional as F

    height, width = shape
    imgs = np.asarray(x, dtype=np.float32).reshape(len(x), height, width)
    out = np.empty((views, len(x), height * width), dtype=np.float32)
    for v in range(views):
        gen = rng(seed, "hfm", "augment", v)
        for i, img in enumerate(imgs):
            top, left, h, w = crop_box(gen, height, width, scale, ratio)
            patch = torch.as_tensor(img[top:top + h, left:left + w])[None, None]
            resized = F.interpolate(patch, size=(height, width), mode="bilinear",
                                    align_corners=False)[0, 0].numpy()
            if gen.uniform() < flip:
                resized = resized[:, ::-1]
            out[v, i] = resized.reshape(-1)
    return out

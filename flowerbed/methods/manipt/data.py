"""Procedurally rendered compositional concepts (shape x colour) for ManiPT's settings.

ManiPT (arXiv 2602.19198) is evaluated on base-to-novel, few-shot, cross-dataset
and domain-generalisation splits of CLIP's downstream datasets; none ships
offline, and the default ``two_tower`` VLM saw eight concepts only, so its
unseen-class accuracy is noise. This module renders 32x32 RGB images of
``COLOURS x SHAPES`` (64 classes named "red circle", ...), with seeded size,
position, rotation, colour jitter and background, in three styles:

- ``clean``: a flat dark background (the style the VLM's heads pre-train on);
- ``textured``: a noisy, tinted background and a striped fill (the downstream
  "dataset" prompt tuning adapts to);
- ``outline``: only the shape's contour on a noisy background (a shifted domain).

``pretrain_holdout`` names the combinations the VLM's pre-training leaves out
(each shape loses two colours and each colour two shapes), so zero-shot accuracy
on them measures compositional transfer to unseen classes. Pure numpy: rows are
a pure function of ``(seed, class, index, style)``.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from flowerbed.core.registry import Params, register
from flowerbed.core.seeds import rng
from flowerbed.data.base import Dataset, DatasetMeta

SIZE = 32
COLOURS: dict[str, tuple[float, float, float]] = {
    "red": (0.90, 0.10, 0.10), "green": (0.10, 0.70, 0.15), "blue": (0.15, 0.25, 0.95),
    "yellow": (0.95, 0.90, 0.10), "purple": (0.55, 0.15, 0.80), "orange": (1.00, 0.55, 0.05),
    "pink": (1.00, 0.55, 0.80), "white": (0.95, 0.95, 0.95),
}
SHAPES: tuple[str, ...] = (
    "circle", "square", "triangle", "cross", "ring", "diamond", "star", "heart",
)
Style = Literal["clean", "textured", "outline"]
STYLES: tuple[Style, ...] = ("clean", "textured", "outline")


def class_names() -> tuple[str, ...]:
    """``"<colour> <shape>"`` for every colour (outer) and shape (inner)."""
    return tuple(f"{c} {s}" for c in COLOURS for s in SHAPES)


def pretrain_holdout() -> tuple[str, ...]:
    """The 16 combinations with ``(colour index + shape index) % 4 == 0``."""
    return tuple(f"{c} {s}" for i, c in enumerate(COLOURS) for j, s in enumerate(SHAPES)
                 if (i + j) % 4 == 0)


def shape_mask(shape: str, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Boolean mask of ``shape`` in normalised coordinates (unit radius, centred)."""
    r = np.hypot(u, v)
    theta = np.arctan2(v, u)
    masks = {
        "circle": r <= 1.0,
        "square": np.maximum(abs(u), abs(v)) <= 0.8,
        "triangle": (v >= -0.7) & (v <= 0.9 - 1.6 * abs(u) / 0.95),
        "cross": ((abs(u) <= 0.3) | (abs(v) <= 0.3)) & (np.maximum(abs(u), abs(v)) <= 1.0),
        "ring": (r <= 1.0) & (r >= 0.55),
        "diamond": abs(u) + abs(v) <= 1.0,
        "star": r <= 0.45 + 0.55 * np.abs(np.cos(2.5 * (theta + np.pi / 2))) ** 3,
        "heart": ((1.2 * u) ** 2 + (1.2 * v) ** 2 - 1) ** 3 - (1.2 * u) ** 2 * (-1.2 * v) ** 3
        <= 0,
    }
    if shape not in masks:
        raise ValueError(f"unknown shape {shape!r}; known: {', '.join(SHAPES)}")
    return masks[shape]


def render(colour: str, shape: str, style: Style, gen: np.random.Generator) -> np.ndarray:
    """One ``(32, 32, 3)`` image in ``[0, 1]``: seeded placement, jitter and background."""
    yy, xx = np.mgrid[0:SIZE, 0:SIZE].astype(np.float64) + 0.5
    radius = gen.uniform(7.0, 12.0)
    cx, cy = gen.uniform(radius, SIZE - radius, size=2)
    angle = gen.uniform(-0.4, 0.4)
    du, dv = (xx - cx) / radius, (yy - cy) / radius
    u = np.cos(angle) * du + np.sin(angle) * dv
    v = -np.sin(angle) * du + np.cos(angle) * dv
    mask = shape_mask(shape, u, v)
    rgb = np.clip(np.asarray(COLOURS[colour]) + gen.normal(0, 0.05, 3), 0, 1)
    if style == "clean":
        img = np.full((SIZE, SIZE, 3), gen.uniform(0.0, 0.15))
        img[mask] = rgb
    else:
        tint = gen.uniform(0.1, 0.45, 3)
        img = np.clip(tint + gen.normal(0, 0.12, (SIZE, SIZE, 3)), 0, 1)
        if style == "textured":
            period = gen.uniform(3.0, 5.0)
            stripes = np.sin(2 * np.pi * (xx + yy) / period) > -0.3
            img[mask & stripes] = rgb
            img[mask & ~stripes] = 0.5 * rgb
        else:
            inner = shape_mask(shape, u * 1.25, v * 1.25)
            img[mask & ~inner] = rgb
    return img.astype(np.float32)


def render_rows(
    names: tuple[str, ...], per_class: int, style: Style, seed: int, label: str
) -> tuple[np.ndarray, np.ndarray]:
    """``per_class`` flattened images of each ``"<colour> <shape>"`` in ``names``, labels."""
    rows, labels = [], []
    for c, name in enumerate(names):
        colour, shape = name.split(" ", 1)
        for i in range(per_class):
            rows.append(render(colour, shape, style, rng(seed, "concepts", label, name, i)))
            labels.append(c)
    x = np.stack(rows).reshape(len(rows), -1) if rows else np.zeros((0, SIZE * SIZE * 3))
    return x.astype(np.float32), np.asarray(labels, dtype=np.int64)


def concepts_meta(names: tuple[str, ...], style: str) -> DatasetMeta:
    """Metadata of a rendered-concepts dataset (input shape ``(32, 32, 3)``)."""
    return DatasetMeta(
        name=f"concepts_{style}", task="classification", num_features=SIZE * SIZE * 3,
        num_classes=len(names), class_names=names, input_shape=(SIZE, SIZE, 3),
        source="rendered procedurally (flowerbed.methods.manipt.data)", license="MIT",
    )


class ConceptsParams(Params):
    """Style, rows per class and the image seed of the rendered-concepts dataset."""

    style: Style = Field("textured", description="clean | textured | outline")
    train_per_class: int = Field(24, ge=1, description="training rows (the few-shot pool)")
    test_per_class: int = Field(20, ge=1)
    image_seed: int = Field(
        1, description="seed of the rendered images (the VLM pre-trains on seed 0)")


@register("dataset", "concepts", params=ConceptsParams)
def concepts(params: ConceptsParams, *, seed: int) -> Dataset:
    """Rendered shape x colour images, 64 classes ("red circle", ...), three styles."""
    del seed  # the images are fixed by image_seed, so every run seed sees the same rows
    names = class_names()
    x_tr, y_tr = render_rows(names, params.train_per_class, params.style, params.image_seed,
                             "train")
    x_te, y_te = render_rows(names, params.test_per_class, params.style, params.image_seed,
                             "test")
    return Dataset(x_tr, y_tr, x_te, y_te, concepts_meta(names, params.style))


__all__ = ["COLOURS", "SHAPES", "STYLES", "ConceptsParams", "class_names", "concepts",
           "concepts_meta", "pretrain_holdout", "render", "render_rows", "shape_mask"]

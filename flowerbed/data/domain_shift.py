"""Per-client domain shift: input transforms in image or feature space, with a severity knob.

``domain_shift`` splits rows IID and gives each client a domain; the joint
``label_and_domain_shift`` splits rows by Dirichlet label skew instead. A
domain is one transform with a magnitude drawn per domain:

- images (``DatasetMeta.input_shape`` is 2-D or 3-D): ``rotation`` (up to
  60 degrees), ``contrast`` (down to x0.2 around each image's mean), ``noise``
  (Gaussian, up to 0.5 data std) or ``blur`` (Gaussian, sigma up to
  max(1.5, H/14) px);
  clients cycle through ``kinds``;
- feature vectors: a random affine map ``x @ (I + s G / sqrt(d)) + s b``.

Magnitudes scale linearly with ``severity`` in ``[0, 1]`` (times a per-domain
draw in ``[0.5, 1]``); ``severity = 0`` is exactly the identity. Transforms are
pure functions of their rows (noise is seeded by the rows' bytes), so a client's
data is the same in every process.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from pydantic import Field

from flowerbed.core.registry import Params, register
from flowerbed.core.seeds import derive_seed, rng
from flowerbed.data.base import Dataset, Partition, Transform
from flowerbed.data.partitioners import (
    DirichletParams,
    IidParams,
    PartitionError,
    dirichlet,
    iid,
)

ImageKind = Literal["rotation", "contrast", "noise", "blur"]
IMAGE_KINDS: tuple[ImageKind, ...] = ("rotation", "contrast", "noise", "blur")


@dataclass(frozen=True)
class ImageShift:
    """One image transform on flattened rows; ``magnitude`` at its neutral value is a no-op.

    Neutral values: rotation 0 (degrees), contrast 1 (factor), noise 0 (std),
    blur 0 (sigma in pixels).

    Examples
    --------
    >>> x = np.arange(8, dtype=np.float32).reshape(2, 4)
    >>> bool((ImageShift((2, 2), "contrast", 0.5)(x) == [[0.75, 1.25, 1.75, 2.25],
    ...                                                [4.75, 5.25, 5.75, 6.25]]).all())
    True
    """

    shape: tuple[int, ...]
    kind: ImageKind
    magnitude: float
    seed: int = 0

    def is_identity(self) -> bool:
        """Whether the transform leaves every input unchanged."""
        return self.magnitude == (1.0 if self.kind == "contrast" else 0.0)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """Transform rows ``x`` of shape ``(n, prod(shape))``; same shape and dtype out."""
        if self.is_identity() or len(x) == 0:
            return x
        from scipy import ndimage

        img = x.reshape(len(x), *self.shape).astype(np.float64)
        if self.kind == "rotation":
            # Corners uncovered by the rotation take each image's border (background) value.
            edge = border_value(img)
            img = edge + ndimage.rotate(img - edge, self.magnitude, axes=(1, 2), reshape=False,
                                        order=1, mode="constant", cval=0.0)
        elif self.kind == "contrast":
            mean = img.mean(axis=tuple(range(1, img.ndim)), keepdims=True)
            img = mean + self.magnitude * (img - mean)
        elif self.kind == "noise":
            digest = hashlib.blake2b(np.ascontiguousarray(x).tobytes(), digest_size=8).hexdigest()
            img = img + self.magnitude * rng(self.seed, "noise", digest).standard_normal(img.shape)
        else:
            sigma = (0, self.magnitude, self.magnitude) + (0,) * (img.ndim - 3)
            img = ndimage.gaussian_filter(img, sigma=sigma, mode="nearest")
        return img.reshape(x.shape).astype(x.dtype)

    def describe(self) -> str:
        """Short human-readable form, e.g. ``rotation +23.4 deg``."""
        text = {
            "rotation": f"{self.magnitude:+.1f} deg",
            "contrast": f"x{self.magnitude:.2f}",
            "noise": f"std {self.magnitude:.3f}",
            "blur": f"sigma {self.magnitude:.2f}px",
        }[self.kind]
        return f"{self.kind} {text}"


def border_value(img: np.ndarray) -> np.ndarray:
    """Median of each image's border pixels (per channel), shaped to broadcast on ``img``."""
    edges = [img[:, 0], img[:, -1], img[:, :, 0], img[:, :, -1]]
    value = np.median(np.concatenate(edges, axis=1), axis=1)
    return value.reshape(len(img), 1, 1, *value.shape[1:])


@dataclass(frozen=True, eq=False)
class AffineShift:
    """Feature-space domain: ``x @ matrix + offset`` (``matrix=None`` is the identity)."""

    matrix: np.ndarray | None
    offset: np.ndarray | None
    severity: float = 0.0

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """Map rows ``x`` of shape ``(n, d)``; same shape and dtype out."""
        if self.matrix is None or len(x) == 0:
            return x
        return (x @ self.matrix + self.offset).astype(x.dtype)

    def describe(self) -> str:
        """Short human-readable form."""
        return "identity" if self.matrix is None else f"affine severity {self.severity:.2f}"


def is_image(data: Dataset) -> bool:
    """Whether rows are flattened images (input_shape 2-D/3-D matching num_features)."""
    shape = data.meta.input_shape
    return len(shape) in (2, 3) and int(np.prod(shape)) == data.meta.num_features


def image_shift(data: Dataset, kind: ImageKind, severity: float, seed: int) -> ImageShift:
    """One domain's image transform; magnitude = severity x U(0.5, 1) x the kind's scale."""
    gen = rng(seed, "magnitude")
    strength = severity * gen.uniform(0.5, 1.0)
    shape = data.meta.input_shape
    magnitude = {
        "rotation": strength * 60.0 * gen.choice([-1.0, 1.0]),
        "contrast": 1.0 - 0.8 * strength,
        "noise": strength * 0.5 * float(data.x_train.std()),
        "blur": strength * max(1.5, shape[0] / 14.0),
    }[kind]
    return ImageShift(tuple(shape), kind, float(magnitude), seed)


def affine_shift(data: Dataset, severity: float, seed: int) -> AffineShift:
    """One domain's random affine map; ``severity = 0`` gives the identity."""
    if severity == 0:
        return AffineShift(None, None)
    gen = rng(seed, "affine")
    d = data.meta.num_features
    matrix = np.eye(d) + severity * gen.standard_normal((d, d)) / np.sqrt(d)
    scale = data.x_train.std(axis=0) if len(data.x_train) else np.ones(d)
    offset = severity * gen.standard_normal(d) * scale
    return AffineShift(matrix.astype(np.float32), offset.astype(np.float32), severity)


class DomainShiftParams(Params):
    """Per-client domains: severity, image transform kinds, space, number of domains."""

    severity: float = Field(0.5, ge=0, le=1, description="0 = identity, 1 = strongest")
    kinds: tuple[ImageKind, ...] = Field(IMAGE_KINDS, min_length=1,
                                         description="image transforms clients cycle through")
    space: Literal["auto", "image", "features"] = Field(
        "auto", description="auto: image transforms when input_shape is an image"
    )
    num_domains: int | None = Field(
        None, ge=1, description="clients share domains round-robin (default: one per client)"
    )

    def scenario_problems(self, scenario: Any) -> list[str]:
        """More domains than clients would leave some domain unused (known before any data)."""
        if self.num_domains is not None and self.num_domains > scenario.num_clients:
            return [f"num_domains: {self.num_domains} domains for num_clients="
                    f"{scenario.num_clients}: some would have no client; lower num_domains"]
        return []


def domain_transforms(
    params: DomainShiftParams, data: Dataset, num_clients: int, seed: int
) -> tuple[list[Transform | None], list[str]]:
    """Each client's transform and description; client ``i`` is in domain ``i % D``."""
    image = params.space == "image" or (params.space == "auto" and is_image(data))
    if image and not is_image(data):
        raise PartitionError(
            f"partition.space=image needs image rows; {data.meta.name!r} has input_shape "
            f"{data.meta.input_shape or '()'} (use space: features)"
        )
    count = params.num_domains or num_clients
    shifts: list[ImageShift | AffineShift] = []
    for d in range(count):
        dseed = derive_seed(seed, "domain", d)
        kind = params.kinds[d % len(params.kinds)]
        shifts.append(image_shift(data, kind, params.severity, dseed) if image
                      else affine_shift(data, params.severity, dseed))
    chosen = [shifts[pid % count] for pid in range(num_clients)]
    names = [f"d{pid % count}: {s.describe()}" for pid, s in enumerate(chosen)]
    return list(chosen), names


@register("partition", "domain_shift", params=DomainShiftParams)
def domain_shift(
    params: DomainShiftParams, data: Dataset, num_clients: int, *, seed: int
) -> Partition:
    """IID rows, each client in its own domain (image or affine transform, severity knob)."""
    rows = iid(IidParams(), data, num_clients, seed=seed)
    transforms, names = domain_transforms(params, data, num_clients, seed)
    return Partition(rows.indices, transforms=transforms, domains=names)


class LabelDomainParams(DomainShiftParams):
    """Dirichlet label skew (``alpha``) combined with per-client domains."""

    alpha: float = Field(0.5, gt=0, description="concentration; small = more label skew")
    min_partition_size: int = Field(10, ge=0)
    self_balancing: bool = False


@register("partition", "label_and_domain_shift", params=LabelDomainParams)
def label_and_domain_shift(
    params: LabelDomainParams, data: Dataset, num_clients: int, *, seed: int
) -> Partition:
    """Joint shift: Dirichlet(alpha) label skew x per-client domain transform."""
    label_params = DirichletParams(
        alpha=params.alpha, min_partition_size=params.min_partition_size,
        self_balancing=params.self_balancing,
    )
    rows = dirichlet(label_params, data, num_clients, seed=seed)
    transforms, names = domain_transforms(params, data, num_clients, seed)
    return Partition(rows.indices, transforms=transforms, domains=names)

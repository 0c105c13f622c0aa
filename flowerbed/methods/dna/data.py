"""Real-vs-generated images for DNA (arXiv 2601.22515), with fakes made here.

No set of AI-generated images can be had offline, so the fakes come from generators
trained locally on the real images (``flowerbed pretrain dna_generator``, in
:mod:`flowerbed.methods.dna.model_generators`): a conditional convolutional VAE, an
autoencoder with a transposed-convolution decoder (reconstructions, checkerboard
artefacts), a small conditional flow-matching model, and a class-conditional
PCA-Gaussian sampler. Every image, real or fake, then goes through random
post-processing (JPEG at a random quality, down-and-up resizing), so that neither
compression nor blur alone tells the classes apart; the test split can also be
re-compressed with one heavy JPEG quality.

Real images (28x28 gray, values in [0, 1]): Fashion-MNIST from Debian's
``dataset-fashion-mnist`` or patches of scikit-image's bundled pictures (the
semantic class is the garment or the picture). Each source is split three ways, so
no generator ever trained on, or reconstructs, an image the task uses as real:

- ``generator``: what the generators train on (Fashion-MNIST train rows; patches from
  the top 60% of each picture);
- ``task``: the real images of the task (test rows 0-4999; the next 20% band);
- ``reconstruct``: what the autoencoder family reconstructs (test rows 5000-9999;
  the bottom band).

Labels are composite: ``y = source * S + semantic`` with source 0 = real, then the
seen generators, then the unseen ones; ``class_names`` are ``"<source>|<class>"`` with
sources ``real``, ``seen:<family>`` and ``unseen:<family>``
(:func:`label_parts` decodes them). Training rows hold reals and seen fakes only.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field, model_validator

from flowerbed.core.registry import Params, register
from flowerbed.core.seeds import rng
from flowerbed.data.base import Dataset, DatasetMeta, DataSourceError, require
from flowerbed.data.image_data import (
    FASHION_CLASSES,
    FASHION_DIR,
    SKIMAGE_DEFAULT,
    _fashion_file,
    _gray,
    read_idx,
    sample_patches,
)

Source = Literal["fashion_mnist", "skimage_patches"]
Family = Literal["vae", "tconv_ae", "flow", "pca"]
Part = Literal["generator", "task", "reconstruct"]
FAMILIES: tuple[str, ...] = ("vae", "tconv_ae", "flow", "pca")
SIZE = 28
#: Rows of the Fashion-MNIST test split that are the task's real images.
FASHION_TASK_ROWS = 5000
#: Bands (fractions of picture height) of the three skimage parts.
PATCH_BANDS: dict[str, tuple[float, float]] = {
    "generator": (0.0, 0.6), "task": (0.6, 0.8), "reconstruct": (0.8, 1.0)}


def semantic_names(source: str) -> tuple[str, ...]:
    """Names of the semantic classes of a real-image source."""
    return FASHION_CLASSES if source == "fashion_mnist" else SKIMAGE_DEFAULT


def real_images(source: str, part: str, count: int | None = None, seed: int = 0,
                path: str = FASHION_DIR) -> tuple[np.ndarray, np.ndarray]:
    """``(images (n, 28, 28) float32 in [0, 1], semantic classes)`` of one part of a source.

    Fashion-MNIST parts are fixed row ranges (``count`` takes the first rows);
    skimage patches are drawn at random positions of their band, ``count`` per
    picture class in total (seeded).
    """
    if source == "fashion_mnist":
        folder = Path(path)
        split = "train" if part == "generator" else "t10k"
        x = read_idx(_fashion_file(folder, f"{split}-images-idx3-ubyte"))
        y = read_idx(_fashion_file(folder, f"{split}-labels-idx1-ubyte")).astype(np.int64)
        rows = {"generator": slice(0, None), "task": slice(0, FASHION_TASK_ROWS),
                "reconstruct": slice(FASHION_TASK_ROWS, None)}[part]
        x, y = x[rows][:count], y[rows][:count]
        return (x / np.float32(255)).astype(np.float32), y
    if source != "skimage_patches":
        raise DataSourceError(f"dna: unknown real-image source {source!r}")
    ski = require("skimage", "scikit-image", "dna_fakes")
    for sub in ("data", "color", "util"):
        require(f"skimage.{sub}", "scikit-image", "dna_fakes")
    per = max(1, (count or 3000) // len(SKIMAGE_DEFAULT))
    xs, ys = [], []
    for c, name in enumerate(SKIMAGE_DEFAULT):
        img = _gray(ski, name)
        lo, hi = PATCH_BANDS[part]
        band = (int(lo * img.shape[0]), int(hi * img.shape[0]))
        xs.append(sample_patches(img, SIZE, per, band, rng(seed, "dna", "patch", part, name)))
        ys.append(np.full(per, c, dtype=np.int64))
    return np.concatenate(xs).astype(np.float32), np.concatenate(ys)


# --------------------------------------------------------------------------- post-processing


def jpeg(img: np.ndarray, quality: int) -> np.ndarray:
    """A gray image in [0, 1] after one JPEG round trip at ``quality`` (Pillow)."""
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.round(np.clip(img, 0, 1) * 255).astype(np.uint8)).save(
        buf, format="JPEG", quality=int(quality))
    buf.seek(0)
    with Image.open(buf) as im:
        return np.asarray(im, dtype=np.float32) / 255.0


def resize_round_trip(img: np.ndarray, scale: float) -> np.ndarray:
    """Bilinear down to ``scale`` of the side and back up (a blur with aliasing)."""
    from PIL import Image

    side = img.shape[0]
    small = max(2, round(side * scale))
    im = Image.fromarray(np.clip(img, 0, 1).astype(np.float32))  # mode F
    im = im.resize((small, small), Image.Resampling.BILINEAR)
    return np.asarray(im.resize((side, side), Image.Resampling.BILINEAR), dtype=np.float32)


class PostProcess(Params):
    """Random post-processing applied to every image of both classes."""

    jpeg_prob: float = Field(0.5, ge=0, le=1)
    jpeg_quality: tuple[int, int] = Field((60, 95), description="uniform range of JPEG quality")
    resize_prob: float = Field(0.5, ge=0, le=1)
    resize_scale: tuple[float, float] = Field((0.6, 0.9), description="range of the down-scale")

    @model_validator(mode="after")
    def _ranges(self) -> PostProcess:
        lo, hi = self.jpeg_quality
        if not 1 <= lo <= hi <= 100:
            raise ValueError(f"jpeg_quality must satisfy 1 <= low <= high <= 100, got {lo, hi}")
        s_lo, s_hi = self.resize_scale
        if not 0 < s_lo <= s_hi <= 1:
            raise ValueError(f"resize_scale must satisfy 0 < low <= high <= 1, got {s_lo, s_hi}")
        return self


def postprocess(images: np.ndarray, p: PostProcess, gen: np.random.Generator) -> np.ndarray:
    """Each image: resize round trip with ``resize_prob``, then JPEG with ``jpeg_prob``."""
    out = np.empty_like(images, dtype=np.float32)
    for i, img in enumerate(images):
        cur = np.asarray(img, dtype=np.float32)
        if gen.random() < p.resize_prob:
            cur = resize_round_trip(cur, gen.uniform(*p.resize_scale))
        if gen.random() < p.jpeg_prob:
            cur = jpeg(cur, int(gen.integers(p.jpeg_quality[0], p.jpeg_quality[1] + 1)))
        out[i] = cur
    return out


# --------------------------------------------------------------------------- the dataset


class DnaFakesParams(Params):
    """Real source, which generator families are seen in training and which only in test."""

    source: Source = "fashion_mnist"
    seen: tuple[Family, ...] = Field(("vae",), min_length=1,
                                     description="generators whose fakes are in training rows")
    unseen: tuple[Family, ...] = Field(("tconv_ae", "flow", "pca"),
                                       description="generators held out: test rows only")
    train_per_class: int = Field(80, ge=2, description="real and fake training rows, each")
    test_per_class: int = Field(500, ge=1, description="test reals, and test fakes per generator")
    post: PostProcess = PostProcess()
    test_jpeg: int | None = Field(None, ge=1, le=100,
                                  description="re-compress every test image at this quality")
    generator: dict[str, Any] = Field(
        default_factory=dict,
        description="overrides of the dna_generator pretrain parameters (e.g. steps)")
    path: str = Field(FASHION_DIR, description="Fashion-MNIST folder")

    @model_validator(mode="after")
    def _disjoint(self) -> DnaFakesParams:
        both = set(self.seen) & set(self.unseen)
        if both:
            raise ValueError(f"generators {sorted(both)} are both seen and unseen")
        if len(set(self.seen)) != len(self.seen) or len(set(self.unseen)) != len(self.unseen):
            raise ValueError("seen and unseen must not repeat a generator")
        return self


@dataclass(frozen=True)
class LabelParts:
    """What a composite ``dna_fakes`` label means."""

    sources: tuple[str, ...]
    semantic: tuple[str, ...]

    @property
    def num_semantic(self) -> int:
        """Semantic classes ``S``."""
        return len(self.semantic)

    def source(self, y: np.ndarray) -> np.ndarray:
        """Source index of each label (0 = real)."""
        return np.asarray(y) // self.num_semantic

    def fake(self, y: np.ndarray) -> np.ndarray:
        """1 for generated images, 0 for real ones."""
        return (self.source(y) > 0).astype(np.int64)

    def semantic_class(self, y: np.ndarray) -> np.ndarray:
        """Semantic class of each label."""
        return np.asarray(y) % self.num_semantic

    def generators(self, kind: str) -> list[int]:
        """Source indices of the ``seen`` or ``unseen`` generators."""
        return [i for i, s in enumerate(self.sources) if s.startswith(kind + ":")]


def label_parts(meta: DatasetMeta) -> LabelParts:
    """Decode ``dna_fakes`` class names ``"<source>|<class>"``; one-line error otherwise."""
    names = meta.class_names
    if not names or any("|" not in n for n in names):
        raise ValueError(f"DNA needs the dna_fakes dataset (labels '<source>|<class>'); "
                         f"dataset {meta.name!r} has other labels")
    sources = tuple(dict.fromkeys(n.split("|", 1)[0] for n in names))
    semantic = tuple(dict.fromkeys(n.split("|", 1)[1] for n in names))
    if sources[0] != "real" or len(names) != len(sources) * len(semantic):
        raise ValueError(f"dataset {meta.name!r}: class names are not a real/generator x "
                         "class grid")
    return LabelParts(sources, semantic)


def generator_bank(family: str, source: str, overrides: dict[str, Any], path: str
                   ) -> tuple[np.ndarray, np.ndarray]:
    """``(images, semantic classes)`` of a trained generator, built once (pretrain target)."""
    from flowerbed.core.artefacts import ensure_artefact, target

    t = target("dna_generator")
    try:
        params = t.params.model_validate({**overrides, "family": family, "source": source,
                                          "data_path": path})
    except ValueError as exc:
        first = str(exc).splitlines()
        raise ValueError(f"dataset.generator: {' '.join(first[:3])}") from None
    with np.load(ensure_artefact("dna_generator", params)) as blob:
        return blob["images"].astype(np.float32) / 255.0, blob["labels"].astype(np.int64)


def _take(pool: int, counts: tuple[int, int], gen: np.random.Generator, what: str
          ) -> tuple[np.ndarray, np.ndarray]:
    if sum(counts) > pool:
        raise DataSourceError(f"dna_fakes: {what} has {pool} images; {counts[0]} train + "
                              f"{counts[1]} test rows need {sum(counts)}")
    order = gen.permutation(pool)
    return order[: counts[0]], order[counts[0] : sum(counts)]


@register("dataset", "dna_fakes", params=DnaFakesParams)
def dna_fakes(params: DnaFakesParams, *, seed: int) -> Dataset:
    """Real vs locally generated 28x28 images; seen generators in train, all in test."""
    p = params
    names = semantic_names(p.source)
    s_count = len(names)
    reals, real_y = real_images(p.source, "task", seed=seed, path=p.path)
    gen = rng(seed, "dna_fakes", "rows")
    tr, te = _take(len(reals), (p.train_per_class, p.test_per_class), gen, "the real set")
    xs = {"train": [reals[tr]], "test": [reals[te]]}
    ys = {"train": [real_y[tr]], "test": [real_y[te]]}
    sources = ["real"] + [f"seen:{f}" for f in p.seen] + [f"unseen:{f}" for f in p.unseen]
    split = np.array_split(np.arange(p.train_per_class), len(p.seen))
    for k, family in enumerate((*p.seen, *p.unseen), start=1):
        bank, bank_y = generator_bank(family, p.source, p.generator, p.path)
        n_train = len(split[k - 1]) if k <= len(p.seen) else 0
        tr, te = _take(len(bank), (n_train, p.test_per_class), gen, f"generator {family!r}")
        for part, rows in (("train", tr), ("test", te)):
            xs[part].append(bank[rows])
            ys[part].append(k * s_count + bank_y[rows])
    out = {}
    for part in ("train", "test"):
        x = np.concatenate(xs[part])
        x = postprocess(x, p.post, rng(seed, "dna_fakes", "post", part))
        if part == "test" and p.test_jpeg is not None:
            x = np.stack([jpeg(img, p.test_jpeg) for img in x])
        out[part] = (x.reshape(len(x), -1).astype(np.float32), np.concatenate(ys[part]))
    meta = DatasetMeta(
        name="dna_fakes", task="classification", num_features=SIZE * SIZE,
        num_classes=len(sources) * s_count,
        class_names=tuple(f"{s}|{c}" for s in sources for c in names), input_shape=(SIZE, SIZE),
        source=f"real: {p.source}; fakes: generators trained here on the source's generator "
        "part (flowerbed pretrain dna_generator)", license="as the real source",
    )
    return Dataset(out["train"][0], out["train"][1], out["test"][0], out["test"][1], meta)

"""Image datasets: Fashion-MNIST (Debian package), scikit-image patches, user image folders.

Images are flattened to ``float32`` rows in ``[0, 1]`` (unless ``standardize``);
``DatasetMeta.input_shape`` keeps their shape, which the image domain-shift
transforms (rotation, contrast, noise, blur) rely on.
"""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import Field

from flowerbed.core.registry import Params, register
from flowerbed.core.seeds import rng
from flowerbed.data.base import Dataset, DatasetMeta, DataSourceError, require
from flowerbed.data.extras import register_with_extra
from flowerbed.data.sklearn_data import split_rows, standardize

# --- Fashion-MNIST from Debian's dataset-fashion-mnist ------------------------------------

FASHION_DIR = "/usr/share/datasets/fashion-mnist"
FASHION_CLASSES = (
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
)


class FashionParams(Params):
    """Where the idx files are, and optional seeded subsampling for quick runs."""

    path: str = Field(FASHION_DIR, description="folder holding the four *-ubyte.gz files")
    max_train: int | None = Field(None, ge=1, description="random subset of the 60,000")
    max_test: int | None = Field(None, ge=1, description="random subset of the 10,000")
    standardize: bool = Field(False, description="z-score pixels (default: scale to [0, 1])")


def read_idx(path: Path) -> np.ndarray:
    """Read a (gzipped) IDX file: big-endian dims after a 4-byte magic, then uint8 data."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as fh:
        raw = fh.read()
    ndim = raw[3]
    dims = np.frombuffer(raw, dtype=">u4", count=ndim, offset=4).astype(int)
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def _fashion_file(folder: Path, stem: str) -> Path:
    for candidate in (folder / f"{stem}.gz", folder / stem):
        if candidate.is_file():
            return candidate
    raise DataSourceError(
        f"fashion_mnist: {folder / (stem + '.gz')} not found; install the Debian package "
        f"dataset-fashion-mnist (apt-get install dataset-fashion-mnist) or set dataset.path"
    )


def _subset(n: int, limit: int | None, seed: int, label: str) -> np.ndarray:
    if limit is None or limit >= n:
        return np.arange(n)
    return np.sort(rng(seed, "subset", label).choice(n, size=limit, replace=False))


@register("dataset", "fashion_mnist", params=FashionParams)
def fashion_mnist(params: FashionParams, *, seed: int) -> Dataset:
    """Fashion-MNIST 28x28 (60k/10k, 10 classes) from Debian's dataset-fashion-mnist."""
    folder = Path(params.path)
    arrays = {
        stem: read_idx(_fashion_file(folder, f"{stem}-ubyte"))
        for stem in (
            "train-images-idx3", "train-labels-idx1", "t10k-images-idx3", "t10k-labels-idx1"
        )
    }
    tr = _subset(len(arrays["train-labels-idx1"]), params.max_train, seed, "train")
    te = _subset(len(arrays["t10k-labels-idx1"]), params.max_test, seed, "test")
    x_tr = arrays["train-images-idx3"][tr].reshape(len(tr), -1) / np.float32(255)
    x_te = arrays["t10k-images-idx3"][te].reshape(len(te), -1) / np.float32(255)
    if params.standardize:
        x_tr, x_te = standardize(x_tr, x_te)
    meta = DatasetMeta(
        name="fashion_mnist", task="classification", num_features=784, num_classes=10,
        class_names=FASHION_CLASSES, input_shape=(28, 28),
        source="Zalando Fashion-MNIST via Debian dataset-fashion-mnist", license="MIT",
    )
    y_tr = arrays["train-labels-idx1"][tr].astype(np.int64)
    y_te = arrays["t10k-labels-idx1"][te].astype(np.int64)
    return Dataset(x_tr.astype(np.float32), y_tr, x_te.astype(np.float32), y_te, meta)


# --- scikit-image bundled pictures as a patch-classification task -------------------------

SKIMAGE_DEFAULT = (
    "camera", "astronaut", "coffee", "chelsea", "coins",
    "moon", "brick", "grass", "gravel", "text",
)


class PatchParams(Params):
    """Which pictures, patch size and count; train/test patches come from disjoint bands."""

    images: tuple[str, ...] = Field(SKIMAGE_DEFAULT, min_length=2)
    patch_size: int = Field(16, ge=2, le=128)
    patches_per_image: int = Field(300, ge=2)
    test_fraction: float = Field(0.25, gt=0, lt=1)


def _gray(skimage: Any, name: str) -> np.ndarray:
    """A bundled picture as a float grayscale array in [0, 1]."""
    loader = getattr(skimage.data, name, None)
    if loader is None:
        raise DataSourceError(f"skimage_patches: skimage.data has no image {name!r}")
    img = np.asarray(loader())
    if img.ndim == 3:
        img = skimage.color.rgb2gray(img[..., :3])
    return np.asarray(skimage.util.img_as_float(img), dtype=np.float32)


def sample_patches(
    img: np.ndarray, size: int, count: int, rows: tuple[int, int], gen: np.random.Generator
) -> np.ndarray:
    """``count`` random ``size`` x ``size`` patches whose rows lie in ``[rows[0], rows[1])``."""
    top_max = rows[1] - size
    if top_max < rows[0]:
        raise DataSourceError(f"skimage_patches: band {rows} too small for {size}px patches")
    tops = gen.integers(rows[0], top_max + 1, size=count)
    lefts = gen.integers(0, img.shape[1] - size + 1, size=count)
    return np.stack([img[t : t + size, u : u + size] for t, u in zip(tops, lefts, strict=True)])


@register_with_extra("skimage_patches", PatchParams, "skimage", "scikit-image")
def skimage_patches(params: PatchParams, *, seed: int) -> Dataset:
    """Which-picture-is-this-patch from scikit-image's bundled photos (gray patches)."""
    ski = require("skimage", "scikit-image", "skimage_patches")
    for sub in ("data", "color", "util"):
        require(f"skimage.{sub}", "scikit-image", "skimage_patches")
    p = params.patch_size
    n_test = max(1, round(params.patches_per_image * params.test_fraction))
    xs: dict[str, list[np.ndarray]] = {"train": [], "test": []}
    for name in params.images:
        img = _gray(ski, name)
        cut = int(img.shape[0] * (1 - params.test_fraction))
        gen = rng(seed, "patches", name)
        xs["train"].append(sample_patches(img, p, params.patches_per_image - n_test, (0, cut), gen))
        xs["test"].append(sample_patches(img, p, n_test, (cut, img.shape[0]), gen))

    def stack(split: str) -> tuple[np.ndarray, np.ndarray]:
        x = np.concatenate(xs[split]).reshape(-1, p * p)
        y = np.repeat(np.arange(len(params.images)), [len(a) for a in xs[split]])
        return x.astype(np.float32), y.astype(np.int64)

    (x_tr, y_tr), (x_te, y_te) = stack("train"), stack("test")
    meta = DatasetMeta(
        name="skimage_patches", task="classification", num_features=p * p,
        num_classes=len(params.images), class_names=params.images, input_shape=(p, p),
        source="scikit-image skimage.data bundled pictures (train patches from the top "
        "band, test patches from the bottom band of each picture)",
        license="per picture, see skimage.data docstrings (public domain / CC0 / CC BY)",
    )
    return Dataset(x_tr, y_tr, x_te, y_te, meta)


# --- user image folders -------------------------------------------------------------------

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff")


class ImageFolderParams(Params):
    """``path/<class>/*.png`` (or jpg...), resized to ``size`` x ``size``."""

    path: str
    size: int = Field(28, ge=2, le=512)
    grayscale: bool = True
    test_fraction: float = Field(0.25, gt=0, lt=1)


def _class_files(root: Path) -> dict[str, list[Path]]:
    """Image files per class folder (sorted), or a one-line error naming the path."""
    if not root.is_dir():
        raise DataSourceError(f"image_folder: folder not found: {root}")
    classes = {
        d.name: sorted(f for f in d.iterdir() if f.suffix.lower() in IMAGE_SUFFIXES)
        for d in sorted(root.iterdir()) if d.is_dir()
    }
    classes = {k: v for k, v in classes.items() if v}
    if len(classes) < 2:
        raise DataSourceError(
            f"image_folder: {root} needs at least 2 class folders holding images "
            f"({', '.join(IMAGE_SUFFIXES)}); found {len(classes)}"
        )
    return classes


def _load_image(path: Path, size: int, grayscale: bool) -> np.ndarray:
    from PIL import Image

    with Image.open(path) as raw:
        mode = "L" if grayscale else "RGB"
        im = raw.convert(mode).resize((size, size), Image.Resampling.BILINEAR)
        return np.asarray(im, dtype=np.float32) / 255.0


@register("dataset", "image_folder", params=ImageFolderParams)
def image_folder(params: ImageFolderParams, *, seed: int) -> Dataset:
    """User images laid out as path/<class>/*.png, resized, stratified train/test split."""
    classes = _class_files(Path(params.path))
    files = [f for fs in classes.values() for f in fs]
    y = np.repeat(np.arange(len(classes)), [len(fs) for fs in classes.values()]).astype(np.int64)
    x = np.stack([_load_image(f, params.size, params.grayscale) for f in files])
    shape = x.shape[1:]
    x = x.reshape(len(x), -1)
    tr, te = split_rows(len(y), y, params.test_fraction, seed)
    meta = DatasetMeta(
        name="image_folder", task="classification", num_features=x.shape[1],
        num_classes=len(classes), class_names=tuple(classes), input_shape=tuple(shape),
        source=f"user image folder {params.path}", license="user-supplied",
    )
    return Dataset(x[tr], y[tr], x[te], y[te], meta)

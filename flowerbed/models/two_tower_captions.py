"""Fashion-MNIST image rows and captions that pre-train the ``two_tower`` model's heads.

Captions pair each class with varied templates and synonyms, so the heads learn
the class concepts rather than one phrasing; ``fashion_rows`` reads a slice of
the Fashion-MNIST idx files (gzipped or not) from a folder.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from flowerbed.data.base import DatasetMeta
from flowerbed.data.image_data import FASHION_CLASSES

FASHION_TRAIN_ROWS = 60_000

#: Caption templates for pre-training (the zero-shot template is among them).
CAPTION_TEMPLATES: tuple[str, ...] = (
    "a photo of a {}.", "a picture of a {}.", "an image of a {}.", "a {}.", "this is a {}.",
    "a black and white photo of a {}.", "a grayscale picture of a {}.",
    "a low-resolution photo of a {}.", "a small photo of a {}.", "a blurry photo of a {}.",
    "a product photo of a {}.", "a catalogue image of a {}.", "a close-up photo of the {}.",
    "a photo of the {}, an item of clothing.", "someone's {}.",
)

#: Fashion-MNIST class name -> synonyms and short descriptions used in captions.
CLASS_WORDS: dict[str, tuple[str, ...]] = {
    "T-shirt/top": ("T-shirt/top", "t-shirt", "tee", "top", "short-sleeved t-shirt",
                    "casual cotton top", "crew-neck tee"),
    "Trouser": ("trouser", "pair of trousers", "pants", "jeans", "slacks", "long pants",
                "pair of denim jeans"),
    "Pullover": ("pullover", "sweater", "jumper", "knitted sweater", "long-sleeved pullover",
                 "sweatshirt", "wool jumper"),
    "Dress": ("dress", "gown", "frock", "summer dress", "long dress", "one-piece dress",
              "evening dress"),
    "Coat": ("coat", "jacket", "overcoat", "winter coat", "parka", "trench coat",
             "zip-up jacket"),
    "Sandal": ("sandal", "pair of sandals", "flip-flop", "open-toed shoe", "strappy sandal",
               "summer sandal", "slipper"),
    "Shirt": ("shirt", "button-up shirt", "blouse", "collared shirt", "dress shirt",
              "flannel shirt", "long-sleeved shirt"),
    "Sneaker": ("sneaker", "pair of sneakers", "trainer", "running shoe", "athletic shoe",
                "canvas shoe", "sports shoe"),
    "Bag": ("bag", "handbag", "purse", "tote bag", "shoulder bag", "backpack", "leather bag"),
    "Ankle boot": ("ankle boot", "boot", "bootie", "short boot", "leather boot",
                   "chelsea boot", "heeled boot"),
}


FASHION_META = DatasetMeta(
    name="fashion_mnist", task="classification", num_features=784, num_classes=10,
    class_names=FASHION_CLASSES, input_shape=(28, 28),
)


def fashion_rows(folder: str, split: str, rows: slice) -> tuple[np.ndarray, np.ndarray]:
    """Fashion-MNIST ``split`` (``train``/``t10k``) rows as ``[0, 1]`` floats, with labels."""
    from flowerbed.data.image_data import _fashion_file, read_idx

    x = read_idx(_fashion_file(Path(folder), f"{split}-images-idx3-ubyte"))[rows]
    y = read_idx(_fashion_file(Path(folder), f"{split}-labels-idx1-ubyte"))[rows]
    return x.reshape(len(x), -1).astype(np.float32) / 255, y.astype(np.int64)


def captions(templates: int = len(CAPTION_TEMPLATES)) -> tuple[list[str], np.ndarray]:
    """Every (template, class word) caption, using the first ``templates``, and its class."""
    texts, labels = [], []
    for c, name in enumerate(FASHION_CLASSES):
        for word in CLASS_WORDS[name]:
            for template in CAPTION_TEMPLATES[:templates]:
                texts.append(template.format(word))
                labels.append(c)
    return texts, np.asarray(labels)


__all__ = [
    "CAPTION_TEMPLATES",
    "CLASS_WORDS",
    "FASHION_META",
    "FASHION_TRAIN_ROWS",
    "captions",
    "fashion_rows",
]

"""``two_tower_concepts``: the offline two-tower VLM pre-trained on many more concepts.

The default ``two_tower`` aligns its projection heads on eight Fashion-MNIST
concepts, so zero-shot accuracy on its held-out classes is 0.02 and a
base-to-novel result on it means nothing. This recipe trains the same heads
(frozen EfficientNet-Lite0 + frozen MiniLM, CLIP loss, label-aware positives:
:func:`flowerbed.models.vlm_two_tower.train_heads`) on two corpora:

- rendered shape x colour concepts (:mod:`flowerbed.methods.manipt.data`, style
  ``clean``, image seed 0) with varied captions, leaving out whole combinations
  (:func:`~flowerbed.methods.manipt.data.pretrain_holdout`, 16 of 64);
- the last ``fashion_rows`` Fashion-MNIST training rows with the ``two_tower``
  captions (all ten classes, so Fashion-MNIST is a cross-dataset target).

Printed metrics: zero-shot accuracy among all 64 concept names on fresh images
of the seen and of the held-out combinations (chance 1/64), and on the
Fashion-MNIST test rows. ``flowerbed pretrain two_tower_concepts`` builds the
heads file (in the ``two_tower`` format); the VLM builds it on first use.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import Field

from flowerbed.core.artefacts import PretrainTarget, ensure_artefact
from flowerbed.core.cache import cached_file
from flowerbed.core.registry import Params, register
from flowerbed.data.image_data import FASHION_CLASSES, FASHION_DIR
from flowerbed.methods.manipt.data import SHAPES, class_names, concepts_meta, pretrain_holdout
from flowerbed.models.two_tower_captions import FASHION_META, FASHION_TRAIN_ROWS
from flowerbed.models.vlm import (
    DEFAULT_TEMPLATES,
    VisionLanguageModel,
    VlmParams,
    cached_array,
    params_hash,
    save_atomic,
)
from flowerbed.models.vlm_two_tower import (
    ARTEFACT_FORMAT,
    TEXT_DIM,
    TwoTowerPretrainParams,
    TwoTowerVLM,
    load_heads,
)

#: Caption templates of the concept images ({} is "<colour> <shape>").
CONCEPT_TEMPLATES: tuple[str, ...] = (
    "a photo of a {}.", "a picture of a {}.", "a drawing of a {}.", "a {}.",
    "an image of a {}.", "a small {}.", "a {} on a dark background.", "this is a {}.",
    "a simple {} icon.", "a rendering of a {}.",
)
#: Extra words for some shapes (captions only; class names use the first word).
SHAPE_WORDS: dict[str, tuple[str, ...]] = {
    "circle": ("circle", "disc", "round dot"), "square": ("square", "box shape"),
    "triangle": ("triangle",), "cross": ("cross", "plus sign"),
    "ring": ("ring", "hollow circle"), "diamond": ("diamond", "rhombus"),
    "star": ("star", "five-pointed star"), "heart": ("heart", "heart shape"),
}


class ConceptsPretrainParams(Params):
    """Everything that determines the trained heads (their cache key)."""

    dim: int = Field(256, ge=2, description="shared embedding width")
    hidden: int = Field(0, ge=0, description="hidden width of MLP heads (0: linear heads)")
    image_size: int = Field(64, ge=32, description="images are resized to this for the encoder")
    concept_per_class: int = Field(40, ge=1, description="rendered images per seen concept")
    fashion_rows: int = Field(3000, ge=0, le=FASHION_TRAIN_ROWS,
                              description="the last N Fashion-MNIST training rows (0: none)")
    epochs: int = Field(30, ge=1)
    batch_size: int = Field(256, ge=2)
    lr: float = Field(1e-3, gt=0)
    weight_decay: float = Field(1e-4, ge=0)
    seed: int = 0
    eval_per_class: int = Field(10, ge=0, description="fresh images per concept for the metrics")
    fashion_eval_rows: int = Field(2000, ge=0, le=10_000)
    data_path: str = Field(FASHION_DIR, description="folder of the Fashion-MNIST idx files")

    def two_tower(self) -> TwoTowerPretrainParams:
        """The ``two_tower`` recipe fields ``train_heads`` reads (recorded in the file)."""
        return TwoTowerPretrainParams(
            dim=self.dim, hidden=self.hidden, image_size=self.image_size,
            pretrain_rows=max(self.fashion_rows, 10), holdout_classes=(), epochs=self.epochs,
            batch_size=self.batch_size, lr=self.lr, weight_decay=self.weight_decay,
            seed=self.seed, eval_rows=0, data_path=self.data_path)


def concept_captions(names: tuple[str, ...]) -> tuple[list[str], list[int]]:
    """Every (template, shape word) caption of each concept, and its index in ``names``."""
    texts, labels = [], []
    for c, name in enumerate(names):
        colour, shape = name.split(" ", 1)
        for word in SHAPE_WORDS[shape]:
            for template in CONCEPT_TEMPLATES:
                texts.append(template.format(f"{colour} {word}"))
                labels.append(c)
    return texts, labels


def _features(x: np.ndarray, meta: Any, size: int) -> np.ndarray:
    from flowerbed.models.vlm_two_tower import image_tower_features

    return cached_array("vlm_features", f"effl0-{size}", x,
                        lambda: image_tower_features(x, meta, size, show=True))


def concept_zero_shot(heads: Any, feats: np.ndarray, y: np.ndarray,
                      names: tuple[str, ...]) -> np.ndarray:
    """Per-row correctness of zero-shot prediction among ``names`` (template 0)."""
    import torch

    from flowerbed.models.vlm_two_tower import text_tower_features

    with torch.no_grad():
        f = heads.embed_image(torch.as_tensor(feats))
        t = heads.embed_text(text_tower_features([DEFAULT_TEMPLATES[0].format(n)
                                                  for n in names]))
        pred = (f @ t.T).argmax(1).numpy()
    out: np.ndarray = pred == y
    return out


def pretrain(p: ConceptsPretrainParams, out: Path) -> dict[str, float]:
    """Render and encode both corpora, train the heads, write the file, return metrics."""
    import torch

    from flowerbed.methods.manipt.data import render_rows
    from flowerbed.models.two_tower_captions import captions, fashion_rows
    from flowerbed.models.vlm_two_tower import text_tower_features, train_heads

    start = time.perf_counter()
    names, held = class_names(), set(pretrain_holdout())
    seen = tuple(n for n in names if n not in held)
    xc, yc = render_rows(seen, p.concept_per_class, "clean", 0, "pretrain")
    feats = [_features(xc, concepts_meta(seen, "clean"), p.image_size)]
    labels = [np.asarray([names.index(seen[i]) for i in yc])]
    texts, cap_y = concept_captions(seen)
    cap_y = [names.index(seen[i]) for i in cap_y]
    if p.fashion_rows:
        xf, yf = fashion_rows(p.data_path, "train",
                              slice(FASHION_TRAIN_ROWS - p.fashion_rows, None))
        feats.append(_features(xf, FASHION_META, p.image_size))
        labels.append(yf + len(names))
        ftexts, fy = captions()
        texts += ftexts
        cap_y += [int(c) + len(names) for c in fy]
    cap = text_tower_features(texts)
    encode_s = time.perf_counter() - start
    heads = train_heads(p.two_tower(), np.concatenate(feats), np.concatenate(labels), cap,
                        np.asarray(cap_y))
    metrics = {"pairs": float(sum(len(f) for f in feats)), "captions": float(len(texts)),
               "encode_s": encode_s, "train_s": time.perf_counter() - start - encode_s,
               "logit_scale": float(heads.log_scale.exp()), "chance_concepts": 1 / len(names)}
    if p.eval_per_class:
        for style in ("clean", "textured"):
            xe, ye = render_rows(names, p.eval_per_class, style, 2, "pretrain-eval")
            ok = concept_zero_shot(heads, _features(xe, concepts_meta(names, style),
                                                    p.image_size), ye, names)
            unseen = np.isin(ye, [names.index(n) for n in held])
            metrics[f"zero_shot_{style}_seen"] = float(ok[~unseen].mean())
            metrics[f"zero_shot_{style}_heldout"] = float(ok[unseen].mean())
    if p.fashion_eval_rows:
        xt, yt = fashion_rows(p.data_path, "t10k", slice(0, p.fashion_eval_rows))
        ok = concept_zero_shot(heads, _features(xt, FASHION_META, p.image_size), yt,
                               tuple(FASHION_CLASSES))
        metrics["zero_shot_fashion"] = float(ok.mean())
    blob = {"format": ARTEFACT_FORMAT, "params": p.two_tower().model_dump(mode="json"),
            "recipe": p.model_dump(mode="json"), "state": heads.state_dict(),
            "metrics": metrics}
    save_atomic(out, lambda tmp: torch.save(blob, tmp))
    return metrics


def default_path(p: ConceptsPretrainParams) -> Path:
    """``cache_dir()/vlm/two_tower_concepts-<params hash>.pt``."""
    return cached_file("vlm", f"two_tower_concepts-{params_hash(p)}.pt")


PRETRAIN_TARGET = PretrainTarget(
    name="two_tower_concepts", params=ConceptsPretrainParams, run=pretrain,
    default_path=default_path,
    help="two_tower heads on rendered shape x colour concepts + Fashion-MNIST (ManiPT)",
)


class ConceptsTwoTowerParams(VlmParams):
    """The concepts recipe (or a trained heads file) plus use-time settings."""

    pretrain: ConceptsPretrainParams = ConceptsPretrainParams()
    heads: str | None = Field(
        None, description="trained heads file (default: cache, built on first use)")
    logit_scale: float | None = Field(
        None, gt=0, description="zero-shot logit scale (default: the learned one)")
    batch_size: int = Field(64, ge=1, description="images per encoder forward pass")


@register("vlm", "two_tower_concepts", params=ConceptsTwoTowerParams)
class ConceptsTwoTowerVLM(TwoTowerVLM):
    """``two_tower`` whose heads pre-trained on 48 rendered concepts + Fashion-MNIST."""

    def __init__(self, params: Params) -> None:
        VisionLanguageModel.__init__(self, params)
        p: ConceptsTwoTowerParams = params  # type: ignore[assignment]
        self.path = (Path(p.heads) if p.heads
                     else ensure_artefact("two_tower_concepts", p.pretrain))
        self.heads, recorded = load_heads(str(self.path))
        self.recipe = TwoTowerPretrainParams.model_validate(recorded)
        self.dim, self.context_dim = self.recipe.dim, TEXT_DIM
        learned = float(self.heads.log_scale.exp())
        self.logit_scale = p.logit_scale if p.logit_scale is not None else learned


__all__ = ["CONCEPT_TEMPLATES", "SHAPES", "ConceptsPretrainParams", "ConceptsTwoTowerParams",
           "ConceptsTwoTowerVLM", "concept_captions", "pretrain"]

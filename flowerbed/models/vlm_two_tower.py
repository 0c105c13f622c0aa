"""``two_tower``: a CLIP-like model from frozen pretrained parts that ship in packages.

Image tower: ImageNet EfficientNet-Lite0 (Tan & Le, 2019) pooled features
(1280-d). Text tower: the all-MiniLM-L6-v2 sentence encoder (384-d). Only two
projection heads into a shared ``dim``-d space (and a logit scale) are trained,
with CLIP's symmetric contrastive loss (Radford et al., 2021, arXiv 2103.00020),
on image-caption pairs made from a held-out slice of Fashion-MNIST's training
set: the last ``pretrain_rows`` rows, minus the ``holdout_classes``, each image
paired with captions drawn from varied templates and class synonyms. The towers'
features are computed once (and cached), so training the heads takes seconds.
The trained heads live in one file under ``cache_dir()``, keyed by a hash of the
pre-training parameters; ``flowerbed pretrain two_tower`` builds it, and using
the model builds it on first use. The heads' torch modules are in
:mod:`flowerbed.models.two_tower_heads`, imported only to train or load them.

Prompt tuning (CoOp, Zhou et al., 2022, arXiv 2109.01134) feeds
``[CLS] ctx_1..ctx_n <class name> . [SEP]`` word embeddings straight into MiniLM.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import Field

from flowerbed.core.artefacts import PretrainTarget, ensure_artefact
from flowerbed.core.cache import cached_file
from flowerbed.core.registry import Params, register
from flowerbed.core.seeds import derive_seed
from flowerbed.data.base import DatasetMeta
from flowerbed.data.image_data import FASHION_CLASSES, FASHION_DIR
from flowerbed.models.two_tower_captions import (
    CAPTION_TEMPLATES,
    FASHION_META,
    FASHION_TRAIN_ROWS,
    captions,
    fashion_rows,
)
from flowerbed.models.vlm import (
    DEFAULT_TEMPLATES,
    VisionLanguageModel,
    VlmParams,
    cached_array,
    file_identity,
    params_hash,
    save_atomic,
)

if TYPE_CHECKING:
    import torch

    from flowerbed.models.two_tower_heads import Heads

logger = logging.getLogger("flowerbed.vlm.two_tower")

IMAGE_DIM, TEXT_DIM = 1280, 384
ARTEFACT_FORMAT = 1
class TwoTowerPretrainParams(Params):
    """Everything that determines the trained heads (their cache key).

    Pre-training pairs come from the last ``pretrain_rows`` rows of Fashion-MNIST's
    60,000 training rows (indices ``60000 - pretrain_rows`` to ``59999``); keep
    them out of any client data that should be unseen. Metrics are measured on
    the first ``eval_rows`` rows of the test set.
    """

    dim: int = Field(256, ge=2, description="shared embedding width")
    hidden: int = Field(0, ge=0, description="hidden width of MLP heads (0: linear heads)")
    image_size: int = Field(64, ge=32, description="images are resized to this for the encoder")
    pretrain_rows: int = Field(5000, ge=10, le=FASHION_TRAIN_ROWS,
                               description="the last N rows of Fashion-MNIST train")
    holdout_classes: tuple[str, ...] = Field(
        ("Sneaker", "Shirt"), description="classes left out of pre-training (zero-shot unseen)"
    )
    caption_templates: int = Field(len(CAPTION_TEMPLATES), ge=1, le=len(CAPTION_TEMPLATES),
                                   description="how many of the caption templates to use")
    epochs: int = Field(20, ge=1)
    batch_size: int = Field(256, ge=2)
    lr: float = Field(1e-3, gt=0)
    weight_decay: float = Field(1e-4, ge=0)
    label_aware: bool = Field(True, description="same-class pairs count as positives (UniCL)")
    seed: int = 0
    eval_rows: int = Field(2000, ge=0, le=10_000, description="test rows for the printed metrics")
    data_path: str = Field(FASHION_DIR, description="folder of the Fashion-MNIST idx files")


class TwoTowerParams(VlmParams):
    """The pre-training recipe (or a trained heads file) plus use-time settings."""

    pretrain: TwoTowerPretrainParams = TwoTowerPretrainParams()
    heads: str | None = Field(
        None, description="trained heads file (default: cache, built on first use)"
    )
    logit_scale: float | None = Field(
        None, gt=0, description="zero-shot logit scale (default: the learned one)"
    )
    batch_size: int = Field(64, ge=1, description="images per encoder forward pass")


# --- the frozen towers ---------------------------------------------------------------------


def image_tower_features(
    x: np.ndarray, meta: DatasetMeta, image_size: int, batch_size: int = 64, show: bool = False
) -> np.ndarray:
    """EfficientNet-Lite0 pooled features ``(n, 1280)`` of image rows (progress optional)."""
    from flowerbed.models.encoders import EfficientNetEncoder, EfficientNetParams

    encoder = EfficientNetEncoder(EfficientNetParams(image_size=image_size, batch_size=batch_size))
    step = 512
    parts, start = [], time.perf_counter()
    if show:
        logger.warning("two_tower: encoding %d images at %d px", len(x), image_size)
    for i in range(0, len(x), step):
        parts.append(encoder.encode(x[i : i + step], meta))
        if show:
            done = min(i + step, len(x))
            logger.warning("two_tower: encoded %d/%d images (%.0f s)", done, len(x),
                           time.perf_counter() - start)
    return np.concatenate(parts) if parts else np.zeros((0, IMAGE_DIM), np.float32)


def text_tower_features(texts: Sequence[str]) -> torch.Tensor:
    """MiniLM sentence embeddings ``(n, 384)``, unit norm."""
    from flowerbed.models.minilm import load_sentence_encoder

    return load_sentence_encoder().encode(list(texts))


# --- pre-training --------------------------------------------------------------------------


def train_heads(
    p: TwoTowerPretrainParams, img: np.ndarray, y: np.ndarray, cap: torch.Tensor,
    cap_y: np.ndarray,
) -> Heads:
    """Fit the heads on frozen features: image rows ``img`` (labels ``y``) against captions."""
    # torch only when heads are trained or used: validating a scenario must stay light.
    import torch

    from flowerbed.algorithms.clip_loss import CLIP_MAX_LOGIT_SCALE, clamp_log_scale, clip_loss
    from flowerbed.models.two_tower_heads import Heads

    with torch.random.fork_rng():
        torch.manual_seed(derive_seed(p.seed, "two_tower", "init") % 2**63)
        heads = Heads(p.dim, p.hidden)
    feats = torch.as_tensor(img)
    heads.image_mean.copy_(feats.mean(0))
    heads.image_std.copy_(feats.std(0).clamp_min(1e-3))
    order_c = np.argsort(cap_y, kind="stable")
    counts = np.bincount(cap_y, minlength=int(y.max()) + 1)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    if (counts[np.unique(y)] == 0).any():
        raise ValueError("two_tower: a pre-training class has no captions")
    gen = np.random.default_rng(derive_seed(p.seed, "two_tower", "batches"))
    opt = torch.optim.AdamW(heads.parameters(), lr=p.lr, weight_decay=p.weight_decay)
    steps = p.epochs * -(-len(y) // p.batch_size)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps)
    labels = torch.as_tensor(y)
    for _ in range(p.epochs):
        order = gen.permutation(len(y))
        pick = order_c[starts[y] + (gen.random(len(y)) * counts[y]).astype(np.int64)]
        for i in range(0, len(y), p.batch_size):
            b = order[i : i + p.batch_size]
            if len(b) < 2:
                continue
            loss = clip_loss(
                heads.embed_image(feats[b]), heads.embed_text(cap[pick[b]]),
                heads.log_scale.exp(), labels[b] if p.label_aware else None,
            )
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            clamp_log_scale(heads.log_scale, CLIP_MAX_LOGIT_SCALE)
    heads.eval()
    for q in heads.parameters():
        q.requires_grad_(False)
    return heads


def zero_shot_metrics(
    heads: Heads, img: np.ndarray, y: np.ndarray, holdout: Sequence[str]
) -> dict[str, float]:
    """Zero-shot accuracy (all, seen, unseen classes) with the default class prompts."""
    import torch

    with torch.no_grad():
        f = heads.embed_image(torch.as_tensor(img))
        t = heads.embed_text(text_tower_features(
            [DEFAULT_TEMPLATES[0].format(n) for n in FASHION_CLASSES]))
        pred = (f @ t.T).argmax(1).numpy()
    unseen = np.isin(y, [FASHION_CLASSES.index(c) for c in holdout])
    out = {"zero_shot_acc": float((pred == y).mean())}
    if unseen.any():
        out["zero_shot_acc_seen"] = float((pred == y)[~unseen].mean())
        out["zero_shot_acc_unseen"] = float((pred == y)[unseen].mean())
    return out


def pretrain(p: TwoTowerPretrainParams, out: Path) -> dict[str, float]:
    """Encode the pre-training slice, train the heads, write the artefact, return metrics."""
    import torch

    unknown = [c for c in p.holdout_classes if c not in FASHION_CLASSES]
    if unknown:
        raise ValueError(f"two_tower: holdout_classes {unknown} are not Fashion-MNIST classes "
                         f"({', '.join(FASHION_CLASSES)})")
    start = time.perf_counter()
    x, y = fashion_rows(p.data_path, "train", slice(FASHION_TRAIN_ROWS - p.pretrain_rows, None))
    keep = ~np.isin(y, [FASHION_CLASSES.index(c) for c in p.holdout_classes])
    x, y = x[keep], y[keep]
    if len(np.unique(y)) < 2:
        raise ValueError(f"two_tower: pre-training needs two classes or more; the last "
                         f"{p.pretrain_rows} rows minus holdout_classes leave {len(np.unique(y))}")
    img = cached_array("vlm_features", f"effl0-{p.image_size}", x,
                       lambda: image_tower_features(x, FASHION_META, p.image_size, show=True))
    texts, cap_y = captions(p.caption_templates)
    cap = text_tower_features(texts)
    encode_s = time.perf_counter() - start
    heads = train_heads(p, img, y, cap, cap_y)
    metrics = {"pairs": float(len(y)), "captions": float(len(texts)), "encode_s": encode_s,
               "train_s": time.perf_counter() - start - encode_s,
               "logit_scale": float(heads.log_scale.exp())}
    if p.eval_rows:
        xt, yt = fashion_rows(p.data_path, "t10k", slice(0, p.eval_rows))
        ft = cached_array("vlm_features", f"effl0-{p.image_size}", xt,
                          lambda: image_tower_features(xt, FASHION_META, p.image_size, show=True))
        metrics |= zero_shot_metrics(heads, ft, yt, p.holdout_classes)
    blob = {"format": ARTEFACT_FORMAT, "params": p.model_dump(mode="json"),
            "state": heads.state_dict(), "metrics": metrics}
    save_atomic(out, lambda tmp: torch.save(blob, tmp))
    return metrics


def default_path(p: TwoTowerPretrainParams) -> Path:
    """``cache_dir()/vlm/two_tower-<params hash>.pt``."""
    return cached_file("vlm", f"two_tower-{params_hash(p)}.pt")


PRETRAIN_TARGET = PretrainTarget(
    name="two_tower", params=TwoTowerPretrainParams, run=pretrain, default_path=default_path,
    help="projection heads of the two_tower vision-language model (Fashion-MNIST slice)",
)


@functools.cache
def load_heads(path: str) -> tuple[Heads, dict[str, Any]]:
    """Heads from an artefact file (frozen, eval mode) and the file's recorded params."""
    import torch

    from flowerbed.models.two_tower_heads import Heads

    if not Path(path).is_file():
        raise FileNotFoundError(f"two_tower: heads file {path} not found "
                                "(build it with: flowerbed pretrain two_tower --output PATH)")
    blob = torch.load(path, map_location="cpu", weights_only=True)
    if blob.get("format") != ARTEFACT_FORMAT:
        raise ValueError(f"two_tower: {path} is not a format-{ARTEFACT_FORMAT} heads file")
    p = TwoTowerPretrainParams.model_validate(blob["params"])
    heads = Heads(p.dim, p.hidden)
    heads.load_state_dict(blob["state"])
    heads.eval()
    for q in heads.parameters():
        q.requires_grad_(False)
    return heads, blob["params"]


# --- the model -------------------------------------------------------------------------------


@register("vlm", "two_tower", params=TwoTowerParams)
class TwoTowerVLM(VisionLanguageModel):
    """Frozen EfficientNet-Lite0 + MiniLM towers with contrastively aligned heads (offline)."""

    def __init__(self, params: Params) -> None:
        super().__init__(params)
        p: TwoTowerParams = params  # type: ignore[assignment]
        self.path = Path(p.heads) if p.heads else ensure_artefact("two_tower", p.pretrain)
        self.heads, recorded = load_heads(str(self.path))
        self.recipe = TwoTowerPretrainParams.model_validate(recorded)
        self.dim, self.context_dim = self.recipe.dim, TEXT_DIM
        learned = float(self.heads.log_scale.exp())
        self.logit_scale = p.logit_scale if p.logit_scale is not None else learned

    cache_ignore = frozenset({"feature_cache", "batch_size", "logit_scale"})

    def weights_identity(self) -> str:
        """The heads file (path, size, time): retraining invalidates cached features."""
        return file_identity(self.path)

    def encode_images_uncached(self, x: np.ndarray, meta: DatasetMeta) -> np.ndarray:
        """EfficientNet-Lite0 features through the image head, unit norm."""
        import torch

        p: TwoTowerParams = self.params  # type: ignore[assignment]
        feats = image_tower_features(x, meta, self.recipe.image_size, p.batch_size)
        with torch.no_grad():
            out: np.ndarray = self.heads.embed_image(torch.as_tensor(feats)).numpy()
        return out.astype(np.float32)

    def encode_texts(self, texts: Sequence[str]) -> np.ndarray:
        """MiniLM sentence embeddings through the text head, unit norm."""
        import torch

        with torch.no_grad():
            out: np.ndarray = self.heads.embed_text(text_tower_features(texts)).numpy()
        return out.astype(np.float32)

    def init_context(self, n_ctx: int, seed: int) -> Any:
        """CoOp's random init: ``N(0, 0.02^2)`` vectors of MiniLM's word-embedding width."""
        import torch

        gen = torch.Generator().manual_seed(seed % 2**63)
        return 0.02 * torch.randn(n_ctx, self.context_dim, generator=gen)

    def context_from_text(self, text: str) -> Any:
        """MiniLM word embeddings of ``text`` (no special tokens)."""
        import torch

        from flowerbed.models.minilm import load_sentence_encoder

        enc = load_sentence_encoder()
        return enc.model.word_embeddings(torch.tensor(enc.token_ids(text))).clone()

    def prompt_text_features(self, context: Any, class_names: Sequence[str]) -> Any:
        """``[CLS] ctx <name> . [SEP]`` through MiniLM and the text head; grads reach ``ctx``."""
        import torch

        from flowerbed.models.minilm import load_sentence_encoder

        enc = load_sentence_encoder()
        names = [enc.model.word_embeddings(torch.tensor(enc.token_ids(f"{n}.")))
                 for n in class_names]
        words, keep = enc.pack([torch.cat([context, n]) for n in names])
        return self.heads.embed_text(enc.model.sentence_embedding(words, keep))

"""``open_clip``: any open_clip architecture with weights from a local checkpoint.

open_clip (Ilharco et al., 2021; Cherti et al., 2023, arXiv 2212.07143) builds
the architecture from a config name or a JSON config file; the weights always
come from the ``checkpoint`` path given in the scenario (a state dict as saved
by ``torch.save(model.state_dict(), path)`` or an open_clip training checkpoint).
Pretrained tags and Hugging Face hub names are refused: nothing is downloaded.
``flowerbed-tiny`` is a tiny ViT config registered here for tests.

Prompt tuning (CoOp, Zhou et al., 2022, arXiv 2109.01134) places the context
vectors right after the start-of-text token, runs the text transformer and
takes the final features at the end-of-text position, as CoOp does.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import Field

from flowerbed.core.registry import Params, register
from flowerbed.data.base import DatasetMeta
from flowerbed.models.vlm import VisionLanguageModel, VlmParams, file_identity

if TYPE_CHECKING:
    import torch

INSTALL_HINT = "pip install open_clip_torch (or pip install 'flowerbed[vlm]')"
TINY_NAME = "flowerbed-tiny"
#: A tiny ViT-CLIP (about 3.4 M parameters, most in the token embedding) for tests.
TINY_CONFIG: dict[str, Any] = {
    "embed_dim": 32,
    "vision_cfg": {"image_size": 32, "layers": 2, "width": 64, "patch_size": 8, "head_width": 32},
    "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 64, "heads": 2,
                 "layers": 2},
}
#: CLIP's pre-processing statistics, used when a config gives none.
OPENAI_MEAN = (0.48145466, 0.4578275, 0.40821073)
OPENAI_STD = (0.26862954, 0.26130258, 0.27577711)


class OpenClipParams(VlmParams):
    """Architecture, local weights, input size, precision and device."""

    model: str = Field(TINY_NAME, description="open_clip config name, or a .json config path")
    checkpoint: str = Field(description="local weights file (state dict or training checkpoint)")
    image_size: int | None = Field(None, ge=8, description="override the config's image size")
    precision: Literal["fp32", "fp16", "bf16"] = "fp32"
    device: str = Field("cpu", description="torch device, or 'auto' (cuda when available)")
    batch_size: int = Field(64, ge=1, description="images per forward pass")


def open_clip_module() -> Any:
    """``import open_clip`` with the one-line install hint on failure."""
    try:
        import open_clip
    except ImportError:
        raise ImportError(f"the open_clip vlm needs open_clip: {INSTALL_HINT}") from None
    return open_clip


@functools.cache
def register_config(model: str) -> str:
    """Make ``model`` known to open_clip; return its config name.

    A ``.json`` path is registered under its file stem; ``flowerbed-tiny`` is
    written to a temporary file and registered; other names must be built in.
    """
    oc = open_clip_module()
    if model.startswith(("hf-hub:", "local-dir:")):
        raise ValueError(f"vlm open_clip: model {model!r}: hub and folder schemas are not "
                         "supported (give a config name or a .json path, and a checkpoint)")
    if model.endswith(".json"):
        path = Path(model)
        if not path.is_file():
            raise FileNotFoundError(f"vlm open_clip: model config {path} not found")
        cfg = json.loads(path.read_text())
        if not all(k in cfg for k in ("embed_dim", "vision_cfg", "text_cfg")):
            raise ValueError(f"vlm open_clip: {path} lacks embed_dim/vision_cfg/text_cfg")
        oc.add_model_config(path)
        return path.stem
    if model == TINY_NAME and model not in oc.list_models():
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / f"{TINY_NAME}.json"
            path.write_text(json.dumps(TINY_CONFIG))
            oc.add_model_config(path)
    if model not in oc.list_models():
        raise ValueError(f"vlm open_clip: unknown model config {model!r} (open_clip has "
                         f"{len(oc.list_models())} built in, e.g. ViT-B-32, RN50; or give a .json)")
    return model


def build_open_clip(
    model: str, checkpoint: str | None, image_size: int | None = None, precision: str = "fp32",
    device: str = "cpu",
) -> Any:
    """The open_clip model in eval mode with ``checkpoint`` loaded (strict); gradients off.

    ``checkpoint=None`` gives the random initialisation (tests only).
    """
    oc = open_clip_module()
    name = register_config(model)
    if checkpoint is not None and not Path(checkpoint).is_file():
        raise FileNotFoundError(
            f"vlm open_clip: checkpoint {checkpoint} not found; set vlm.checkpoint to a local "
            "weights file (open_clip weights are never downloaded)"
        )
    with _quiet_random_init_warning():
        net = oc.create_model(name, pretrained=None, precision=precision, device=device,
                              force_image_size=image_size, pretrained_image=False,
                              pretrained_text=False)
    if checkpoint is not None:
        oc.load_checkpoint(net, checkpoint, strict=True, device=device)
    net.eval()
    for p in net.parameters():
        p.requires_grad_(False)
    return net


@contextlib.contextmanager
def _quiet_random_init_warning() -> Iterator[None]:
    """Hide open_clip's "initialized randomly" warning: the checkpoint is loaded next."""

    def keep(record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("No pretrained weights loaded")

    root = logging.getLogger()
    root.addFilter(keep)
    try:
        yield
    finally:
        root.removeFilter(keep)


@functools.lru_cache(maxsize=2)
def _cached_model(model: str, checkpoint: str, identity: str, image_size: int | None,
                  precision: str, device: str) -> tuple[Any, Any]:
    del identity  # part of the cache key: a replaced file is reloaded
    net = build_open_clip(model, checkpoint, image_size, precision, device)
    return net, open_clip_module().get_tokenizer(register_config(model))


def _text_parts(net: Any) -> Any:
    """The module holding the text transformer (``net`` itself for CLIP, ``net.text`` else)."""
    text = getattr(net, "text", net)
    pool = getattr(text, "text_pool_type", getattr(text, "pool_type", None))
    if not hasattr(text, "token_embedding") or pool != "argmax":
        raise NotImplementedError("vlm open_clip: prompt tuning needs a CLIP text transformer "
                                  "pooled at the end-of-text token (this config's is not)")
    return text


@register("vlm", "open_clip", params=OpenClipParams)
class OpenClipVLM(VisionLanguageModel):
    """Any open_clip architecture, weights from a local checkpoint (never downloaded)."""

    def __init__(self, params: Params) -> None:
        # torch only once the model is built: validating a scenario must stay light.
        import torch

        super().__init__(params)
        p: OpenClipParams = params  # type: ignore[assignment]
        self.device = ("cuda" if torch.cuda.is_available() else "cpu") if p.device == "auto" \
            else p.device
        if not Path(p.checkpoint).is_file():
            raise FileNotFoundError(
                f"vlm open_clip: checkpoint {p.checkpoint} not found; set vlm.checkpoint to a "
                "local weights file (open_clip weights are never downloaded)"
            )
        self.model, self.tokenizer = _cached_model(
            p.model, p.checkpoint, file_identity(p.checkpoint), p.image_size, p.precision,
            self.device,
        )
        with torch.no_grad():
            probe = self.model.encode_text(self.tokenizer(["a"]).to(self.device))
        self.dim = int(probe.shape[-1])
        embedding = getattr(getattr(self.model, "text", self.model), "token_embedding", None)
        self.context_dim = int(embedding.weight.shape[1]) if embedding is not None else 0
        self.logit_scale = min(float(self.model.logit_scale.exp()), 100.0)
        cfg = getattr(self.model.visual, "preprocess_cfg", {}) or {}
        size = getattr(self.model.visual, "image_size", 224)
        self.image_size = int(size[0] if isinstance(size, (tuple, list)) else size)
        self.mean = tuple(cfg.get("mean", OPENAI_MEAN))
        self.std = tuple(cfg.get("std", OPENAI_STD))

    cache_ignore = frozenset({"feature_cache", "batch_size"})

    def weights_identity(self) -> str:
        """The checkpoint file (path, size, time)."""
        p: OpenClipParams = self.params  # type: ignore[assignment]
        return file_identity(p.checkpoint)

    def _dtype(self) -> torch.dtype:
        dtype: torch.dtype = next(self.model.parameters()).dtype
        return dtype

    def encode_images_uncached(self, x: np.ndarray, meta: DatasetMeta) -> np.ndarray:
        """Images resized to the model's size, CLIP-normalised, through the image tower."""
        import torch
        from torch.nn import functional as F

        from flowerbed.models.encoders import to_image_batch

        p: OpenClipParams = self.params  # type: ignore[assignment]
        img = to_image_batch(x, meta, self.image_size, 1.0)
        mean = torch.tensor(self.mean).view(1, 3, 1, 1)
        std = torch.tensor(self.std).view(1, 3, 1, 1)
        parts = []
        with torch.no_grad():
            for i in range(0, len(img), p.batch_size):
                b = ((img[i : i + p.batch_size] - mean) / std).to(self.device, self._dtype())
                parts.append(F.normalize(self.model.encode_image(b).float(), dim=-1).cpu())
        return torch.cat(parts).numpy().astype(np.float32)

    def encode_texts(self, texts: Sequence[str]) -> np.ndarray:
        """Tokenised texts through the text tower, unit norm."""
        import torch
        from torch.nn import functional as F

        with torch.no_grad():
            tokens = self.tokenizer(list(texts)).to(self.device)
            out = F.normalize(self.model.encode_text(tokens).float(), dim=-1)
        return out.cpu().numpy().astype(np.float32)

    def init_context(self, n_ctx: int, seed: int) -> Any:
        """CoOp's random init: ``N(0, 0.02^2)`` vectors of the token-embedding width."""
        import torch

        gen = torch.Generator().manual_seed(seed % 2**63)
        return 0.02 * torch.randn(n_ctx, self.context_dim, generator=gen)

    def context_from_text(self, text: str) -> Any:
        """Token embeddings of ``text`` (between start and end of text)."""
        tokens = self.tokenizer([text])[0]
        end = int(tokens.argmax())
        emb = _text_parts(self.model).token_embedding(tokens[1:end].to(self.device))
        return emb.float().cpu().clone()

    def prompt_text_features(self, context: Any, class_names: Sequence[str]) -> Any:
        """``[SOT] ctx <name> . [EOT]`` through the text transformer; grads reach ``ctx``."""
        import torch
        from torch.nn import functional as F

        text = _text_parts(self.model)
        n_ctx = context.shape[0]
        placeholder = " ".join(["X"] * n_ctx)
        tokens = self.tokenizer([f"{placeholder} {n}." for n in class_names]).to(self.device)
        if int(tokens[0].argmax()) <= n_ctx + 1:
            raise ValueError(f"vlm open_clip: {n_ctx} context vectors leave no room for the "
                             f"class name in {tokens.shape[1]} tokens")
        dtype = self._dtype()
        emb = text.token_embedding(tokens).to(dtype)
        ctx = context.to(self.device, dtype).expand(len(class_names), -1, -1)
        x = torch.cat([emb[:, :1], ctx, emb[:, 1 + n_ctx :]], dim=1)
        x = x + text.positional_embedding.to(dtype)
        x = text.transformer(x, attn_mask=text.attn_mask)
        x = text.ln_final(x)
        x = x[torch.arange(len(tokens), device=x.device), tokens.argmax(dim=-1)]
        proj = text.text_projection
        x = proj(x) if isinstance(proj, torch.nn.Linear) else x @ proj
        return F.normalize(x.float(), dim=-1)

"""Torch modules of the ``two_tower`` VLM (:mod:`flowerbed.models.vlm_two_tower`).

Kept apart from the registered params, which a scenario's validation imports,
so that only training or loading the heads imports torch.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from flowerbed.algorithms.clip_loss import CLIP_INIT_LOGIT_SCALE
from flowerbed.models.vlm_two_tower import IMAGE_DIM, TEXT_DIM


class Heads(nn.Module):
    """Projection heads (with the image-feature standardisation) and the logit scale."""

    image_mean: torch.Tensor
    image_std: torch.Tensor

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.image = _head(IMAGE_DIM, dim, hidden)
        self.text = _head(TEXT_DIM, dim, hidden)
        self.log_scale = nn.Parameter(torch.tensor(float(np.log(CLIP_INIT_LOGIT_SCALE))))
        self.register_buffer("image_mean", torch.zeros(IMAGE_DIM))
        self.register_buffer("image_std", torch.ones(IMAGE_DIM))

    def embed_image(self, feats: torch.Tensor) -> torch.Tensor:
        """Unit-norm joint embedding of EfficientNet features."""
        z = (feats - self.image_mean) / self.image_std
        return F.normalize(self.image(z), dim=-1)

    def embed_text(self, feats: torch.Tensor) -> torch.Tensor:
        """Unit-norm joint embedding of MiniLM sentence embeddings."""
        return F.normalize(self.text(feats), dim=-1)


def _head(cin: int, dim: int, hidden: int) -> nn.Module:
    if hidden == 0:
        return nn.Linear(cin, dim)
    return nn.Sequential(nn.Linear(cin, hidden), nn.GELU(), nn.Linear(hidden, dim))

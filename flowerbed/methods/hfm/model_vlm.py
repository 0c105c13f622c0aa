"""The ``hfm_hierarchy`` vision-language model: text side of HFM's controlled set.

Pairs with the ``hfm_hierarchy`` dataset (:mod:`flowerbed.methods.hfm.data`): image
rows are already unit features; a text naming class ``h<world>-s<k>-c<j>`` maps
to ``normalise(u_c + text_noise r_c / sqrt(dim))``. ``dim`` and ``sibling``
must equal the dataset's (a different ``dim`` is refused; the world comes from
the class name). A toy / test asset, no prompt tuning.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from pydantic import Field

from flowerbed.core.registry import Params, register
from flowerbed.core.seeds import rng
from flowerbed.data.base import DatasetMeta
from flowerbed.methods.hfm.data import parse_name, text_feature
from flowerbed.models.vlm import VisionLanguageModel


class HierarchyVlmParams(Params):
    """Must match the dataset: ``dim`` and ``sibling``; ``text_noise`` sets zero-shot quality."""

    dim: int = Field(64, ge=2, description="must equal the hfm_hierarchy dataset's dim")
    sibling: float = Field(0.5, ge=0, description="must equal the dataset's sibling")
    text_noise: float = Field(0.8, ge=0, description="noise of the class text features")


@register("vlm", "hfm_hierarchy", params=HierarchyVlmParams)
class HierarchyVlm(VisionLanguageModel):
    """Rows are features (normalised); class texts rebuilt from the hierarchy's centres."""

    logit_scale = 100.0

    def __init__(self, params: Params) -> None:
        super().__init__(params)
        p: HierarchyVlmParams = params  # type: ignore[assignment]
        self.dim, self.context_dim = p.dim, 1

    def encode_images_uncached(self, x: np.ndarray, meta: DatasetMeta) -> np.ndarray:
        """The rows, normalised (they are the hfm_hierarchy dataset's features)."""
        if x.shape[1] != self.dim:
            raise ValueError(f"vlm hfm_hierarchy: dim={self.dim} but dataset {meta.name!r} "
                             f"rows have {x.shape[1]} values; set the vlm's dim to the dataset's")
        z = np.asarray(x, dtype=np.float64)
        return (z / np.linalg.norm(z, axis=1, keepdims=True)).astype(np.float32)

    def encode_texts(self, texts: Sequence[str]) -> np.ndarray:
        """Class text features for texts naming a class, else a seeded random direction."""
        p: HierarchyVlmParams = self.params  # type: ignore[assignment]
        rows = []
        for text in texts:
            named = parse_name(text)
            if named is None:
                z = rng(0, "hfm_hierarchy", "text", text).standard_normal(self.dim)
                rows.append(z / np.linalg.norm(z))
            else:
                rows.append(text_feature(*named, self.dim, p.sibling, p.text_noise))
        return np.asarray(rows, dtype=np.float32)

"""SparseSSM's Mamba (arXiv 2506.09613): a byte-level Mamba-1 LM, pre-trained here or loaded.

No pretrained Mamba ships offline, so ``flowerbed pretrain sparsessm_mamba``
trains transformers' ``MambaForCausalLM`` (Mamba-1, same parameter names as
the official checkpoints) on the training block of ``sparsessm_text`` (WordNet
glosses, fortunes, stdlib code; the held-out block is never seen) and caches
it with its held-out perplexity beside unigram and bigram models. Training
uses the fast scan of :mod:`flowerbed.methods.sparsessm.algorithm_scan`. Any other
Mamba-1 folder (``save_pretrained`` output, e.g. a copied ``state-spaces``
snapshot converted to transformers) loads with ``folder:``; nothing is
downloaded, and a Hub name is refused in one line. This module stays light:
torch and transformers load in :mod:`flowerbed.methods.sparsessm.model_mamba`.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from pydantic import Field

from flowerbed.core.artefacts import PretrainTarget, ensure_artefact
from flowerbed.core.cache import cached_file
from flowerbed.core.registry import Params
from flowerbed.data.base import MissingExtraError
from flowerbed.models.lm import LM_EXTRA_HINT, LmError, lm_extra_installed

ARTEFACT_FORMAT = 1


class SparseSsmPretrainParams(Params):
    """Shape of the Mamba, its data and its training run (the artefact's cache key)."""

    hidden: int = Field(64, ge=8, description="d_model (D = expand · hidden)")
    layers: int = Field(4, ge=1)
    state: int = Field(16, ge=2, description="d_state N")
    expand: int = Field(2, ge=1)
    conv: int = Field(4, ge=2)
    window: int = Field(128, ge=8, description="training window (bytes)")
    n_train: int = Field(40000, ge=16, description="training windows sampled")
    n_test: int = Field(600, ge=16, description="held-out windows for the recorded perplexity")
    steps: int = Field(300, ge=1)
    batch_size: int = Field(16, ge=1)
    lr: float = Field(3e-3, gt=0)
    weight_decay: float = Field(0.01, ge=0)
    seed: int = Field(0, ge=0, description="initialisation, data sample and order")


class SparseSsmModelParams(Params):
    """The Mamba to prune: a local folder, or the pre-trained artefact (built on first use)."""

    folder: str | None = Field(
        None, description="a local Mamba-1 folder (config.json + weights); default: the cache"
    )
    pretrain: SparseSsmPretrainParams = SparseSsmPretrainParams()


def default_path(p: SparseSsmPretrainParams) -> Path:
    """Cache folder of the pre-trained model (keyed by ``p``)."""
    key = json.dumps({"format": ARTEFACT_FORMAT, **p.model_dump()}, sort_keys=True)
    return cached_file("lm", f"sparsessm_mamba-{hashlib.sha1(key.encode()).hexdigest()[:10]}")


def _pretrain(p: SparseSsmPretrainParams, out: Path) -> dict[str, float]:
    from flowerbed.methods.sparsessm.model_mamba import pretrain

    return pretrain(p, out)


PRETRAIN_TARGET = PretrainTarget(
    name="sparsessm_mamba",
    params=SparseSsmPretrainParams,
    run=_pretrain,
    default_path=default_path,
    help="byte-level Mamba-1 trained on glosses/fortunes/stdlib code (SparseSSM pruning)",
)


def model_folder(params: SparseSsmModelParams) -> Path:
    """The folder to load: ``folder`` checked (one-line error), or the artefact (trained once)."""
    if not lm_extra_installed():
        raise MissingExtraError(f"sparsessm {LM_EXTRA_HINT}")
    if params.folder is None:
        return ensure_artefact("sparsessm_mamba", params.pretrain)
    from flowerbed.models.lm_hf import model_folder as hf_folder

    try:
        return hf_folder(params.folder)
    except LmError as exc:
        raise LmError(str(exc).replace("lm 'hf'", "sparsessm model.folder")) from None


def load_model(params: SparseSsmModelParams) -> Any:
    """The ``MambaForCausalLM`` (float32, eval mode) the parameters name."""
    from flowerbed.methods.sparsessm.model_mamba import load_folder

    return load_folder(model_folder(params))

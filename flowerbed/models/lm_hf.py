"""``hf``: any Hugging Face causal LM from a local folder, loaded offline.

The folder is what ``save_pretrained`` writes (``config.json``, the weights,
the tokenizer files), e.g. a copied Hub snapshot. Nothing is downloaded: a name
such as ``HuggingFaceTB/SmolLM2-135M`` that is no local folder is refused with
one line saying which folder to give. Weights stored in bf16 are computed in
float32 unless ``dtype: bfloat16`` (slow on CPUs without AVX-512).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from flowerbed.core.registry import register, register_hint
from flowerbed.models.lm import LM_EXTRA_HINT, LmError, LmParams, lm_extra_installed

if TYPE_CHECKING:
    from flowerbed.models.lm_transformers import TransformersLM


class HfLmParams(LmParams):
    """A local model folder."""

    path: str = Field(description="folder holding config.json, the weights and the tokenizer")
    tokenizer: Literal["auto", "bytes"] = Field(
        "auto", description="auto: the folder's tokenizer files; bytes: the byte tokenizer"
    )
    prefix: str = Field(
        "", description="text the model expects at the start of a prompt, e.g. '<|endoftext|>' "
        "for a tokenizer that adds no bos token (prompt builders that follow the model's "
        "convention prepend it); empty: none"
    )


def model_folder(path: str) -> Path:
    """``path`` as a model folder, or :class:`LmError` (one line) saying what to give."""
    folder = Path(path).expanduser()
    if folder.is_dir() and (folder / "config.json").is_file():
        return folder
    if folder.is_dir():
        raise LmError(
            f"lm 'hf': {folder} has no config.json; give the folder save_pretrained wrote"
        )
    looks_like_hub = "/" in path and not path.startswith((".", "/", "~"))
    what = "a Hub name, and nothing is downloaded" if looks_like_hub else "no such folder"
    raise LmError(
        f"lm 'hf': {path!r} is {what}; give path: a local folder with config.json, weights "
        "and tokenizer (e.g. a copied snapshot of the model, or what save_pretrained wrote)"
    )


def build_hf(params: HfLmParams, seed: int | None = None) -> TransformersLM:
    """Any Hugging Face causal LM from a local folder (path: required), offline."""
    del seed  # pretrained weights: nothing random
    from flowerbed.models.lm import require_lm_extra

    folder = model_folder(params.path)
    require_lm_extra("hf")
    from flowerbed.models.lm import set_text_prefix
    from flowerbed.models.lm_transformers import load_folder

    return set_text_prefix(load_folder(folder, params.dtype, params.tokenizer), params.prefix)


if lm_extra_installed():
    register("lm", "hf", params=HfLmParams)(build_hf)
else:
    register_hint("lm", "hf", LM_EXTRA_HINT)

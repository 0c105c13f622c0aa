"""SparseSSM's second test bed: typeseg's trained bidirectional Mamba-1, loaded into torch.

The PyPI wheel ``typeseg`` (0.2.7, Apache-2.0; extra ``typeseg``) bundles a
character-level content-type segmenter, ``typeseg/data/mamba_al.npz``: byte
embedding (130 compact rows), 6 Mamba-1 blocks (d_model = d_inner = 256,
N = 16, dt_rank 16, conv 4), a final LayerNorm and a 35-class head, 1.36 M
parameters, Flax names (``CheckpointMambaBlock1D_<i>/Dense_0/kernel`` stored
as ``CheckpointMambaBlock1D_<i>__Dense_0__kernel``, kernels ``(in, out)``).
Its block differs from transformers' ``MambaMixer`` in five places, which
the mixer here carries as attributes that
:mod:`flowerbed.methods.sparsessm.algorithm_scan` reads:

- LayerNorm (ε 1e-6, with bias) instead of RMSNorm, and biases on every dense layer;
- a "same"-padded depthwise convolution (``conv_same``), not a causal one;
- ``Δ = softplus(·) + 1e-4`` (``dt_floor``);
- **bidirectional**: a second scan over the reversed sequence shares ``A_log``,
  ``D`` and the projections; the two outputs are added before the gate.

The loaded model has the duck-typed layout the scan expects
(``backbone.embeddings``, ``backbone.layers[i].norm`` / ``.mixer``,
``backbone.norm_f``, ``lm_head``), so pruning, calibration and evaluation run
unchanged. The compact byte table (bytes 0-127 as themselves, 128-255 → 128,
256 → 129) is folded into a 257-row embedding, so raw byte ids go in.
:func:`write_random_npz` writes a randomly initialised file of the same
layout (for tests that must run without the wheel).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np

from flowerbed.data.base import MissingExtraError

TYPESEG_HINT = "needs typeseg's wheel: pip install 'flowerbed[typeseg]'"
N_BYTE_IDS = 257


def compact_table() -> np.ndarray:
    """Typeseg byte-id remap: 0-127 kept, 128-255 → 128, 256 (padding) → 129."""
    table = np.arange(N_BYTE_IDS, dtype=np.int64)
    table[128:256] = 128
    table[256] = 129
    return table


def typeseg_npz() -> Path:
    """Path of the wheel's ``mamba_al.npz`` (one-line error naming the extra when absent)."""
    if importlib.util.find_spec("typeseg") is None:
        raise MissingExtraError(f"sparsessm typeseg test bed {TYPESEG_HINT}")
    from importlib.resources import files

    path = Path(str(files("typeseg") / "data" / "mamba_al.npz"))
    if not path.is_file():
        raise MissingExtraError(f"sparsessm: typeseg is installed but has no {path.name}; "
                                f"{TYPESEG_HINT}")
    return path


def read_npz(path: Path) -> dict[str, np.ndarray]:
    """The npz's arrays as float32 under ``/``-separated Flax names."""
    with np.load(path) as data:
        return {k.replace("__", "/"): np.asarray(data[k], dtype=np.float32) for k in data.files}


def n_blocks(weights: dict[str, np.ndarray]) -> int:
    """Number of ``CheckpointMambaBlock1D_<i>`` blocks in ``weights``."""
    return len({k.split("/")[0] for k in weights if k.startswith("CheckpointMambaBlock1D_")})


def build_typeseg(weights: dict[str, np.ndarray]) -> Any:
    """A torch module (float32, eval mode) holding ``weights`` in the scan's layout."""
    import torch
    from torch import nn

    class Mixer(nn.Module):
        """One bidirectional block's mixer (the scan reads its flags)."""

        bidirectional = True
        conv_same = True
        stepwise = True
        dt_floor = 1e-4

        def __init__(self, p: str) -> None:
            super().__init__()
            kin = weights[p + "Dense_0/kernel"]
            d_model, d_inner = kin.shape[0], kin.shape[1] // 2
            k_conv = weights[p + "Conv_0/kernel"].shape[0]
            a_log = weights[p + "A_log"]
            rank = weights[p + "Dense_2/kernel"].shape[0]
            self.in_proj = _linear(weights, p + "Dense_0")
            self.conv1d = nn.Conv1d(d_inner, d_inner, k_conv, groups=d_inner)
            with torch.no_grad():
                kern = weights[p + "Conv_0/kernel"]  # (k, 1, C)
                self.conv1d.weight.copy_(torch.as_tensor(np.transpose(kern, (2, 1, 0))))
                bias = self.conv1d.bias
                assert bias is not None
                bias.copy_(torch.as_tensor(weights[p + "Conv_0/bias"]))
            self.x_proj = _linear(weights, p + "Dense_1")
            self.dt_proj = _linear(weights, p + "Dense_2")
            self.out_proj = _linear(weights, p + "Dense_3")
            self.A_log = nn.Parameter(torch.as_tensor(a_log.copy()))
            self.D = nn.Parameter(torch.as_tensor(weights[p + "D"].copy()))
            self.ssm_state_size = a_log.shape[1]
            self.dims = (d_model, d_inner, rank)

    class Block(nn.Module):
        def __init__(self, i: int) -> None:
            super().__init__()
            p = f"CheckpointMambaBlock1D_{i}/"
            self.norm = _layernorm(weights, p + "LayerNorm_0")
            self.mixer = Mixer(p)

    class Backbone(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            table = weights["Embed_0/embedding"]
            full = table[compact_table()] if table.shape[0] != N_BYTE_IDS else table
            self.embeddings = nn.Embedding.from_pretrained(torch.as_tensor(full.copy()),
                                                           freeze=False)
            self.layers = nn.ModuleList([Block(i) for i in range(n_blocks(weights))])
            self.norm_f = _layernorm(weights, "LayerNorm_0")

    class TypesegMamba(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.backbone = Backbone()
            self.lm_head = _linear(weights, "Dense_0")

    return TypesegMamba().float().eval()


def _linear(weights: dict[str, np.ndarray], name: str) -> Any:
    """``nn.Linear`` from a Flax ``Dense`` (kernel ``(in, out)``, bias ``(out,)``)."""
    import torch
    from torch import nn

    kern = weights[name + "/kernel"]
    lin = nn.Linear(kern.shape[0], kern.shape[1])
    with torch.no_grad():
        lin.weight.copy_(torch.as_tensor(kern.T.copy()))
        lin.bias.copy_(torch.as_tensor(weights[name + "/bias"]))
    return lin


def _layernorm(weights: dict[str, np.ndarray], name: str) -> Any:
    """``nn.LayerNorm`` (ε 1e-6, Flax's default) from a Flax ``LayerNorm``."""
    import torch
    from torch import nn

    scale = weights[name + "/scale"]
    norm = nn.LayerNorm(scale.shape[0], eps=1e-6)
    with torch.no_grad():
        norm.weight.copy_(torch.as_tensor(scale))
        norm.bias.copy_(torch.as_tensor(weights[name + "/bias"]))
    return norm


def load_typeseg(path: Path | None = None) -> Any:
    """The torch model of ``path`` (an npz of typeseg's layout) or of the wheel's own file."""
    path = typeseg_npz() if path is None else Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"sparsessm: typeseg weights {path} not found")
    return build_typeseg(read_npz(path))


def write_random_npz(path: Path, *, layers: int = 2, d_model: int = 16, state: int = 4,
                     rank: int = 4, classes: int = 5, conv: int = 4, seed: int = 0) -> None:
    """A randomly initialised npz with typeseg's layout and names (d_inner = d_model)."""
    gen = np.random.default_rng(seed)

    def arr(*shape: int, scale: float = 0.3) -> np.ndarray:
        return (gen.standard_normal(shape) * scale).astype(np.float32)

    out = {"Embed_0__embedding": arr(130, d_model, scale=1.0),
           "LayerNorm_0__scale": 1 + arr(d_model, scale=0.1), "LayerNorm_0__bias": arr(d_model),
           "Dense_0__kernel": arr(d_model, classes), "Dense_0__bias": arr(classes)}
    for i in range(layers):
        p = f"CheckpointMambaBlock1D_{i}__"
        out |= {p + "LayerNorm_0__scale": 1 + arr(d_model, scale=0.1),
                p + "LayerNorm_0__bias": arr(d_model),
                p + "Dense_0__kernel": arr(d_model, 2 * d_model),
                p + "Dense_0__bias": arr(2 * d_model),
                p + "Conv_0__kernel": arr(conv, 1, d_model), p + "Conv_0__bias": arr(d_model),
                p + "Dense_1__kernel": arr(d_model, rank + 2 * state),
                p + "Dense_1__bias": arr(rank + 2 * state),
                p + "Dense_2__kernel": arr(rank, d_model), p + "Dense_2__bias": arr(d_model),
                p + "Dense_3__kernel": arr(d_model, d_model), p + "Dense_3__bias": arr(d_model),
                p + "A_log": arr(d_model, state, scale=0.5), p + "D": arr(d_model)}
    np.savez(path, **out)  # type: ignore[arg-type]


def typeseg_logits(model: Any, ids: np.ndarray, keeps: Any = None) -> np.ndarray:
    """Per-character logits ``(B, T, classes)`` of byte ids ``(B, T)`` under ``keeps``."""
    import torch

    from flowerbed.methods.sparsessm.algorithm_scan import model_logits

    with torch.no_grad():
        out = model_logits(model, torch.as_tensor(np.asarray(ids), dtype=torch.long), keeps)
    return np.asarray(out.double().numpy())

"""SparseSSM (arXiv 2506.09613) on the linear layers: SparseGPT with component sensitivity.

RECONSTRUCTED: the official snapshot lacks this part (``prune/sparsessm.py``,
``ffn_sequential``). Following the spec: SparseGPT (damp 0.01, block 128,
:func:`flowerbed.methods.sparsessm.algorithm_obs.sparsegpt`) on each mixer's
``in_proj``, ``x_proj``, ``dt_proj`` and ``out_proj``, layer by layer (layer
``i`` calibrated on the outputs of the pruned layers ``< i``; the input Gram
of each projection is read with forward pre-hooks). The component sensitivity
analysis prunes one component type alone (all layers, ``probe`` sparsity),
measures the perplexity increase on the calibration windows, and allocates
sparsities ``s_c ∝ 1 / Δppl_c`` (more to robust components) rescaled so that
the parameter-weighted mean is the target, capped at ``cap``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from flowerbed.methods.sparsessm.algorithm_obs import sparsegpt
from flowerbed.methods.sparsessm.algorithm_scan import model_logits, perplexity

COMPONENTS = ("in_proj", "x_proj", "dt_proj", "out_proj")


def input_grams(model: Any, windows: np.ndarray, layer: int, keeps: Sequence[Any] | None = None,
                batch_size: int = 16) -> dict[str, np.ndarray]:
    """``Σ x xᵀ`` of the inputs of each projection of ``layer`` over all windows and steps."""
    import torch

    mixer = model.backbone.layers[layer].mixer
    grams: dict[str, np.ndarray] = {}
    handles = []

    def hook(name: str) -> Any:
        def fn(_module: Any, args: tuple[torch.Tensor, ...]) -> None:
            x = args[0].reshape(-1, args[0].shape[-1]).double()
            grams[name] = grams.get(name, 0) + (x.T @ x).numpy()
        return fn

    for name in COMPONENTS:
        handles.append(getattr(mixer, name).register_forward_pre_hook(hook(name)))
    try:
        with torch.no_grad():
            for s in range(0, len(windows), batch_size):
                model_logits(model, torch.as_tensor(windows[s : s + batch_size]), keeps)
    finally:
        for h in handles:
            h.remove()
    return grams


def prune_linear(model: Any, windows: np.ndarray, sparsity: Mapping[str, float],
                 keeps: Sequence[Any] | None = None, percdamp: float = 0.01) -> None:
    """SparseGPT on the named projections of every layer, layer-sequentially, in place."""
    import torch

    for i, block in enumerate(model.backbone.layers):
        grams = input_grams(model, windows, i, keeps)
        for name, s in sparsity.items():
            if s <= 0:
                continue
            lin = getattr(block.mixer, name)
            w, _ = sparsegpt(lin.weight.detach().double().numpy(), grams[name], s,
                             percdamp=percdamp)
            with torch.no_grad():
                lin.weight.copy_(torch.as_tensor(w, dtype=lin.weight.dtype))


def component_sizes(model: Any) -> dict[str, int]:
    """Weights of each component type over all layers."""
    return {c: sum(int(getattr(b.mixer, c).weight.numel()) for b in model.backbone.layers)
            for c in COMPONENTS}


def sensitivity(model: Any, rows: np.ndarray, probe: float = 0.5) -> dict[str, float]:
    """Perplexity increase on ``rows`` (``(n, T+1)``) when one component type alone is pruned."""
    base = perplexity(model, rows)
    out = {}
    for c in COMPONENTS:
        trial = copy.deepcopy(model)
        prune_linear(trial, rows[:, :-1], {c: probe})
        out[c] = perplexity(trial, rows) - base
    return out


def allocate(target: float, sizes: Mapping[str, int], deltas: Mapping[str, float],
             cap: float = 0.95) -> dict[str, float]:
    """Sparsities ``∝ 1/Δ`` whose size-weighted mean is ``target`` (capped, excess re-spread)."""
    names = list(sizes)
    n = np.array([sizes[c] for c in names], float)
    inv = np.array([1.0 / max(deltas[c], 1e-9) for c in names])
    fixed = np.zeros(len(names), bool)
    s = np.zeros(len(names))
    for _ in range(len(names)):
        budget = target * n.sum() - (s * n)[fixed].sum()
        free = ~fixed
        s[free] = inv[free] * budget / (inv[free] * n[free]).sum()
        over = free & (s > cap)
        if not over.any():
            break
        s[over] = cap
        fixed |= over
    return {c: float(v) for c, v in zip(names, s, strict=True)}

"""Velocity field of FMA / HFM: a residual MLP with AdaLN time modulation (torch module).

The shape of FMA's ``DeepFlowMatchingNet`` (HKUST-LongGroup/FMA ``models/fm.py``,
MAR-style): an input projection to ``width``, ``depth`` residual blocks
``h + gate * MLP(LN(h) * (1 + scale) + shift)`` whose ``(shift, scale, gate)``
come from a sinusoidal embedding of ``1000 t``, and a modulated output layer.
The modulation and output layers start at zero (as in MAR), so the untrained
field is 0. FMA's default is width 512 and 12 blocks; the CPU default of the
learner is smaller (docs/methods/hfm.md).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn


def time_embedding(t: torch.Tensor, dim: int, scale: float = 1000.0) -> torch.Tensor:
    """Sinusoidal embedding ``[cos(s t f_i), sin(s t f_i)]`` with ``f_i = 10000^(-i/half)``."""
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=t.dtype) / half)
    arg = scale * t.reshape(-1, 1) * freqs
    return torch.cat([torch.cos(arg), torch.sin(arg)], dim=-1)


def _zero(layer: nn.Linear) -> nn.Linear:
    """``layer`` with zero weight and bias (MAR's initialisation of modulations and output)."""
    nn.init.zeros_(layer.weight)
    nn.init.zeros_(layer.bias)
    return layer


class _Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width, elementwise_affine=False, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(width, width), nn.SiLU(), nn.Linear(width, width))
        self.mod = nn.Sequential(nn.SiLU(), _zero(nn.Linear(width, 3 * width)))

    def forward(self, h: torch.Tensor, emb: torch.Tensor) -> torch.Tensor:
        shift, scale, gate = self.mod(emb).chunk(3, dim=-1)
        return h + gate * self.mlp(self.norm(h) * (1 + scale) + shift)


class VelocityNet(nn.Module):
    """``v(x, t)``: ``in_dim`` inputs plus time to ``out_dim`` outputs."""

    def __init__(self, in_dim: int, out_dim: int, width: int = 128, depth: int = 4) -> None:
        super().__init__()
        self.width = width
        self.inp = nn.Linear(in_dim, width)
        self.time = nn.Sequential(nn.Linear(width, width), nn.SiLU(), nn.Linear(width, width))
        self.blocks = nn.ModuleList(_Block(width) for _ in range(depth))
        self.norm = nn.LayerNorm(width, elementwise_affine=False, eps=1e-6)
        self.mod = nn.Sequential(nn.SiLU(), _zero(nn.Linear(width, 2 * width)))
        self.out = _zero(nn.Linear(width, out_dim))

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """Velocity at points ``x`` (``(N, in_dim)``) and times ``t`` (``(N, 1)`` or ``(N,)``)."""
        emb = self.time(time_embedding(t.to(x.dtype), self.width))
        h = self.inp(x)
        for block in self.blocks:
            h = block(h, emb)
        shift, scale = self.mod(emb).chunk(2, dim=-1)
        out: torch.Tensor = self.out(self.norm(h) * (1 + scale) + shift)
        return out


def build(in_dim: int, out_dim: int, width: int, depth: int, seed: int,
          dtype: torch.dtype = torch.float32) -> VelocityNet:
    """A seeded :class:`VelocityNet` (the same weights for the same arguments)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed % 2**63)
        net = VelocityNet(in_dim, out_dim, width, depth)
    return net.to(dtype)


def to_arrays(net: nn.Module) -> dict[str, np.ndarray]:
    """The net's weights as numpy arrays keyed by parameter name (what FedAvg averages)."""
    return {k: v.detach().cpu().numpy().copy() for k, v in net.state_dict().items()}


def load_arrays(net: nn.Module, arrays: dict[str, np.ndarray]) -> nn.Module:
    """Load weights from :func:`to_arrays`-style arrays (strict)."""
    ref = net.state_dict()
    state = {k: torch.as_tensor(np.asarray(arrays[k]), dtype=ref[k].dtype) for k in ref}
    net.load_state_dict(state, strict=True)
    return net

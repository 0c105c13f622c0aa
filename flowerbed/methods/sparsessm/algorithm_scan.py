"""SparseSSM (arXiv 2506.09613) scan: the selective scan of a Mamba-1 mixer, with masks.

The mixer's computation (transformers' ``MambaMixer``, same parameter names)
written out so that pruning and calibration can see inside it:

- ``x, z = in_proj(h)``; ``u = SiLU(causal depthwise conv1d(x))``;
  ``(δ, B, C) = x_proj(u)``; ``Δ = softplus(dt_proj(δ))``; ``A = -exp(A_log)``;
- ``Ā_t = exp(Δ_t ⊙ A)`` (ZOH), ``B̄_t u_t = Δ_t B_t u_t``;
- ``h_t = Ā_t ⊙ h_{t-1} + B̄_t u_t``, ``y_t = C_t · h_t + D ⊙ u_t``, gated by
  ``SiLU(z)``, then ``out_proj``.

A pruned state entry ``(d, n)`` (``mask[d, n]`` false) keeps no memory:
``Ā_t[d, n] = 0`` at every step, so ``h_t[d, n] = B̄_t u_t`` (the official
code's ``deltaA * (A != -1)``). The scan (:func:`linear_scan`) is one fused
update per step on a time-major layout with a hand-written adjoint backward;
transformers' CPU path loops over slices under autograd, whose backward
allocates a full-size gradient per step (see ``benchmarks/methods/sparsessm_experiment.py
--scan-timing``). A chunked log-space form (batched ``cxc`` products per chunk)
and a doubling scan were tried and were slower on this CPU.

Calibration (:func:`collect_layer_stats`) records, per position ``t``, the sum
over windows of ``Ā_t`` and of ``h_{t-1}²`` (``h_0 = 0``), the window count,
and the state Gram ``Σ h_{t-1}[d,:]ᵀ h_{t-1}[d,:]`` for the SparseGPT-ext
baseline. Sums, not means, so client statistics add up to pooled ones exactly.
The model is duck-typed (``backbone.embeddings``, ``backbone.layers[i].norm``
/ ``.mixer``, ``backbone.norm_f``, ``lm_head``): torch only, no transformers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch

@dataclass
class LayerStats:
    """Calibration sums of one layer (float64 numpy; add clients' stats with :func:`merge_stats`).

    Attributes
    ----------
    abar_sum
        ``(T, D, N)``: Σ over windows of ``Ā_t``.
    h2_sum
        ``(T, D, N)``: Σ over windows of ``h_{t-1}²``.
    gram
        ``(N, N)``: Σ over windows, steps and channels of ``h_{t-1}[d] h_{t-1}[d]ᵀ``.
    count
        Number of windows.
    """

    abar_sum: np.ndarray
    h2_sum: np.ndarray
    gram: np.ndarray
    count: int

    @property
    def h_mean(self) -> np.ndarray:
        """``H[t]``: the mean over windows of ``h_{t-1}²``."""
        return self.h2_sum / max(self.count, 1)


def merge_stats(parts: Sequence[LayerStats]) -> LayerStats:
    """Pooled statistics of several disjoint sets of windows (clients): plain sums."""
    if not parts:
        raise ValueError("merge_stats: no statistics to merge")
    shape = parts[0].abar_sum.shape
    for p in parts:
        if p.abar_sum.shape != shape:
            raise ValueError(f"merge_stats: shapes differ ({p.abar_sum.shape} vs {shape})")
    return LayerStats(
        abar_sum=np.sum([p.abar_sum for p in parts], axis=0),
        h2_sum=np.sum([p.h2_sum for p in parts], axis=0),
        gram=np.sum([p.gram for p in parts], axis=0),
        count=int(sum(p.count for p in parts)),
    )


def _scan_function() -> Any:
    """The autograd function of :func:`linear_scan` (built once, torch imported lazily)."""
    global _SCAN
    if _SCAN is None:
        import torch

        class _Scan(torch.autograd.Function):
            """``h_t = a_t h_{t-1} + x_t`` on time-major ``(T, M)``; adjoint-scan gradient."""

            @staticmethod
            def forward(ctx: Any, a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
                h = torch.empty_like(x)
                h[0] = x[0]
                for t in range(1, x.shape[0]):
                    torch.addcmul(x[t], a[t], h[t - 1], out=h[t])
                ctx.save_for_backward(a, h)
                return h

            @staticmethod
            def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
                a, h = ctx.saved_tensors
                gx = grad.clone()  # dL/dh_t including the future: g_t += a_{t+1} g_{t+1}
                for t in range(grad.shape[0] - 2, -1, -1):
                    gx[t].addcmul_(a[t + 1], gx[t + 1])
                ga = torch.zeros_like(a)
                ga[1:] = gx[1:] * h[:-1]
                return ga, gx

        _SCAN = _Scan
    return _SCAN


_SCAN: Any = None


def linear_scan(
    log_a: torch.Tensor, bu: torch.Tensor, keep: torch.Tensor | None = None
) -> torch.Tensor:
    """All states ``h_t = exp(log_a_t) ⊙ h_{t-1} + bu_t`` (``h_0 = 0``), ``(B, T, D, N)``.

    ``keep`` (``(D, N)`` bool) false forces ``Ā = 0`` there: ``h_t = bu_t``.
    One fused in-place update per step, time-major, and a hand-written
    backward (the adjoint recurrence run in reverse): autograd through a
    Python loop of slices allocates a full-size gradient per step instead.
    """
    abar = log_a.exp()
    if keep is not None:
        abar = abar * keep
    b, t_len, d, n = bu.shape
    a_tm = abar.transpose(0, 1).reshape(t_len, -1).contiguous()
    x_tm = bu.transpose(0, 1).reshape(t_len, -1).contiguous()
    h: torch.Tensor = _scan_function().apply(a_tm, x_tm)
    return h.reshape(t_len, b, d, n).transpose(0, 1)


def mixer_inner(mixer: Any, hidden: torch.Tensor) -> dict[str, torch.Tensor]:
    """The mixer up to the scan: ``u`` (B,T,D), gate ``z``, ``Δ`` (B,T,D), ``B``, ``C`` (B,T,N')."""
    import torch.nn.functional as F

    t_len = hidden.shape[1]
    x, z = mixer.in_proj(hidden).chunk(2, dim=-1)
    w = mixer.conv1d.weight
    k = w.shape[-1]
    low = (k - 1) // 2 if getattr(mixer, "conv_same", False) else k - 1
    x = F.conv1d(F.pad(x.transpose(1, 2), (low, k - 1 - low)), w, mixer.conv1d.bias,
                 groups=w.shape[0])[..., :t_len]
    u = F.silu(x).transpose(1, 2)
    n = mixer.A_log.shape[1]
    rank = mixer.x_proj.weight.shape[0] - 2 * n
    dbc = mixer.x_proj(u)
    dt, b_in, c_out = dbc[..., :rank], dbc[..., rank : rank + n], dbc[..., rank + n :]
    delta = F.softplus(mixer.dt_proj(dt)) + getattr(mixer, "dt_floor", 0.0)
    return {"u": u, "z": z, "delta": delta, "B": b_in, "C": c_out}


def mixer_forward(
    mixer: Any, hidden: torch.Tensor, keep: torch.Tensor | None = None,
    stats: LayerStats | None = None,
) -> torch.Tensor:
    """The mixer's output for ``hidden`` ``(B, T, d_model)``; ``stats`` gets calibration sums.

    A mixer with ``bidirectional = True`` (typeseg's block) adds a second scan
    over the reversed sequence with the same ``A_log`` and mask; its
    statistics are added as further windows, indexed by its own scan step.
    """
    import torch.nn.functional as F

    p = mixer_inner(mixer, hidden)
    y = _scan_output(mixer, p, keep, stats)
    if getattr(mixer, "bidirectional", False):
        rev = {name: v.flip(1) for name, v in p.items()}
        y = y + _scan_output(mixer, rev, keep, stats).flip(1)
    out: torch.Tensor = mixer.out_proj(y * F.silu(p["z"]))
    return out


def _scan_output(mixer: Any, p: dict[str, torch.Tensor], keep: torch.Tensor | None,
                 stats: LayerStats | None) -> torch.Tensor:
    """One direction's ``y_t = C_t · h_t + D ⊙ u_t`` (before the gate)."""
    import torch

    if getattr(mixer, "stepwise", False) and not torch.is_grad_enabled():
        return stepwise_output(mixer, p, keep, stats)
    a = -mixer.A_log.float().exp()
    log_a = p["delta"][..., None] * a  # log Ā_t, (B, T, D, N)
    bu = p["delta"][..., None] * p["B"][:, :, None, :] * p["u"][..., None]
    h = linear_scan(log_a, bu, keep)
    if stats is not None:
        add_stats(stats, log_a, h, keep)
    y: torch.Tensor = (h * p["C"][:, :, None, :]).sum(-1) + p["u"] * mixer.D
    return y


def stepwise_output(mixer: Any, p: dict[str, torch.Tensor], keep: torch.Tensor | None,
                    stats: LayerStats | None) -> torch.Tensor:
    """:func:`_scan_output` one step at a time, never holding ``(B, T, D, N)`` (no autograd).

    For long inputs of wide models (typeseg's 256 x 16 states) the full state
    tensor is hundreds of MB; this loop keeps one step's ``(B, D, N)`` and adds
    the calibration sums step by step (the same sums as :func:`add_stats`).
    """
    import torch

    a = -mixer.A_log.float().exp()
    delta, u, b_in, c_out = p["delta"], p["u"], p["B"], p["C"]
    bsz, t_len, d = u.shape
    state = u.new_zeros(bsz, d, a.shape[1])
    y = torch.empty_like(u)
    sums = None
    if stats is not None:
        sums = [torch.zeros(t_len, *a.shape, dtype=torch.float64) for _ in range(2)]
        gram = torch.zeros(a.shape[1], a.shape[1], dtype=torch.float64)
    for t in range(t_len):
        dt = delta[:, t, :, None]
        abar = torch.exp(dt * a)
        if keep is not None:
            abar = abar * keep
        if sums is not None:
            prev = state.double()
            sums[0][t] += abar.double().sum(0)
            sums[1][t] += (prev * prev).sum(0)
            gram += torch.einsum("bdn,bdm->nm", prev, prev)
        state = abar * state + (dt * u[:, t, :, None]) * b_in[:, t, None, :]
        y[:, t] = (state * c_out[:, t, None, :]).sum(-1)
    if stats is not None and sums is not None:
        stats.abar_sum += sums[0].numpy()
        stats.h2_sum += sums[1].numpy()
        stats.gram += gram.numpy()
        stats.count += bsz
    out: torch.Tensor = y + u * mixer.D
    return out


def add_stats(stats: LayerStats, log_a: torch.Tensor, h: torch.Tensor,
              keep: torch.Tensor | None) -> None:
    """Add one batch's ``Σ Ā_t``, ``Σ h_{t-1}²``, Gram and count to ``stats`` in place."""
    import torch

    abar = log_a.exp()
    if keep is not None:
        abar = abar * keep
    prev = torch.cat([torch.zeros_like(h[:, :1]), h[:, :-1]], dim=1).double()
    stats.abar_sum += abar.double().sum(0).cpu().numpy()
    stats.h2_sum += (prev**2).sum(0).cpu().numpy()
    stats.gram += torch.einsum("btdn,btdm->nm", prev, prev).cpu().numpy()
    stats.count += int(h.shape[0])


def empty_stats(t_len: int, d: int, n: int) -> LayerStats:
    """Zero statistics for windows of ``t_len`` steps and an ``(d, n)`` state."""
    return LayerStats(np.zeros((t_len, d, n)), np.zeros((t_len, d, n)), np.zeros((n, n)), 0)


def model_logits(
    model: Any, ids: torch.Tensor, keeps: Sequence[torch.Tensor | None] | None = None,
    collect: dict[int, LayerStats] | None = None,
) -> torch.Tensor:
    """Logits ``(B, T, V)`` of a Mamba LM with per-layer keep masks; fills ``collect[i]``."""
    bb = model.backbone
    hidden = bb.embeddings(ids)
    for i, block in enumerate(bb.layers):
        keep = None if keeps is None else keeps[i]
        stats = None if collect is None else collect.get(i)
        hidden = hidden + mixer_forward(block.mixer, block.norm(hidden), keep, stats)
    logits: torch.Tensor = model.lm_head(bb.norm_f(hidden))
    return logits


def collect_layer_stats(
    model: Any, windows: np.ndarray, layers: Sequence[int],
    keeps: Sequence[torch.Tensor | None] | None = None, batch_size: int = 16,
) -> dict[int, LayerStats]:
    """Calibration sums of ``layers`` on input windows ``(n, T)`` (int ids), under ``keeps``."""
    import torch

    blocks = model.backbone.layers
    collect = {i: empty_stats(windows.shape[1], *blocks[i].mixer.A_log.shape) for i in layers}
    last = max(layers, default=-1)
    with torch.no_grad():
        for s in range(0, len(windows), batch_size):
            ids = torch.as_tensor(windows[s : s + batch_size], dtype=torch.long)
            hidden = model.backbone.embeddings(ids)
            for i, block in enumerate(blocks[: last + 1]):  # later layers are not needed
                keep = None if keeps is None else keeps[i]
                hidden = hidden + mixer_forward(block.mixer, block.norm(hidden), keep,
                                                collect.get(i))
    return collect


def perplexity(
    model: Any, rows: np.ndarray, keeps: Sequence[torch.Tensor | None] | None = None,
    batch_size: int = 32,
) -> float:
    """Per-token perplexity on ``rows`` ``(n, T + 1)``: inputs ``[:, :-1]``, targets ``[:, 1:]``."""
    import torch
    import torch.nn.functional as F

    total, count = 0.0, 0
    with torch.no_grad():
        for s in range(0, len(rows), batch_size):
            ids = torch.as_tensor(rows[s : s + batch_size], dtype=torch.long)
            logits = model_logits(model, ids[:, :-1], keeps)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(),
                                   ids[:, 1:].reshape(-1), reduction="sum")
            total += float(loss)
            count += ids[:, 1:].numel()
    return float(np.exp(total / max(count, 1)))

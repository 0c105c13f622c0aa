"""SparseSSM (Tuo & Wang, arXiv 2506.09613, github.com/CFinTech/SparseSSM): OBS pruning of A_log.

Training-free one-shot pruning of Mamba's time-shared state-transition matrix
``A_log`` (``D x N`` per layer). The OBS cost of zeroing the discretised entry
``Ā_t[d, n]`` at step ``t`` is ``Ā² · H`` with the diagonal Hessian
``H[t, d, n] ∝ E h_{t-1}[d, n]²``; SparseSSM sums ``Ā`` over the calibration
windows and aggregates the per-step costs over time with weights ``w_t``::

    S[d, n] = Σ_t w_t (Σ_j Ā^{(j)}_t[d, n])² · H[t, d, n]

and prunes the ``round(s · D · N)`` smallest entries of each layer, layer by
layer (layer ``i + 1`` calibrated on the outputs of the pruned layer ``i``). A
pruned entry keeps no memory (``Ā = 0`` at every step; see
:mod:`flowerbed.methods.sparsessm.algorithm_scan`). Variants are parameters: the
``unstructured`` mask, ``nm`` (``n`` smallest of every ``m`` consecutive states
of a row; the official default time weighting there is ``window``) and
``structured`` (each step votes for its ``k`` lowest state columns by
``Σ_d A_log² H[t]``; the most-voted columns are deleted from ``A_log`` and the
``B``/``C`` rows of ``x_proj``). Baselines on ``A_log``: magnitude (keep the
largest ``|A_log|``), random, SparseGPT-ext (OBS with the state Gram
``Σ h hᵀ``, :func:`flowerbed.methods.sparsessm.algorithm_obs.sparsegpt`), and uniform
time weights (the ablation).

One deliberate difference from the official code: ``H`` is the plain mean of
``h_{t-1}²`` over windows. The official running update
``H ← H·n/(n+1) + h²`` weights window ``j`` of ``N`` by ``j/N`` (it depends on
the order of the windows), so no exchange of client sums could reproduce it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from flowerbed.methods.sparsessm.algorithm_obs import sparsegpt
from flowerbed.methods.sparsessm.algorithm_scan import LayerStats

if TYPE_CHECKING:
    import torch

TimeMode = Literal["power", "discount", "linear", "window", "uniform"]
Method = Literal["sparsessm", "magnitude", "random", "sparsegpt", "uniform_time"]
Pattern = Literal["unstructured", "nm", "structured"]
#: ``stats_for(layers, keeps) -> {layer: LayerStats}``: calibration under the current masks.
StatsFn = Callable[[Sequence[int], "Sequence[torch.Tensor | None]"], dict[int, LayerStats]]

METHODS: tuple[Method, ...] = ("sparsessm", "magnitude", "random", "sparsegpt", "uniform_time")


def time_weights(
    steps: int, mode: TimeMode = "power", gamma: float = 0.9, k_frac: float = 0.25,
    power: float = 1.0,
) -> np.ndarray:
    """Normalised weights ``w_t`` over ``steps`` positions (the official five modes)."""
    t = np.arange(steps, dtype=np.float64)
    if mode == "discount":
        w = gamma**t
    elif mode == "linear":
        w = steps - t
    elif mode == "power":
        w = (t + 1.0) ** (-power)
    elif mode == "window":
        w = np.zeros(steps)
        w[: max(1, math.ceil(k_frac * steps))] = 1.0
    else:
        w = np.ones(steps)
    out: np.ndarray = w / (w.sum() + 1e-12)
    return out


def window_steps(steps: int, k_frac: float = 0.25) -> int:
    """Positions the ``window`` mode weighs: ``max(1, ⌈k_frac · steps⌉)``."""
    return max(1, math.ceil(k_frac * steps))


def saliency(stats: LayerStats, mode: TimeMode = "power", steps: int | None = None,
             **kw: float) -> np.ndarray:
    """``S[d, n] = Σ_t w_t (Σ_j Ā_t)² H_t``; ``steps`` is the full length when ``stats`` is cut.

    With statistics truncated to their first ``⌈k_frac T⌉`` steps (the
    compressed upload) the ``window`` score is unchanged: give ``steps = T``.
    """
    t_have = stats.abar_sum.shape[0]
    w = time_weights(steps or t_have, mode, **kw)[:t_have]  # type: ignore[arg-type]
    metric = stats.abar_sum**2 * stats.h_mean
    out: np.ndarray = np.einsum("t,tdn->dn", w, metric)
    return out


def lowest_keep(score: np.ndarray, sparsity: float) -> np.ndarray:
    """Keep-mask pruning exactly ``round(sparsity · size)`` lowest entries (stable ties)."""
    k = round(sparsity * score.size)
    keep = np.ones(score.size, dtype=bool)
    keep[np.argsort(score.ravel(), kind="stable")[:k]] = False
    return keep.reshape(score.shape)


def nm_keep(score: np.ndarray, prunen: int, prunem: int) -> np.ndarray:
    """Keep-mask pruning the ``prunen`` lowest of every ``prunem`` consecutive entries of a row."""
    rows, cols = score.shape
    if not 0 < prunen < prunem or cols % prunem:
        raise ValueError(f"N:M pattern {prunen}:{prunem} needs 0 < N < M and M | {cols} states")
    groups = score.reshape(rows, cols // prunem, prunem)
    order = np.argsort(groups, axis=-1, kind="stable")[..., :prunen]
    keep = np.ones_like(groups, dtype=bool)
    np.put_along_axis(keep, order, False, axis=-1)
    return keep.reshape(rows, cols)


def channel_keep(score: np.ndarray, sparsity: float) -> np.ndarray:
    """Keep-mask pruning the ``round(sparsity · N)`` lowest entries of every row (channel).

    The per-channel allocation (a variant, not the paper's code): every
    channel keeps the same number of states, so none is emptied, whereas the
    official per-layer lowest-K can prune all ``N`` states of a channel.
    """
    k = round(sparsity * score.shape[1])
    keep = np.ones_like(score, dtype=bool)
    order = np.argsort(score, axis=1, kind="stable")[:, :k]
    np.put_along_axis(keep, order, False, axis=1)
    return keep


def emptied_channels(keep: np.ndarray) -> int:
    """Number of channels (rows) whose every state is pruned."""
    return int((~keep).all(axis=1).sum())


def structured_columns(a_log: np.ndarray, h_mean: np.ndarray, sparsity: float) -> np.ndarray:
    """State columns to delete: each step votes for its ``k`` lowest ``Σ_d A_log² H[t]``.

    ``k = round(sparsity · N)``; the ``k`` most-voted columns win (ties to
    the lower index). Returns the sorted indices.
    """
    n = a_log.shape[1]
    k = round(sparsity * n)
    if k == 0:
        return np.zeros(0, dtype=np.int64)
    per_step = np.einsum("dn,tdn->tn", a_log**2, h_mean)
    votes = np.zeros(n)
    for col_scores in per_step:
        votes[np.argsort(col_scores, kind="stable")[:k]] += 1
    chosen = np.argsort(-votes, kind="stable")[:k]
    return np.sort(chosen).astype(np.int64)


def magnitude_keep(a_log: np.ndarray, sparsity: float) -> np.ndarray:
    """MP: prune the ``round(s·D·N)`` smallest ``|A_log|`` (the slowest-decaying states)."""
    return lowest_keep(np.abs(a_log), sparsity)


def random_keep(shape: tuple[int, int], sparsity: float, seed: int) -> np.ndarray:
    """A seeded uniformly random mask with exactly ``round(s·D·N)`` pruned entries."""
    score = np.random.default_rng(seed).random(shape)
    return lowest_keep(score, sparsity)


@dataclass(frozen=True)
class PruneSpec:
    """What to prune and how (one cell of the experiment)."""

    method: Method = "sparsessm"
    pattern: Pattern = "unstructured"
    sparsity: float = 0.5
    prunen: int = 2
    prunem: int = 4
    time_mode: TimeMode | None = None  # None: power (unstructured) / window (nm), as coded
    #: ``layer``: the official lowest-K over each layer's ``D x N`` scores; ``channel``: the
    #: same count taken per channel (:func:`channel_keep`; unstructured only)
    allocation: Literal["layer", "channel"] = "layer"
    k_frac: float = 0.25
    sequential: bool = True
    seed: int = 0
    percdamp: float = 0.01
    blocksize: int = 128

    @property
    def weighting(self) -> TimeMode:
        """The time weighting used: uniform for the ablation, else as given or the default."""
        if self.method == "uniform_time":
            return "uniform"
        if self.time_mode is not None:
            return self.time_mode
        return "window" if self.pattern == "nm" else "power"

    @property
    def needs_stats(self) -> bool:
        """Whether calibration statistics are needed (not for magnitude and random)."""
        return self.method not in ("magnitude", "random")


@dataclass
class PruneResult:
    """Masks (``None`` where a layer is dense) and, for ``structured``, deleted columns."""

    keeps: list[Any]
    removed: list[np.ndarray] = field(default_factory=list)
    rounds: int = 0


def layer_keep(spec: PruneSpec, a_log: np.ndarray, stats: LayerStats | None,
               layer: int) -> tuple[np.ndarray, np.ndarray | None]:
    """One layer's keep-mask and, for SparseGPT-ext, its compensated ``A_log``."""
    nm = spec.pattern == "nm"
    if spec.method == "magnitude":
        score = np.abs(a_log)
    elif spec.method == "random":
        score = np.random.default_rng([spec.seed, layer]).random(a_log.shape)
    elif spec.method == "sparsegpt":
        assert stats is not None
        w, keep = sparsegpt(a_log, stats.gram, spec.sparsity,
                            prunen=spec.prunen if nm else 0, prunem=spec.prunem if nm else 0,
                            blocksize=spec.blocksize, percdamp=spec.percdamp)
        return keep, w
    else:
        assert stats is not None
        score = saliency(stats, spec.weighting, k_frac=spec.k_frac)
    if nm:
        keep = nm_keep(score, spec.prunen, spec.prunem)
    elif spec.allocation == "channel":
        keep = channel_keep(score, spec.sparsity)
    else:
        keep = lowest_keep(score, spec.sparsity)
    return keep, None


def prune_model(model: Any, spec: PruneSpec, stats_for: StatsFn | None) -> PruneResult:
    """Prune every layer's ``A_log`` of ``model`` in place (masks returned, module edited).

    ``stats_for(layers, keeps)`` calibrates the model under the current masks:
    pooled windows (:func:`flowerbed.methods.sparsessm.algorithm_scan.collect_layer_stats`)
    or a federation (one exchange per call). ``spec.sequential``: one call per
    layer, each after the previous layers were pruned (the paper's form);
    otherwise one call for all layers of the dense model (the one-round
    approximation). ``structured`` deletes columns (``keeps`` stay ``None``).
    """
    import torch

    layers = model.backbone.layers
    n_layers = len(layers)
    keeps: list[Any] = [None] * n_layers
    result = PruneResult(keeps=keeps)
    pooled: dict[int, LayerStats] = {}
    if spec.needs_stats and not spec.sequential:
        assert stats_for is not None
        pooled = stats_for(list(range(n_layers)), keeps)
        result.rounds = 1
    for i, block in enumerate(layers):
        mixer = block.mixer
        stats = pooled.get(i)
        if spec.needs_stats and spec.sequential:
            assert stats_for is not None
            stats = stats_for([i], keeps)[i]
            result.rounds += 1
        a_log = mixer.A_log.detach().double().cpu().numpy()
        if spec.pattern == "structured":
            if spec.method == "sparsessm":
                assert stats is not None
                cols = structured_columns(a_log, stats.h_mean, spec.sparsity)
            else:  # magnitude / random column choices for comparison
                score = (np.abs(a_log).sum(0) if spec.method == "magnitude"
                         else np.random.default_rng([spec.seed, i]).random(a_log.shape[1]))
                cols = np.sort(np.argsort(score, kind="stable")[: round(
                    spec.sparsity * a_log.shape[1])])
            remove_state_columns(mixer, cols)
            result.removed.append(cols)
            continue
        keep, new_a_log = layer_keep(spec, a_log, stats, i)
        if new_a_log is not None:
            with torch.no_grad():
                mixer.A_log.copy_(torch.as_tensor(new_a_log, dtype=mixer.A_log.dtype))
        keeps[i] = torch.as_tensor(keep)
    return result


def remove_state_columns(mixer: Any, cols: np.ndarray) -> None:
    """Delete state dims ``cols`` from ``A_log`` and from the ``B``/``C`` rows of ``x_proj``.

    ``x_proj``'s output dim becomes ``dt_rank + 2 (N - k)``.
    """
    import torch

    n = mixer.A_log.shape[1]
    keep_cols = torch.as_tensor([c for c in range(n) if c not in set(cols.tolist())])
    rank = mixer.x_proj.weight.shape[0] - 2 * n
    w = mixer.x_proj.weight.detach()
    rows = torch.cat([torch.arange(rank), rank + keep_cols, rank + n + keep_cols])
    new_proj = torch.nn.Linear(w.shape[1], len(rows), bias=False, dtype=w.dtype)
    with torch.no_grad():
        new_proj.weight.copy_(w[rows])
    mixer.x_proj = new_proj
    mixer.A_log = torch.nn.Parameter(mixer.A_log.detach()[:, keep_cols].clone())
    mixer.ssm_state_size = len(keep_cols)


def pruned_fraction(keeps: Sequence[Any]) -> float:
    """Fraction of ``A_log`` entries pruned over all layers with a mask."""
    total = sum(int(k.numel()) for k in keeps if k is not None)
    off = sum(int((~k).sum()) for k in keeps if k is not None)
    return off / max(total, 1)


def export_masked(model: Any, keeps: Sequence[Any], sentinel: float = 50.0) -> None:
    """Write masks into ``A_log`` for a stock Mamba: ``A_log = +50`` ⇒ ``Ā = 0`` in float32."""
    import torch

    with torch.no_grad():
        for block, keep in zip(model.backbone.layers, keeps, strict=True):
            if keep is not None:
                block.mixer.A_log.masked_fill_(~keep, sentinel)

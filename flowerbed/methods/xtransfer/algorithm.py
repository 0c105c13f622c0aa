"""XTransfer (Zhang et al., arXiv 2506.22726): anchor space, S-score, repair and removal.

The maths of the SRR pipeline (Splice -> Repair -> Removal) of the official code
(github.com/zhangy10/XTransfer, ``xtransfer/trans.py``, ``tools.py``,
``sampling_losses.py``), with its ``configs/hhar_single.yaml`` defaults set by the
caller. The layer-wise search that uses these pieces is
:mod:`flowerbed.methods.xtransfer.algorithm_search`.

- Feature of a layer output: ``F(x) = normalize(GAP(x))`` (``NORM_MODE='IS'``: anchors
  and targets both L2-normalised).
- Anchor space: PCA (2 components) fitted on a layer's normalised source anchors;
  anchors are per-class chunk means of source activations (:func:`align_anchors`).
- S-score: mean over classes of the mean silhouette of the class's points in
  the anchor space (:func:`s_score`).
- Repair (:func:`plan_repair`, :func:`repair_loss`, :func:`repair`): scale the
  target into the anchor space, rotate it (2x2 matrix aligning the mean target
  centroid with the mean top-anchor centroid), map target classes to distinct
  top anchor classes (Hungarian), then train connector + layer so every ``z_i``
  lands on its mapped anchor while samples of different classes stay ``margin``
  apart (L1 distances).
- Removal (:func:`removal`): rank each channel group by the mean absolute PCA
  loading of its anchor activation; mask the ``n`` lowest for every ``n`` and keep
  the ``n`` with the highest (rounded) S-score, ties to the larger ``n``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from flowerbed.methods.xtransfer.algorithm_layers import PoolLayer, gap

Project = Callable[[torch.Tensor], torch.Tensor]

#: Mean nearest-class distance (anchor space) below which target features count as collapsed.
COLLAPSED = 1e-6


def features(h: torch.Tensor) -> torch.Tensor:
    """``normalize(GAP(h))``: a layer output as one unit vector per sample."""
    return F.normalize(gap(h), dim=1)


def align_anchors(
    acts: np.ndarray, labels: np.ndarray, n_shot: int
) -> tuple[np.ndarray, np.ndarray]:
    """``n_shot`` anchors per class: means of ``n_shot`` consecutive chunks of its rows.

    As the code's ``align_anchor_to_target``: with 100 source samples per class
    and 5 shots, each anchor is the mean of 20 samples.
    """
    rows, ys = [], []
    for c in np.unique(labels):
        chunks = np.array_split(acts[labels == c], n_shot)
        rows += [ch.mean(axis=0) for ch in chunks if len(ch)]
        ys += [c] * sum(1 for ch in chunks if len(ch))
    return np.stack(rows), np.asarray(ys)


@dataclass(frozen=True)
class AnchorSpace:
    """PCA of a layer's normalised anchors: ``z = (f - mean) @ components.T``."""

    mean: np.ndarray
    components: np.ndarray  # (k, C)

    def transform(self, f: np.ndarray) -> np.ndarray:
        """Coordinates of features ``f`` (rows) in the anchor space."""
        return np.asarray((f - self.mean) @ self.components.T)

    def keep(self, idx: np.ndarray) -> AnchorSpace:
        """The space restricted to channels ``idx`` (after pruning output channels)."""
        return AnchorSpace(self.mean[idx], self.components[:, idx])


def fit_space(anchor_feats: np.ndarray, n_components: int) -> AnchorSpace:
    """PCA (``random_state=1``, as the code) on normalised anchor features."""
    from sklearn.decomposition import PCA

    k = min(n_components, *anchor_feats.shape)
    pca = PCA(n_components=k, random_state=1).fit(anchor_feats)
    return AnchorSpace(pca.mean_.astype(np.float64), pca.components_.astype(np.float64))


def normalize_rows(x: np.ndarray) -> np.ndarray:
    """L2-normalise rows (zero rows stay zero), like ``F.normalize``."""
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def class_silhouettes(z: np.ndarray, y: np.ndarray) -> dict[int, float]:
    """Mean silhouette of each class (``sklearn.metrics.silhouette_samples``).

    Defined as 0 for every class when fewer than two classes are present or
    every class is a single point (silhouette of a singleton is 0; scikit-learn
    refuses that input).
    """
    classes = np.unique(y)
    if len(classes) < 2 or len(classes) >= len(y):
        return {int(c): 0.0 for c in classes}
    from sklearn.metrics import silhouette_samples

    s = silhouette_samples(z, y)
    return {int(c): float(s[y == c].mean()) for c in classes}


def s_score(z: np.ndarray, y: np.ndarray) -> float:
    """XTransfer's S-score: mean over classes of the class's mean silhouette."""
    return float(np.mean(list(class_silhouettes(z, y).values())))


def intra_inter(z: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per class (sorted labels): mean intra distance ``a`` and nearest-class distance ``b``.

    ``a_i`` is the mean distance to the other points of ``i``'s class (0 for a
    singleton), ``b_i`` the smallest mean distance to another class; the
    silhouette terms the code's ``intra_distance``/``inter_distance`` average.
    """
    from scipy.spatial.distance import cdist

    classes = np.unique(y)
    d = cdist(z, z)
    member = np.stack([y == c for c in classes])  # (C, n)
    counts = member.sum(axis=1)
    sums = d @ member.T  # (n, C): distance sum to each class
    own = np.searchsorted(classes, y)
    n = np.arange(len(y))
    a = sums[n, own] / np.maximum(counts[own] - 1, 1)
    means = sums / counts
    means[n, own] = np.inf
    b = means.min(axis=1) if len(classes) > 1 else np.zeros(len(y))
    intra = np.array([a[own == k].mean() for k in range(len(classes))])
    inter = np.array([b[own == k].mean() for k in range(len(classes))])
    return intra, inter


def centroids(z: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Class means, one row per sorted label."""
    return np.stack([z[y == c].mean(axis=0) for c in np.unique(y)])


def top_classes(scores: dict[int, float], n: int) -> np.ndarray:
    """The ``n`` labels with the highest silhouette (the code's ``select_topN``)."""
    order = sorted(scores.items(), key=lambda kv: kv[1], reverse=True)
    return np.asarray([k for k, _ in order[:n]], dtype=np.int64)


def match_classes(anchor_cent: np.ndarray, top: np.ndarray, target_cent: np.ndarray) -> np.ndarray:
    """Map each target class to a distinct anchor class among ``top``.

    Minimises the summed centroid distances (Hungarian assignment, as the code's
    ``map_classes_best``).
    """
    from scipy.optimize import linear_sum_assignment
    from scipy.spatial.distance import cdist

    cost = cdist(anchor_cent[top], target_cent)
    rows, cols = linear_sum_assignment(cost)
    mapping = np.zeros(len(target_cent), dtype=np.int64)
    mapping[cols] = top[rows]
    return mapping


def fit_rotation(source: np.ndarray, target: np.ndarray, steps: int, seed: int) -> np.ndarray:
    """The code's "rotation matrix" aligning ``source`` with ``target``.

    A free ``k x k`` matrix ``R`` (uniform(-1, 1) init) trained by SGD (lr 0.01,
    momentum 0.95) on ``1 - cos(source R, target)``.
    """
    gen = torch.Generator().manual_seed(seed)
    src = torch.as_tensor(source, dtype=torch.float32).reshape(1, -1)
    tgt = torch.as_tensor(target, dtype=torch.float32).reshape(1, -1)
    src, tgt = src / src.norm().clamp_min(1e-12), tgt / tgt.norm().clamp_min(1e-12)
    k = src.shape[1]
    rot = nn.Parameter(torch.rand(k, k, generator=gen) * 2 - 1)
    opt = torch.optim.SGD([rot], lr=0.01, momentum=0.95)
    for _ in range(steps):
        loss = 1 - F.cosine_similarity(src @ rot, tgt).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return rot.detach().numpy().astype(np.float64)


@dataclass(frozen=True)
class RepairPlan:
    """Everything the repair loss needs, fixed before training.

    ``project(f) = ((f - mean) @ components.T) * scale @ rotation``; ``anchors[c]``
    is the anchor-space centroid of the anchor class mapped to target class
    ``c``; ``margin`` is the largest (inter - intra) distance of the mapped
    anchor classes; ``anchor_score`` the mean silhouette of the top anchor classes.
    """

    space: AnchorSpace
    scale: float
    rotation: np.ndarray
    anchors: np.ndarray
    mapping: np.ndarray
    margin: float
    anchor_score: float

    def project(self, f: torch.Tensor) -> torch.Tensor:
        """Normalised features to the scaled, rotated anchor space (differentiable)."""
        mean = torch.as_tensor(self.space.mean, dtype=f.dtype)
        comp = torch.as_tensor(self.space.components, dtype=f.dtype)
        rot = torch.as_tensor(self.rotation, dtype=f.dtype)
        return ((f - mean) @ comp.T) * self.scale @ rot


def anchor_score(
    space: AnchorSpace, anchor_feats: np.ndarray, anchor_y: np.ndarray, n_classes: int
) -> float:
    """Mean silhouette of the ``n_classes`` best-separated anchor classes."""
    scores = class_silhouettes(space.transform(anchor_feats), anchor_y)
    return float(np.mean([scores[int(c)] for c in top_classes(scores, n_classes)]))


def plan_repair(
    target_feats: np.ndarray,
    y: np.ndarray,
    anchor_feats: np.ndarray,
    anchor_y: np.ndarray,
    n_components: int,
    rotate: bool,
    rotation_steps: int,
    seed: int,
) -> RepairPlan:
    """Anchor space, scale, rotation, class map and margin (``RepairTrans.update_param``).

    ``y`` must be ``0..C-1`` and the anchors must have at least ``C`` classes.
    """
    n_classes = len(np.unique(y))
    if len(np.unique(anchor_y)) < n_classes:
        raise ValueError(
            f"repair: {len(np.unique(anchor_y))} anchor classes for "
            f"{n_classes} target classes; a source needs at least as many"
        )
    space = fit_space(anchor_feats, n_components)
    ax, tx = space.transform(anchor_feats), space.transform(target_feats)
    a_scores = class_silhouettes(ax, anchor_y)
    top = top_classes(a_scores, n_classes)
    a_intra, a_inter = intra_inter(ax, anchor_y)
    _, t_inter = intra_inter(tx, y)
    spread = float(np.mean(t_inter))
    # Collapsed target features (every class on one point) have no spread to match;
    # dividing by ~0 gave scales of 1e11 and a repair that diverged to NaN.
    scale = float(np.mean(a_inter[top]) / spread) if spread > COLLAPSED else 1.0
    tx = tx * scale
    a_cent, t_cent = centroids(ax, anchor_y), centroids(tx, y)
    rotation = np.eye(ax.shape[1])
    if rotate:
        rotation = fit_rotation(t_cent.mean(axis=0), a_cent[top].mean(axis=0), rotation_steps, seed)
        t_cent = centroids(tx @ rotation, y)
    mapping = match_classes(a_cent, top, t_cent)
    margins = (a_inter - a_intra)[mapping]
    return RepairPlan(
        space,
        scale,
        rotation,
        a_cent[mapping],
        mapping,
        float(margins.max()),
        float(np.mean([a_scores[int(c)] for c in top])),
    )


def repair_loss(
    z: torch.Tensor, y: torch.Tensor, anchors: torch.Tensor, margin: float, gen: np.random.Generator
) -> torch.Tensor:
    """``mean_i |z_i - a_{y_i}|_1 + mean_c mean_{c' != c} relu(m - |z_{p_c} - z_{n_c'}|_1)``.

    ``anchors[c]`` is the anchor of target class ``c``. Each class with at least
    two samples draws a pair ``(p_c, n_c)``; ``p_c`` is pushed at least ``m``
    from the ``n`` of every other class (the code's ``CrossSample`` with its
    ``anchor_npair`` sampler). The code also lists the pair's own second sample
    among the negatives, pushing two samples of one class apart while the
    first term pulls them onto one anchor; that contradicts the loss's intent
    and is not done here.
    """
    anchor_term = (z - anchors[y]).abs().sum(dim=1).mean()
    labels = y.numpy()
    classes = [c for c in np.unique(labels) if (labels == c).sum() >= 2]
    if len(classes) < 2:
        return anchor_term
    pairs = np.stack([gen.choice(np.flatnonzero(labels == c), 2, replace=False) for c in classes])
    terms = []
    for i in range(len(classes)):
        negs = np.delete(pairs[:, 1], i)
        dist = (z[pairs[i, 0]][None] - z[negs]).abs().sum(dim=1)
        terms.append(F.relu(margin - dist).mean())
    return anchor_term + torch.stack(terms).mean()


class EarlyStop:
    """The code's ``EarlyStopping``.

    No stop in the first ``min_epochs``; then stop after ``patience`` epochs
    without a strictly lower loss than the best seen since.
    """

    def __init__(self, patience: int, min_epochs: int) -> None:
        self.patience, self.min_epochs = patience, min_epochs
        self.epochs, self.bad = 0, 0
        self.best: float | None = None

    def step(self, loss: float) -> bool:
        """Record one epoch's loss; ``True`` when training should stop."""
        self.epochs += 1
        if not np.isfinite(loss):
            return True  # diverged: every later step starts from non-finite weights
        if self.epochs <= self.min_epochs:
            return False
        if self.best is None:
            self.best = loss
            return False
        if loss < self.best:
            self.best, self.bad = loss, 0
        else:
            self.bad += 1
        return self.bad >= self.patience


def _snapshot(module: nn.Module) -> dict[str, torch.Tensor]:
    """A detached copy of ``module``'s state (what ``deepcopy(state_dict())`` holds)."""
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def repair(
    modules: list[nn.Module],
    forward: Project,
    x: torch.Tensor,
    y: np.ndarray,
    plan: RepairPlan,
    episodes: int,
    seed: int,
) -> list[float]:
    """Train every parameter of ``modules`` (connector and candidate layer) to repair.

    The repair loss, full batch: SGD (lr 0.01, momentum 0.95), StepLR (every ``0.2 episodes``,
    gamma 0.5), early stop (patience 10 after ``0.25 episodes``); restores the
    weights that gave the lowest loss (the state before the step that loss fed)
    and stops at the first non-finite loss. ``forward(x)`` returns normalised features. Returns
    the loss curve.
    """
    params = [p for m in modules for p in m.parameters()]
    for p in params:
        p.requires_grad_(True)
    opt = torch.optim.SGD(params, lr=0.01, momentum=0.95)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=max(1, int(0.2 * episodes)), gamma=0.5)
    stop = EarlyStop(patience=10, min_epochs=int(0.25 * episodes))
    anchors = torch.as_tensor(plan.anchors, dtype=torch.float32)
    yt = torch.as_tensor(y, dtype=torch.long)
    gen = np.random.default_rng(seed)
    best, best_state = np.inf, [_snapshot(m) for m in modules]
    curve: list[float] = []
    for m in modules:
        m.train()
    for _ in range(episodes):
        loss = repair_loss(plan.project(forward(x)), yt, anchors, plan.margin, gen)
        value = float(loss.detach())
        curve.append(value)
        # The weights that gave this loss, before the step changes them (NaN is never < best).
        if value < best:
            best, best_state = value, [_snapshot(m) for m in modules]
        if stop.step(value):
            break
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    for m, state in zip(modules, best_state, strict=True):
        m.load_state_dict(state)
        m.eval()
    for p in params:
        p.requires_grad_(False)
    return curve


def channel_ranking(anchor_acts: np.ndarray, n_components: int) -> np.ndarray:
    """Channels from least to most important: mean |PCA loading| of normalised anchors."""
    space = fit_space(normalize_rows(anchor_acts), n_components)
    return np.argsort(np.abs(space.components).mean(axis=0), kind="stable")


@torch.no_grad()
def removal(
    layer: PoolLayer,
    x_in: torch.Tensor,
    y: np.ndarray,
    anchors: dict[str, np.ndarray],
    space: AnchorSpace,
    n_components: int,
    max_range: float,
    reuse: bool = True,
) -> tuple[PoolLayer, np.ndarray]:
    """PCA-based channel removal of ``layer`` (the code's ``PruneTrans``).

    For each channel group in turn (earlier choices kept): for ``n = 0 ..
    int(max_range C) - 2`` mask the ``n`` lowest-ranked channels and score the
    layer output (S-score in ``space``, rounded to 2 decimals); keep the best
    ``n``, the larger on ties. ``anchors`` holds the layer's ``"out"`` and, if
    any, ``"inter"`` anchor activations. Returns the physically pruned copy and
    the kept output channels (to slice ``space`` for later scores). ``reuse``: the
    part of the layer before a group's mask runs once per group
    (:meth:`~flowerbed.methods.xtransfer.algorithm_layers.PoolLayer.masked_forward`), not
    once per ``n``; the same features (``False`` recomputes, for the speed check).
    """
    groups = layer.groups()
    masks: list[torch.Tensor | None] = [None] * len(groups)
    layer.eval()
    for g, group in enumerate(groups):
        acts = anchors.get(group.anchor)
        n_max = int(max_range * group.size) - 1
        if acts is None or n_max <= 0:
            continue
        order = torch.as_tensor(channel_ranking(acts, n_components))
        best_n, best_s = 0, -np.inf
        # Output channels: masking them scales the pooled output channel-wise, so one
        # forward pass serves every n (exactly the masked forward's features).
        pooled = gap(layer(x_in)) if group.anchor == "out" and g == len(groups) - 1 else None
        masked = layer.masked_forward(x_in, g) if reuse and pooled is None else None
        for n in range(n_max):
            mask = torch.ones(group.size)
            mask[order[:n]] = 0
            if pooled is not None:
                f = F.normalize(pooled * mask, dim=1)
            elif masked is not None:
                f = features(masked(mask))
            else:
                masks[g] = mask
                layer.set_masks(masks)
                f = features(layer(x_in))
            score = round(s_score(space.transform(f.numpy()), y), 2)
            if score >= best_s:
                best_n, best_s = n, score
        mask = torch.ones(group.size)
        mask[order[:best_n]] = 0
        masks[g] = mask
        layer.set_masks(masks)
    keep = [
        torch.arange(gr.size) if m is None else torch.nonzero(m).flatten()
        for gr, m in zip(groups, masks, strict=True)
    ]
    layer.set_masks([None] * len(groups))
    if not groups:
        return copy.deepcopy(layer), np.arange(space.mean.shape[0])
    return layer.pruned(keep), keep[-1].numpy()

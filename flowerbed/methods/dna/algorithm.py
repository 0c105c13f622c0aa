"""DNA: forgery-discriminative units of a frozen backbone (Dou et al., arXiv 2601.22515).

"DNA: Uncovering Universal Latent Forgery Knowledge" (2026). Only the abstract and
third-party summaries could be read: the pipeline below is the paper's, the formulas
are reconstructed (choices argued in ``docs/methods/dna.md``).

1. **Layer localisation.** Per layer: the activation-distribution shift between real
   and fake images (mean over units of the squared Hellinger distance of the two
   class-conditional Gaussians), the semantic load (mean partial η² of the semantic
   class), their difference (*feature decoupling*), and a spatial attention signal:
   the Jensen-Shannon divergence between the mean real and mean fake attention maps
   (CLS→patch attention for a ViT; for a CNN, the channel-mean activation energy
   over positions, the CNN analogue) and their entropy across depth. The chosen layer
   maximises decoupling + normalised map shift, optionally within a window around
   the layer where the map entropy changes fastest.
2. **Triadic unit score** at that layer: ``T_j = d_j · s_j · u_j`` with
   discriminability ``d_j`` (absolute standardised mean difference, scaled by its
   maximum), stability ``s_j = 1 - CV`` of the effect size over delete-one-fold
   jackknife resamples, and semantic independence ``u_j = 1 - η²_j``.
3. **Curvature truncation**: Kneedle (Satopää et al., 2011) on the descending sorted
   ``T``; the units up to the elbow are the forgery-discriminative units (FDUs).

Every score is a function of additive sufficient statistics (:class:`LayerStats`:
counts, sums and sums of squares per (real/fake, fold) and per (real/fake,
semantic class) cell, summed attention maps and entropies), so a federation that adds
its clients' statistics selects exactly the layer and units the pooled data would.
The FDU probe is in :mod:`flowerbed.methods.dna.algorithm_probe`.

Examples
--------
>>> gen = np.random.default_rng(0)
>>> fake = np.repeat([0, 1], 50)
>>> x = gen.standard_normal((100, 6)); x[:, 0] += 2.0 * fake
>>> st = layer_stats(x, fake, fold_ids(x, 5), np.zeros(100, int), 5, 1)
>>> int(np.argmax(unit_scores(st).triadic))
0
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Literal

import numpy as np

Fusion = Literal["product", "mean"]
#: Below this a variance or a norm counts as zero.
TINY = 1e-12


# --------------------------------------------------------------------------- statistics


@dataclass(frozen=True)
class LayerStats:
    """Additive sufficient statistics of one layer's ``d`` units on labelled images.

    Index 0 of the first axis is real, 1 is fake. ``n``/``s1``/``s2`` hold counts,
    sums and sums of squares per (label, fold) cell; ``sem_*`` the same per (label,
    semantic class) cell (images of unknown class are left out of them);
    ``map_sum`` is the sum of each label's attention maps (width 0 when the layer
    has none) and ``ent_sum`` the sum of their normalised entropies;
    ``null_map_sum[b, r]`` the sum of the maps of the images whose ``b``-th null
    pseudo-label (:func:`null_labels`) is ``r`` (``(B, 2, P)``, ``B = 0`` without a
    null). Two clients' statistics add (:meth:`__add__`); nothing else about the images
    is kept.
    """

    n: np.ndarray
    s1: np.ndarray
    s2: np.ndarray
    sem_n: np.ndarray
    sem_s1: np.ndarray
    sem_s2: np.ndarray
    map_sum: np.ndarray
    ent_sum: np.ndarray
    null_map_sum: np.ndarray = field(default_factory=lambda: np.zeros((0, 2, 0)))

    def __add__(self, other: LayerStats) -> LayerStats:
        """Statistics of the union of both image sets (shapes must agree)."""
        parts = {}
        for f in fields(self):
            a, b = getattr(self, f.name), getattr(other, f.name)
            if a.shape != b.shape:
                raise ValueError(f"layer stats {f.name}: shapes {a.shape} and {b.shape} differ")
            parts[f.name] = a + b
        return LayerStats(**parts)

    @property
    def num_units(self) -> int:
        """Units ``d`` of the layer."""
        return int(self.s1.shape[-1])

    def to_arrays(self, prefix: str) -> dict[str, np.ndarray]:
        """Named arrays ``<prefix>/<field>`` (for a message)."""
        return {f"{prefix}/{f.name}": getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], prefix: str) -> LayerStats:
        """Inverse of :meth:`to_arrays`."""
        return cls(**{f.name: np.asarray(arrays[f"{prefix}/{f.name}"], dtype=np.float64)
                      for f in fields(cls)})

    def nbytes(self) -> int:
        """Bytes of the statistics as sent (float64)."""
        return int(sum(getattr(self, f.name).nbytes for f in fields(self)))


def fold_ids(x: np.ndarray, num_folds: int) -> np.ndarray:
    """Fold of each image from a checksum of its pixels: the same on every client.

    The jackknife folds must not depend on who holds an image, or pooled and
    federated stability scores would differ.
    """
    rows = np.ascontiguousarray(np.asarray(x, dtype=np.float32).reshape(len(x), -1))
    return np.array([zlib.crc32(r.tobytes()) % num_folds for r in rows], dtype=np.int64)


def null_labels(x: np.ndarray, num_draws: int, seed: int = 0) -> np.ndarray:
    """``(n, num_draws)`` seeded fair-coin pseudo-labels per image, from its pixel checksum.

    The null of the map-shift term: each draw relabels every image at random, so the
    JS divergence between the two pseudo-classes' mean maps is what chance alone gives
    with this many images and positions. Like :func:`fold_ids` the labels depend on
    the image (and the seed) only, so a federation's summed null statistics equal the
    pooled ones; group sizes are binomial rather than fixed, the one difference from a
    label permutation.
    """
    rows = np.ascontiguousarray(np.asarray(x, dtype=np.float32).reshape(len(x), -1))
    out = np.zeros((len(rows), num_draws), dtype=np.int64)
    for i, r in enumerate(rows):
        out[i] = np.random.default_rng([zlib.crc32(r.tobytes()), seed]).integers(0, 2, num_draws)
    return out


def _cell_sums(x: np.ndarray, cell: np.ndarray, cells: int) -> tuple[np.ndarray, ...]:
    """Counts, sums and sums of squares of ``x`` rows per cell ``0..cells-1``."""
    n = np.bincount(cell, minlength=cells).astype(np.float64)
    s1 = np.zeros((cells, x.shape[1]))
    s2 = np.zeros((cells, x.shape[1]))
    np.add.at(s1, cell, x)
    np.add.at(s2, cell, x * x)
    return n, s1, s2


def map_entropy(maps: np.ndarray) -> np.ndarray:
    """Entropy of each row of ``maps`` (a distribution over P positions) over ``log P``."""
    p = np.asarray(maps, dtype=np.float64)
    if p.shape[1] < 2:
        return np.zeros(len(p))
    with np.errstate(divide="ignore", invalid="ignore"):
        h = -np.where(p > 0, p * np.log(p), 0.0).sum(axis=1)
    return np.asarray(h / np.log(p.shape[1]))


def layer_stats(
    x: np.ndarray,
    fake: np.ndarray,
    folds: np.ndarray,
    semantic: np.ndarray,
    num_folds: int,
    num_semantic: int,
    maps: np.ndarray | None = None,
    null: np.ndarray | None = None,
) -> LayerStats:
    """Statistics of units ``x`` ``(n, d)`` of images labelled ``fake`` (0 real, 1 fake).

    ``folds`` are jackknife folds in ``0..num_folds-1`` (:func:`fold_ids`);
    ``semantic`` the semantic class in ``0..num_semantic-1``, or -1 when unknown;
    ``maps`` optional ``(n, P)`` attention maps (rows sum to 1); ``null`` optional
    ``(n, B)`` pseudo-labels (:func:`null_labels`) whose map sums give the map shift's
    chance level.
    """
    x = np.asarray(x, dtype=np.float64)
    fake = np.asarray(fake, dtype=np.int64)
    folds, semantic = np.asarray(folds, dtype=np.int64), np.asarray(semantic, dtype=np.int64)
    if not (len(x) == len(fake) == len(folds) == len(semantic)):
        raise ValueError("layer_stats: x, fake, folds and semantic need one entry per image")
    if len(x) and (fake.min() < 0 or fake.max() > 1):
        raise ValueError("layer_stats: fake must be 0 (real) or 1 (fake)")
    if len(x) and (folds.min() < 0 or folds.max() >= num_folds):
        raise ValueError(f"layer_stats: folds must lie in 0..{num_folds - 1}")
    if null is not None and len(null) != len(x):
        raise ValueError("layer_stats: null needs one row of pseudo-labels per image")
    if len(x) and semantic.max() >= num_semantic:
        raise ValueError(f"layer_stats: semantic classes must lie in 0..{num_semantic - 1} (or -1)")
    d = x.shape[1]
    n, s1, s2 = _cell_sums(x, fake * num_folds + folds, 2 * num_folds)
    known = semantic >= 0
    sn, t1, t2 = _cell_sums(x[known], fake[known] * num_semantic + semantic[known],
                            2 * num_semantic)
    width = 0 if maps is None else maps.shape[1]
    map_sum, ent_sum = np.zeros((2, width)), np.zeros(2)
    if maps is not None:
        m = np.asarray(maps, dtype=np.float64)
        h = map_entropy(m)
        for label in (0, 1):
            map_sum[label] = m[fake == label].sum(axis=0)
            ent_sum[label] = h[fake == label].sum()
    null_sum = np.zeros((0, 2, width))
    if null is not None and maps is not None:
        null = np.asarray(null, dtype=np.int64)
        null_sum = np.zeros((null.shape[1], 2, width))
        for b in range(null.shape[1]):
            for label in (0, 1):
                null_sum[b, label] = np.asarray(maps, dtype=np.float64)[null[:, b] == label].sum(0)
    return LayerStats(
        n.reshape(2, num_folds), s1.reshape(2, num_folds, d), s2.reshape(2, num_folds, d),
        sn.reshape(2, num_semantic), t1.reshape(2, num_semantic, d),
        t2.reshape(2, num_semantic, d), map_sum, ent_sum, null_sum,
    )


def merge(parts: Sequence[Sequence[LayerStats]]) -> list[LayerStats]:
    """Layer-by-layer sum of several clients' statistics (one list of layers each)."""
    if not parts:
        raise ValueError("merge: no statistics to merge")
    out = list(parts[0])
    for other in parts[1:]:
        if len(other) != len(out):
            raise ValueError("merge: clients sent statistics of different numbers of layers")
        out = [a + b for a, b in zip(out, other, strict=True)]
    return out


# --------------------------------------------------------------------------- unit scores


def moments(n: np.ndarray, s1: np.ndarray, s2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and unbiased variance from count ``n`` (broadcast), sums and sums of squares."""
    n = np.asarray(n, dtype=np.float64)[..., None]
    mean = s1 / np.maximum(n, 1.0)
    var = (s2 - n * mean * mean) / np.maximum(n - 1.0, 1.0)
    return mean, np.maximum(var, 0.0)


def _effect(n: np.ndarray, s1: np.ndarray, s2: np.ndarray) -> np.ndarray:
    """Signed ``(μ_fake - μ_real) / sqrt(σ²_real + σ²_fake)`` from per-label sums ``(2, d)``."""
    mean, var = moments(n, s1, s2)
    scale = np.sqrt(var[0] + var[1])
    diff = mean[1] - mean[0]
    return np.where(scale > TINY, diff / np.maximum(scale, TINY), 0.0)


def _check_counts(st: LayerStats) -> np.ndarray:
    counts = st.n.sum(axis=1)
    if counts.min() < 2:
        raise ValueError(f"DNA needs at least 2 real and 2 fake images; got {counts[0]:.0f} "
                         f"real and {counts[1]:.0f} fake")
    return counts


def effect_size(st: LayerStats) -> np.ndarray:
    """Signed standardised mean difference per unit, fake minus real."""
    _check_counts(st)
    return _effect(st.n.sum(axis=1), st.s1.sum(axis=1), st.s2.sum(axis=1))


def stability(st: LayerStats) -> np.ndarray:
    """``1 - CV`` of the effect size over delete-one-fold jackknife resamples, in [0, 1].

    For each fold ``b`` whose removal leaves two images of each label, the effect
    size ``δ^(-b)`` is recomputed without it; the jackknife standard error
    ``sqrt((G-1)/G Σ_b (δ^(-b) - mean)²)`` over the ``G`` usable folds, divided by
    ``|δ|``, is the coefficient of variation. With fewer than two usable folds
    there is no evidence either way and every unit gets 1.
    """
    counts = _check_counts(st)
    delta = _effect(counts, st.s1.sum(axis=1), st.s2.sum(axis=1))
    tot1, tot2 = st.s1.sum(axis=1), st.s2.sum(axis=1)
    resampled = []
    for b in range(st.n.shape[1]):
        left = counts - st.n[:, b]
        if st.n[:, b].sum() == 0 or left.min() < 2:
            continue
        resampled.append(_effect(left, tot1 - st.s1[:, b], tot2 - st.s2[:, b]))
    if len(resampled) < 2:
        return np.ones(st.num_units)
    jack = np.stack(resampled)
    g = len(jack)
    se = np.sqrt((g - 1) / g * ((jack - jack.mean(axis=0)) ** 2).sum(axis=0))
    cv = np.where(np.abs(delta) > TINY, se / np.maximum(np.abs(delta), TINY), np.inf)
    return np.asarray(np.clip(1.0 - cv, 0.0, 1.0))


def semantic_eta2(st: LayerStats, adjusted: bool = True) -> np.ndarray:
    """Share of each unit's within-label variance explained by the semantic class.

    Partial η² of semantic class nested in the real/fake label: between-cell sum
    of squares over the total within-label sum of squares, on the images of known
    class. ``adjusted`` gives ε² (subtracts the between-cell sum of squares that
    noise alone produces, ``df_b · MS_within``), so tiny few-shot sets do not look
    semantic by chance. Without the degrees of freedom to tell (every cell a
    singleton, or one class only) the value is 0: no evidence of semantics.
    """
    n = st.sem_n
    labels = n.sum(axis=1)
    mean_cell, _ = moments(n, st.sem_s1, st.sem_s2)
    mean_label = st.sem_s1.sum(axis=1) / np.maximum(labels, 1.0)[:, None]
    ss_total = (st.sem_s2.sum(axis=1) - labels[:, None] * mean_label**2).sum(axis=0)
    ss_between = (n[..., None] * (mean_cell - mean_label[:, None]) ** 2).sum(axis=(0, 1))
    cells, groups = int((n > 0).sum()), int((labels > 0).sum())
    df_b, df_w = cells - groups, float(labels.sum()) - cells
    if df_b <= 0 or df_w <= 0:
        return np.zeros(st.num_units)
    effect = ss_between
    if adjusted:
        effect = ss_between - df_b * np.maximum(ss_total - ss_between, 0.0) / df_w
    eta = np.where(ss_total > TINY, effect / np.maximum(ss_total, TINY), 0.0)
    return np.asarray(np.clip(eta, 0.0, 1.0))


@dataclass(frozen=True)
class UnitScores:
    """The three terms of the triadic score and their fusion, per unit."""

    effect: np.ndarray
    discriminability: np.ndarray
    stability: np.ndarray
    independence: np.ndarray
    triadic: np.ndarray


def unit_scores(st: LayerStats, fusion: Fusion = "product", adjusted: bool = True) -> UnitScores:
    """Triadic score ``T = d̃ · s · u`` (``fusion="mean"``: their mean).

    ``d̃ = |δ| / max |δ|`` keeps the magnitudes, so the sorted curve has the elbow
    that curvature truncation looks for (rank normalisation would make every layer's
    curve the same straight line); ``s`` and ``u = 1 - η²`` lie in [0, 1] already.
    """
    delta = effect_size(st)
    d = np.abs(delta)
    d_norm = d / d.max() if d.max() > TINY else d
    s = stability(st)
    u = 1.0 - semantic_eta2(st, adjusted)
    t = d_norm * s * u if fusion == "product" else (d_norm + s + u) / 3.0
    return UnitScores(delta, d_norm, s, u, t)


@dataclass(frozen=True)
class AttributionScores:
    """The attribution triad per unit: each term over its maximum, and their product."""

    activation: np.ndarray
    gradient: np.ndarray
    weight: np.ndarray
    triadic: np.ndarray


def _over_max(v: np.ndarray) -> np.ndarray:
    v = np.abs(np.asarray(v, dtype=np.float64))
    return v / v.max() if v.size and v.max() > TINY else np.zeros_like(v)


def attribution_scores(st: LayerStats, gradient: np.ndarray, weight: np.ndarray
                       ) -> AttributionScores:
    """Attribution triad ``A_j = a_j · g_j · w_j`` (ablation of :func:`unit_scores`).

    The one second-hand description of the paper's triad names activation, gradient
    and probe weight. Here ``a_j = |μ_fake - μ_real|`` (the unit's activation
    difference, from the statistics), ``g_j`` the mean absolute gradient of a
    detector's logit with respect to the unit over the labelled images
    (``gradient``, ``(n, d)`` or already averaged ``(d,)``; see
    :func:`flowerbed.methods.dna.model.unit_gradients`) and ``w_j = |weight_j|`` the
    weight of a probe on the whole layer; each divided by its maximum.
    """
    counts = _check_counts(st)
    mean, _ = moments(counts, st.s1.sum(axis=1), st.s2.sum(axis=1))
    g = np.asarray(gradient, dtype=np.float64)
    g = np.abs(g).mean(axis=0) if g.ndim == 2 else np.abs(g)
    if not (len(g) == len(weight) == st.num_units):
        raise ValueError(f"attribution_scores: {len(g)} gradients and {len(weight)} weights "
                         f"for a layer of {st.num_units} units")
    a, gn, w = _over_max(mean[1] - mean[0]), _over_max(g), _over_max(weight)
    return AttributionScores(a, gn, w, a * gn * w)


# --------------------------------------------------------------------------- truncation


def kneedle(y: np.ndarray, sensitivity: float = 1.0) -> int | None:
    """Index of the elbow of a decreasing convex sequence (Kneedle, offline), or None.

    Satopää, Albrecht, Irwin, Raghavan (2011): normalise both axes to [0, 1], turn the
    convex decreasing curve into a concave increasing one (``1 - y``), take the
    difference curve ``D_i = (1 - y_i) - x_i``; at each local maximum of ``D`` set the
    threshold ``D_max - S · mean Δx``; the first local maximum after which ``D`` falls
    below its threshold, before a local minimum resets the threshold, is the elbow.
    Ties count as extrema on both sides (as in ``kneed``), so a straight line has no
    elbow. Points are evenly spaced.
    """
    y = np.asarray(y, dtype=np.float64)
    n = len(y)
    if n < 3 or y.max() - y.min() <= TINY:
        return None
    x = np.linspace(0.0, 1.0, n)
    diff = (1.0 - (y - y.min()) / (y.max() - y.min())) - x
    left, right = np.r_[diff[0], diff[:-1]], np.r_[diff[1:], diff[-1]]
    is_max = (diff >= left) & (diff >= right)
    is_min = (diff <= left) & (diff <= right)
    maxima = np.flatnonzero(is_max)
    if maxima.size == 0:
        return None
    step = sensitivity / (n - 1)
    threshold, anchor, active = 0.0, int(maxima[0]), True
    for i in range(int(maxima[0]), n - 1):
        if is_max[i]:
            threshold, anchor, active = diff[i] - step, i, True
        if is_min[i]:
            threshold, active = 0.0, False
        if active and diff[i + 1] < threshold:
            return anchor
    return None


def truncate(scores: np.ndarray, sensitivity: float = 1.0, min_units: int = 1
             ) -> tuple[np.ndarray, int | None]:
    """FDUs: the units up to and including the elbow of the sorted scores, best first.

    ``k + 1`` units are kept for an elbow at sorted position ``k`` (the elbow unit is
    the last one on the steep part; at least ``min_units``); without an elbow every
    unit is kept. Returns the FDUs and the elbow.
    """
    order = np.argsort(-np.asarray(scores), kind="stable")
    knee = kneedle(np.asarray(scores)[order], sensitivity)
    k = len(order) if knee is None else max(knee + 1, min_units)
    return order[: min(k, len(order))], knee


# --------------------------------------------------------------------------- layers


def hellinger2_gauss(m0: np.ndarray, v0: np.ndarray, m1: np.ndarray, v1: np.ndarray
                     ) -> np.ndarray:
    """Squared Hellinger distance between ``N(m0, v0)`` and ``N(m1, v1)``, elementwise."""
    total = v0 + v1
    safe = np.maximum(total, TINY)
    coef = np.sqrt(2.0 * np.sqrt(v0 * v1) / safe) * np.exp(-((m0 - m1) ** 2) / (4.0 * safe))
    degenerate = np.where(np.abs(m0 - m1) > TINY, 1.0, 0.0)
    return np.where(total > TINY, 1.0 - coef, degenerate)


def js_divergence(p: np.ndarray, q: np.ndarray) -> float:
    """Jensen-Shannon divergence of two distributions, in bits (0 to 1)."""
    p, q = np.asarray(p, float) / max(np.sum(p), TINY), np.asarray(q, float) / max(np.sum(q), TINY)
    m = (p + q) / 2

    def kl(a: np.ndarray) -> float:
        keep = a > 0
        return float(np.sum(a[keep] * np.log2(a[keep] / m[keep])))

    return 0.5 * kl(p) + 0.5 * kl(q)


Localisation = Literal["statistics", "probe_auc"]


@dataclass(frozen=True)
class LayerProfile:
    """Per-layer localisation signals and the chosen layer (an index into the layers).

    ``map_shift`` is the raw JS of the mean maps, ``map_null`` its mean over the null
    draws (NaN without them) and ``map_excess`` the share of ``map_shift`` above that
    chance level (0 without a null); ``auc`` the leave-one-out probe AUC per layer
    (NaN unless ``localisation == "probe_auc"``); ``score`` what ``chosen`` maximises.
    """

    shift: np.ndarray
    semantic: np.ndarray
    decoupling: np.ndarray
    map_shift: np.ndarray
    map_null: np.ndarray
    map_excess: np.ndarray
    entropy: np.ndarray
    auc: np.ndarray
    score: np.ndarray
    transition: int
    candidates: np.ndarray
    chosen: int
    localisation: Localisation


def _scaled(v: np.ndarray) -> np.ndarray:
    top = float(np.max(v)) if len(v) else 0.0
    return v / top if top > TINY else np.zeros_like(v)


def null_js(st: LayerStats) -> float:
    """Mean JS between the null pseudo-classes' mean maps (NaN without usable draws).

    A draw that leaves one pseudo-class empty is skipped.
    """
    vals = [js_divergence(m[0], m[1]) for m in st.null_map_sum
            if st.null_map_sum.shape[2] > 1 and m[0].sum() > TINY and m[1].sum() > TINY]
    return float(np.mean(vals)) if vals else float("nan")


def map_excess(js: np.ndarray, null: np.ndarray) -> np.ndarray:
    """Share of the observed map shift above its chance level, ``(JS - JS_null) / JS`` in [0, 1].

    Bias-corrected and bounded without any scaling across layers: a layer whose maps
    differ only by chance scores about 0 however large its plug-in JS is, a real
    attention shift about 1. Layers without a null (or without maps) score 0.
    """
    ok = np.isfinite(null) & (js > TINY)
    out = np.where(ok, 1.0 - np.where(ok, null, 0.0) / np.maximum(js, TINY), 0.0)
    return np.asarray(np.clip(out, 0.0, 1.0))


def layer_profile(stats: Sequence[LayerStats], window: int | None = None,
                  adjusted: bool = True, auc: Sequence[float] | None = None) -> LayerProfile:
    """Locate the critical layer from every candidate layer's statistics.

    ``shift[l]`` = mean squared Hellinger distance between the real and fake unit
    Gaussians; ``semantic[l]`` = mean partial ε²; ``decoupling[l]`` = both scaled
    by their maximum over layers, semantic subtracted; ``map_shift[l]`` = JS of the
    mean real and fake attention maps, ``map_excess[l]`` its bias-corrected share
    (:func:`map_excess`); ``entropy[l]`` = mean normalised map entropy. The
    transition is the layer after the largest entropy change. The chosen layer
    maximises ``decoupling + map_excess`` (``localisation = "statistics"``) or, when
    per-layer leave-one-out probe AUCs ``auc`` are given (:func:`flowerbed.methods.dna.
    algorithm_probe.loo_auc`), the AUC (``"probe_auc"``), over all layers or over
    those at most ``window`` layers from the transition.
    """
    shift, sem, js, null, ent = [], [], [], [], []
    for st in stats:
        counts = _check_counts(st)
        mean, var = moments(counts, st.s1.sum(axis=1), st.s2.sum(axis=1))
        shift.append(float(hellinger2_gauss(mean[0], var[0], mean[1], var[1]).mean()))
        sem.append(float(semantic_eta2(st, adjusted).mean()))
        has_maps = st.map_sum.shape[1] > 1
        js.append(js_divergence(st.map_sum[0], st.map_sum[1]) if has_maps else 0.0)
        null.append(null_js(st) if has_maps else float("nan"))
        ent.append(float(st.ent_sum.sum() / counts.sum()) if has_maps else np.nan)
    shift_a, sem_a, js_a, null_a, ent_a = map(np.asarray, (shift, sem, js, null, ent))
    decoupling = _scaled(shift_a) - _scaled(sem_a)
    excess = map_excess(js_a, null_a)
    auc_a = np.full(len(stats), np.nan) if auc is None else np.asarray(auc, dtype=np.float64)
    if len(auc_a) != len(stats):
        raise ValueError(f"layer_profile: {len(auc_a)} probe AUCs for {len(stats)} layers")
    score = decoupling + excess if auc is None else auc_a
    jumps = np.abs(np.diff(ent_a))
    transition = int(np.nanargmax(jumps)) + 1 if np.isfinite(jumps).any() else 0
    idx = np.arange(len(stats))
    cand = idx if window is None else idx[np.abs(idx - transition) <= window]
    chosen = int(cand[np.argmax(score[cand])])
    return LayerProfile(shift_a, sem_a, decoupling, js_a, null_a, excess, ent_a, auc_a, score,
                        transition, cand, chosen, "statistics" if auc is None else "probe_auc")


@dataclass(frozen=True)
class Selection:
    """What DNA selects from the statistics: the layer, its unit scores, the FDUs."""

    profile: LayerProfile
    layer: int
    scores: UnitScores
    fdus: np.ndarray
    knee: int | None


def select(
    stats: Sequence[LayerStats],
    window: int | None = None,
    fusion: Fusion = "product",
    sensitivity: float = 1.0,
    min_units: int = 1,
    adjusted: bool = True,
    layer: int | None = None,
    auc: Sequence[float] | None = None,
) -> Selection:
    """Layer localisation, triadic scores and curvature truncation (``layer`` forces one).

    ``auc``: per-layer leave-one-out probe AUCs, to localise by them instead of by the
    statistics (:func:`layer_profile`).
    """
    profile = layer_profile(stats, window, adjusted, auc)
    chosen = profile.chosen if layer is None else layer
    scores = unit_scores(stats[chosen], fusion, adjusted)
    fdus, knee = truncate(scores.triadic, sensitivity, min_units)
    return Selection(profile, chosen, scores, fdus, knee)


def standardisation(st: LayerStats, units: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard deviation of ``units`` over every image (both labels) of ``st``."""
    total = st.n.sum()
    mean, var = moments(np.array(total), st.s1.sum(axis=(0, 1)), st.s2.sum(axis=(0, 1)))
    std = np.sqrt(var)
    return mean[units], np.where(std[units] > TINY, std[units], 1.0)


def unit_sets(sel: Selection, final_layer: int, final_units: int, seed: int
              ) -> dict[str, tuple[int, np.ndarray]]:
    """``(layer, units)`` each probe of the comparison reads.

    ``fdu``: the FDUs; ``all_units``: every unit of the chosen layer; ``random_units``:
    as many units of that layer drawn at random (seeded); ``top_d``: as many units
    ranked by discriminability alone (no fusion, no knee); ``final_layer``: every unit
    of the backbone's final representation (UnivFD's linear probe).
    """
    k = len(sel.fdus)
    d = sel.scores.triadic.shape[0]
    gen = np.random.default_rng(seed)
    top_d = np.argsort(-sel.scores.discriminability, kind="stable")[:k]
    return {
        "fdu": (sel.layer, sel.fdus),
        "all_units": (sel.layer, np.arange(d)),
        "random_units": (sel.layer, np.sort(gen.choice(d, size=k, replace=False))),
        "top_d": (sel.layer, top_d),
        "final_layer": (final_layer, np.arange(final_units)),
    }

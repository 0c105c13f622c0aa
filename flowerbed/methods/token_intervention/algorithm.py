"""Base-reasoning disagreement and disagreement-guided one-token intervention.

Shen, Sheng, Chen, Zhang & Wang, "Reasoning Can Be Restored by Correcting a
Few Decision Tokens" (ICML 2026, arXiv 2605.16874). Stated: the gap between a
base and a stronger reasoning model is measured by token-level likelihood
divergences; salient disagreement is sparse (~8 % of tokens), early, enriched
in planning tokens and coincides with high base uncertainty; letting the
reasoner write *one* token where disagreement is high, then handing back to
the base, recovers (and can surpass) the reasoner's accuracy. The exact score,
threshold and budget are not published (no code could be obtained): the
choices below are the spec's reconstruction.

- Scores on next-token log-distributions (natural log, float32): Jensen-Shannon
  (default, bounded by ln 2), ``KL(p_R || p_B)`` and the log-likelihood ratio
  ``log p_R(y) - log p_B(y)`` at ``y = argmax p_R``; the base entropy.
- Analysis mode (:func:`analyse`): the salient threshold carrying a share of
  the total disagreement, the salient fraction, relative positions, the
  enrichment of a token category and the correlation with the base entropy.
- Intervention decoding: :mod:`flowerbed.methods.token_intervention.algorithm_decode`.

Examples
--------
>>> import math, torch
>>> p = torch.tensor([0.9, 0.1]).log(); q = torch.tensor([0.1, 0.9]).log()
>>> round(float(js_divergence(p, q)), 4)
0.3681
>>> float(js_divergence(p, p))
0.0
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np

if TYPE_CHECKING:
    import torch

Score = Literal["js", "kl", "llr"]
SCORES: tuple[str, ...] = ("js", "kl", "llr")
LN2 = math.log(2.0)


def _plogp_ratio(logp: torch.Tensor, logq: torch.Tensor) -> torch.Tensor:
    """``sum p (log p - log q)`` over the last axis, with ``0 log 0 = 0``."""
    import torch

    p = logp.exp()
    terms = torch.where(p > 0, p * (logp - logq), torch.zeros_like(p))
    return terms.sum(-1)


def kl_divergence(logp: torch.Tensor, logq: torch.Tensor) -> torch.Tensor:
    """``KL(p || q)`` in nats for log-distributions on the last axis."""
    return _plogp_ratio(logp.float(), logq.float()).clamp(min=0)


def js_divergence(logp: torch.Tensor, logq: torch.Tensor) -> torch.Tensor:
    """Jensen-Shannon divergence in nats: ``KL(p||m)/2 + KL(q||m)/2``, ``m = (p+q)/2``."""
    import torch

    logp, logq = logp.float(), logq.float()
    logm = torch.logaddexp(logp, logq) - LN2
    js = 0.5 * (_plogp_ratio(logp, logm) + _plogp_ratio(logq, logm))
    return js.clamp(min=0.0, max=LN2)


def log_likelihood_ratio(logp_r: torch.Tensor, logp_b: torch.Tensor) -> torch.Tensor:
    """``log p_R(y) - log p_B(y)`` at the reasoner's greedy token ``y``."""
    y = logp_r.argmax(-1, keepdim=True)
    return (logp_r.gather(-1, y) - logp_b.float().gather(-1, y))[..., 0].float()


def entropy(logp: torch.Tensor) -> torch.Tensor:
    """Shannon entropy in nats of log-distributions on the last axis."""
    import torch

    p = logp.float().exp()
    return -torch.where(p > 0, p * logp.float(), torch.zeros_like(p)).sum(-1)


def disagreement(logp_b: torch.Tensor, logp_r: torch.Tensor, score: Score = "js") -> torch.Tensor:
    """Disagreement ``d_t`` of base and reasoner: ``js``, ``kl`` (``KL(p_R||p_B)``), ``llr``."""
    if score == "js":
        return js_divergence(logp_b, logp_r)
    if score == "kl":
        return kl_divergence(logp_r, logp_b)
    if score == "llr":
        return log_likelihood_ratio(logp_r, logp_b)
    raise ValueError(f"unknown disagreement score {score!r}; known: {', '.join(SCORES)}")


# --- analysis mode -------------------------------------------------------------------------


def salient_threshold(scores: np.ndarray, mass: float = 0.5) -> float:
    """The largest ``tau`` such that tokens with ``d >= tau`` carry ``mass`` of ``sum d``.

    Equivalently: the fewest top-scoring tokens whose disagreement adds up to
    ``mass`` of the total; ``tau`` is the smallest score among them. Negative
    scores (``llr``) count as zero mass.
    """
    if not 0 < mass <= 1:
        raise ValueError(f"mass must lie in (0, 1], got {mass}")
    d = np.sort(np.clip(np.asarray(scores, dtype=np.float64).ravel(), 0, None))[::-1]
    total = d.sum()
    if d.size == 0 or total <= 0:
        return math.inf
    k = int(np.searchsorted(np.cumsum(d), mass * total - 1e-12 * total))
    return float(d[min(k, d.size - 1)])


def relative_positions(lengths: Sequence[int]) -> np.ndarray:
    """``t / T`` of every token of responses of the given lengths (``t`` from 0)."""
    return np.concatenate([np.arange(n) / n for n in lengths if n]) if lengths else np.zeros(0)


def enrichment(salient: np.ndarray, category: np.ndarray) -> float:
    """``P(category | salient) / P(category)`` (``nan`` when undefined)."""
    salient, category = np.asarray(salient, bool), np.asarray(category, bool)
    base = category.mean() if category.size else 0.0
    if salient.sum() == 0 or base == 0:
        return float("nan")
    return float(category[salient].mean() / base)


@dataclass(frozen=True)
class Analysis:
    """Disagreement statistics over finished responses (one flat entry per token)."""

    tau: float
    salient_fraction: float
    mass_share: float
    enrichment: float
    pearson_entropy: float
    spearman_entropy: float
    positions: np.ndarray
    salient: np.ndarray
    mean_score: float

    def histogram(self, bins: int = 10) -> tuple[np.ndarray, np.ndarray]:
        """Share of salient tokens and of all tokens per relative-position bin."""
        edges = np.linspace(0, 1, bins + 1)
        sal, _ = np.histogram(self.positions[self.salient], bins=edges)
        every, _ = np.histogram(self.positions, bins=edges)
        return sal / max(sal.sum(), 1), every / max(every.sum(), 1)

    def early_share(self, cut: float = 0.25) -> tuple[float, float]:
        """Share of salient tokens, and of all tokens, in the first ``cut`` of a response."""
        early = self.positions < cut
        return float(early[self.salient].mean()) if self.salient.any() else math.nan, float(
            early.mean())


def analyse(
    scores: Sequence[np.ndarray],
    base_entropy: Sequence[np.ndarray],
    category: Sequence[np.ndarray],
    mass: float = 0.5,
    tau: float | None = None,
) -> Analysis:
    """Salient fraction, positions, category enrichment and entropy correlation.

    ``scores[i]``, ``base_entropy[i]`` and ``category[i]`` hold one value per
    token of response ``i`` (teacher-forced ``d_t``, ``H(p_B,t)`` and the
    category flag, e.g. planning-lexicon membership). ``tau`` defaults to
    :func:`salient_threshold` at ``mass``.
    """
    from scipy import stats

    d = np.concatenate([np.asarray(s, float) for s in scores])
    h = np.concatenate([np.asarray(e, float) for e in base_entropy])
    cat = np.concatenate([np.asarray(c, bool) for c in category])
    if not (d.shape == h.shape == cat.shape):
        raise ValueError("scores, base_entropy and category must have one value per token")
    t = salient_threshold(d, mass) if tau is None else tau
    sal = d >= t
    pos = relative_positions([len(s) for s in scores])
    total = np.clip(d, 0, None).sum()
    constant = d.size < 2 or np.ptp(d) == 0 or np.ptp(h) == 0
    return Analysis(
        tau=float(t), salient_fraction=float(sal.mean()) if d.size else math.nan,
        mass_share=float(np.clip(d[sal], 0, None).sum() / total) if total > 0 else math.nan,
        enrichment=enrichment(sal, cat),
        pearson_entropy=math.nan if constant else float(stats.pearsonr(d, h)[0]),
        spearman_entropy=math.nan if constant else float(stats.spearmanr(d, h)[0]),
        positions=pos, salient=sal, mean_score=float(d.mean()) if d.size else math.nan,
    )

"""ManiPT: prompt tuning on the pretrained manifold (Yang et al., arXiv 2602.19198).

A frozen VLM gives the frozen branch: class text features ``t0_c`` of the hand
template ("a photo of a {class}.") and image features ``f0``. The prompted branch
runs the same towers with learnable prompts: CoOp context vectors (initialised
to spell "a photo of a") and, in the multimodal methods, visual prompt tokens
made from the context by a MaPLe coupling ``v_j = W ctx_j + b`` (``W, b``
initialised to zero, so the prompted branch starts equal to the frozen one).
ManiPT's objective (the paper's equations were not
reachable, this is the reconstruction):

    t_c = Norm(t0_c + alpha t^p_c),   f = Norm(f0 + alpha f^p)     (incremental bias)
    s_c = logit_scale <f, t_c>
    L   = CE(s, y) + lam_T mean_c (1 - cos(t^p_c, t0_c)) + lam_I mean_i (1 - cos(f^p_i, f0_i))

``alpha = None`` drops the fusion (the prompted features are used alone). The
baselines are the same objective with other settings (:data:`PRESETS`): CoOp
(context only), KgCoOp (context + text consistency, lam 8), MaPLe-style
(coupled multimodal prompts, no constraint). Drift (the quantity ManiPT
bounds): cosine distance ``1 - cos`` of the used features to the frozen ones,
and the relative residual off a PCA subspace of the frozen features.
Pure torch; training reuses FedSPA's loop (:func:`flowerbed.algorithms.adapter_training.fit`,
AdamW + cosine schedule).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from flowerbed.algorithms import adapter_training as at

if TYPE_CHECKING:
    import torch

#: Fusion weight and consistency weights of the spec's reconstruction (KgCoOp's lambda).
ALPHA = 0.5
LAMBDA_TEXT = 8.0
LAMBDA_IMAGE = 8.0
CONTEXT, COUPLING_W, COUPLING_B = "context", "coupling_w", "coupling_b"


class Branch(Protocol):
    """A frozen VLM's towers with prompt inputs (:mod:`flowerbed.methods.manipt.model`)."""

    context_dim: int
    visual_dim: int

    def text(self, ctx: torch.Tensor, names: Sequence[str]) -> torch.Tensor:
        """``(C, D)`` unit-norm features of "[ctx] <name>."."""
        ...

    def image(self, inputs: torch.Tensor, tokens: torch.Tensor | None) -> torch.Tensor:
        """``(B, D)`` unit-norm image features; ``tokens=None``: the frozen features."""
        ...


@dataclass(frozen=True)
class PromptConfig:
    """Which prompts learn and which constraints apply (one method = one setting)."""

    visual: bool = True
    lambda_text: float = LAMBDA_TEXT
    lambda_image: float = LAMBDA_IMAGE
    alpha: float | None = ALPHA


PRESETS: dict[str, PromptConfig] = {
    "coop": PromptConfig(visual=False, lambda_text=0.0, lambda_image=0.0, alpha=None),
    "kgcoop": PromptConfig(visual=False, lambda_text=LAMBDA_TEXT, lambda_image=0.0, alpha=None),
    "maple": PromptConfig(visual=True, lambda_text=0.0, lambda_image=0.0, alpha=None),
    "manipt": PromptConfig(),
}


def cosine_consistency(prompted: torch.Tensor, frozen: torch.Tensor) -> torch.Tensor:
    """``mean_i (1 - cos(prompted_i, frozen_i))`` over rows."""
    from torch.nn import functional as F

    return (1.0 - F.cosine_similarity(prompted, frozen, dim=-1)).mean()


def fuse(frozen: torch.Tensor, prompted: torch.Tensor, alpha: float | None) -> torch.Tensor:
    """``Norm(frozen + alpha prompted)``; ``alpha=None``: ``prompted`` unchanged."""
    from torch.nn import functional as F

    return prompted if alpha is None else F.normalize(frozen + alpha * prompted, dim=-1)


def init_prompts(context: torch.Tensor, visual_dim: int, cfg: PromptConfig
                 ) -> dict[str, torch.Tensor]:
    """Learnable leaves: the context and, for visual prompts, a zero coupling ``W, b``."""
    import torch

    out = {CONTEXT: context.detach().clone().float()}
    if cfg.visual:
        out[COUPLING_W] = torch.zeros(visual_dim, context.shape[1])
        out[COUPLING_B] = torch.zeros(visual_dim)
    return out


def visual_tokens(prompts: dict[str, torch.Tensor]) -> torch.Tensor | None:
    """MaPLe coupling: ``(n_ctx, visual_dim)`` tokens ``ctx W^T + b``, or None (text only)."""
    if COUPLING_W not in prompts:
        return None
    return prompts[CONTEXT] @ prompts[COUPLING_W].T + prompts[COUPLING_B]


@dataclass
class Features:
    """Frozen, prompted and used (fused) features of one batch and the class texts."""

    t0: torch.Tensor
    tp: torch.Tensor
    t: torch.Tensor
    f0: torch.Tensor
    fp: torch.Tensor
    f: torch.Tensor


def features(branch: Branch, prompts: dict[str, torch.Tensor], cfg: PromptConfig,
             names: Sequence[str], inputs: torch.Tensor, t0: torch.Tensor,
             f0: torch.Tensor) -> Features:
    """Both branches and the fusion; without visual prompts the image side stays frozen."""
    tp = branch.text(prompts[CONTEXT], names)
    tokens = visual_tokens(prompts)
    fp = f0 if tokens is None else branch.image(inputs, tokens)
    return Features(t0, tp, fuse(t0, tp, cfg.alpha), f0, fp, fuse(f0, fp, cfg.alpha))


def objective(feat: Features, y: torch.Tensor, cfg: PromptConfig, logit_scale: float
              ) -> tuple[torch.Tensor, dict[str, float]]:
    """ManiPT's loss and its parts (CE, text and image consistency of the prompted branch)."""
    from torch.nn import functional as F

    ce = F.cross_entropy(logit_scale * feat.f @ feat.t.T, y)
    ct, ci = cosine_consistency(feat.tp, feat.t0), cosine_consistency(feat.fp, feat.f0)
    loss = ce + cfg.lambda_text * ct + cfg.lambda_image * ci
    return loss, {"loss": float(loss.detach()), "ce": float(ce.detach()),
                  "drift_text": float(cosine_consistency(feat.t, feat.t0).detach()),
                  "drift_image": float(cosine_consistency(feat.f, feat.f0).detach())}


@dataclass
class TrainResult:
    """Trained prompts (numpy) and the per-step log (loss, CE, drift of the used features)."""

    prompts: dict[str, np.ndarray]
    steps: list[dict[str, float]] = field(default_factory=list)


def train(branch: Branch, prompts: dict[str, torch.Tensor], cfg: PromptConfig,
          names: Sequence[str], inputs: torch.Tensor, y: np.ndarray, t0: torch.Tensor,
          f0: torch.Tensor, train_cfg: at.TrainConfig, logit_scale: float) -> TrainResult:
    """Minimise :func:`objective` over the prompts only (the towers are frozen).

    ``inputs`` are the branch's image inputs of the training rows, ``f0`` their
    frozen features and ``t0`` the frozen class features of ``names``.
    """
    import torch

    leaves = {k: v.detach().clone().float().requires_grad_(True) for k, v in prompts.items()}
    labels = torch.as_tensor(y, dtype=torch.long)
    log: list[dict[str, float]] = []

    def loss_fn(idx: torch.Tensor) -> torch.Tensor:
        feat = features(branch, leaves, cfg, names, inputs[idx], t0, f0[idx])
        loss, parts = objective(feat, labels[idx], cfg, logit_scale)
        log.append(parts)
        return loss

    at.fit(list(leaves.values()), loss_fn, len(y), train_cfg)
    return TrainResult({k: v.detach().numpy().copy() for k, v in leaves.items()}, log)


def batched_image(branch: Branch, inputs: torch.Tensor, tokens: torch.Tensor | None,
                  batch: int = 256) -> torch.Tensor:
    """:meth:`Branch.image` over ``inputs`` in chunks, without gradients."""
    import torch

    with torch.no_grad():
        return torch.cat([branch.image(inputs[i : i + batch], tokens)
                          for i in range(0, len(inputs), batch)])


def evaluate(branch: Branch, prompts: dict[str, np.ndarray], cfg: PromptConfig,
             names: Sequence[str], inputs: torch.Tensor, y: np.ndarray, t0: np.ndarray,
             f0: np.ndarray, logit_scale: float) -> dict[str, float]:
    """Accuracy among ``names`` and the cosine drift on these rows.

    ``drift_*`` is the drift of the used (fused) features, ``drift_*_unfused``
    that of the prompted branch alone: the fusion ``Norm(f0 + alpha f^p)`` by
    itself rotates the used features less than the prompted ones.
    """
    import torch

    p = {k: torch.as_tensor(v) for k, v in prompts.items()}
    t0t, f0t = torch.as_tensor(t0), torch.as_tensor(f0)
    with torch.no_grad():
        tokens = visual_tokens(p)
        fp = f0t if tokens is None else batched_image(branch, inputs, tokens)
        tp = branch.text(p[CONTEXT], names)
        t, f = fuse(t0t, tp, cfg.alpha), fuse(f0t, fp, cfg.alpha)
        pred = (f @ t.T).argmax(1).numpy()
    del logit_scale  # argmax does not depend on the positive scale
    return {"accuracy": float((pred == np.asarray(y)).mean()) if len(y) else 0.0,
            "drift_text": float(cosine_consistency(t, t0t)),
            "drift_image": float(cosine_consistency(f, f0t)) if len(y) else 0.0,
            "drift_text_unfused": float(cosine_consistency(tp, t0t)),
            "drift_image_unfused": float(cosine_consistency(fp, f0t)) if len(y) else 0.0,
            "pca_drift_image": pca_drift(f.numpy(), *pca_basis(f0)) if len(y) > 2 else 0.0}


def harmonic_mean(a: float, b: float) -> float:
    """``2ab / (a + b)`` (0 when both are 0): the base-to-novel summary."""
    return 2 * a * b / (a + b) if a + b > 0 else 0.0


def pca_basis(frozen: np.ndarray, variance: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Mean and the top principal directions ``(k, D)`` explaining ``variance`` of ``frozen``."""
    x = np.asarray(frozen, dtype=np.float64)
    mu = x.mean(axis=0)
    _, s, vt = np.linalg.svd(x - mu, full_matrices=False)
    share = np.cumsum(s**2) / max(float((s**2).sum()), 1e-300)
    k = int(np.searchsorted(share, variance - 1e-12) + 1)
    return mu, vt[:k]


def pca_drift(f: np.ndarray, mu: np.ndarray, basis: np.ndarray) -> float:
    """Mean relative residual ``||f - P f|| / ||f||`` off the affine PCA subspace."""
    x = np.asarray(f, dtype=np.float64)
    c = x - mu
    resid = c - (c @ basis.T) @ basis
    return float((np.linalg.norm(resid, axis=1) / np.linalg.norm(x, axis=1)).mean())


def average_prompts(prompts: Sequence[dict[str, np.ndarray]], weights: Sequence[float]
                    ) -> dict[str, np.ndarray]:
    """PromptFL: the example-weighted mean of each prompt array over clients."""
    return {k: at.weighted_average([p[k] for p in prompts], weights) for k in prompts[0]}


def as_tensors(prompts: dict[str, np.ndarray]) -> dict[str, Any]:
    """Numpy prompt arrays as float32 tensors."""
    import torch

    return {k: torch.as_tensor(np.asarray(v, dtype=np.float32)) for k, v in prompts.items()}

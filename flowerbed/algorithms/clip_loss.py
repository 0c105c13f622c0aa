"""Symmetric contrastive image-text loss of CLIP (Radford et al., 2021, arXiv 2103.00020).

For a batch of ``n`` image embeddings ``f_i`` and text embeddings ``t_j`` (both
L2-normalised inside), the logits are ``L = s * F T^T`` with ``s`` the logit
scale. CLIP's loss is the mean of two cross-entropies: each image must pick its
own caption among the batch's captions (rows of ``L``) and each caption its own
image (columns):

    loss = ( CE(L, arange(n)) + CE(L^T, arange(n)) ) / 2.

With ``labels``, pairs sharing a label are all positives, each with weight
``1 / #same-label`` (the label-aware target of UniCL, Yang et al., 2022, arXiv
2204.03610). This removes the false negatives that plain InfoNCE creates when a
batch holds several images of one class. Pure torch; no Flower, no Ray.
"""

from __future__ import annotations

import math

import torch
from torch.nn import functional as F

#: CLIP's initial logit scale, ``1 / 0.07``, and the cap it is clamped to.
CLIP_INIT_LOGIT_SCALE = 1 / 0.07
CLIP_MAX_LOGIT_SCALE = 100.0


def clip_logits(image: torch.Tensor, text: torch.Tensor, logit_scale: torch.Tensor | float) -> (
    torch.Tensor
):
    """``logit_scale * normalise(image) @ normalise(text).T``, shape ``(n_image, n_text)``."""
    return logit_scale * F.normalize(image, dim=-1) @ F.normalize(text, dim=-1).T


def clip_loss(
    image: torch.Tensor,
    text: torch.Tensor,
    logit_scale: torch.Tensor | float,
    labels: torch.Tensor | None = None,
) -> torch.Tensor:
    """Symmetric InfoNCE between paired rows of ``image`` and ``text`` (``(n, d)`` each).

    Parameters
    ----------
    image, text
        Paired embeddings; row ``i`` of each belongs together. They need not be
        normalised (this function normalises them).
    logit_scale
        The inverse temperature ``s`` (not its logarithm).
    labels
        Optional ``(n,)`` integer labels: when given, every same-label pair is a
        positive (soft target ``1 / #same-label`` per row).

    Returns
    -------
    torch.Tensor
        The scalar loss.

    Examples
    --------
    Orthogonal pairs with a large scale give a loss near zero:

    >>> e = torch.eye(2)
    >>> round(float(clip_loss(e, e, 50.0)), 6)
    0.0
    """
    if image.shape != text.shape or image.ndim != 2:
        raise ValueError(
            f"clip_loss needs two (n, d) arrays of one shape; got {tuple(image.shape)} "
            f"and {tuple(text.shape)}"
        )
    logits = clip_logits(image, text, logit_scale)
    if labels is None:
        target = torch.arange(len(image), device=image.device)
        return (F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target)) / 2
    same = (labels[:, None] == labels[None, :]).to(logits.dtype)
    soft = same / same.sum(dim=1, keepdim=True)
    loss_i = -(soft * F.log_softmax(logits, dim=1)).sum(dim=1).mean()
    loss_t = -(soft * F.log_softmax(logits.T, dim=1)).sum(dim=1).mean()
    return (loss_i + loss_t) / 2


def clamp_log_scale(log_scale: torch.Tensor, cap: float = CLIP_MAX_LOGIT_SCALE) -> None:
    """Clamp a learnable ``log(logit_scale)`` in place to ``[0, log(cap)]`` (as CLIP does)."""
    with torch.no_grad():
        log_scale.clamp_(0.0, math.log(cap))

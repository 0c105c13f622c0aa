"""IMReDi (rectification on reproducible seeds) and how much a denoiser's output depends on ε.

Method: "Infinite Mask Diffusion for Few-Step Distillation" (arXiv 2605.10518; official code
Ugness/IMDM ``algo.py::IMReDi``, ``configs/algo/im-redi.yaml`` with ``ignore_seed: false``,
``scripts/*/datagen_*`` and ``train_*_redi1.sh``), after ReDi (rectified discrete flow).

IMReDi, as the official pipeline runs it: a trained IMDM (there: the IM-SDTT student)
generates a dataset of samples ``x_0`` from all-masked sequences, each with a
*reproducible* ε: the ε of every position is a function of the sample's integer seed
only (``rand_fn_reproducible``), and the sampler keeps it fixed along the path. The
student, initialised from that model, is then trained with the MDLM ELBO on
``(x_t, ε(seed)) → x_0``: the same ε that produced the sample, never reset. Because the
target is the sample its ε generated, the objective pays the student for reading ε;
with ``ignore_seed: true`` (the control) ε is drawn afresh and the coupling is lost.

RECONSTRUCTED here: ``x_t`` is drawn by masking ``x_0`` at ``t ~ U(0, 1)`` (the official
loader supplies a stored ``(x_T, t)``; an absorbing path's intermediate state has the
same law given ``x_0`` when ε is never reset); the seed → ε map is a seeded
``torch.Generator`` per sample (the official ``robust_seeded_randn`` differs in its
generator but has the same property: the same seed gives the same ε whatever the batch).

:func:`eps_dependence` measures how much the prediction at all-masked input moves with
ε: the mutual information between ε and each position's token under the one-step
predictive, and the mean total-variation distance of ``p(· | m, ε)`` from its ε-average.
Both are zero for MDLM and for an IMDM whose ε-MLP outputs a constant.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

from flowerbed.methods.imdm.algorithm import (
    EPS_MIN,
    Denoiser,
    alpha_prime,
    ancestral_step,
    forward_mask,
    subs_log_probs,
    time_grid,
)

if TYPE_CHECKING:
    import torch


def seeded_eps(model: Denoiser, seeds: torch.Tensor) -> torch.Tensor:
    """ε of each sequence from its own integer seed: ``(B, L, D)`` (or ``(B, L)`` ids).

    Row ``i`` is ``model.sample_eps(1, Generator(seed_i))``: a function of the seed
    alone, the same in any batch and any order.
    """
    import torch

    rows = [
        model.sample_eps(1, torch.Generator().manual_seed(int(s)))
        for s in seeds.reshape(-1).tolist()
    ]
    return torch.cat(rows, dim=0)


def sample_seeded(
    model: Denoiser, seeds: torch.Tensor, length: int, steps: int, gen: torch.Generator
) -> torch.Tensor:
    """One sequence per seed from all-masked in ``steps`` steps, ε = ``seeded_eps`` kept fixed.

    The posterior is MDLM's (no reset), so every position keeps its seed's ε along
    the whole path; token draws come from ``gen``. Positions still masked at the
    end take the argmax, as :func:`~flowerbed.methods.imdm.algorithm.sample` does.
    """
    import torch

    x = torch.full((len(seeds), length), model.mask_id, dtype=torch.long)
    eps = seeded_eps(model, seeds)
    with torch.no_grad():
        for t, s in itertools.pairwise(time_grid(steps)):
            x, eps, _ = ancestral_step(model, x, eps, t, s, gen, "mdlm")
        left = x == model.mask_id
        if left.any():
            fill = subs_log_probs(model(x, eps), x, model.mask_id).argmax(-1)
            x = torch.where(left, fill, x)
    return x


def redi_dataset(
    teacher: Denoiser, n: int, length: int, steps: int, seed: int, batch: int = 1000
) -> torch.Tensor:
    """``(n, L + 1)``: ``n`` seeded samples of ``teacher`` and, in the last column, their seeds.

    Seeds are ``seed · 10^6 + i`` (distinct across datasets of different ``seed``).
    """
    import torch

    seeds = torch.arange(n, dtype=torch.long) + seed * 1_000_000
    gen = torch.Generator().manual_seed(seed)
    parts = [
        sample_seeded(teacher, seeds[i : i + batch], length, steps, gen)
        for i in range(0, n, batch)
    ]
    return torch.cat([torch.cat(parts), seeds[:, None]], dim=1)


def redi_loss(
    model: Denoiser,
    batch: torch.Tensor,
    gen: torch.Generator | None = None,
    t: torch.Tensor | None = None,
    ignore_seed: bool = False,
    eps_min: float = EPS_MIN,
) -> torch.Tensor:
    """ELBO of ``x_0`` given ``(x_t, ε(seed))``, nats per token; ``batch`` rows are ``[x_0, seed]``.

    ``loss = Σ_i 1{x_t^i = m} · (-alpha'_t / (1 - alpha_t)) · (-log p_θ(x_0^i | x_t, ε)) / (B L)``
    with ``t ~ U(0, 1)`` per row unless given, ``x_t`` masked from ``x_0``, and ε the
    seed's (``ignore_seed``: fresh ε, the official control).
    """
    import torch

    x, seeds = batch[:, :-1], batch[:, -1]
    b = x.shape[0]
    if t is None:
        t = torch.rand(b, generator=gen)
    x_t = forward_mask(x, t, model.mask_id, gen)
    eps = model.sample_eps(b, gen) if ignore_seed else seeded_eps(model, seeds)
    logp = torch.log_softmax(model(x_t, eps).float(), dim=-1)
    nll = -logp.gather(-1, x.unsqueeze(-1)).squeeze(-1)
    weight = -alpha_prime(eps_min) / ((1 - eps_min) * t)
    masked = (x_t == model.mask_id).float()
    return (masked * nll * weight.unsqueeze(-1)).sum() / x.numel()


def eps_dependence(
    model: Denoiser, length: int, draws: int, gen: torch.Generator
) -> dict[str, float]:
    """How much ``p_θ(· | all masked, ε)`` moves with ε, over ``draws`` ε draws.

    ``mi``: mean over positions of ``H(E_ε p) - E_ε H(p)`` (nats), the mutual
    information between ε and the position's one-step token; ``tv``: mean over
    positions and draws of ``½ ‖p_ε - E_ε p‖₁``.
    """
    import torch

    x = torch.full((draws, length), model.mask_id, dtype=torch.long)
    with torch.no_grad():
        logp = torch.log_softmax(model(x, model.sample_eps(draws, gen)).double(), dim=-1)
    p = logp.exp()  # (K, L, V)
    mean = p.mean(0)
    entropy_of_mean = -(mean * mean.clamp_min(1e-300).log()).sum(-1)
    mean_entropy = -(p * logp).nan_to_num().sum(-1).mean(0)
    mi = (entropy_of_mean - mean_entropy).mean()
    tv = 0.5 * (p - mean).abs().sum(-1).mean()
    return {"mi": float(mi), "tv": float(tv)}

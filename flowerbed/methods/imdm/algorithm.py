"""MDLM and IMDM: masked diffusion with a deterministic or an infinite-state (ε) mask.

Method: "Infinite Mask Diffusion for Few-Step Distillation" (Yoo, Kim, Lee, Hong, ICML 2026,
arXiv 2605.10518; official code Ugness/IMDM ``algo.py::IMDM``), built on MDLM (Sahoo et al.
2024). Distillation (SDTT / IM-SDTT) lives in :mod:`flowerbed.methods.imdm.algorithm_distill`.

Notation: data ``x ∈ {0..V-1}^L``, mask id ``m = V``, log-linear schedule
``alpha_t = 1 - (1 - ε_min) t``. A *denoiser* is any callable ``(x_t, ε) -> logits (B, L, V)``
with a ``sample_eps(batch, gen)`` method (:class:`Denoiser` protocol); for MDLM ε is
ignored. SUBS: the model's distribution at an unmasked position is the observed token.

IMDM's ancestral step ``t → s`` at a masked position has three outcomes (probabilities
divided by ``1 - alpha_t``): *keep* the mask and its ε (``alpha_t/alpha_s - alpha_t``),
*unmask* to ``v`` (``(alpha_s - alpha_t) p_θ(v | x_t, ε)``), *reset* — stay masked with a
fresh ε (``(1 - alpha_t/alpha_s)(1 - alpha_s)``). keep + reset is MDLM's stay-masked probability.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:
    import torch

Posterior = Literal["imdm", "mdlm"]
EPS_MIN = 1e-3


class Denoiser(Protocol):
    """What the algorithms need of a network (``methods.imdm.model_denoiser.Denoiser``)."""

    mask_id: int

    def __call__(self, x_t: torch.Tensor, eps: torch.Tensor | None = None) -> torch.Tensor:
        """Clean-token logits ``(B, L, V)``."""
        ...

    def sample_eps(self, batch: int, gen: torch.Generator | None = None) -> torch.Tensor:
        """Fresh per-position noise for ``batch`` sequences."""
        ...


# -- schedule and forward process ------------------------------------------------------------


def alpha(t: torch.Tensor | float, eps_min: float = EPS_MIN) -> torch.Tensor | float:
    """Log-linear schedule ``alpha_t = 1 - (1 - ε_min) t`` (probability a token is still clean)."""
    return 1 - (1 - eps_min) * t


def alpha_prime(eps_min: float = EPS_MIN) -> float:
    """``dalpha_t/dt = -(1 - ε_min)`` (constant for the log-linear schedule)."""
    return -(1 - eps_min)


def forward_mask(
    x: torch.Tensor, t: torch.Tensor, mask_id: int, gen: torch.Generator | None = None
) -> torch.Tensor:
    """``x_t ~ q(x_t | x)``: each position independently masked with probability ``1 - alpha_t``.

    ``t`` has one entry per row.
    """
    import torch

    keep = torch.rand(x.shape, generator=gen) < alpha(t).unsqueeze(-1)  # type: ignore[union-attr]
    return torch.where(keep, x, torch.full_like(x, mask_id))


def subs_log_probs(logits: torch.Tensor, x_t: torch.Tensor, mask_id: int) -> torch.Tensor:
    """SUBS log p_θ(x^i | x_t): softmax at masked positions, the observed token elsewhere."""
    import torch

    logp = torch.log_softmax(logits.float(), dim=-1)
    observed = x_t != mask_id
    onehot = torch.full_like(logp, -math.inf)
    onehot.scatter_(-1, x_t.clamp(max=logp.shape[-1] - 1).unsqueeze(-1), 0.0)
    return torch.where(observed.unsqueeze(-1), onehot, logp)


# -- training objectives ---------------------------------------------------------------------


def elbo_loss(
    model: Denoiser,
    x: torch.Tensor,
    gen: torch.Generator | None = None,
    t: torch.Tensor | None = None,
    eps_min: float = EPS_MIN,
) -> torch.Tensor:
    """Continuous-time MDLM ELBO, nats per token (IMDM: fresh ε at every masked position).

    ``loss = E_t Σ_i 1{x_t^i = m} · (-alpha'_t / (1 - alpha_t)) · (-log p_θ(x^i | x_t, ε)) / L``;
    ``t ~ U(0, 1)`` per row unless given (antithetic-free, as MDLM without low-discrepancy).
    """
    import torch

    b = x.shape[0]
    if t is None:
        t = torch.rand(b, generator=gen)
    x_t = forward_mask(x, t, model.mask_id, gen)
    eps = model.sample_eps(b, gen)
    logp = torch.log_softmax(model(x_t, eps).float(), dim=-1)
    nll = -logp.gather(-1, x.unsqueeze(-1)).squeeze(-1)
    weight = -alpha_prime(eps_min) / ((1 - eps_min) * t)  # 1 - alpha_t
    masked = (x_t == model.mask_id).float()
    return (masked * nll * weight.unsqueeze(-1)).sum() / x.numel()


def one_step_mixture_nll(
    model: Denoiser, x: torch.Tensor, draws: int, gen: torch.Generator | None = None
) -> torch.Tensor:
    """RECONSTRUCTED one-step objective: ``-log (1/K) Σ_k Π_i p_θ(x^i | m, ε_k)``.

    All positions masked (t = 1). For MDLM (ε ignored) it is plain per-token
    cross-entropy, whose optimum is the product of marginals; for IMDM it is an
    IWAE-style bound on the ε-mixture likelihood. Returns nats per sequence.

    The ``B·K`` (data point, ε draw) pairs go through the network as one batch. A
    denoiser that declares ``uses_eps = False`` (no ε-mask) gives the same logits for
    every draw, so it is evaluated once per data point (``logsumexp`` of ``K`` equal
    terms minus ``log K`` is that term); the ε draws are still taken, so the
    generator ends in the same state either way.
    """
    import torch

    b = x.shape[0]
    eps = model.sample_eps(b * draws, gen)
    if not getattr(model, "uses_eps", True):
        logp = torch.log_softmax(model(torch.full_like(x, model.mask_id)).float(), dim=-1)
        return -logp.gather(-1, x.unsqueeze(-1)).squeeze(-1).sum(-1).mean()
    x_t = torch.full((b * draws, x.shape[1]), model.mask_id, dtype=x.dtype)
    xr = x.repeat_interleave(draws, 0)
    logp = torch.log_softmax(model(x_t, eps).float(), dim=-1)
    seq = logp.gather(-1, xr.unsqueeze(-1)).squeeze(-1).sum(-1).view(b, draws)
    return -(torch.logsumexp(seq, dim=1) - math.log(draws)).mean()


# -- posterior and sampling ------------------------------------------------------------------


@dataclass(frozen=True)
class StepProbs:
    """Outcome probabilities at a masked position for one step ``t → s`` (sum to one)."""

    keep: float
    reset: float
    unmask: float  # total; split over tokens by p_θ(v | x_t, ε)


def posterior_probs(alpha_t: float, alpha_s: float, kind: Posterior = "imdm") -> StepProbs:
    """IMDM's keep / reset / unmask split, or MDLM's (reset = 0, keep = stay-masked)."""
    if not 0 <= alpha_t <= alpha_s <= 1 or alpha_t >= 1:
        raise ValueError(
            f"need 0 <= alpha_t <= alpha_s <= 1, alpha_t < 1; got {alpha_t}, {alpha_s}"
        )
    denom = 1 - alpha_t
    unmask = (alpha_s - alpha_t) / denom
    if kind == "mdlm":
        return StepProbs(keep=(1 - alpha_s) / denom, reset=0.0, unmask=unmask)
    keep = (alpha_t / alpha_s - alpha_t) / denom
    reset = (1 - alpha_t / alpha_s) * (1 - alpha_s) / denom
    return StepProbs(keep=keep, reset=reset, unmask=unmask)


def ancestral_step(
    model: Denoiser,
    x_t: torch.Tensor,
    eps: torch.Tensor,
    t: float,
    s: float,
    gen: torch.Generator | None = None,
    kind: Posterior = "imdm",
    eps_min: float = EPS_MIN,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One step ``t → s``: returns ``(x_s, ε_s, log p_θ(· | x_t, ε))``.

    Unmasked positions are copied; a masked one is unmasked to a token drawn from
    p_θ, kept masked with its ε, or (``imdm``) reset: masked with a fresh ε.
    """
    import torch

    a_t, a_s = float(alpha(t, eps_min)), float(alpha(s, eps_min))
    probs = posterior_probs(a_t, a_s, kind)
    logp = subs_log_probs(model(x_t, eps), x_t, model.mask_id)
    masked = x_t == model.mask_id
    u = torch.rand(x_t.shape, generator=gen)
    tokens = gumbel_argmax(logp, gen)
    unmask = masked & (u < probs.unmask)
    reset = masked & (u >= probs.unmask) & (u < probs.unmask + probs.reset)
    x_s = torch.where(unmask, tokens, x_t)
    eps_s = eps
    if reset.any():
        fresh = model.sample_eps(x_t.shape[0], gen)
        sel = reset if eps.dim() == 2 else reset.unsqueeze(-1)
        eps_s = torch.where(sel, fresh, eps)
    return x_s, eps_s, logp


def gumbel_argmax(logp: torch.Tensor, gen: torch.Generator | None = None) -> torch.Tensor:
    """One categorical draw per row of ``logp`` (Gumbel-max, seeded by ``gen``)."""
    import torch

    u = torch.rand(logp.shape, generator=gen).clamp(1e-20, 1 - 1e-7)
    return (logp - torch.log(-torch.log(u))).argmax(-1)


def time_grid(steps: int, eps_min: float = EPS_MIN) -> list[float]:
    """``steps + 1`` times from 1 down to ``ε_min`` (MDLM's uniform grid)."""
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    return [1 - i * (1 - eps_min) / steps for i in range(steps + 1)]


def sample(
    model: Denoiser,
    n: int,
    length: int,
    steps: int,
    gen: torch.Generator | None = None,
    kind: Posterior = "imdm",
    greedy_last: bool = True,
) -> torch.Tensor:
    """``n`` sequences from all-masked in ``steps`` ancestral steps (``(n, L)`` token ids).

    ``greedy_last``: positions still masked at ``t = ε_min`` take the argmax
    (``noise_removal: greedy``); otherwise they are sampled.
    """
    import torch

    x = torch.full((n, length), model.mask_id, dtype=torch.long)
    eps = model.sample_eps(n, gen)
    grid = time_grid(steps)
    with torch.no_grad():
        for t, s in itertools.pairwise(grid):
            x, eps, _ = ancestral_step(model, x, eps, t, s, gen, kind)
        left = x == model.mask_id
        if left.any():
            logp = subs_log_probs(model(x, eps), x, model.mask_id)
            fill = logp.argmax(-1) if greedy_last else gumbel_argmax(logp, gen)
            x = torch.where(left, fill, x)
    return x


def one_step_greedy(
    model: Denoiser, n: int, length: int, gen: torch.Generator | None = None
) -> torch.Tensor:
    """One-step argmax decoding from all-masked: ``argmax_v p_θ(v | m, ε)`` per position."""
    import torch

    x = torch.full((n, length), model.mask_id, dtype=torch.long)
    with torch.no_grad():
        return model(x, model.sample_eps(n, gen)).argmax(-1)


# -- evaluation ------------------------------------------------------------------------------


def aligned_rate(samples: torch.Tensor) -> float:
    """Share of sequences whose tokens are all equal (synthetic-align; data = 1)."""
    return float((samples == samples[:, :1]).all(dim=1).float().mean())


def token_frequencies(samples: torch.Tensor, vocab: int) -> torch.Tensor:
    """Frequency of each token among the first positions (mode coverage on synthetic-align)."""
    import torch

    return torch.bincount(samples[:, 0], minlength=vocab).float() / len(samples)


def unigram_entropy(samples: torch.Tensor) -> float:
    """Mean over sequences of the entropy (nats) of each sequence's own token histogram.

    The collapse check of MDLM/DUO/IMDM evaluations: repetitive samples score low.
    """
    import torch

    total = 0.0
    for row in samples:
        counts = torch.bincount(row).float()
        p = counts[counts > 0] / len(row)
        total += float(-(p * p.log()).sum())
    return total / len(samples)


def product_aligned_probability(marginals: torch.Tensor) -> float:
    """Exact aligned probability of a product-of-marginals sampler: ``Σ_v Π_i p_i(v)``.

    ``marginals`` is ``(L, V)``; at the optimum (uniform marginals) it is ``V^{-(L-1)}``.
    """
    return float(marginals.double().prod(dim=0).sum())


def total_correlation_floor(vocab: int, length: int) -> float:
    """NLL (nats/sequence) of the best product distribution on synthetic-align: ``L log V``."""
    return length * math.log(vocab)

"""ReAugment: model-zoo-guided RL augmentation for few-shot time-series forecasting.

Paper: Yuan, Wang, Chen, Wang, Yang, "ReAugment: Model Zoo-Guided RL for Few-Shot
Time Series Augmentation and Forecasting", arXiv 2409.06282 (ICML 2026). No code
was public and only abstracts and summaries could be read: the structure
is STATED, the reward and every size are RECONSTRUCTED.

1. **Zoo** (STATED): ``K``-fold split of the training windows ``D``; member ``f_k``
   is trained on ``D`` minus fold ``k`` (:func:`fit_zoo`). ``e_k(w) = MSE(f_k(x), y)``.
2. **Where to augment** (STATED): score ``s(w) = Var_k e_k(w)`` (zoo disagreement),
   or the generalisation gap ``e_{fold(w)}(w) - mean_{k ≠ fold(w)} e_k(w)``
   (out-of-fold minus in-fold error); anchors = the top ``anchor_share`` (50 %).
3. **How** (STATED): the VMAE augmenter (:mod:`.reaugment_vmae`), pre-trained as a CVAE.
4. **RL** (STATED: REINFORCE, reward from backtested zoo errors, proximity to the
   data; RECONSTRUCTED: the formula). The policy is the VMAE's prior head
   ``π_θ(z | masked anchor)``; ``J`` latents per anchor; ``ẽ_k = MSE(f_k(x̃), ỹ)``
   with the zoo frozen and evaluated without gradients (:func:`reward`)::

       target          R = λ_v Var_k ẽ_k + λ_m mean_k ẽ_k - λ_d ‖w̃ - w‖² / ‖w‖²
       reduce_variance R = -λ_v Var_k ẽ_k - λ_d ‖w̃ - w‖² / ‖w‖²

   ("target overfit-prone regions while staying close", v4 wording; "reduce
   the variance of errors across the zoo", v1 wording). Rewards are standardised
   over the batch and the mean over an anchor's ``J`` samples is the baseline;
   ``L = -E[(R - b) log π_θ(z | w_masked)] + β_RL · L_pre`` (:func:`reinforce`).
5. **Augment and train**: ``M`` windows per anchor from the fine-tuned prior; the
   final forecaster is trained on ``D + D̃`` (:func:`augment` in
   :mod:`.reaugment_arms`, which also holds the baselines and the pipeline).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from torch import nn

from flowerbed.core.seeds import derive_seed
from flowerbed.methods.reaugment.algorithm_ops import (
    CHUNK,
    ModelFactory,
    TrainConfig,
    adam,
    as_tensor,
    seeded_model,
    train_forecaster,
)
from flowerbed.methods.reaugment.algorithm_vmae import VMAE, batches, gaussian_kl, pretrain_loss

Reward = Literal["target", "reduce_variance"]
Score = Literal["variance", "gap"]


@dataclass(frozen=True)
class RLConfig:
    """REINFORCE fine-tuning of the VMAE prior (defaults live in the learner's params)."""

    iterations: int
    batch_anchors: int
    samples: int
    lr: float
    beta_rl: float
    reward: Reward
    lambda_v: float
    lambda_m: float
    lambda_d: float


@dataclass
class Zoo:
    """K forecasters, the fold of every training window, and each member's training rows."""

    members: list[nn.Module]
    fold: np.ndarray
    train_index: list[np.ndarray]


def fold_ids(n: int, k: int, seed: int, mode: Literal["blocked", "random"]) -> np.ndarray:
    """Fold ``0..k'-1`` of each of ``n`` windows, ``k' = min(k, n)``.

    ``blocked``: contiguous runs in window order (overlapping windows of one series
    then rarely straddle a train/held-out boundary); ``random``: a seeded shuffle.

    Examples
    --------
    >>> fold_ids(7, 3, 0, "blocked").tolist()
    [0, 0, 0, 1, 1, 2, 2]
    """
    k = min(k, n)
    order = np.arange(n) if mode == "blocked" else np.random.default_rng(seed).permutation(n)
    fold = np.empty(n, dtype=np.int64)
    for i, part in enumerate(np.array_split(order, k)):
        fold[part] = i
    return fold


def fit_zoo(
    make: ModelFactory,
    train: np.ndarray,
    lookback: int,
    k: int,
    cfg: TrainConfig,
    seed: int,
    val: np.ndarray | None = None,
    mode: Literal["blocked", "random"] = "blocked",
) -> Zoo:
    """Train member ``k`` on every window outside fold ``k`` (needs ≥ 2 windows)."""
    if len(train) < 2:
        raise ValueError(f"the zoo needs at least 2 training windows, got {len(train)}")
    fold = fold_ids(len(train), k, seed, mode)
    members, index = [], []
    for j in range(int(fold.max()) + 1):
        rows = np.flatnonzero(fold != j)
        model = seeded_model(make, derive_seed(seed, "member", j))
        fit_seed = derive_seed(seed, "member-fit", j)
        members.append(train_forecaster(model, train[rows], lookback, cfg, fit_seed, val)[0])
        index.append(rows)
    return Zoo(members, fold, index)


@torch.no_grad()
def zoo_errors(
    members: Sequence[nn.Module], windows: np.ndarray | torch.Tensor, lookback: int
) -> np.ndarray:
    """``e[i, k]``: MSE of member ``k`` on window ``i`` (no gradient, eval mode).

    The same numbers as :func:`~flowerbed.methods.reaugment.algorithm_ops.window_mse` per
    member; the windows are converted and split into lookback / horizon once for
    the whole zoo (this runs every REINFORCE iteration).
    """
    w = windows if isinstance(windows, torch.Tensor) else as_tensor(windows)
    x, y = w[:, :lookback], w[:, lookback:]
    out = np.empty((len(w), len(members)), dtype=np.float64)
    for k, member in enumerate(members):
        was_training = member.training
        member.eval()
        pred = torch.cat([member(x[i : i + CHUNK]) for i in range(0, len(x), CHUNK)])
        member.train(was_training)
        out[:, k] = ((pred - y) ** 2).mean(dim=(1, 2)).numpy()
    return out


def out_of_fold(errors: np.ndarray, fold: np.ndarray) -> np.ndarray:
    """Each window's error under the member that did not train on it."""
    return errors[np.arange(len(fold)), fold]


def anchor_scores(errors: np.ndarray, score: Score, fold: np.ndarray | None = None) -> np.ndarray:
    """Zoo disagreement ``Var_k e_k`` (population variance) or the generalisation gap."""
    if score == "variance":
        return errors.var(axis=1)
    if fold is None:
        raise ValueError("score 'gap' needs each window's fold (a K-fold zoo)")
    held = out_of_fold(errors, fold)
    inside = (errors.sum(axis=1) - held) / max(errors.shape[1] - 1, 1)
    return held - inside


def select_anchors(scores: np.ndarray, share: float) -> np.ndarray:
    """Indices of the top ``ceil(share · n)`` scores (ties broken by index), sorted."""
    n = max(1, int(np.ceil(share * len(scores))))
    return np.sort(np.argsort(-scores, kind="stable")[:n])


def reward(
    errors: np.ndarray, augmented: np.ndarray, original: np.ndarray, cfg: RLConfig
) -> np.ndarray:
    """Reward of each augmented window from its zoo errors ``(n, K)`` and its anchor."""
    diff = ((augmented - original) ** 2).sum(axis=(1, 2))
    proximity = diff / np.maximum((original**2).sum(axis=(1, 2)), 1e-8)
    var, mean = errors.var(axis=1), errors.mean(axis=1)
    if cfg.reward == "target":
        return cfg.lambda_v * var + cfg.lambda_m * mean - cfg.lambda_d * proximity
    return -cfg.lambda_v * var - cfg.lambda_d * proximity


def advantages(rewards: np.ndarray, samples: int) -> np.ndarray:
    """Batch-standardised rewards minus the mean of each anchor's ``samples`` draws.

    ``rewards`` is ordered anchor by anchor (``samples`` consecutive entries each).
    """
    r = (rewards - rewards.mean()) / (rewards.std() + 1e-8)
    r = r.reshape(-1, samples)
    return (r - r.mean(axis=1, keepdims=True)).ravel()


def _log_prob(z: torch.Tensor, mu: torch.Tensor, logvar: torch.Tensor) -> torch.Tensor:
    """Diagonal-Gaussian log density summed over patches and latent dimensions."""
    dist = torch.distributions.Normal(mu, (0.5 * logvar).exp())
    return dist.log_prob(z).sum(dim=(-2, -1))


def reinforce(
    vmae: VMAE,
    anchors: np.ndarray,
    data: np.ndarray,
    members: Sequence[nn.Module],
    lookback: int,
    cfg: RLConfig,
    seed: int,
) -> list[float]:
    """Fine-tune the VMAE prior with REINFORCE; the mean raw reward of every iteration.

    Per iteration: ``batch_anchors`` anchors, one mask each, ``samples`` latents
    ``z ~ π_θ(z | masked anchor)`` per anchor; the decoder (no gradient) makes the
    windows, the frozen zoo scores them (no gradient), and the loss
    ``-mean(A · log π_θ(z)) + β_RL · L_pre`` (``L_pre`` on a batch of ``data``) takes
    one Adam step. Only the prior head gets the policy-gradient term (the context
    tokens are computed without gradient); ``L_pre`` moves the whole VMAE.
    """
    gen = torch.Generator().manual_seed(seed)
    opt = adam(vmae.parameters(), cfg.lr)
    pool, source = as_tensor(data), as_tensor(anchors)
    history = []
    vmae.train()
    for _ in range(cfg.iterations):
        w = source[batches(len(source), cfg.batch_anchors, gen)]
        with torch.no_grad():
            c = vmae.context(w, vmae.sample_mask(len(w), gen))
        mu, logvar = vmae.prior_params(c)
        mu_j = mu.repeat_interleave(cfg.samples, dim=0)
        logvar_j = logvar.repeat_interleave(cfg.samples, dim=0)
        with torch.no_grad():
            z = mu_j + (0.5 * logvar_j).exp() * torch.randn(mu_j.shape, generator=gen)
            w_aug = vmae.decode(c.repeat_interleave(cfg.samples, dim=0), z)
        errors = zoo_errors(members, w_aug, lookback)
        anchor = w.repeat_interleave(cfg.samples, dim=0).numpy()
        r = reward(errors, w_aug.numpy(), anchor, cfg)
        adv = torch.as_tensor(advantages(r, cfg.samples), dtype=torch.float32)
        pg = -(adv * _log_prob(z, mu_j, logvar_j)).mean()
        pre = pretrain_loss(vmae, pool[batches(len(pool), cfg.batch_anchors, gen)], gen)
        loss = pg + cfg.beta_rl * pre
        opt.zero_grad()
        loss.backward()
        opt.step()
        history.append(float(r.mean()))
    vmae.eval()
    return history


@torch.no_grad()
def policy_kl(policy: VMAE, prior: VMAE, anchors: np.ndarray, seed: int) -> float:
    """Mean ``KL(π_policy(z | w_masked) ‖ π_prior(z | w_masked))`` over ``anchors`` (nats).

    Each anchor gets one random mask (the same for both models); each model
    encodes the masked window with its own feature encoder (RL's ``L_pre`` term
    moves the encoder too) and the two diagonal Gaussians over every patch's
    latent are compared in closed form, summed over patches and latent dimensions.
    Zero when ``policy`` is ``prior``: how far the RL stage moved the augmenter.
    """
    w = as_tensor(anchors)
    mask = prior.sample_mask(len(w), torch.Generator().manual_seed(seed))
    mu_q, logvar_q = policy.prior_params(policy.context(w, mask))
    mu_p, logvar_p = prior.prior_params(prior.context(w, mask))
    return float(gaussian_kl(mu_q, logvar_q, mu_p, logvar_p).sum(dim=-1).mean())

"""ReAugment's pipeline and the comparison arms run beside it on the same windows and seeds.

Part of ReAugment (Yuan et al., arXiv 2409.06282; :mod:`flowerbed.methods.reaugment.algorithm`).
Every arm adds ``per_anchor`` augmented windows for each of ``|A| = ceil(anchor_share
· |D|)`` source windows (the same budget for every arm) and trains the same
forecaster from the same initial weights on ``D + D̃``:

============== ========================== =========================================
arm            source windows             transformation
============== ========================== =========================================
none           (no augmentation)          —
jitter …       random ``|A|`` windows     one classic / FrAug op (:data:`CLASSIC`)
vmae           random ``|A|`` windows     pre-trained VMAE, no RL (ablation of RL)
rl_random      random ``|A|`` windows     VMAE + REINFORCE (ablation of "where")
reaugment      top zoo-variance anchors   VMAE + REINFORCE, ``target`` reward
reaugment_v1   top zoo-variance anchors   VMAE + REINFORCE, ``reduce_variance``
reaugment_gap  top generalisation gap     VMAE + REINFORCE, ``target`` reward
============== ========================== =========================================
"""

from __future__ import annotations

import copy
import hashlib
import time
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np
import torch
from torch import nn

from flowerbed.core.seeds import derive_seed
from flowerbed.methods.reaugment import algorithm as ra
from flowerbed.methods.reaugment.algorithm import RLConfig
from flowerbed.methods.reaugment.algorithm_ops import (
    CLASSIC,
    ModelFactory,
    TrainConfig,
    as_tensor,
    forecast_metrics,
    seeded_model,
    train_forecaster,
)
from flowerbed.methods.reaugment.algorithm_vmae import VMAE, VMAEConfig, pretrain

#: RL arms: (where the sources come from, reward variant).
RL_ARMS: dict[str, tuple[str, ra.Reward]] = {
    "rl_random": ("random", "target"),
    "reaugment": ("variance", "target"),
    "reaugment_v1": ("variance", "reduce_variance"),
    "reaugment_gap": ("gap", "target"),
}


@dataclass(frozen=True)
class ReAugmentConfig:
    """Zoo, anchors, augmenter, RL and forecaster training of one ReAugment run."""

    folds: int
    fold_mode: Literal["blocked", "random"]
    anchor_share: float
    per_anchor: int
    train: TrainConfig
    vmae: VMAEConfig
    rl: RLConfig


@dataclass
class Augmented:
    """Augmented windows per arm, and what the run measured on the way."""

    windows: dict[str, np.ndarray]
    info: dict[str, float]


def _sources(
    n: int, errors: np.ndarray | None, fold: np.ndarray | None, cfg: ReAugmentConfig, seed: int
) -> dict[str, np.ndarray]:
    """Source rows per selection rule: zoo variance, gap (K-fold zoo only), random."""
    size = int(np.ceil(cfg.anchor_share * n))
    out = {"random": np.sort(np.random.default_rng(seed).choice(n, size, replace=False))}
    if errors is not None:
        out["variance"] = ra.select_anchors(ra.anchor_scores(errors, "variance"), cfg.anchor_share)
        if fold is not None:
            out["gap"] = ra.select_anchors(ra.anchor_scores(errors, "gap", fold), cfg.anchor_share)
    return out


def _repeat(windows: np.ndarray, times: int) -> np.ndarray:
    return np.repeat(windows, times, axis=0)


def augment(
    train: np.ndarray,
    members: list[nn.Module] | None,
    lookback: int,
    cfg: ReAugmentConfig,
    arms: tuple[str, ...],
    seed: int,
    fold: np.ndarray | None = None,
) -> Augmented:
    """``D̃`` for every arm from training windows ``train`` and a zoo (``members``).

    ``fold`` (each window's held-out fold) is known for a K-fold zoo and enables
    ``reaugment_gap``; a federated zoo (peer models) has none.
    """
    errors = None if members is None else ra.zoo_errors(members, train, lookback)
    sources = _sources(len(train), errors, fold, cfg, derive_seed(seed, "sources"))
    out: dict[str, np.ndarray] = {}
    info: dict[str, float] = {"anchors": float(len(sources["random"]))}
    rng = np.random.default_rng(derive_seed(seed, "classic"))
    for arm in arms:
        if arm in CLASSIC:
            out[arm] = CLASSIC[arm](_repeat(train[sources["random"]], cfg.per_anchor), rng, train)
    vmae_arms = [a for a in arms if a == "vmae" or a in RL_ARMS]
    if vmae_arms:
        start = time.perf_counter()
        base = _pretrained(train, cfg, derive_seed(seed, "vmae"))
        info["time/vmae_s"] = time.perf_counter() - start
    for arm in vmae_arms:
        rule, variant = RL_ARMS.get(arm, ("random", "target"))
        if rule not in sources:
            raise ValueError(f"arm {arm!r} needs a zoo with folds (score {rule!r})")
        anchors = train[sources[rule]]
        vmae = copy.deepcopy(base)
        if arm in RL_ARMS:
            if members is None:
                raise ValueError(f"arm {arm!r} needs a zoo")
            start = time.perf_counter()
            history = ra.reinforce(
                vmae,
                anchors,
                train,
                members,
                lookback,
                replace(cfg.rl, reward=variant),
                derive_seed(seed, arm),
            )
            info[f"time/rl_{arm}_s"] = time.perf_counter() - start
            tail = max(1, len(history) // 5)
            info[f"rl/{arm}/reward_first"] = float(np.mean(history[:tail]))
            info[f"rl/{arm}/reward_last"] = float(np.mean(history[-tail:]))
        gen = torch.Generator().manual_seed(derive_seed(seed, arm, "generate"))
        out[arm] = vmae.generate(as_tensor(_repeat(anchors, cfg.per_anchor)), gen).numpy()
    for arm, windows in out.items():
        src = _repeat(train[sources[RL_ARMS.get(arm, ("random",))[0]]], cfg.per_anchor)
        info[f"aug/{arm}/proximity"] = float(
            np.mean(
                ((windows - src) ** 2).sum(axis=(1, 2))
                / np.maximum((src**2).sum(axis=(1, 2)), 1e-8)
            )
        )
        if members is not None:
            info[f"aug/{arm}/zoo_var"] = float(
                ra.zoo_errors(members, windows, lookback).var(axis=1).mean()
            )
    return Augmented(out, info)


def pretrained_vmae(train: np.ndarray, cfg: VMAEConfig, seed: int) -> VMAE:
    """A VMAE pre-trained on the training windows (KL + L2), computed afresh."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        vmae = VMAE(train.shape[1], train.shape[2], cfg)
    pretrain(vmae, as_tensor(train), seed)
    return vmae


#: This process's pre-trained VMAEs, least recently used first:
#: (sha256 of the float32 windows, their shape, VMAE config, seed) -> VMAE.
_VMAE_CACHE: OrderedDict[tuple[str, tuple[int, ...], VMAEConfig, int], VMAE] = OrderedDict()
#: Most VMAEs kept (a few hundred kB each at the default sizes).
VMAE_CACHE_SIZE = 32


def clear_vmae_cache() -> None:
    """Forget every cached pre-trained VMAE."""
    _VMAE_CACHE.clear()


def _pretrained(train: np.ndarray, cfg: ReAugmentConfig, seed: int) -> VMAE:
    """:func:`pretrained_vmae`, cached in the process; the caller gets its own copy.

    Pre-training depends only on the windows, the VMAE config and the seed, not on
    the forecaster or the arm, so grid points that differ only in the model family
    (the same few-shot windows and seed) pre-train once. A hit is a deep copy of the
    module the same seeded computation produced, so results are bit-identical.
    """
    data = np.ascontiguousarray(train, dtype=np.float32)
    key = (hashlib.sha256(data.tobytes()).hexdigest(), data.shape, cfg.vmae, seed)
    vmae = _VMAE_CACHE.get(key)
    if vmae is None:
        vmae = pretrained_vmae(data, cfg.vmae, seed)
        _VMAE_CACHE[key] = vmae
        while len(_VMAE_CACHE) > VMAE_CACHE_SIZE:
            _VMAE_CACHE.popitem(last=False)
    else:
        _VMAE_CACHE.move_to_end(key)
    return copy.deepcopy(vmae)


def with_augmentation(train: np.ndarray, extra: np.ndarray | None) -> np.ndarray:
    """``D + D̃`` (float32)."""
    if extra is None or len(extra) == 0:
        return np.asarray(train, dtype=np.float32)
    return np.concatenate([train, extra]).astype(np.float32)


def evaluate_arms(
    make: ModelFactory,
    train: np.ndarray,
    val: np.ndarray,
    test: np.ndarray,
    scale: np.ndarray | None,
    lookback: int,
    cfg: TrainConfig,
    augmented: dict[str, np.ndarray],
    arms: tuple[str, ...],
    seed: int,
) -> dict[str, dict[str, float]]:
    """Test metrics of the forecaster trained on ``D + D̃_arm`` for every arm (same init)."""
    out = {}
    for arm in arms:
        model = seeded_model(make, derive_seed(seed, "final"))
        data = with_augmentation(train, augmented.get(arm))
        model, fit = train_forecaster(model, data, lookback, cfg, derive_seed(seed, "fit"), val)
        out[arm] = {**forecast_metrics(model, test, lookback, scale), "train_steps": fit["steps"]}
    return out


def run(
    make: ModelFactory,
    train: np.ndarray,
    val: np.ndarray,
    test: np.ndarray,
    scale: np.ndarray | None,
    lookback: int,
    cfg: ReAugmentConfig,
    arms: tuple[str, ...],
    seed: int,
) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """The whole local / centralized pipeline: K-fold zoo, ``D̃`` per arm, final training."""
    start = time.perf_counter()
    needs_zoo = any(a in RL_ARMS for a in arms)
    zoo = (
        ra.fit_zoo(
            make,
            train,
            lookback,
            cfg.folds,
            cfg.train,
            derive_seed(seed, "zoo"),
            val,
            cfg.fold_mode,
        )
        if needs_zoo
        else None
    )
    zoo_s = time.perf_counter() - start
    aug = augment(
        train,
        None if zoo is None else zoo.members,
        lookback,
        cfg,
        arms,
        seed,
        None if zoo is None else zoo.fold,
    )
    start = time.perf_counter()
    metrics = evaluate_arms(
        make, train, val, test, scale, lookback, cfg.train, aug.windows, arms, seed
    )
    info = {**aug.info, "time/zoo_s": zoo_s, "time/final_s": time.perf_counter() - start}
    return metrics, info

"""Personalized FL: which arrays are shared or private, merging, and Ditto's objective.

FedPer (Arivazhagan et al., 2019, arXiv:1912.00818) and FedRep (Collins et
al., 2021, ICML, arXiv:2102.07078) share the body and keep the head private;
FedBN (Li et al., 2021, ICLR, arXiv:2102.07623) keeps every BatchNorm array
(affine weights and running statistics) private; Ditto (Li et al., 2021, ICML,
arXiv:2012.04221) shares the whole global model ``w`` and trains a personal
``v_k`` on ``F_k(v) + λ/2‖v - w‖²``. Arrays are ``name -> array`` dicts in a
model's state-dict order; nothing here knows Flower.

Examples
--------
>>> names = ["fc0.weight", "fc0.bias", "head.weight", "head.bias"]
>>> sorted(head_keys(names, 1))
['head.bias', 'head.weight']
>>> import numpy as np
>>> full = {k: np.zeros(1) for k in names}
>>> shared, private = split(full, head_keys(names, 1))
>>> list(shared), list(private)
(['fc0.weight', 'fc0.bias'], ['head.weight', 'head.bias'])
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Literal

import numpy as np

if TYPE_CHECKING:
    import torch
    from torch import nn

Method = Literal["fedper", "fedrep", "fedbn", "ditto", "finetune"]
METHODS: tuple[Method, ...] = ("fedper", "fedrep", "fedbn", "ditto", "finetune")


def module_of(key: str) -> str:
    """The module a state-dict key belongs to: ``"bn0.running_mean"`` -> ``"bn0"``."""
    return key.rpartition(".")[0]


def head_keys(names: Sequence[str], layers: int) -> frozenset[str]:
    """Keys of the last ``layers`` modules holding arrays (state-dict order): the head.

    Raises
    ------
    ValueError
        When ``layers`` < 1 or would leave no body to share.
    """
    modules = list(dict.fromkeys(module_of(k) for k in names))
    if not 1 <= layers < len(modules):
        raise ValueError(
            f"head of {layers} layer(s) in a model of {len(modules)} modules with arrays: "
            "need 1 <= head_layers < number of modules (a body must remain to share)"
        )
    head = set(modules[-layers:])
    return frozenset(k for k in names if module_of(k) in head)


def batchnorm_keys(model: nn.Module) -> frozenset[str]:
    """Every state-dict key of the model's BatchNorm layers (weights, biases, statistics)."""
    from torch.nn.modules.batchnorm import _BatchNorm

    found: set[str] = set()
    for prefix, module in model.named_modules():
        if isinstance(module, _BatchNorm):
            found.update(f"{prefix}.{k}" for k in module.state_dict())
    return frozenset(found)


def private_keys(
    method: Method, names: Sequence[str], *, head_layers: int, bn_keys: Collection[str]
) -> frozenset[str]:
    """Arrays a client keeps to itself under ``method``; the rest is averaged.

    FedPer and FedRep keep the head, FedBN the BatchNorm arrays; Ditto and
    fine-tuning share the whole global model (their personal model is a
    separate copy, never a part of it).
    """
    if method in ("fedper", "fedrep"):
        return head_keys(names, head_layers)
    if method == "fedbn":
        if not bn_keys:
            raise ValueError("fedbn needs a model with BatchNorm layers (e.g. model: mlp_bn)")
        return frozenset(bn_keys)
    return frozenset()


def split(
    arrays: Mapping[str, np.ndarray], private: Collection[str]
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """``(shared, private)`` parts of ``arrays``, each in the original order."""
    shared = {k: v for k, v in arrays.items() if k not in private}
    own = {k: v for k, v in arrays.items() if k in private}
    return shared, own


def merge(
    template: Mapping[str, np.ndarray],
    shared: Mapping[str, np.ndarray],
    private: Mapping[str, np.ndarray],
) -> dict[str, np.ndarray]:
    """A full model: ``shared`` (the received global) over ``private`` over ``template``.

    ``template`` fixes the order and fills private arrays the client does not
    have yet (its first round); a shared array must never overlap a private one.

    Raises
    ------
    ValueError
        When ``shared`` and ``private`` overlap, or either names an unknown array.
    """
    overlap = set(shared) & set(private)
    unknown = (set(shared) | set(private)) - set(template)
    if overlap or unknown:
        raise ValueError(
            f"cannot merge: shared and private overlap on {sorted(overlap)}, "
            f"unknown arrays {sorted(unknown)}"
        )
    out = {}
    for k, default in template.items():
        out[k] = shared[k] if k in shared else private.get(k, default)
    return out


def ditto_penalty(v: Sequence[torch.Tensor], w: Sequence[torch.Tensor], lam: float) -> torch.Tensor:
    """Ditto's proximal term λ/2 Σ‖v - w‖² between personal and global parameters."""
    total = sum(((a - b.detach()) ** 2).sum() for a, b in zip(v, w, strict=True))
    return 0.5 * lam * total  # type: ignore[return-value]


def ditto_objective(
    data_loss: torch.Tensor, v: Sequence[torch.Tensor], w: Sequence[torch.Tensor], lam: float
) -> torch.Tensor:
    """h_k(v; w) = F_k(v) + λ/2‖v - w‖² (Ditto, eq. 2), with F_k the batch loss."""
    return data_loss + ditto_penalty(v, w, lam)


def ditto_gradient(grad_f: np.ndarray, v: np.ndarray, w: np.ndarray, lam: float) -> np.ndarray:
    """∇_v h_k = ∇F_k(v) + λ(v - w): the personal step of Ditto's Algorithm 1."""
    return np.asarray(grad_f) + lam * (np.asarray(v) - np.asarray(w))

"""MOON (Li, He & Song, CVPR 2021, arXiv:2103.16257): model-contrastive federated learning.

Client ``i`` trains the received global model ``w^t`` on
``L = L_sup + μ·L_con`` where, for a representation ``z = R_w(x)`` of the
model being trained, ``z_glob`` of the global model and ``z_prev`` of the
client's own model from its previous round (both frozen),

``L_con = -log( exp(sim(z, z_glob)/τ) / (exp(sim(z, z_glob)/τ) + exp(sim(z, z_prev)/τ)) )``

with ``sim`` the cosine similarity, averaged over the batch (Eq. 3). The server
is FedAvg.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

#: The paper's temperature τ (all its experiments).
TEMPERATURE = 0.5


def contrastive_loss(
    z: torch.Tensor, z_glob: torch.Tensor, z_prev: torch.Tensor, temperature: float = TEMPERATURE
) -> torch.Tensor:
    """MOON's ``L_con``, the batch mean over the rows of ``z`` (batch x features).

    The positive pair is (``z``, ``z_glob``), the negative (``z``, ``z_prev``);
    it equals the cross-entropy of the logits ``[sim_glob, sim_prev]/τ`` with
    the positive as the target.
    """
    import torch
    from torch.nn import functional

    pos = functional.cosine_similarity(z, z_glob, dim=-1) / temperature
    neg = functional.cosine_similarity(z, z_prev, dim=-1) / temperature
    logits = torch.stack([pos, neg], dim=1)
    return -torch.log_softmax(logits, dim=1)[:, 0].mean()


def moon_loss(
    supervised: torch.Tensor,
    z: torch.Tensor,
    z_glob: torch.Tensor,
    z_prev: torch.Tensor,
    mu: float,
    temperature: float = TEMPERATURE,
) -> torch.Tensor:
    """The local objective ``L_sup + μ·L_con``."""
    return supervised + mu * contrastive_loss(z, z_glob, z_prev, temperature)

"""FedDyn (Acar et al., ICLR 2021, arXiv:2111.04263): dynamic regularisation.

In round ``t`` client ``k`` minimises
``L_k(θ) - ⟨∇L_k(θ_k^{t-1}), θ⟩ + alpha/2‖θ - θ^{t-1}‖²`` from the server model
``θ^{t-1}``, where ``∇L_k(θ_k^{t-1})`` is a state the client carries (zero at
first), and then updates it by the first-order condition of that problem,
``∇L_k(θ_k^t) = ∇L_k(θ_k^{t-1}) - alpha·(θ_k^t - θ^{t-1})``. The server keeps
``h`` (zero at first): ``h^t = h^{t-1} - alpha/m Σ_{k∈P_t}(θ_k^t - θ^{t-1})`` over
the ``m`` clients, and sets ``θ^t = mean_{k∈P_t} θ_k^t - h^t/alpha`` (Algorithm 1).

The regulariser works on torch tensors (it is added to a training loss); the
state updates on ``name -> ndarray`` dicts, keeping each array's dtype.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch

Arrays = dict[str, np.ndarray]


def regularizer(
    params: Mapping[str, torch.Tensor],
    anchor: Mapping[str, torch.Tensor],
    grad_state: Mapping[str, torch.Tensor],
    alpha: float,
) -> torch.Tensor:
    """``-⟨∇L_k(θ_k^{t-1}), θ⟩ + alpha/2‖θ - θ^{t-1}‖²`` summed over ``params``.

    ``anchor`` is the received server model ``θ^{t-1}`` and ``grad_state`` the
    client's ``∇L_k(θ_k^{t-1})``, both keyed like ``params``.
    """
    linear = sum((grad_state[k] * w).sum() for k, w in params.items())
    quad = sum(((w - anchor[k]) ** 2).sum() for k, w in params.items())
    return -linear + 0.5 * alpha * quad  # type: ignore[return-value,operator]


def client_state_update(grad_state: Arrays, local: Arrays, server: Arrays, alpha: float) -> Arrays:
    """``∇L_k(θ_k^t) = ∇L_k(θ_k^{t-1}) - alpha·(θ_k^t - θ^{t-1})`` for every array of the state.

    Examples
    --------
    >>> g = client_state_update({"w": np.array([1.0])}, {"w": np.array([3.0])},
    ...                         {"w": np.array([1.0])}, alpha=0.5)
    >>> g["w"]
    array([0.])
    """
    return {
        k: (
            np.asarray(g, np.float64)
            - alpha * (np.asarray(local[k], np.float64) - np.asarray(server[k], np.float64))
        ).astype(np.asarray(g).dtype)
        for k, g in grad_state.items()
    }


def server_update(
    h: Arrays,
    server: Arrays,
    local: Sequence[Arrays],
    alpha: float,
    num_clients: int,
) -> tuple[Arrays, Arrays]:
    """Return ``(θ^t, h^t)`` from the participants' models ``local``.

    ``h`` covers the trainable parameters; arrays of ``server`` without an
    ``h`` entry (buffers such as BatchNorm statistics) are plainly averaged.

    Examples
    --------
    >>> theta, h = server_update({"w": np.array([0.0])}, {"w": np.array([1.0])},
    ...                          [{"w": np.array([2.0])}, {"w": np.array([4.0])}],
    ...                          alpha=0.5, num_clients=4)
    >>> float(h["w"][0]), float(theta["w"][0])
    (-0.5, 4.0)
    """
    if not local:
        raise ValueError("FedDyn's server step needs at least one participant's model")
    theta, new_h = {}, {}
    for k, v in server.items():
        mean = np.mean([np.asarray(m[k], np.float64) for m in local], axis=0)
        if k not in h:
            theta[k] = mean.astype(np.asarray(v).dtype)
            continue
        drift = sum(np.asarray(m[k], np.float64) - np.asarray(v, np.float64) for m in local)
        hk = np.asarray(h[k], np.float64) - alpha / num_clients * drift
        new_h[k] = hk.astype(np.asarray(h[k]).dtype)
        theta[k] = (mean - hk / alpha).astype(np.asarray(v).dtype)
    return theta, new_h

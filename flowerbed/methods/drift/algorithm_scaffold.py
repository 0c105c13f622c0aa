"""SCAFFOLD (Karimireddy et al., ICML 2020, arXiv:1910.06378): control variates against drift.

Each client ``i`` keeps a control variate ``c_i`` and the server keeps ``c``
(both start at zero). A local step on client ``i`` follows the corrected
gradient ``g_i(y) - c_i + c``; after ``K`` local steps of size ``η_l`` from the
global model ``x`` to ``y_i`` the client updates its variate by option II of
Algorithm 1, ``c_i⁺ = c_i - c + (x - y_i) / (K·η_l)``, and sends
``Δy_i = y_i - x`` and ``Δc_i = c_i⁺ - c_i``. The server averages both over
the sampled set ``S`` of the ``N`` clients (unweighted, as in the paper) and
steps ``x ← x + η_g·Δx``, ``c ← c + |S|/N·Δc``.

Arrays are ``name -> ndarray`` dicts; results keep each input array's dtype.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

Arrays = dict[str, np.ndarray]


def zeros_like(arrays: Arrays) -> Arrays:
    """The zero control variate for a model with these arrays."""
    return {k: np.zeros_like(v) for k, v in arrays.items()}


def corrected_gradient(grad: np.ndarray, c_i: np.ndarray, c: np.ndarray) -> np.ndarray:
    """The direction of one local SCAFFOLD step: ``g_i(y) - c_i + c``.

    Examples
    --------
    >>> corrected_gradient(np.array([1.0]), np.array([0.5]), np.array([2.0]))
    array([2.5])
    """
    return grad - c_i + c


def client_control_update(
    c_i: Arrays, c: Arrays, x: Arrays, y: Arrays, steps: int, lr: float
) -> Arrays:
    """Option II: ``c_i⁺ = c_i - c + (x - y_i) / (K·η_l)`` for every array of ``c_i``.

    Parameters
    ----------
    c_i, c
        The client's and the server's control variates.
    x, y
        The received global model and the client's model after its local steps.
    steps
        ``K``, the number of local steps taken (at least 1).
    lr
        ``η_l``, the local step size.

    Examples
    --------
    >>> one = {"w": np.array([1.0])}
    >>> client_control_update(one, {"w": np.array([2.0])}, {"w": np.array([3.0])},
    ...                       {"w": np.array([1.0])}, steps=4, lr=0.5)["w"]
    array([0.])
    """
    if steps < 1:
        raise ValueError(f"SCAFFOLD needs at least one local step, got {steps}")
    out = {}
    for k, ci in c_i.items():
        drift = (np.asarray(x[k], np.float64) - np.asarray(y[k], np.float64)) / (steps * lr)
        new = np.asarray(ci, np.float64) - np.asarray(c[k], np.float64) + drift
        out[k] = new.astype(np.asarray(ci).dtype)
    return out


def _mean(deltas: Sequence[Arrays], key: str) -> np.ndarray:
    return np.mean([np.asarray(d[key], np.float64) for d in deltas], axis=0)


def server_update(
    x: Arrays,
    c: Arrays,
    delta_y: Sequence[Arrays],
    delta_c: Sequence[Arrays],
    num_clients: int,
    global_lr: float = 1.0,
) -> tuple[Arrays, Arrays]:
    """``x ← x + η_g·mean(Δy_i)``, ``c ← c + |S|/N·mean(Δc_i)``; return ``(x, c)``.

    ``delta_y`` covers every array of ``x`` (weights and buffers), ``delta_c``
    every array of ``c`` (the trainable parameters); ``|S|`` is
    ``len(delta_c)`` and ``N`` is ``num_clients``.

    Examples
    --------
    >>> x, c = {"w": np.array([1.0])}, {"w": np.array([0.0])}
    >>> dy = [{"w": np.array([1.0])}, {"w": np.array([3.0])}]
    >>> dc = [{"w": np.array([2.0])}, {"w": np.array([4.0])}]
    >>> new_x, new_c = server_update(x, c, dy, dc, num_clients=4, global_lr=0.5)
    >>> float(new_x["w"][0]), float(new_c["w"][0])
    (2.0, 1.5)
    """
    if not delta_y or len(delta_y) != len(delta_c):
        raise ValueError("SCAFFOLD's server step needs one (Δy, Δc) pair per sampled client")
    share = len(delta_c) / num_clients
    new_x = {}
    for k, v in x.items():
        step = np.asarray(v, np.float64) + global_lr * _mean(delta_y, k)
        new_x[k] = step.astype(np.asarray(v).dtype)
    new_c = {
        k: (np.asarray(v, np.float64) + share * _mean(delta_c, k)).astype(np.asarray(v).dtype)
        for k, v in c.items()
    }
    return new_x, new_c

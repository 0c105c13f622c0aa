"""Malicious clients: the scenario's ``clients.attack`` applied around any learner's training.

:func:`answer` is the one place the ClientApp calls. It changes nothing
unless the scenario names an attack *and* the message trains weights (a
``train.*`` message carrying the global arrays; never ``evaluate``, queries
or ``train.local``). Then every client is honest except those
:func:`~flowerbed.core.attacks.malicious_clients` names, which

* ``label_flip``: train, through the learner itself, on flipped labels;
* ``sign_flip`` / ``gaussian``: train honestly, then send their update
  reversed and scaled, or Gaussian noise instead of it;
* ``alie``: send ``w + mu - z * sigma`` (Baruch et al., 2019).

Every train reply of an attacked run carries the metric
``attack/malicious`` (1 for a malicious client, 0 otherwise), so the run's
``client_metrics.jsonl`` records who attacked in every round, and
``client_train/attack/malicious`` in ``metrics.jsonl`` is the share of
training examples behind malicious replies.

What ALIE's attackers know. Baruch et al. state the attack with the mean
and standard deviation of the honest updates; when the attackers cannot see
them, they estimate both from the honest updates their own data would give
(the paper's setting: corrupted workers have data of their own). That is
what happens here, with no knowledge of any honest client: each malicious
client trains honestly, from the same global weights, on the data of every
malicious client (its own and its colluders', each with the seed that
client would use), and takes the per-coordinate mean and population std of
those updates. All malicious clients therefore send the same vector, as in
the paper. ``z`` defaults to the paper's ``z_max`` for ``n = num_clients``
and ``m`` malicious clients. Simulating a colluder's training needs its
data in this process (true for the ``inline`` and ``simulation`` engines)
and a learner that keeps no per-client state between rounds.

Everything is derived from the root seed (the malicious set, the Gaussian
noise per client and round, the colluders' training seeds), so a run is
identical on every engine.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from flowerbed.algorithms import attacks as maths
from flowerbed.clients.learner import Handler, TaskContext, client_seed
from flowerbed.core import keys
from flowerbed.core.attacks import (
    GaussianNoise,
    LabelFlip,
    LittleIsEnough,
    MaliciousAttack,
    SignFlip,
    malicious_clients,
)
from flowerbed.core.messages import Payload
from flowerbed.core.seeds import rng
from flowerbed.data.base import ClientData

#: The reply metric naming a malicious client (1.0) or an honest one (0.0).
MALICIOUS_METRIC = "attack/malicious"


def trains_weights(message_type: str, payload: Payload) -> bool:
    """Whether a message is weight training: ``train.*`` with the global arrays."""
    category = message_type.partition(".")[0]
    return category == "train" and message_type != keys.LOCAL_TASK and bool(payload.arrays)


def answer(
    handler: Handler,
    message_type: str,
    data: ClientData,
    payload: Payload,
    task: TaskContext,
    client_data: Callable[[int], ClientData],
) -> Payload:
    """The learner's reply to one message, as the scenario's attack has this client send it.

    ``client_data(pid)`` gives any client's data (ALIE's colluders train on theirs).
    """
    spec = task.scenario.clients.attack
    if not isinstance(spec, MaliciousAttack) or not trains_weights(message_type, payload):
        return handler(data, payload, task)
    bad = malicious_clients(spec, task.scenario.num_clients, task.scenario.seed)
    malicious = task.partition_id in bad
    if not malicious:
        reply = handler(data, payload, task)
    elif isinstance(spec, LabelFlip):
        reply = handler(flipped(data), payload, task)
    else:
        reply = _poisoned(spec, handler, message_type, data, payload, task, client_data, bad)
    if isinstance(reply, Payload):
        reply.metrics = {**reply.metrics, MALICIOUS_METRIC: float(malicious)}
    return reply


def flipped(data: ClientData) -> ClientData:
    """The client's data with training labels flipped (test labels untouched)."""
    meta = data.meta
    if meta.task != "classification":
        raise ValueError(
            f"attack label_flip needs a classification dataset; {meta.name!r} is {meta.task}"
        )
    return dataclasses.replace(data, y_train=maths.flip_labels(data.y_train, meta.num_classes))


def _poisoned(
    spec: MaliciousAttack,
    handler: Handler,
    message_type: str,
    data: ClientData,
    payload: Payload,
    task: TaskContext,
    client_data: Callable[[int], ClientData],
    bad: tuple[int, ...],
) -> Payload:
    """Train honestly, then replace the weights by the attack's (sign flip, noise, ALIE)."""
    reply = handler(data, payload, task)
    if not isinstance(reply, Payload) or not reply.arrays:
        return reply
    own = {k: v for k, v in reply.arrays.items() if _matches(payload, k, v.shape)}
    if isinstance(spec, SignFlip):
        sent = maths.sign_flip(payload.arrays, own, spec.scale)
    elif isinstance(spec, GaussianNoise):
        noise = rng(task.scenario.seed, "attack", "gaussian", task.partition_id, task.server_round)
        sent = maths.gaussian_update(payload.arrays, own, spec.std, noise)
    else:
        assert isinstance(spec, LittleIsEnough)
        honest = [
            own
            if j == task.partition_id
            else _colluder(handler, message_type, client_data(j), payload, task, j)
            for j in bad
        ]
        z = spec.z if spec.z is not None else maths.alie_z(task.scenario.num_clients, len(bad))
        sent = maths.alie_update(payload.arrays, honest, z, own)
    return dataclasses.replace(reply, arrays={**reply.arrays, **sent})


def _colluder(
    handler: Handler,
    message_type: str,
    data: ClientData,
    payload: Payload,
    task: TaskContext,
    pid: int,
) -> dict[str, np.ndarray]:
    """The honest weights colluder ``pid`` would send (its data, its seed, no state)."""
    seed = client_seed(task.scenario, pid, message_type, task.server_round)
    peer = TaskContext(task.scenario, pid, task.server_round, seed, state_root=None)
    try:
        reply = handler(data, payload, peer)
    except Exception as exc:
        raise RuntimeError(
            f"attack alie: simulating colluding client {pid}'s honest training failed "
            f"({type(exc).__name__}: {exc}); alie needs a learner without per-client state"
        ) from exc
    return {k: v for k, v in reply.arrays.items() if _matches(payload, k, v.shape)}


def _matches(payload: Payload, key: str, shape: tuple[int, ...]) -> bool:
    """Whether reply array ``key`` is an update of a global array (same name and shape)."""
    glob = payload.arrays.get(key)
    return glob is not None and tuple(glob.shape) == tuple(shape)

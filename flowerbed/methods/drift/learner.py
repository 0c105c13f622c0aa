"""Client halves of SCAFFOLD, FedDyn and MOON on learner ``sgd``'s training loop.

Learner ``sgd_drift`` is learner ``sgd`` (same parameters, same plain
``train``) plus three handlers, each one :class:`FitHooks` on
:meth:`SGDLearner.fit <flowerbed.clients.torch_learner.SGDLearner.fit>` rather
than another loop, with the maths in this package's ``algorithm_*.py``:

- ``train.scaffold`` (:mod:`flowerbed.methods.drift.algorithm_scaffold`): ``after_backward``
  adds ``c - c_i`` to every parameter's gradient; the server's ``c`` arrives in
  the payload under :data:`CONTROL_PREFIX`, ``c_i`` lives in the client's state
  folder, and the reply carries ``y_i`` and ``Δc_i``.
- ``train.feddyn`` (:mod:`flowerbed.methods.drift.algorithm_feddyn`): ``extra_loss`` is
  ``-⟨∇L_k(θ_k^{t-1}), θ⟩ + alpha/2‖θ - θ^{t-1}‖²``; the gradient state lives in
  the client's state folder.
- ``train.moon`` (:mod:`flowerbed.methods.drift.algorithm_moon`): ``extra_loss`` is
  ``μ·L_con``; the previous local model lives in the client's state folder.

MOON's representation is the input of the model's last layer: for model
``mlp`` (``nn.Sequential``) the output of the last hidden block, which plays
the paper's projection head (no extra head is added, so the network is the
one FedAvg trains). A client's first MOON round has no previous model; it uses
the global one, so ``sim(z, z_glob) = sim(z, z_prev)``, ``L_con = log 2`` and
its gradient is zero.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from flowerbed.clients.learner import TaskContext
from flowerbed.clients.state import ClientState
from flowerbed.clients.torch_learner import FitHooks, SGDLearner
from flowerbed.core.messages import Arrays, Payload
from flowerbed.core.registry import register
from flowerbed.data.base import ClientData, DatasetMeta
from flowerbed.methods.drift import algorithm_feddyn as feddyn
from flowerbed.methods.drift import algorithm_moon as moon
from flowerbed.methods.drift import algorithm_scaffold as scaffold

if TYPE_CHECKING:
    import torch
    from torch import nn

#: Message types and record keys shared with the ``scaffold``, ``feddyn`` and ``moon``
#: strategies.
SCAFFOLD_MESSAGE = "train.scaffold"
FEDDYN_MESSAGE = "train.feddyn"
MOON_MESSAGE = "train.moon"
#: Prefix of the control-variate arrays (``c`` sent, ``Δc_i`` replied) beside the weights.
CONTROL_PREFIX = "scaffold-c:"
FEDDYN_ALPHA = "feddyn-alpha"
MOON_MU = "moon-mu"
MOON_TEMPERATURE = "moon-temperature"
#: Reply metric: local steps ``K`` this round.
LOCAL_STEPS = "local_steps"


def split_control(arrays: Arrays) -> tuple[Arrays, Arrays]:
    """``(weights, control variates)`` of a SCAFFOLD payload (the prefix removed)."""
    weights = {k: v for k, v in arrays.items() if not k.startswith(CONTROL_PREFIX)}
    control = {
        k.removeprefix(CONTROL_PREFIX): v for k, v in arrays.items() if k.startswith(CONTROL_PREFIX)
    }
    return weights, control


def join_control(weights: Arrays, control: Arrays) -> Arrays:
    """One SCAFFOLD payload: the weights and the prefixed control variates."""
    return {**weights, **{CONTROL_PREFIX + k: v for k, v in control.items()}}


def load_arrays(state: ClientState, like: Arrays) -> Arrays | None:
    """The arrays named like ``like`` from ``state``; ``None`` before the first save."""
    loaded = {k: state.load_array(k) for k in like}
    if any(v is None for v in loaded.values()):
        return None
    return {k: v for k, v in loaded.items() if v is not None}


def save_arrays(state: ClientState, arrays: Arrays) -> None:
    """Store every array under its own name."""
    for k, v in arrays.items():
        state.save_array(k, v)


def representation(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """MOON's ``z``: the input of the model's last layer (an ``nn.Sequential``)."""
    from torch import nn

    if not isinstance(model, nn.Sequential) or len(model) < 2:
        raise ValueError(
            "MOON needs a representation: the learner takes the input of the last layer "
            f"of an nn.Sequential model (e.g. model: mlp); got {type(model).__name__}"
        )
    z: torch.Tensor = model[:-1](x)
    return z


@register("learner", "sgd_drift")
class DriftSGDLearner(SGDLearner):
    """Learner ``sgd`` plus SCAFFOLD's, FedDyn's and MOON's client steps (same parameters)."""

    def parameter_names(self, meta: DatasetMeta) -> list[str]:
        """Names of the model's trainable parameters (not its buffers)."""
        return [n for n, _ in self._build(meta).named_parameters()]

    def _tensors_of(self, arrays: Arrays) -> dict[str, torch.Tensor]:
        import torch

        return {k: torch.as_tensor(np.asarray(v), device=self.device()) for k, v in arrays.items()}

    def train_scaffold(self, data: ClientData, payload: Payload, ctx: TaskContext) -> Payload:
        """K corrected steps ``g - c_i + c``; reply ``y_i`` and ``Δc_i`` (option II).

        Option II's ``(x - y_i)/(K·η_l)`` is the mean corrected step only for
        plain SGD, so momentum or Adam are refused.
        """
        if self.p.optimizer != "sgd" or self.p.momentum:
            raise ValueError(
                "SCAFFOLD's option-II control variate (x - y)/(K·lr) assumes plain local SGD: "
                "set learner optimizer: sgd and momentum: 0"
            )
        x, c = split_control(payload.arrays)
        state = ctx.client_state("scaffold")
        c_i = load_arrays(state, c) or scaffold.zeros_like(c)
        correction = self._tensors_of({k: c[k] - c_i[k] for k in c})
        steps = [0]

        def after_backward(model: nn.Module) -> None:
            for name, w in model.named_parameters():
                if w.grad is not None:
                    w.grad.add_(correction[name])
            steps[0] += 1

        y, metrics = self.fit(
            x, data.x_train, data.y_train, data.meta, ctx.seed,
            hooks=FitHooks(after_backward=after_backward),
        )  # fmt: skip
        if steps[0] == 0:  # no training rows: y_i = x and c_i unchanged
            return Payload(arrays=join_control(x, scaffold.zeros_like(c)), metrics=metrics)
        c_new = scaffold.client_control_update(c_i, c, x, y, steps[0], self.p.lr)
        save_arrays(state, c_new)
        delta_c = {k: c_new[k] - c_i[k] for k in c}
        metrics = {**metrics, LOCAL_STEPS: float(steps[0])}
        return Payload(
            arrays=join_control(y, delta_c), metrics=metrics, num_examples=data.num_train
        )

    def train_feddyn(self, data: ClientData, payload: Payload, ctx: TaskContext) -> Payload:
        """Minimise FedDyn's local objective; update the client's gradient state."""
        alpha = float(payload.config[FEDDYN_ALPHA])
        names = self.parameter_names(data.meta)
        server = {k: payload.arrays[k] for k in names}
        state = ctx.client_state("feddyn")
        grad_state = load_arrays(state, server) or scaffold.zeros_like(server)
        anchor, linear = self._tensors_of(server), self._tensors_of(grad_state)

        def extra_loss(
            model: nn.Module, xb: torch.Tensor, yb: torch.Tensor, out: torch.Tensor
        ) -> torch.Tensor:
            del xb, yb, out
            return feddyn.regularizer(dict(model.named_parameters()), anchor, linear, alpha)

        local, metrics = self.fit(
            payload.arrays, data.x_train, data.y_train, data.meta, ctx.seed,
            hooks=FitHooks(extra_loss=extra_loss),
        )  # fmt: skip
        new_state = feddyn.client_state_update(grad_state, local, server, alpha)
        save_arrays(state, new_state)
        return Payload(arrays=local, metrics=metrics, num_examples=data.num_train)

    def train_moon(self, data: ClientData, payload: Payload, ctx: TaskContext) -> Payload:
        """Train on ``L_sup + μ·L_con`` against the global and the previous local model."""
        import torch

        mu = float(payload.config[MOON_MU])
        tau = float(payload.config[MOON_TEMPERATURE])
        state = ctx.client_state("moon")
        previous = load_arrays(state, payload.arrays) or payload.arrays
        frozen = [self._load(data.meta, a).eval() for a in (payload.arrays, previous)]

        def extra_loss(
            model: nn.Module, xb: torch.Tensor, yb: torch.Tensor, out: torch.Tensor
        ) -> torch.Tensor:
            del yb, out
            z = representation(model, xb)
            with torch.no_grad():
                z_glob, z_prev = (representation(m, xb) for m in frozen)
            return mu * moon.contrastive_loss(z, z_glob, z_prev, tau)

        local, metrics = self.fit(
            payload.arrays, data.x_train, data.y_train, data.meta, ctx.seed,
            hooks=FitHooks(extra_loss=extra_loss),
        )  # fmt: skip
        save_arrays(state, local)
        return Payload(arrays=local, metrics=metrics, num_examples=data.num_train)

"""A learner that misbehaves on purpose, to exercise the platform's failure handling."""

from __future__ import annotations

import os
import signal
from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from flowerbed.clients.learner import Handler, TaskContext
from flowerbed.clients.torch_learner import SGDLearner, SGDParams
from flowerbed.core.messages import Payload
from flowerbed.core.registry import register
from flowerbed.data.base import ClientData

Fault = Literal[
    "raise", "nan", "inf", "wrong_shape", "wrong_dtype", "none", "no_payload", "crash"
]
Phase = Literal["train", "evaluate", "both"]

#: Faults that need arrays to corrupt; an ``evaluate`` reply carries none.
ARRAY_FAULTS = ("wrong_shape", "wrong_dtype", "none")


class FaultyParams(SGDParams):
    """SGD settings plus which clients fail, how, in which rounds and phases.

    Faults: ``raise`` an exception; ``nan`` / ``inf`` in the first array (train)
    or in every metric (evaluate); ``wrong_shape`` / ``wrong_dtype`` of the
    first array; ``none``, a reply without arrays; ``no_payload``, a handler
    that returns ``None`` instead of a payload; ``crash``, the client's
    process killed (SIGKILL), as the kernel's out-of-memory killer would: on
    the ``inline`` engine that process is the whole run.
    """

    fail_clients: tuple[int, ...] = Field((), description="partition ids that misbehave")
    fault: Fault = "raise"
    fail_rounds: tuple[int, ...] = Field((), description="rounds with faults (empty: all)")
    phase: Phase = Field("train", description="which handler misbehaves")

    @model_validator(mode="after")
    def _fault_fits_phase(self) -> FaultyParams:
        if self.phase != "train" and self.fault in ARRAY_FAULTS:
            raise ValueError(
                f"fault {self.fault!r} corrupts arrays, which evaluate replies do not "
                f"carry; use phase: train, or fault: raise, nan, inf or no_payload"
            )
        return self


@register("learner", "faulty_sgd")
class FaultyLearner(SGDLearner):
    """SGD learner with injected client faults (raise, NaN/Inf, wrong arrays, no reply body)."""

    Params = FaultyParams

    def _fails(self, ctx: TaskContext, phase: str) -> bool:
        p: FaultyParams = self.params  # type: ignore[assignment]
        in_round = not p.fail_rounds or ctx.server_round in p.fail_rounds
        in_phase = p.phase in (phase, "both")
        return ctx.partition_id in p.fail_clients and in_round and in_phase

    def train(self, data: ClientData, payload: Payload, ctx: TaskContext) -> Payload:
        """Train normally, then corrupt the reply of the failing clients."""
        if not self._fails(ctx, "train"):
            return super().train(data, payload, ctx)
        return self._misbehave(super().train, data, payload, ctx)

    def evaluate(self, data: ClientData, payload: Payload, ctx: TaskContext) -> Payload:
        """Evaluate normally, then corrupt the reply of the failing clients."""
        if not self._fails(ctx, "evaluate"):
            return super().evaluate(data, payload, ctx)
        return self._misbehave(super().evaluate, data, payload, ctx)

    def _misbehave(
        self, handler: Handler, data: ClientData, payload: Payload, ctx: TaskContext
    ) -> Payload:
        fault: Fault = self.params.fault  # type: ignore[attr-defined]
        if fault == "raise":
            raise RuntimeError(f"injected fault on client {ctx.partition_id}")
        if fault == "no_payload":
            return None  # type: ignore[return-value]
        if fault == "crash":
            os.kill(os.getpid(), signal.SIGKILL)
        reply = handler(data, payload, ctx)
        return _corrupt(reply, fault)


def _corrupt(reply: Payload, fault: Fault) -> Payload:
    """A copy of ``reply`` damaged by ``fault`` (arrays first, else metrics)."""
    if not reply.arrays:
        bad = np.nan if fault == "nan" else np.inf
        metrics = {name: bad for name in reply.metrics} or {"loss": bad}
        return Payload(metrics=metrics, num_examples=reply.num_examples)
    first = next(iter(reply.arrays))
    arrays = dict(reply.arrays)
    if fault in ("nan", "inf"):
        bad_array = arrays[first].copy()
        bad_array.flat[0] = np.nan if fault == "nan" else np.inf
        arrays[first] = bad_array
    elif fault == "wrong_shape":
        arrays[first] = np.zeros((1,), dtype=arrays[first].dtype)
    elif fault == "wrong_dtype":
        arrays[first] = arrays[first].astype(np.float64)
    elif fault == "none":
        arrays = {}
    return Payload(arrays=arrays, metrics=reply.metrics, num_examples=reply.num_examples)

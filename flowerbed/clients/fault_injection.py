"""A learner that misbehaves on purpose, to exercise the platform's failure handling."""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from flowerbed.clients.learner import TaskContext
from flowerbed.clients.torch_learner import SGDLearner, SGDParams
from flowerbed.data.base import ClientData
from flowerbed.platform.messages import Payload
from flowerbed.platform.registry import register

Fault = Literal["raise", "nan", "inf", "wrong_shape", "wrong_dtype", "none"]


class FaultyParams(SGDParams):
    """SGD settings plus which clients fail, how, and in which rounds."""

    fail_clients: tuple[int, ...] = Field((), description="partition ids that misbehave")
    fault: Fault = "raise"
    fail_rounds: tuple[int, ...] = Field((), description="rounds with faults (empty: all)")


@register("learner", "faulty_sgd")
class FaultyLearner(SGDLearner):
    """SGD learner with injected client faults (raise, NaN/Inf, wrong arrays, no reply body)."""

    Params = FaultyParams

    def _fails(self, ctx: TaskContext) -> bool:
        p: FaultyParams = self.params  # type: ignore[assignment]
        in_round = not p.fail_rounds or ctx.server_round in p.fail_rounds
        return ctx.partition_id in p.fail_clients and in_round

    def train(self, data: ClientData, payload: Payload, ctx: TaskContext) -> Payload:
        """Train normally, then corrupt the reply of the failing clients."""
        if not self._fails(ctx):
            return super().train(data, payload, ctx)
        fault = self.params.fault  # type: ignore[attr-defined]
        if fault == "raise":
            raise RuntimeError(f"injected fault on client {ctx.partition_id}")
        reply = super().train(data, payload, ctx)
        return _corrupt(reply, fault)


def _corrupt(reply: Payload, fault: Fault) -> Payload:
    first = next(iter(reply.arrays))
    arrays = dict(reply.arrays)
    if fault in ("nan", "inf"):
        bad = arrays[first].copy()
        bad.flat[0] = np.nan if fault == "nan" else np.inf
        arrays[first] = bad
    elif fault == "wrong_shape":
        arrays[first] = np.zeros((1,), dtype=arrays[first].dtype)
    elif fault == "wrong_dtype":
        arrays[first] = arrays[first].astype(np.float64)
    elif fault == "none":
        arrays = {}
    return Payload(arrays=arrays, metrics=reply.metrics, num_examples=reply.num_examples)

"""Client-side one-shot magnitude pruning of the model update before upload.

Method: the pruning half of "Theoretical Guarantees for One-Shot Magnitude Pruning
and Compute-Adaptive Early Exit" (ICML 2026 poster 63550; reconstructed in
docs/methods/compute_reduction.md), applied to the update as in sparsified FedAvg
uploads; maths in :mod:`flowerbed.methods.compute_reduction.algorithm`. The client trains like
``sgd``, prunes ``delta = local - global`` and replies ``global + pruned delta``,
so FedAvg receives the names, shapes and dtypes it sent and averages as usual.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from flowerbed.clients.learner import TaskContext
from flowerbed.clients.torch_learner import SGDLearner, SGDParams
from flowerbed.core.messages import Arrays, Payload
from flowerbed.core.registry import register
from flowerbed.data.base import ClientData
from flowerbed.methods.compute_reduction.algorithm import prune


class PrunedSGDParams(SGDParams):
    """``sgd`` settings plus how the uploaded update is pruned."""

    upload_sparsity: float = Field(
        0.0, ge=0, le=1, description="fraction of update entries zeroed (unstructured)"
    )
    pruning: Literal["global", "layer"] = Field(
        "global", description="rank magnitudes over the whole update or per array"
    )
    pattern: Literal["unstructured", "n:m"] = "unstructured"
    nm_n: int = Field(2, ge=0, description="kept entries per group (pattern n:m)")
    nm_m: int = Field(4, ge=1, description="group length (pattern n:m)")

    @model_validator(mode="after")
    def _consistent(self) -> PrunedSGDParams:
        if self.nm_n > self.nm_m:
            raise ValueError(f"nm_n must be <= nm_m, got {self.nm_n}:{self.nm_m}")
        if self.pattern == "n:m" and self.upload_sparsity:
            raise ValueError(
                "pattern n:m sets its own sparsity (1 - nm_n/nm_m); leave upload_sparsity at 0"
            )
        return self


def upload_stats(update: Arrays) -> dict[str, float]:
    """Nonzero count and bytes of an update, dense and as values + 1-bit mask.

    ``upload_bytes`` is the cheaper of the dense size and ``nnz * itemsize +
    ceil(n / 8)`` (kept values plus a bitmap), what a sparse upload would cost.
    """
    nnz = sum(int(np.count_nonzero(v)) for v in update.values())
    n = sum(int(v.size) for v in update.values())
    dense = sum(int(v.nbytes) for v in update.values())
    sparse = sum(int(np.count_nonzero(v)) * v.itemsize for v in update.values())
    return {
        "upload_nonzero": float(nnz),
        "upload_density": nnz / max(n, 1),
        "upload_bytes_dense": float(dense),
        "upload_bytes": float(min(dense, sparse + math.ceil(n / 8))),
    }


@register("learner", "sgd_pruned")
class PrunedSGDLearner(SGDLearner):
    """``sgd`` whose upload is ``global + magnitude-pruned(local - global)``.

    Contract: the reply has exactly the received array names, shapes and dtypes;
    with ``upload_sparsity = 0`` and ``pattern: unstructured`` it equals ``sgd``'s
    reply bit for bit (kept entries carry the local value, pruned ones the
    received value). Non-floating arrays are sent unpruned. Baselines (``centralized``,
    ``local_only``) call ``fit`` and are not pruned.
    """

    Params = PrunedSGDParams
    p: PrunedSGDParams

    def compress(self, local: Arrays, received: Arrays) -> tuple[Arrays, dict[str, float]]:
        """Prune ``local - received``; return the upload and its :func:`upload_stats`."""
        floats = [k for k in local if np.issubdtype(local[k].dtype, np.floating)]
        delta = {k: local[k] - received[k].astype(local[k].dtype) for k in floats}
        pruned, masks = prune(
            delta,
            self.p.upload_sparsity,
            scope=self.p.pruning,
            pattern=self.p.pattern,
            nm=(self.p.nm_n, self.p.nm_m),
        )
        upload = dict(local)
        for k in floats:
            kept = np.where(masks[k], local[k], received[k].astype(local[k].dtype))
            upload[k] = kept.astype(received[k].dtype)
        return upload, upload_stats(pruned)

    def train(self, data: ClientData, payload: Payload, ctx: TaskContext) -> Payload:
        """Local SGD, then upload the global weights plus the pruned update."""
        reply = super().train(data, payload, ctx)
        arrays, stats = self.compress(reply.arrays, payload.arrays)
        return Payload(
            arrays=arrays, metrics={**reply.metrics, **stats}, num_examples=reply.num_examples
        )

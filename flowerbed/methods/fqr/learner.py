"""FQR client: local quantile regression on the client's own columns (one-shot FQR upload).

Answers ``query.fqr_fit`` with :class:`flowerbed.methods.fqr.algorithm_local.LocalFit`'s
arrays, and ``train.pinball`` with local smoothed-pinball gradient steps for the
iterative FedAvg baseline. See ``flowerbed/methods/fqr/algorithm.py`` for the method.
"""

from __future__ import annotations

import logging
from typing import Literal

import numpy as np
from pydantic import Field

from flowerbed.clients.learner import Learner, TaskContext
from flowerbed.core.messages import Payload
from flowerbed.core.registry import Params, register
from flowerbed.data.base import ClientData

log = logging.getLogger("flowerbed")

#: Message types and record keys shared with ``flowerbed.methods.fqr.strategy``.
FIT_MESSAGE = "query.fqr_fit"
PINBALL_MESSAGE = "train.pinball"
TAUS = "taus"
STATUS = "fqr-status"
REASON = "fqr-reason"
STATUS_SINGULAR = "singular"
LR = "lr"
LOCAL_STEPS = "local-steps"
SMOOTHING = "smoothing"
COEF = "coef"
FEATURES = "features"


class FqrLearnerParams(Params):
    """How the client estimates its QR covariance."""

    cov_type: Literal["iid", "kernel"] = Field(
        "iid", description="iid: tau(1-tau)/(n f^2) S^-1; kernel: Powell's robust sandwich"
    )
    density: Literal["siddiqui", "kernel"] = Field(
        "siddiqui", description="estimator of the residual density at 0"
    )


@register("learner", "fqr_local")
class FqrLearner(Learner):
    """Local linear QR at each requested tau on the client's own feature columns."""

    Params = FqrLearnerParams

    def query_fqr_fit(self, data: ClientData, payload: Payload, ctx: TaskContext) -> Payload:
        """Fit QR at ``config[taus]``; a singular design replies with a flag, not an error."""
        # scipy only once a client fits: validating a scenario must stay light.
        from flowerbed.methods.fqr.algorithm_local import SingularDesignError, fit_local

        del ctx
        p: FqrLearnerParams = self.params  # type: ignore[assignment]
        taus = np.asarray(payload.config[TAUS], dtype=np.float64)
        try:
            fit = fit_local(
                data.x_train, data.y_train, taus, data.column_ids(), p.cov_type, p.density
            )
        except (SingularDesignError, np.linalg.LinAlgError) as exc:
            log.warning("client %d: local QR design unusable: %s", data.partition_id, exc)
            return Payload(config={STATUS: STATUS_SINGULAR, REASON: str(exc)})
        return Payload(arrays=fit.to_arrays(), num_examples=fit.n)

    def train_pinball(self, data: ClientData, payload: Payload, ctx: TaskContext) -> Payload:
        """Local gradient steps on the smoothed check loss, own columns only.

        Receives ``coef`` of shape ``(K, 1 + d)`` (intercept first); returns the
        updated ``(K, 1 + d_m)`` block of the client's columns and their ids.
        """
        from flowerbed.methods.fqr.algorithm_local import smoothed_pinball_grad

        del ctx
        cols = data.column_ids()
        cfg = payload.config
        taus = np.asarray(cfg[TAUS], dtype=np.float64)
        x, y = (
            np.asarray(data.x_train, dtype=np.float64),
            np.asarray(data.y_train, dtype=np.float64),
        )
        coef = payload.arrays[COEF][:, np.concatenate([[0], cols + 1])].copy()
        for k, tau in enumerate(taus):
            for _ in range(int(cfg[LOCAL_STEPS])):
                coef[k] -= float(cfg[LR]) * smoothed_pinball_grad(
                    x, y, coef[k], tau, float(cfg[SMOOTHING])
                )
        return Payload(arrays={COEF: coef, FEATURES: cols}, num_examples=len(y))

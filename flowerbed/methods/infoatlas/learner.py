"""InfoAtlas client: MI between each local feature and the label, sent as scalars.

Answers ``query.mi_screen`` with one MI estimate (nats) per feature the client
holds, and optionally per feature pair, computed on its private training rows.
With ``estimator: infoatlas`` all estimates come from one forward pass of the
pre-trained network (:mod:`flowerbed.methods.infoatlas.model`); the reference
estimators (KSG, MINE, InfoNCE, Gaussian) run per feature, for comparison.
Method: ``flowerbed/methods/infoatlas/algorithm.py``.
"""

from __future__ import annotations

import time
from typing import Literal

import numpy as np
from pydantic import Field

from flowerbed.clients.learner import Learner, TaskContext
from flowerbed.core.messages import Payload
from flowerbed.core.registry import Params, register
from flowerbed.data.base import ClientData

#: Message type and record keys shared with ``flowerbed.methods.infoatlas.strategy``.
SCREEN_MESSAGE = "query.mi_screen"
PAIRS = "pairs"
MI = "mi"
PAIR_MI = "pair_mi"
FEATURES = "features"
SECONDS = "seconds"

Estimator = Literal["infoatlas", "ksg", "mine", "infonce", "gaussian"]


class InfoAtlasLearnerParams(Params):
    """Which estimator the client runs and its settings."""

    estimator: Estimator = Field("infoatlas", description="infoatlas or a reference estimator")
    weights: str | None = Field(None, description="network file; None: the shipped default")
    crossfit: bool = Field(True, description="InfoAtlas: score each half's critic on the other")
    ksg_k: int = Field(3, ge=1)
    neural_steps: int = Field(500, ge=1, description="MINE/InfoNCE optimisation steps per pair")


@register("learner", "infoatlas")
class InfoAtlasLearner(Learner):
    """Local MI estimates (feature-label, optionally feature-feature) on private rows."""

    Params = InfoAtlasLearnerParams

    def estimate_pairs(self, pairs: list[tuple[np.ndarray, np.ndarray]], seed: int) -> np.ndarray:
        """MI estimates of ``(x, y)`` pairs with the configured estimator."""
        # The estimators import torch and scipy: only once a client estimates, so
        # that validating a scenario stays light.
        from flowerbed.methods.infoatlas import algorithm_reference as ref

        p: InfoAtlasLearnerParams = self.params  # type: ignore[assignment]
        if not pairs:
            return np.zeros(0)
        if p.estimator == "infoatlas":
            from flowerbed.methods.infoatlas import algorithm as ia
            from flowerbed.methods.infoatlas.model import load_model

            net = load_model(p.weights)
            return ia.estimate_many(net, pairs, crossfit=p.crossfit, seed=seed % 2**31)
        if p.estimator == "ksg":
            return np.array([ref.ksg(x, y, k=p.ksg_k, seed=seed % 2**32) for x, y in pairs])
        if p.estimator == "gaussian":
            return np.array([ref.gaussian_estimate(x, y) for x, y in pairs])
        return np.array(
            [
                ref.neural_mi(x, y, objective=p.estimator, steps=p.neural_steps, seed=seed % 2**31)
                for x, y in pairs
            ]
        )

    def screen(
        self, x: np.ndarray, y: np.ndarray, pairs: bool, seed: int
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """``I(x_j; y)`` per column and, with ``pairs``, ``I(x_j; x_k)`` for ``j < k``.

        Pair estimates come in ``np.triu_indices(d, 1)`` order.
        """
        x = np.asarray(x, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        d = x.shape[1]
        jobs = [(x[:, j], y) for j in range(d)]
        if pairs:
            jobs += [(x[:, j], x[:, k]) for j, k in zip(*np.triu_indices(d, 1), strict=True)]
        est = self.estimate_pairs(jobs, seed)
        return est[:d], (est[d:] if pairs else None)

    def query_mi_screen(self, data: ClientData, payload: Payload, ctx: TaskContext) -> Payload:
        """Reply ``mi`` ``(d_m,)``, ``features`` ``(d_m,)`` and optionally ``pair_mi``.

        ``pair_mi`` holds ``I(x_j; x_k)`` for the local pairs ``j < k`` in
        ``np.triu_indices(d_m, 1)`` order.
        """
        if data.num_train < 8:
            raise ValueError(
                f"client {data.partition_id}: {data.num_train} training rows, need at least 8 "
                "to estimate mutual information"
            )
        start = time.perf_counter()
        mi, mat = self.screen(
            data.x_train, data.y_train, bool(payload.config.get(PAIRS, False)), ctx.seed
        )
        arrays = {MI: mi, FEATURES: data.column_ids()}
        if mat is not None:
            arrays[PAIR_MI] = mat
        return Payload(
            arrays=arrays,
            metrics={SECONDS: time.perf_counter() - start},
            num_examples=data.num_train,
        )

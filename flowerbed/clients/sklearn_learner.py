"""Learner ``sklearn``: a scikit-learn estimator fitted on a client's own data, as a local task.

The simplest local task, and a reference point beside any federated method:
each client fits the estimator on its training rows and scores it on its
held-out rows; strategy ``local`` runs it on every client, the ``centralized``
baseline once on every client's rows pooled. Classification datasets report
``accuracy`` and ``macro_f1``; regression datasets ``mse`` and ``r2``.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from pydantic import Field

from flowerbed.clients.learner import Learner, TaskContext
from flowerbed.core.messages import Payload
from flowerbed.core.registry import Params, register
from flowerbed.data.base import ClientData

Estimator = Literal["linear", "knn", "random_forest"]


class SklearnParams(Params):
    """Which estimator, and its main setting."""

    estimator: Estimator = Field(
        "linear",
        description="linear: logistic regression (classification) or ridge (regression); "
        "knn: k nearest neighbours; random_forest",
    )
    C: float = Field(1.0, gt=0, description="inverse L2 strength of the logistic regression")
    alpha: float = Field(1.0, ge=0, description="L2 strength of the ridge regression")
    n_neighbors: int = Field(5, ge=1, description="neighbours of knn (capped at the rows)")
    n_estimators: int = Field(100, ge=1, description="trees of random_forest")
    max_iter: int = Field(1000, ge=1, description="iterations of the logistic regression")


def make_estimator(p: SklearnParams, classification: bool, n_rows: int, seed: int) -> Any:
    """The scikit-learn estimator ``p`` names, seeded where it is random."""
    from sklearn import ensemble, linear_model, neighbors

    if p.estimator == "linear":
        if classification:
            return linear_model.LogisticRegression(C=p.C, max_iter=p.max_iter)
        return linear_model.Ridge(alpha=p.alpha)
    if p.estimator == "knn":
        k = min(p.n_neighbors, n_rows)
        cls = neighbors.KNeighborsClassifier if classification else neighbors.KNeighborsRegressor
        return cls(n_neighbors=k)
    cls = ensemble.RandomForestClassifier if classification else ensemble.RandomForestRegressor
    return cls(n_estimators=p.n_estimators, random_state=seed % 2**32)


def scores(model: Any, x: np.ndarray, y: np.ndarray, classification: bool) -> dict[str, float]:
    """``accuracy``/``macro_f1`` or ``mse``/``r2`` of ``model`` on ``(x, y)``."""
    from sklearn import metrics

    pred = model.predict(x)
    if classification:
        return {
            "accuracy": float(metrics.accuracy_score(y, pred)),
            "macro_f1": float(metrics.f1_score(y, pred, average="macro", zero_division=0)),
        }
    mse = float(metrics.mean_squared_error(y, pred))
    return {"mse": mse, "r2": float(metrics.r2_score(y, pred))}


@register("learner", "sklearn")
class SklearnLearner(Learner):
    """A scikit-learn estimator fitted on the client's data and scored on its held-out rows."""

    Params = SklearnParams

    def run_local(self, data: ClientData, ctx: TaskContext) -> Payload:
        """Fit on ``data``'s training rows, score on its test rows (``num_examples``: test rows)."""
        p: SklearnParams = self.params  # type: ignore[assignment]
        if data.meta.task == "language_modeling":
            raise ValueError(
                f"learner sklearn: {data.meta.name!r} is token windows for language modelling; "
                "use learner: lm_sgd"
            )
        classification = data.meta.task == "classification"
        if data.num_train == 0 or len(data.y_test) == 0:
            raise ValueError(
                f"learner sklearn: client {data.partition_id} has {data.num_train} training "
                f"and {len(data.y_test)} test rows; both must be > 0"
            )
        if classification and len(np.unique(data.y_train)) < 2 and p.estimator == "linear":
            raise ValueError(
                f"learner sklearn: client {data.partition_id} holds a single class; "
                "logistic regression needs two (use estimator: knn or random_forest)"
            )
        model = make_estimator(p, classification, data.num_train, ctx.seed)
        model.fit(data.x_train, data.y_train)
        return Payload(
            metrics=scores(model, data.x_test, data.y_test, classification),
            num_examples=len(data.y_test),
        )

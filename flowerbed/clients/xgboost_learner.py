"""Learner ``xgboost``: boosted trees by XGBoost (Chen & Guestrin, KDD 2016, arXiv:1603.02754).

The client side of Flower's ``FedXgbBagging`` and ``FedXgbCyclic``
(:mod:`flowerbed.strategies.flower_xgb`). The booster travels the way
Flower's XGBoost examples send it: the raw bytes of its JSON model
(``Booster.save_raw("json")``) as one ``uint8`` array named ``"0"``; an
empty array is "no model yet". Each ``train`` message loads the received
global booster and boosts ``num_local_round`` more trees on the client's
rows; the reply is the whole booster, or only the new trees where the
strategy asks for them (bagging: its params say ``booster_reply =
"new_trees"``). The objective follows the dataset's task: ``binary:logistic``
(2 classes), ``multi:softprob`` (more), ``reg:squarederror`` (regression).
Training is seeded from the message's seed and uses the client's CPUs
(``engine.client_resources.num_cpus``, 1 by default) as XGBoost threads.

Examples
--------
>>> XGBoostParams().eta, XGBoostParams().max_depth, XGBoostParams().num_local_round
(0.1, 8, 1)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import Field

from flowerbed.clients.learner import SupervisedLearner, TaskContext
from flowerbed.core.messages import Arrays, Payload
from flowerbed.core.registry import Params, name_of, register
from flowerbed.data.base import ClientData, DatasetMeta

if TYPE_CHECKING:
    import xgboost

#: How to install what the learner needs.
XGBOOST_INSTALL = "pip install 'flowerbed[xgboost]'"
#: The name of the booster's array (Flower's ``ArrayRecord([array])`` names it so).
BOOSTER = "0"
#: What the reply to a ``train`` message carries, by the strategy's ``booster_reply``.
NEW_TREES, MODEL = "new_trees", "model"


class XGBoostParams(Params):
    """XGBoost's training parameters, with the defaults of Flower's XGBoost examples."""

    eta: float = Field(0.1, gt=0, le=1, description="learning rate (shrinkage of each tree)")
    max_depth: int = Field(8, ge=1, le=32, description="maximum depth of a tree")
    num_local_round: int = Field(
        1, ge=1, description="trees each client boosts per round on top of the global model"
    )
    subsample: float = Field(1.0, gt=0, le=1, description="share of rows sampled per tree")
    tree_method: Literal["hist", "approx", "exact"] = Field(
        "hist", description="XGBoost's split finding"
    )
    nthread: int | None = Field(
        None, ge=1, description="XGBoost threads; default: the client's CPUs"
    )

    def scenario_problems(self, scenario: Any) -> list[str]:
        """One line when the xgboost package is missing (the install command)."""
        del scenario
        import importlib.util

        if importlib.util.find_spec("xgboost") is None:
            return [
                f"name: learner {name_of(self)!r} needs the xgboost package; "
                f"install it with: {XGBOOST_INSTALL}"
            ]
        return []


def objective(meta: DatasetMeta) -> dict[str, Any]:
    """XGBoost's objective (and ``num_class``) for the dataset's task.

    Examples
    --------
    >>> meta = DatasetMeta(name="t", task="classification", num_features=2, num_classes=3)
    >>> objective(meta)
    {'objective': 'multi:softprob', 'num_class': 3}
    """
    if meta.task == "regression":
        return {"objective": "reg:squarederror"}
    if meta.task != "classification":
        raise ValueError(
            f"learner xgboost: {meta.name!r} is a {meta.task} dataset; "
            "it needs tabular classification or regression rows"
        )
    if meta.num_classes <= 2:
        return {"objective": "binary:logistic"}
    return {"objective": "multi:softprob", "num_class": meta.num_classes}


def _xgb() -> Any:
    try:
        import xgboost
    except ImportError:
        raise ImportError(f"learner xgboost needs the xgboost package: {XGBOOST_INSTALL}") from None
    return xgboost


def booster_arrays(booster: xgboost.Booster) -> Arrays:
    """The booster as Flower's XGBoost examples send it: JSON bytes in one uint8 array."""
    raw = bytes(booster.save_raw(raw_format="json"))
    return {BOOSTER: np.frombuffer(raw, dtype=np.uint8).copy()}


def load_booster(arrays: Arrays, params: dict[str, Any]) -> xgboost.Booster | None:
    """The booster in ``arrays`` (see :func:`booster_arrays`); ``None`` for an empty one."""
    raw = arrays.get(BOOSTER)
    if raw is None or raw.size == 0:
        return None
    booster = _xgb().Booster(params=params)
    booster.load_model(bytearray(np.ascontiguousarray(raw, dtype=np.uint8).tobytes()))
    return booster


def predict(booster: xgboost.Booster, x: np.ndarray, nthread: int = 1) -> np.ndarray:
    """Probabilities (classification: of class 1, or one column per class) or values."""
    return np.asarray(booster.predict(_xgb().DMatrix(x, nthread=nthread)))


def metrics_of(
    pred: np.ndarray, y: np.ndarray, meta: DatasetMeta, auc: bool = True
) -> dict[str, float]:
    """``loss`` (log loss / MSE) and ``accuracy`` (+ ``auc`` for two classes) or ``r2``.

    ``auc=False`` leaves AUC out: a client whose rows hold one class has none,
    and Flower aggregates client metrics only when every reply has the same keys.
    """
    from sklearn import metrics

    if meta.task == "regression":
        return {"loss": float(metrics.mean_squared_error(y, pred)),
                "r2": float(metrics.r2_score(y, pred))}  # fmt: skip
    labels = list(range(max(meta.num_classes, 2)))
    if pred.ndim == 1:
        proba = np.stack([1 - pred, pred], axis=1)
    else:
        proba = pred
    out = {
        "loss": float(metrics.log_loss(y, proba, labels=labels)),
        "accuracy": float(np.mean(proba.argmax(axis=1) == y)),
    }
    if auc and pred.ndim == 1 and len(np.unique(y)) == 2:
        out["auc"] = float(metrics.roc_auc_score(y, pred))
    return out


@register("learner", "xgboost")
class XGBoostLearner(SupervisedLearner):
    """XGBoost trees boosted on the client's rows from the received global booster."""

    Params = XGBoostParams

    def warm(self) -> None:
        """Import xgboost before the first round."""
        _xgb()

    def threads(self) -> int:
        """XGBoost threads: ``nthread``, else the client's CPUs (at least 1)."""
        p: XGBoostParams = self.params  # type: ignore[assignment]
        cpus = self.scenario.engine.client_resources.num_cpus
        return p.nthread or max(1, int(cpus))

    def booster_params(self, meta: DatasetMeta, seed: int) -> dict[str, Any]:
        """XGBoost's parameter dict for this dataset and seed."""
        p: XGBoostParams = self.params  # type: ignore[assignment]
        return {
            **objective(meta),
            "eta": p.eta,
            "max_depth": p.max_depth,
            "subsample": p.subsample,
            "tree_method": p.tree_method,
            "nthread": self.threads(),
            "seed": seed % 2**31,
        }

    def epochs_per_round(self) -> int:
        """Trees boosted per round (the ``centralized`` baseline boosts rounds x this)."""
        p: XGBoostParams = self.params  # type: ignore[assignment]
        return p.num_local_round

    def init_arrays(self, meta: DatasetMeta, seed: int) -> Arrays:
        """No model yet: an empty booster (Flower's examples start from ``b""``)."""
        del meta, seed
        return {BOOSTER: np.zeros(0, dtype=np.uint8)}

    def boost(
        self, arrays: Arrays, x: Any, y: Any, meta: DatasetMeta, seed: int, rounds: int
    ) -> tuple[xgboost.Booster, int]:
        """``rounds`` more boosting rounds from ``arrays``; the booster and its rounds before."""
        if len(y) == 0:
            raise ValueError("learner xgboost: the client has no training rows")
        xgb = _xgb()
        params = self.booster_params(meta, seed)
        start = load_booster(arrays, params)
        before = 0 if start is None else start.num_boosted_rounds()
        train = xgb.DMatrix(x, label=y, nthread=params["nthread"])
        booster = xgb.train(params, train, num_boost_round=rounds, xgb_model=start)
        return booster, before

    def fit(
        self,
        arrays: Arrays,
        x: Any,
        y: Any,
        meta: DatasetMeta,
        seed: int,
        epochs: int | None = None,
    ) -> tuple[Arrays, dict[str, float]]:
        """Boost ``epochs`` (default ``num_local_round``) trees; the whole booster back."""
        booster, _ = self.boost(arrays, x, y, meta, seed, epochs or self.epochs_per_round())
        train = metrics_of(predict(booster, x, self.threads()), np.asarray(y), meta)
        return booster_arrays(booster), train

    def score(self, arrays: Arrays, x: Any, y: Any, meta: DatasetMeta) -> dict[str, float]:
        """Metrics of the booster on ``(x, y)``; none for the empty booster (no model yet)."""
        booster = load_booster(arrays, self.booster_params(meta, 0))
        if booster is None:
            return {}
        return metrics_of(predict(booster, x, self.threads()), np.asarray(y), meta)

    def evaluate(self, data: ClientData, payload: Payload, ctx: TaskContext) -> Payload:
        """Loss and accuracy of the received booster on the client's held-out split (no AUC)."""
        del ctx
        booster = load_booster(payload.arrays, self.booster_params(data.meta, 0))
        if len(data.y_test) == 0 or booster is None:
            return Payload(num_examples=0)
        pred = predict(booster, data.x_test, self.threads())
        metrics = metrics_of(pred, np.asarray(data.y_test), data.meta, auc=False)
        return Payload(metrics=metrics, num_examples=len(data.y_test))

    def reply(self) -> str:
        """What a ``train`` reply carries: the strategy's ``booster_reply``, else the model."""
        return str(getattr(self.scenario.strategy, "booster_reply", MODEL))

    def train(self, data: ClientData, payload: Payload, ctx: TaskContext) -> Payload:
        """Boost on the client's rows; reply the booster or (bagging) only its new trees."""
        booster, before = self.boost(
            payload.arrays, data.x_train, data.y_train, data.meta, ctx.seed,
            self.epochs_per_round(),
        )  # fmt: skip
        y = np.asarray(data.y_train)
        pred = predict(booster, data.x_train, self.threads())
        metrics = metrics_of(pred, y, data.meta, auc=False)
        if self.reply() == NEW_TREES:
            booster = booster[before : booster.num_boosted_rounds()]
        return Payload(arrays=booster_arrays(booster), metrics=metrics, num_examples=data.num_train)

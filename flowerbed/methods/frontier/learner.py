"""Frontier client: benchmark risks of candidate models, and hedging on a new client.

Method: "Hedging on the Frontier" (arXiv 2605.30997; ``docs/methods/frontier.md``
section 1); maths in ``flowerbed/methods/frontier/algorithm.py`` and ``algorithm_hedging.py``.
A benchmark client answers ``query.frontier_risks`` with the Brier risk (and error)
of every received model on all its rows: only these numbers leave it. The new
client answers ``query.frontier_hedge``: for ``repeats`` seeded draws of ``n``
labelled rows (the rest of its rows are the test set) it computes each variant's
weights (ERM, Gibbs, Q-aggregation, a fixed pick) and returns only mean test
metrics per variant, plus, for evaluation, the shipped models' risks on all rows.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from flowerbed.clients.learner import Learner, TaskContext
from flowerbed.core.messages import Payload
from flowerbed.core.registry import register
from flowerbed.data.base import ClientData
from flowerbed.methods.frontier import algorithm_hedging as hedging

#: Message types and record keys shared with ``flowerbed.methods.frontier.strategy``.
RISKS_MESSAGE = "query.frontier_risks"
HEDGE_MESSAGE = "query.frontier_hedge"
MODEL_IDS = "model-ids"
VARIANTS = "variants"
N_LABELLED = "n-labelled"
REPEATS = "repeats"
DRAW_SEED = "draw-seed"
NU = "nu"
STEPS = "steps"
RISKS = "risks"
ERRORS = "errors"
POOL_RISKS = "pool-risks"
METRICS = ("brier", "error", "excess_brier", "excess_error")


def model_key(j: int) -> str:
    """Array name of global model ``j``."""
    return f"model-{j}"


def all_rows(data: ClientData) -> tuple[np.ndarray, np.ndarray]:
    """The client's train and held-out rows together."""
    return np.concatenate([data.x_train, data.x_test]), np.concatenate([data.y_train, data.y_test])


def received_predictions(data: ClientData, payload: Payload) -> tuple[np.ndarray, np.ndarray]:
    """``(M, N, C)`` probabilities of the received models on all rows, and the labels."""
    # The zoo module imports scikit-learn: only once a client predicts, so that
    # validating a scenario stays light.
    from flowerbed.methods.frontier.learner_zoo import from_array, predict_all

    ids = payload.config[MODEL_IDS]
    models = [from_array(payload.arrays[model_key(j)]) for j in ids]
    x, y = all_rows(data)
    return predict_all(models, x, data.meta.num_classes), y


def errors(probs: np.ndarray, y: np.ndarray) -> np.ndarray:
    """0-1 error of ``(..., n, C)`` probabilities against labels, averaged over ``n``."""
    return np.mean(np.argmax(probs, axis=-1) != y, axis=-1)


def variant_weights(
    spec: dict[str, Any], preds: np.ndarray, targets: np.ndarray, nu: float, steps: int
) -> np.ndarray:
    """Weights over received models for one variant on the labelled rows.

    ``spec["rule"]``: ``fixed`` (``weights`` given), ``erm`` (argmin empirical risk on
    the prior's support), ``gibbs`` (bound-minimising temperature) or ``qagg``.
    """
    rule = spec["rule"]
    prior = np.asarray(spec["prior"], dtype=np.float64)
    if rule == "fixed":
        return prior
    risks = hedging.brier(preds, targets).mean(axis=1)
    if rule == "erm":
        w = np.zeros(len(prior))
        support = np.flatnonzero(prior > 0)
        w[support[np.argmin(risks[support])]] = 1.0
        return w
    if rule == "gibbs":
        return hedging.select_temperature(risks, preds.shape[1], prior).weights
    if rule == "qagg":
        return hedging.hedge(preds, targets, prior, nu=nu, steps=steps)[0]
    raise ValueError(f"unknown variant rule {rule!r}")


def evaluate_draws(
    preds: np.ndarray, y: np.ndarray, specs: list[dict[str, Any]], n: int, repeats: int,
    seed: int, nu: float = 0.5, steps: int = 300,
) -> dict[str, float]:
    """Mean test metrics per variant over ``repeats`` draws of ``n`` labelled rows.

    Excess metrics are against the best single received model on each draw's
    test rows (the oracle); negative excess Brier means the mixture beats it.
    """
    targets = hedging.one_hot(y, preds.shape[2])
    gen = np.random.default_rng(seed)
    sums: dict[str, float] = {}
    for _ in range(repeats):
        order = gen.permutation(len(y))
        lab, test = order[:n], order[n:]
        test_brier = hedging.brier(preds[:, test], targets[test]).mean(axis=1)
        test_err = errors(preds[:, test], y[test])
        best = (test_brier.min(), test_err.min())
        for spec in specs:
            w = variant_weights(spec, preds[:, lab], targets[lab], nu, steps)
            mix = np.tensordot(w, preds[:, test], axes=1)
            b, e = hedging.brier(mix, targets[test]).mean(), errors(mix, y[test])
            for key, value in zip(METRICS, (b, e, b - best[0], e - best[1]), strict=True):
                name = f"{spec['name']}/{key}"
                sums[name] = sums.get(name, 0.0) + float(value) / repeats
        for key, value in zip(METRICS, (*best, 0.0, 0.0), strict=True):
            sums[f"oracle/{key}"] = sums.get(f"oracle/{key}", 0.0) + float(value) / repeats
    return sums


@register("learner", "frontier_eval")
class FrontierLearner(Learner):
    """Scores received candidate models: benchmark risks, or few-shot hedging on a new client."""

    def query_frontier_risks(self, data: ClientData, payload: Payload, ctx: TaskContext) -> Payload:
        """Brier risk and 0-1 error of every received model on all local rows."""
        del ctx
        preds, y = received_predictions(data, payload)
        targets = hedging.one_hot(y, preds.shape[2])
        risks = hedging.brier(preds, targets).mean(axis=1)
        return Payload(
            arrays={RISKS: risks, ERRORS: errors(preds, y)}, num_examples=len(y)
        )

    def query_frontier_hedge(self, data: ClientData, payload: Payload, ctx: TaskContext) -> Payload:
        """Mean test metrics of each variant over seeded few-shot draws."""
        del ctx
        cfg = payload.config
        n = int(cfg[N_LABELLED])
        preds, y = received_predictions(data, payload)
        if n >= len(y):
            raise ValueError(f"new client has {len(y)} rows; n-labelled={n} leaves no test rows")
        metrics = evaluate_draws(
            preds, y, cfg[VARIANTS], n, int(cfg[REPEATS]), int(cfg[DRAW_SEED]),
            float(cfg[NU]), int(cfg[STEPS]),
        )
        pool = hedging.brier(preds, hedging.one_hot(y, preds.shape[2])).mean(axis=1)
        return Payload(arrays={POOL_RISKS: pool}, metrics=metrics, num_examples=len(y))

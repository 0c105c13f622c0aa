"""Client learner: ridge teacher + optimally mixed self-distilled student (Dang, Patil, Rinaldo).

Method: "Optimal Unconstrained Self-Distillation in Ridge Regression", arXiv 2602.17565;
maths in :mod:`flowerbed.methods.self_distill.algorithm`. Each client fits, for every λ of a
grid, the ridge teacher and the student with its own one-shot ξ̂ (or a fixed ξ),
from one SVD of its local data. The weights it returns hold one row per λ, so
averaging them (one-shot FedAvg) averages teachers and students λ by λ, and the
``centralized`` / ``local_only`` baselines run the same code on pooled / local data.

It is also a local task (``run_local``: fit on the client's rows, score on its
held-out rows, return the weights), so ``strategy: local`` compares each client
alone with the pooled fit on exactly the same held-out rows
(``scenarios/self_distill/local.yaml``).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field, field_validator

from flowerbed.clients.learner import SupervisedLearner, TaskContext
from flowerbed.core.messages import Arrays, Payload
from flowerbed.core.registry import Params, register
from flowerbed.core.scenario import Scenario
from flowerbed.data.base import ClientData, DatasetMeta

#: Array names of the learner's weights (one row / entry per λ).
TEACHER, STUDENT = "teacher_coef", "student_coef"
TEACHER_B, STUDENT_B, XI = "teacher_intercept", "student_intercept", "xi"


class SelfDistillParams(Params):
    """λ grid, how ξ is chosen, and intercept handling."""

    lambdas: tuple[float, ...] = Field(
        (0.01, 0.1, 1.0, 10.0),
        min_length=1,
        description="ridge penalties on the XᵀX/n scale; every metric is reported per λ",
    )
    xi: Literal["oneshot"] | float = Field(
        "oneshot", description="'oneshot': each fit uses its cross-GCV estimate ξ̂; a number fixes ξ"
    )
    fit_intercept: bool = Field(True, description="centre x and y; unpenalised intercept")

    @field_validator("lambdas")
    @classmethod
    def _positive(cls, value: tuple[float, ...]) -> tuple[float, ...]:
        if any(lam <= 0 for lam in value):
            raise ValueError(f"every lambda must be > 0, got {list(value)}")
        return value


def lam_tag(lam: float) -> str:
    """Metric suffix naming one λ, e.g. ``@0.01``."""
    return f"@{lam:g}"


def _centre(
    x: np.ndarray, y: np.ndarray, on: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if not on:
        return x, y, np.zeros(x.shape[1]), 0.0
    xm, ym = x.mean(axis=0), float(y.mean())
    return x - xm, y - ym, xm, ym


@register("learner", "self_distill_ridge")
class SelfDistillRidgeLearner(SupervisedLearner):
    """Closed-form ridge teacher and self-distilled student per λ (one-shot, no epochs)."""

    Params = SelfDistillParams

    def __init__(self, params: SelfDistillParams, *, scenario: Scenario) -> None:
        super().__init__(params, scenario=scenario)
        self.p: SelfDistillParams = params

    def init_arrays(self, meta: DatasetMeta, seed: int) -> Arrays:
        """Zero weights with the learner's shapes (training ignores them: closed form)."""
        del seed
        k, d = len(self.p.lambdas), meta.num_features
        return {
            TEACHER: np.zeros((k, d)),
            STUDENT: np.zeros((k, d)),
            TEACHER_B: np.zeros(k),
            STUDENT_B: np.zeros(k),
            XI: np.zeros(k),
        }

    def fit(
        self,
        arrays: Arrays,
        x: np.ndarray,
        y: np.ndarray,
        meta: DatasetMeta,
        seed: int,
        epochs: int | None = None,
    ) -> tuple[Arrays, dict[str, float]]:
        """Fit teacher and student at every λ from one SVD; metrics: ξ and GCV per λ."""
        # scipy only once a client fits: validating a scenario must stay light.
        from flowerbed.methods.self_distill import algorithm as sd

        del seed, epochs
        out = {k: np.array(v, dtype=float, copy=True) for k, v in self.init_arrays(meta, 0).items()}
        xc, yc, xm, ym = _centre(x, y, self.p.fit_intercept)
        fit = sd.decompose(xc, yc)
        offset = 1.0 if self.p.fit_intercept else 0.0
        metrics: dict[str, float] = {}
        for i, lam in enumerate(self.p.lambdas):
            quad = sd.gcv_quadratic(fit, lam, df_offset=offset)
            xi = quad.xi_star() if self.p.xi == "oneshot" else float(self.p.xi)
            out[TEACHER][i] = sd.teacher_coef(fit, lam)
            out[STUDENT][i] = sd.student_coef(fit, lam, xi)
            out[TEACHER_B][i] = ym - xm @ out[TEACHER][i]
            out[STUDENT_B][i] = ym - xm @ out[STUDENT][i]
            out[XI][i] = xi
            metrics[f"xi{lam_tag(lam)}"] = xi
            metrics[f"gcv_ridge{lam_tag(lam)}"] = quad.a
            metrics[f"gcv_sd{lam_tag(lam)}"] = float(quad.risk(xi))
        del arrays
        return out, metrics

    def score(
        self, arrays: Arrays, x: np.ndarray, y: np.ndarray, meta: DatasetMeta
    ) -> dict[str, float]:
        """Test MSE of teacher and student per λ, and the ξ the weights were built with."""
        del meta
        x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
        scores: dict[str, float] = {}
        for i, lam in enumerate(self.p.lambdas):
            tag = lam_tag(lam)
            ridge = x @ arrays[TEACHER][i] + arrays[TEACHER_B][i]
            student = x @ arrays[STUDENT][i] + arrays[STUDENT_B][i]
            scores[f"ridge_mse{tag}"] = float(np.mean((y - ridge) ** 2))
            scores[f"sd_mse{tag}"] = float(np.mean((y - student) ** 2))
            scores[f"xi{tag}"] = float(arrays[XI][i])
        return scores

    def run_local(self, data: ClientData, ctx: TaskContext) -> Payload:
        """Fit on the client's training rows; test MSEs on its held-out rows, and the weights."""
        arrays, _ = self.fit({}, data.x_train, data.y_train, data.meta, ctx.seed)
        metrics = self.score(arrays, data.x_test, data.y_test, data.meta)
        return Payload(arrays=arrays, metrics=metrics, num_examples=len(data.y_test))

"""InfoAtlas screening: clients send per-feature MI scalars; the server ranks features.

One ``query.mi_screen`` round (:mod:`flowerbed.methods.infoatlas.learner`): each
client estimates ``I(x_j; y)`` for the features it holds on its private rows and
sends only those scalars (8 bytes each). The server takes the sample-size weighted
mean per feature (:func:`flowerbed.methods.infoatlas.algorithm.aggregate`) and ranks the
features. In the same run it compares against the same estimator on the pooled
rows, scikit-learn's ``mutual_info_classif`` / ``mutual_info_regression`` on the
pooled rows, and, on ``mi_screening`` data, the true MI.
"""

from __future__ import annotations

import logging

import numpy as np
from pydantic import Field

from flowerbed.core.messages import Payload
from flowerbed.core.registry import Params, register
from flowerbed.core.seeds import derive_seed
from flowerbed.methods.infoatlas import learner as K
from flowerbed.strategies.base import ServerContext, Strategy
from flowerbed.strategies.federation import Federation

log = logging.getLogger("flowerbed")


class ScreeningParams(Params):
    """What to ask and report."""

    top_k: int = Field(5, ge=1, description="features reported as selected")
    pairs: bool = Field(False, description="also estimate MI between feature pairs")
    baselines: bool = Field(True, description="pooled-data estimate and scikit-learn MI")


def true_mi(ctx: ServerContext) -> np.ndarray | None:
    """Per-feature MI with the label when the dataset is ``mi_screening``, else None."""
    spec = ctx.scenario.component("dataset")
    if spec.name != "mi_screening":  # type: ignore[attr-defined]
        return None
    from flowerbed.methods.infoatlas.data import feature_mi

    return feature_mi(spec)  # type: ignore[arg-type]


def compare(scores: np.ndarray, reference: np.ndarray, top_k: int, name: str) -> dict[str, float]:
    """Spearman correlation and top-k overlap of ``scores`` with ``reference``."""
    # torch and scipy only once the strategy runs: validating a scenario must stay light.
    from scipy import stats

    from flowerbed.methods.infoatlas import algorithm as ia

    k = min(top_k, len(scores))
    overlap = len(set(ia.ranking(scores)[:k]) & set(ia.ranking(reference)[:k])) / k
    rho = stats.spearmanr(scores, reference).statistic if len(scores) > 1 else 1.0
    return {f"screen/spearman_vs_{name}": float(rho), f"screen/topk_overlap_{name}": overlap}


def against_truth(scores: np.ndarray, truth: np.ndarray) -> dict[str, float]:
    """MAE (nats) and recall of the truly informative features among the top ranks."""
    from flowerbed.methods.infoatlas import algorithm as ia

    informative = set(np.flatnonzero(truth > 1e-3).tolist())
    m = max(len(informative), 1)
    found = set(ia.ranking(scores)[:m].tolist()) & informative
    return {
        "screen/mae_vs_true": float(np.mean(np.abs(scores - truth))),
        "screen/informative_recall": len(found) / m,
    }


@register("strategy", "infoatlas_screening", requires=(K.SCREEN_MESSAGE,))
class ScreeningStrategy(Strategy):
    """Federated feature screening by mutual information with the label."""

    Params = ScreeningParams

    def run(self, fed: Federation, ctx: ServerContext) -> dict[str, float]:
        """Ask every client once, aggregate, rank, compare; return metrics."""
        from flowerbed.methods.infoatlas import algorithm as ia

        p: ScreeningParams = self.params  # type: ignore[assignment]
        meta = ctx.data.dataset.meta
        d = meta.num_features
        replies = fed.ask(K.SCREEN_MESSAGE, Payload(config={K.PAIRS: p.pairs}), server_round=1)
        for pid, reason in replies.failed.items():
            log.warning("infoatlas_screening: client %d failed: %s", pid, reason)
        bodies = list(replies.ok.values())
        weights = [float(b.num_examples) for b in bodies]
        fed_mi = ia.aggregate(
            [b.arrays[K.MI] for b in bodies], [b.arrays[K.FEATURES] for b in bodies], weights, d
        )
        out: dict[str, float] = {
            "comm/bytes_per_client": float(
                np.mean([sum(a.nbytes for a in b.arrays.values()) for b in bodies])
            ),
            "comm/raw_rows_bytes_per_client": float(np.mean(weights) * (d + 1) * 8),
            "time/client_seconds": float(np.mean([b.metrics[K.SECONDS] for b in bodies])),
        }
        record: dict[str, object] = {
            "features": list(meta.feature_names) or [f"x{j}" for j in range(d)],
            "federated": fed_mi,
            "clients": {str(pid): b.arrays[K.MI] for pid, b in replies.ok.items()},
            "ranking": ia.ranking(fed_mi),
        }
        truth = true_mi(ctx)
        if truth is not None:
            out.update(against_truth(fed_mi, truth))
            record["truth"] = truth
        if p.pairs:
            record["pair_mi"] = self._pair_matrix(bodies, weights, d)
        if p.baselines:
            self._baselines(ctx, fed_mi, truth, out, record)
        names = record["features"]
        out["screen/num_features"] = float(d)
        log.info(
            "infoatlas_screening: top %d: %s",
            p.top_k,
            ", ".join(f"{names[j]}={fed_mi[j]:.3f}" for j in ia.ranking(fed_mi)[: p.top_k]),  # type: ignore[index]
        )
        ctx.recorder.metrics(1, "infoatlas_screening", out)
        ctx.recorder.write_json("infoatlas_screening.json", record)
        return out

    @staticmethod
    def _pair_matrix(bodies: list[Payload], weights: list[float], d: int) -> np.ndarray:
        total, mass = np.zeros((d, d)), np.zeros((d, d))
        for body, w in zip(bodies, weights, strict=True):
            cols = body.arrays[K.FEATURES]
            j, k = np.triu_indices(len(cols), 1)
            for a, b in ((cols[j], cols[k]), (cols[k], cols[j])):
                np.add.at(total, (a, b), w * body.arrays[K.PAIR_MI])
                np.add.at(mass, (a, b), w)
        return np.where(mass > 0, total / np.maximum(mass, 1e-300), np.nan)

    def _baselines(
        self,
        ctx: ServerContext,
        fed_mi: np.ndarray,
        truth: np.ndarray | None,
        out: dict[str, float],
        record: dict[str, object],
    ) -> None:
        """Pooled-data estimate (same learner) and scikit-learn MI; both vs truth."""
        from sklearn.feature_selection import mutual_info_classif, mutual_info_regression

        p: ScreeningParams = self.params  # type: ignore[assignment]
        learner: K.InfoAtlasLearner = ctx.learner  # type: ignore[assignment]
        x, y = ctx.data.pooled_train()
        seed = derive_seed(self.scenario.seed, "infoatlas", "pooled")
        pooled, _ = learner.screen(x, y, False, seed)
        state = seed % 2**32
        if ctx.data.dataset.meta.task == "classification":
            sk = mutual_info_classif(x, y, random_state=state)
        else:
            sk = mutual_info_regression(x, y, random_state=state)
        record["pooled"], record["sklearn_pooled"] = pooled, sk
        out.update(compare(fed_mi, pooled, p.top_k, "pooled"))
        out.update(compare(fed_mi, sk, p.top_k, "sklearn"))
        for name, scores, other, other_name in (
            ("pooled", pooled, sk, "sklearn"),
            ("sklearn_pooled", sk, pooled, "pooled"),
        ):
            res = compare(scores, other, p.top_k, other_name)
            if truth is not None:
                res.update(against_truth(scores, truth))
            ctx.extra_results[name] = res

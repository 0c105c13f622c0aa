"""FQR strategy: one query round, then the closed-form minimum-variance ensemble.

Method: ``flowerbed/methods/fqr/algorithm.py`` (FQR, ICML 2026; OpenReview 8dWiSr6G4q).
Beside the ensemble the same run reports, via ``ctx.extra_results``: the pooled
oracle QR (all rows, all features), Naive-OSFL averaging, each client alone, the
identity-weight ensemble, and an iterative FedAvg on the smoothed pinball loss with
the bytes it needs to match FQR's test pinball loss.

Evaluation: slopes alone carry no usable intercept, so every method's
intercept is the tau-quantile of ``y - x'slope`` on a seeded calibration half of the
server's test split, and pinball losses are measured on the other half.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import Field

from flowerbed.core.messages import Payload, Replies
from flowerbed.core.registry import Params, register
from flowerbed.core.seeds import derive_seed
from flowerbed.methods.fqr import learner as K
from flowerbed.strategies.base import ServerContext, Strategy
from flowerbed.strategies.federation import Federation

if TYPE_CHECKING:
    from flowerbed.methods.fqr import algorithm as fqr
    from flowerbed.methods.fqr.algorithm_local import LocalFit

log = logging.getLogger("flowerbed")


#: What each row of an FQR run's summary is (``ServerContext.legend``).
ARMS = {
    "federated": "FQR: the clients' one-shot fits combined by minimum-variance weights",
    "pooled_oracle": "quantile regression on every client's rows pooled (not federated)",
    "naive_average": "each coefficient averaged over the clients that observe it, unweighted "
    "(Naive-OSFL)",
    "local_alone": "each client's own fit, unobserved features as 0, mean over clients",
    "fqr_identity": "FQR with equal (identity) weights instead of minimum-variance ones",
    "fedavg_pinball": "iterative FedAvg on the smoothed pinball loss (its comm/ columns: "
    "bytes per client, rounds to match FQR's pinball loss)",
}


class FqrParams(Params):
    """Quantile grid, weighting, and the iterative baseline's budget."""

    taus: tuple[float, ...] = Field((0.1, 0.25, 0.5, 0.75, 0.9), min_length=1)
    weighting: str = Field("optimal", pattern="^(optimal|diag|size|identity)$")
    sigma_correction: bool = Field(True, description="add the estimated-Sigma variance to CIs")
    iterative_rounds: int = Field(40, ge=0, description="FedAvg-pinball rounds; 0 skips it")
    iterative_lr: float = Field(1.0, gt=0)
    iterative_local_steps: int = Field(5, ge=1)
    iterative_smoothing: float = Field(0.1, gt=0, description="Gaussian smoothing bandwidth h")


def collect_fits(replies: Replies, ctx: ServerContext) -> tuple[list[int], list[LocalFit]]:
    """Usable local fits by partition id; flagged or failed clients are named and skipped."""
    # The method's modules import scipy: only once the strategy runs, so that
    # validating a scenario stays light.
    from flowerbed.methods.fqr.algorithm_local import LocalFit

    pids, fits = [], []
    for pid, body in replies.ok.items():
        if body.config.get(K.STATUS) == K.STATUS_SINGULAR:
            reason = body.config.get(K.REASON, "")
            log.warning("fqr: excluding client %d: singular local design (%s)", pid, reason)
            ctx.recorder.event("fqr_client_excluded", client=pid, reason=reason)
            continue
        pids.append(pid)
        fits.append(LocalFit.from_arrays(body.arrays))
    for pid, reason in replies.failed.items():
        log.warning("fqr: excluding client %d: reply failed (%s)", pid, reason)
    if not fits:
        raise RuntimeError("fqr: no client returned a usable local fit")
    return pids, fits


class Evaluator:
    """Pinball loss of slope matrices on the server test split (calibrated intercepts)."""

    def __init__(self, x: np.ndarray, y: np.ndarray, taus: np.ndarray, seed: int) -> None:
        order = np.random.default_rng(derive_seed(seed, "fqr", "calibration")).permutation(len(y))
        half = len(y) // 2
        self.cal, self.ev = order[:half], order[half:]
        self.x, self.y, self.taus = np.asarray(x, dtype=np.float64), np.asarray(y), taus

    def losses(self, slopes: np.ndarray) -> np.ndarray:
        """Pinball loss per tau of ``slopes`` ``(K, d)``."""
        from flowerbed.methods.fqr import algorithm as fqr
        from flowerbed.methods.fqr.algorithm_local import pinball_loss

        inter = fqr.calibrate_intercepts(self.x[self.cal], self.y[self.cal], slopes, self.taus)
        pred = inter[:, None] + slopes @ self.x[self.ev].T
        return np.array(
            [pinball_loss(self.y[self.ev] - p, t) for p, t in zip(pred, self.taus, strict=True)]
        )

    def metrics(self, slopes: np.ndarray, truth: np.ndarray | None) -> dict[str, float]:
        """``test/pinball_tau<t>``, ``test/pinball_mean`` and, with a truth, ``test/coef_rmse``."""
        loss = self.losses(slopes)
        out = {f"test/pinball_tau{t:g}": float(v) for t, v in zip(self.taus, loss, strict=True)}
        out["test/pinball_mean"] = float(loss.mean())
        if truth is not None:
            out["test/coef_rmse"] = float(np.sqrt(np.mean((slopes - truth) ** 2)))
        return out


def true_slopes(ctx: ServerContext, taus: np.ndarray) -> np.ndarray | None:
    """True quantile slopes when the dataset is ``synthetic_quantile``, else None."""
    spec = ctx.scenario.component("dataset")
    if spec.name != "synthetic_quantile":  # type: ignore[attr-defined]
        return None
    from flowerbed.methods.fqr.data import true_quantile_coefficients

    return true_quantile_coefficients(spec, taus)[:, 1:]  # type: ignore[arg-type]


def payload_bytes(body: Payload) -> int:
    """Bytes of a payload's arrays (what dominates a message)."""
    return int(sum(np.asarray(a).nbytes for a in body.arrays.values()))


@register("strategy", "fqr", requires=((K.FIT_MESSAGE, K.PINBALL_MESSAGE),))
class FqrStrategy(Strategy):
    """FQR: one-shot minimum-variance ensemble of local quantile regressions."""

    Params = FqrParams

    def run(self, fed: Federation, ctx: ServerContext) -> dict[str, float]:
        """One ``query.fqr_fit`` round, the ensemble, its CIs, baselines; return metrics."""
        from flowerbed.methods.fqr import algorithm as fqr

        p: FqrParams = self.params  # type: ignore[assignment]
        taus = np.array(p.taus)
        ds = ctx.data.dataset
        d = ds.meta.num_features
        ctx.legend.update(ARMS)
        replies = fed.ask(K.FIT_MESSAGE, Payload(config={K.TAUS: list(p.taus)}), server_round=1)
        pids, fits = collect_fits(replies, ctx)
        ens = fqr.ensemble(fits, d, p.weighting, sigma_correction=p.sigma_correction)
        truth = true_slopes(ctx, taus)
        ev = Evaluator(ds.x_test, ds.y_test, taus, self.scenario.seed)
        out = ev.metrics(ens.beta, truth)
        lo, hi = ens.ci()
        if truth is not None:
            out["test/ci_coverage"] = float(np.mean((lo <= truth) & (truth <= hi)))
            ctx.legend["test/ci_coverage"] = (
                f"share of the {truth.size} true coefficients (every tau) inside FQR's 95% "
                f"Wald intervals: nominal 0.95; one run's share is noisy, the Monte-Carlo "
                f"coverage is in docs/methods/fqr.md"
            )
        up = float(np.mean([payload_bytes(replies.ok[pid]) for pid in pids]))
        out["comm/bytes_per_client"] = up
        ctx.recorder.metrics(1, "fqr", out)
        self._write_estimates(ctx, taus, ens, truth, pids, fits)
        self._baselines(fed, ctx, ev, fits, truth, out)
        return out

    def _write_estimates(
        self,
        ctx: ServerContext,
        taus: np.ndarray,
        ens: fqr.Ensemble,
        truth: np.ndarray | None,
        pids: list[int],
        fits: list[LocalFit],
    ) -> None:
        lo, hi = ens.ci()
        ctx.recorder.write_json(
            "fqr_estimates.json",
            {
                "taus": taus,
                "beta": ens.beta,
                "ci_low": lo,
                "ci_high": hi,
                "se": np.sqrt(np.diagonal(ens.cov, axis1=1, axis2=2)),
                "se_plugin": np.sqrt(np.diagonal(ens.cov_qr, axis1=1, axis2=2)),
                "truth": truth,
                "clients": pids,
                "features": [f.features for f in fits],
            },
        )

    def _baselines(
        self,
        fed: Federation,
        ctx: ServerContext,
        ev: Evaluator,
        fits: list[LocalFit],
        truth: np.ndarray | None,
        fqr_metrics: dict[str, float],
    ) -> None:
        from flowerbed.methods.fqr import algorithm as fqr
        from flowerbed.methods.fqr.algorithm_local import quantreg

        p: FqrParams = self.params  # type: ignore[assignment]
        d = ctx.data.dataset.meta.num_features
        taus = ev.taus
        x, y = ctx.data.pooled_train()
        pooled = np.array([quantreg(np.asarray(x, np.float64), y, t)[1:] for t in taus])
        ctx.extra_results["pooled_oracle"] = ev.metrics(pooled, truth)
        ctx.extra_results["naive_average"] = ev.metrics(fqr.naive_average(fits, d), truth)
        alone = [ev.metrics(fqr.embed_local(f, d), truth) for f in fits]
        ctx.extra_results["local_alone"] = {
            k: float(np.mean([a[k] for a in alone])) for k in alone[0]
        }
        identity = fqr.ensemble(fits, d, "identity", sigma_correction=False)
        ctx.extra_results["fqr_identity"] = ev.metrics(identity.beta, truth)
        if p.iterative_rounds:
            ctx.extra_results["fedavg_pinball"] = self._iterative(fed, ctx, ev, truth, fqr_metrics)

    def _iterative(
        self,
        fed: Federation,
        ctx: ServerContext,
        ev: Evaluator,
        truth: np.ndarray | None,
        fqr_metrics: dict[str, float],
    ) -> dict[str, float]:
        """FedAvg on the smoothed pinball loss; bytes per client until it matches FQR."""
        from flowerbed.methods.fqr import algorithm as fqr

        p: FqrParams = self.params  # type: ignore[assignment]
        coef = np.zeros((len(ev.taus), 1 + ctx.data.dataset.meta.num_features))
        config: dict[str, Any] = {
            K.TAUS: list(p.taus),
            K.LR: p.iterative_lr,
            K.LOCAL_STEPS: p.iterative_local_steps,
            K.SMOOTHING: p.iterative_smoothing,
        }
        spent, matched_at, bytes_to_match = 0.0, -1.0, -1.0
        metrics: dict[str, float] = {}
        for rnd in range(1, p.iterative_rounds + 1):
            replies = fed.ask(
                K.PINBALL_MESSAGE,
                Payload(arrays={K.COEF: coef}, config=config),
                server_round=1 + rnd,
            )
            bodies = list(replies.ok.values())
            spent += coef.nbytes + float(np.mean([payload_bytes(b) for b in bodies]))
            coef = fqr.masked_average(
                coef,
                [b.arrays[K.COEF] for b in bodies],
                [b.arrays[K.FEATURES] for b in bodies],
                [b.num_examples for b in bodies],
            )
            metrics = ev.metrics(coef[:, 1:], truth)
            ctx.recorder.metrics(1 + rnd, "fedavg_pinball", metrics)
            if matched_at < 0 and metrics["test/pinball_mean"] <= fqr_metrics["test/pinball_mean"]:
                matched_at, bytes_to_match = float(rnd), spent
        metrics["comm/bytes_per_client"] = spent
        metrics["comm/rounds_to_match_fqr"] = matched_at
        metrics["comm/bytes_to_match_fqr"] = bytes_to_match
        return metrics

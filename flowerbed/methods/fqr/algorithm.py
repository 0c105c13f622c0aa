"""FQR server side: one-shot minimum-variance ensemble of local quantile regressions.

"One-shot weighted-ensemble estimator for Federated Quantile Regression under
heterogeneously structured features" (ICML 2026; OpenReview 8dWiSr6G4q), as
reconstructed in ``docs/methods/fqr.md``. Agent ``m`` observes
columns ``S_m``; under a Gaussian design its local QR slope estimates
``gamma_m = T_m beta`` with ``T_m = Sigma_{S S}^-1 Sigma_{S, :}``. The server pools
``Sigma`` from the agents' covariances, then solves the weighted least squares
``beta = (sum T' W T)^-1 sum T' W gamma``; ``W_m = V_m^-1`` (``optimal``) gives the
Loewner-minimum covariance ``(sum T' V^-1 T)^-1``.

Beyond the reference recipe: :func:`sigma_noise_cov` adds the first-order variance that the
estimated ``Sigma`` contributes through ``T_m`` (the reference recipe's plug-in ignores it and
under-covers). Pure numpy: no Flower, no Ray.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from flowerbed.methods.fqr.algorithm_local import LocalFit

WEIGHTINGS = ("optimal", "diag", "size", "identity")


class IdentifiabilityError(ValueError):
    """The agents' feature sets cannot identify ``Sigma`` or ``beta``."""


def pool_sigma(fits: Sequence[LocalFit], d: int) -> tuple[np.ndarray, np.ndarray]:
    """Sample-size-weighted average of the agents' covariances, entry by entry.

    Returns
    -------
    sigma
        ``(d, d)`` estimate projected to PSD (eigenvalues >= 1e-8 tr / d).
    weights
        ``(M, d, d)``: the share of agent ``m`` in each entry (zero off ``S_m``).

    Raises
    ------
    IdentifiabilityError
        A pair of features is co-observed by no agent.
    """
    num = np.zeros((d, d))
    share = np.zeros((len(fits), d, d))
    for m, fit in enumerate(fits):
        idx = np.ix_(fit.features, fit.features)
        num[idx] += fit.n * fit.cov
        share[m][idx] = fit.n
    total = share.sum(axis=0)
    if np.any(total == 0):
        pairs = np.argwhere(np.triu(total == 0))
        raise IdentifiabilityError(
            f"feature pairs {pairs[:5].tolist()} are co-observed by no agent; Sigma is not "
            "identified: give the features overlapping agents or pass sigma explicitly"
        )
    sigma = num / total
    vals, vecs = np.linalg.eigh((sigma + sigma.T) / 2)
    vals = np.maximum(vals, 1e-8 * max(np.trace(sigma), 1e-300) / d)
    return (vecs * vals) @ vecs.T, share / total


def transforms(sigma: np.ndarray, fits: Sequence[LocalFit]) -> list[np.ndarray]:
    """``T_m = Sigma_{S_m S_m}^-1 Sigma_{S_m, :}`` for every agent (``d_m x d``)."""
    return [np.linalg.solve(sigma[np.ix_(f.features, f.features)], sigma[f.features]) for f in fits]


def weight_matrix(fit: LocalFit, k: int, weighting: str) -> np.ndarray:
    """``W_m`` at tau index ``k`` for a weighting scheme of :data:`WEIGHTINGS`."""
    d_m = len(fit.features)
    if weighting == "optimal":
        return np.linalg.inv(fit.vcov[k])
    if weighting == "diag":
        return np.diag(1.0 / np.diag(fit.vcov[k]))
    if weighting == "size":
        return fit.n * np.eye(d_m)
    if weighting == "identity":
        return np.eye(d_m)
    raise ValueError(f"unknown weighting {weighting!r}; known: {', '.join(WEIGHTINGS)}")


@dataclass(frozen=True)
class Ensemble:
    """Server estimate at every tau.

    Attributes
    ----------
    beta
        Slopes ``(K, d)``.
    cov
        Asymptotic covariance ``(K, d, d)`` (QR noise plus, when ``sigma`` was
        estimated and the correction is on, the noise of the estimated ``Sigma``).
    cov_qr
        The QR-noise part alone (the reference recipe's plug-in formula).
    """

    beta: np.ndarray
    cov: np.ndarray
    cov_qr: np.ndarray

    def ci(self, level_z: float = 1.959963984540054) -> tuple[np.ndarray, np.ndarray]:
        """Lower and upper Wald bounds ``beta -/+ z sqrt(diag cov)``, each ``(K, d)``."""
        se = np.sqrt(np.diagonal(self.cov, axis1=1, axis2=2))
        return self.beta - level_z * se, self.beta + level_z * se


def combine(
    gammas: Sequence[np.ndarray],
    vcovs: Sequence[np.ndarray],
    ts: Sequence[np.ndarray],
    ws: Sequence[np.ndarray],
    max_cond: float = 1e8,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Weighted ERM at one tau: ``beta = H^-1 sum T' W gamma``, ``H = sum T' W T``.

    Returns ``(beta, cov, H)`` with the sandwich ``cov = H^-1 (sum T' W V W T) H^-1``.
    """
    h = sum(t.T @ w @ t for t, w in zip(ts, ws, strict=True))
    if np.linalg.cond(h) > max_cond:
        raise IdentifiabilityError(
            f"cond(sum T'WT) = {np.linalg.cond(h):.3g} > {max_cond:g}: the agents' feature sets "
            "do not identify every coefficient"
        )
    rhs = sum(t.T @ w @ g for t, w, g in zip(ts, ws, gammas, strict=True))
    meat = sum(t.T @ w @ v @ w @ t for t, w, v in zip(ts, ws, vcovs, strict=True))
    h_inv = np.linalg.inv(h)
    return h_inv @ rhs, h_inv @ meat @ h_inv, h


def sigma_noise_cov(
    beta: np.ndarray,
    sigma: np.ndarray,
    share: np.ndarray,
    fits: Sequence[LocalFit],
    ts: Sequence[np.ndarray],
    ws: Sequence[np.ndarray],
    h: np.ndarray,
) -> np.ndarray:
    """First-order covariance of ``beta`` caused by estimating ``Sigma`` (delta method).

    At the truth ``gamma_k = T_k beta``, so a perturbation ``D`` of ``Sigma`` moves
    the estimate by ``-H^-1 sum_k T_k' W_k Sigma_kk^-1 D_{S_k,:} delta_k`` with
    ``delta_k = beta - E_k T_k beta`` (``E_k`` embeds ``S_k`` in ``R^d``). Agent ``m``
    contributes ``D = share_m * (Shat_m - Sigma_mm)``, whose Gaussian-design
    covariance is ``Cov(Shat_ab, Shat_ce) = (S_ac S_be + S_ae S_bc) / n_m``; its
    QR scores are uncorrelated with ``Shat_m`` at first order (odd moments), so the
    two variances add.
    """
    d = len(beta)
    h_inv = np.linalg.inv(h)
    q = np.zeros((d, d, d))  # q[j, a, b]: d beta_j / d D_ab before sharing
    for fit, t, w in zip(fits, ts, ws, strict=True):
        s = fit.features
        delta = beta.copy()
        delta[s] -= t @ beta
        g = h_inv @ t.T @ w @ np.linalg.inv(sigma[np.ix_(s, s)])  # (d, d_k)
        q[:, s, :] -= g[:, :, None] * delta[None, None, :]
    out = np.zeros((d, d))
    for m, fit in enumerate(fits):
        s = fit.features
        c = (q * share[m][None])[:, s][:, :, s]
        c = (c + c.transpose(0, 2, 1)) / 2
        sig = sigma[np.ix_(s, s)]
        out += 2.0 / fit.n * np.einsum("jab,bc,lcd,da->jl", c, sig, c, sig)
    return out


def ensemble(
    fits: Sequence[LocalFit],
    d: int,
    weighting: str = "optimal",
    sigma: np.ndarray | None = None,
    sigma_correction: bool = True,
) -> Ensemble:
    """FQR one-shot ensemble at every tau the agents fitted.

    Parameters
    ----------
    fits
        The agents' uploads (same ``taus``).
    d
        Total number of features.
    weighting
        One of :data:`WEIGHTINGS`; ``optimal`` is ``W_m = V_m^-1``.
    sigma
        Known feature covariance (oracle / public data); pooled from the agents if None.
    sigma_correction
        Add :func:`sigma_noise_cov` when ``sigma`` is estimated.
    """
    known = sigma is not None
    sig, share = (np.asarray(sigma, dtype=np.float64), None) if known else pool_sigma(fits, d)
    ts = transforms(sig, fits)
    betas, covs, cov_qrs = [], [], []
    for k in range(len(fits[0].taus)):
        ws = [weight_matrix(f, k, weighting) for f in fits]
        beta, cov_qr, h = combine([f.gamma[k] for f in fits], [f.vcov[k] for f in fits], ts, ws)
        cov = cov_qr
        if not known and sigma_correction:
            cov = cov_qr + sigma_noise_cov(beta, sig, share, fits, ts, ws, h)  # type: ignore[arg-type]
        betas.append(beta)
        covs.append(cov)
        cov_qrs.append(cov_qr)
    return Ensemble(np.array(betas), np.array(covs), np.array(cov_qrs))


def naive_average(fits: Sequence[LocalFit], d: int) -> np.ndarray:
    """Naive-OSFL: coordinate-wise mean of truncated local slopes, ``(K, d)``.

    Coordinate ``j`` averages ``gamma_m[j]`` over the agents observing it
    (unweighted, as the reviewers describe it); unobserved coordinates are 0.
    """
    total = np.zeros((len(fits[0].taus), d))
    count = np.zeros(d)
    for f in fits:
        total[:, f.features] += f.gamma
        count[f.features] += 1
    return total / np.maximum(count, 1)


def embed_local(fit: LocalFit, d: int) -> np.ndarray:
    """Naive-Local: one agent's truncated slopes in ``R^d`` (zeros off ``S_m``), ``(K, d)``."""
    out = np.zeros((len(fit.taus), d))
    out[:, fit.features] = fit.gamma
    return out


def calibrate_intercepts(
    x: np.ndarray, y: np.ndarray, slopes: np.ndarray, taus: np.ndarray
) -> np.ndarray:
    """Intercept per tau as the tau-quantile of ``y - x' slope`` on calibration data.

    Slopes alone cannot give the intercept (each agent's absorbs its own omitted-
    feature noise); this fits it on a held-out calibration set.
    """
    resid = y[None, :] - slopes @ x.T
    return np.array([np.quantile(r, t) for r, t in zip(resid, taus, strict=True)])


def masked_average(
    current: np.ndarray,
    blocks: Sequence[np.ndarray],
    features: Sequence[np.ndarray],
    sizes: Sequence[int],
) -> np.ndarray:
    """FedAvg for feature-subset clients: average each coordinate over its observers.

    ``current`` is ``(K, 1 + d)`` (intercept first); ``blocks[m]`` is client ``m``'s
    ``(K, 1 + d_m)`` update on ``[intercept] + features[m]``. Coordinates nobody
    updated keep their value; the rest are ``n``-weighted means.
    """
    total = np.zeros_like(current)
    weight = np.zeros(current.shape[1])
    for block, cols, n in zip(blocks, features, sizes, strict=True):
        idx = np.concatenate([[0], np.asarray(cols) + 1])
        total[:, idx] += n * block
        weight[idx] += n
    out = current.copy()
    seen = weight > 0
    out[:, seen] = total[:, seen] / weight[seen]
    return out

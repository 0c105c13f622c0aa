"""Ground-truth mutual information and reference estimators (KSG, MINE, InfoNCE, Gaussian).

Companion of :mod:`flowerbed.methods.infoatlas.algorithm` (InfoAtlas, arXiv 2606.00241):
the closed forms and known-MI task families it is validated on, and the per-dataset
estimators it is compared with.

- Closed forms (nats): Gaussian ``-1/2 log det(Σ)/(det Σx det Σy)``, correlated
  Bernoulli ``d [log 2 + q log q + (1-q) log(1-q)]``, shared-Poisson
  (``x = u + v``, ``y = u + w``) by exact PMF summation.
- :func:`known_mi_task`: samples with exactly known MI (Gaussian with random
  canonical correlations seen through random rotations and monotone marginal maps;
  Gaussian copulas with Beta/Gamma marginals; Bernoulli; Poisson).
- :func:`ksg`: Kraskov-Stögbauer-Grassberger estimator 1 (max-norm, k-NN; Kraskov
  et al. 2004, Phys. Rev. E 69, 066138).
- :func:`neural_mi`: MINE (Belghazi et al. 2018, Donsker-Varadhan with the moving-
  average gradient correction) or InfoNCE (van den Oord et al. 2018) trained on the
  dataset itself, the per-dataset "neural estimators".
- :func:`gaussian_estimate`: the linear/Gaussian plug-in ``-1/2 Σ log(1 - rho^_k²)``
  from sample canonical correlations.

Pure numpy/scipy/torch; no Flower, no Ray.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import special, stats
from scipy.spatial import cKDTree

Family = Literal["gaussian", "copula_beta", "copula_gamma", "bernoulli", "poisson"]
FAMILIES: tuple[Family, ...] = ("gaussian", "copula_beta", "copula_gamma", "bernoulli", "poisson")


# --------------------------------------------------------------------------- truth
def gaussian_mi(cov: np.ndarray, dx: int) -> float:
    """MI of a joint Gaussian with covariance ``cov`` whose first ``dx`` coordinates are X.

    Examples
    --------
    >>> round(gaussian_mi(np.array([[1.0, 0.6], [0.6, 1.0]]), 1), 6)  # -1/2 log(1 - 0.36)
    0.223144
    """
    cov = np.asarray(cov, dtype=np.float64)
    _, ld = np.linalg.slogdet(cov)
    _, ldx = np.linalg.slogdet(cov[:dx, :dx])
    _, ldy = np.linalg.slogdet(cov[dx:, dx:])
    return float(0.5 * (ldx + ldy - ld))


def gaussian_mi_from_correlations(rhos: np.ndarray) -> float:
    """``-1/2 Σ log(1 - rho_k²)`` for canonical correlations ``rhos``."""
    r = np.asarray(rhos, dtype=np.float64)
    return float(-0.5 * np.sum(np.log1p(-(r**2))))


def correlation_for_mi(mi: np.ndarray | float) -> np.ndarray:
    """Canonical correlation carrying ``mi`` nats: ``sqrt(1 - exp(-2 mi))``."""
    return np.sqrt(-np.expm1(-2.0 * np.asarray(mi, dtype=np.float64)))


def bernoulli_mi(q: float, d: int = 1) -> float:
    """MI of ``d`` independent pairs x ~ Bern(1/2), y = x w.p. ``q`` else ``1 - x``."""
    return float(d * (np.log(2.0) + special.xlogy(q, q) + special.xlogy(1 - q, 1 - q)))


def poisson_shared_mi(lam_u: float, lam_v: float, lam_w: float, d: int = 1) -> float:
    """MI of ``d`` independent pairs ``x = u + v``, ``y = u + w`` (Poisson u, v, w).

    Exact summation of the joint PMF ``p(x, y) = Σ_u P(u) P(x - u) P(y - u)``,
    truncated far in the tail (mass lost < 1e-12).
    """
    top = int(lam_u + max(lam_v, lam_w) + 12 * np.sqrt(lam_u + max(lam_v, lam_w)) + 25)
    k = np.arange(top + 1)
    pu, pv, pw = (stats.poisson.pmf(k, lam) for lam in (lam_u, lam_v, lam_w))
    # joint[x, y] = Σ_u pu[u] pv[x-u] pw[y-u]
    shift_v = np.array([np.concatenate([np.zeros(u), pv[: top + 1 - u]]) for u in k])
    shift_w = np.array([np.concatenate([np.zeros(u), pw[: top + 1 - u]]) for u in k])
    joint = np.einsum("u,ux,uy->xy", pu, shift_v, shift_w)
    px, py = joint.sum(axis=1), joint.sum(axis=0)
    mask = joint > 0
    ratio = joint[mask] / np.outer(px, py)[mask]
    return float(d * np.sum(joint[mask] * np.log(ratio)))


# --------------------------------------------------------------------------- tasks
@dataclass(frozen=True)
class Task:
    """A sample ``(x, y)`` of shape ``(n, dx)``, ``(n, dy)`` with its true MI in nats."""

    x: np.ndarray
    y: np.ndarray
    mi: float
    family: str


def random_rotation(d: int, gen: np.random.Generator) -> np.ndarray:
    """Haar-random orthogonal ``(d, d)`` matrix."""
    q, r = np.linalg.qr(gen.standard_normal((d, d)))
    return np.asarray(q * np.sign(np.diag(r)), dtype=np.float64)


def monotone_map(z: np.ndarray, gen: np.random.Generator) -> np.ndarray:
    """A random strictly increasing map applied per column (MI-preserving)."""
    out = np.empty_like(z)
    for j in range(z.shape[1]):
        kind = gen.integers(4)
        col = z[:, j]
        if kind == 0:
            out[:, j] = np.exp(0.5 * col)
        elif kind == 1:
            out[:, j] = col**3 + col
        elif kind == 2:
            out[:, j] = np.arcsinh(2.0 * col) + 0.1 * col
        else:
            out[:, j] = stats.norm.cdf(col) * 3.0
    return out


def correlated_gaussian(
    n: int, dx: int, dy: int, rhos: np.ndarray, gen: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Standard normal X, Y whose coordinate pairs ``(x_k, y_k)`` have correlation ``rhos[k]``."""
    x = gen.standard_normal((n, dx))
    y = gen.standard_normal((n, dy))
    r = len(rhos)
    y[:, :r] = rhos * x[:, :r] + np.sqrt(1 - rhos**2) * y[:, :r]
    return x, y


def _invert(fn: Callable[[float], float], target: float, lo: float, hi: float) -> float:
    """``v`` in ``[lo, hi]`` with ``fn(v) = target`` for increasing ``fn`` (bisection)."""
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if fn(mid) < target else (lo, mid)
    return (lo + hi) / 2


@functools.cache
def _poisson_table() -> tuple[np.ndarray, np.ndarray]:
    """Shared rate ``λ_u`` on a grid and the 1-D MI it gives with ``λ_v = λ_w = 2``."""
    lam = np.concatenate([[0.0], np.geomspace(0.01, 30.0, 80)])
    return lam, np.array([poisson_shared_mi(v, 2.0, 2.0) for v in lam])


def known_mi_task(
    family: Family, n: int, d: int, gen: np.random.Generator, mi: float | None = None
) -> Task:
    """Draw ``n`` samples with ``dx = dy = d`` from ``family`` with total MI ``mi`` nats.

    ``mi`` defaults to ``U(0, 3)`` (capped at 90% of ``d log 2`` for Bernoulli).
    The family's parameter is solved for that MI: per-pair canonical
    correlations (``gaussian``: uneven, through random rotations and monotone
    maps; copulas: equal rho per coordinate pair, Beta(2,5)/Beta(5,2) or
    Gamma(2,1)/Gamma(5,0.5) marginals), the copy probability ``q`` (``bernoulli``)
    or the shared rate ``λ_u`` with ``λ_v = λ_w = 2`` (``poisson``, at most ~1.2
    nats per coordinate pair, interpolated on a grid). The returned
    MI is recomputed from the solved parameter by the closed form.
    """
    target = float(gen.uniform(0.0, 3.0)) if mi is None else float(mi)
    if family == "gaussian":
        rhos = correlation_for_mi(target * gen.dirichlet(np.ones(d)))
        x, y = correlated_gaussian(n, d, d, rhos, gen)
        x = monotone_map(x @ random_rotation(d, gen), gen)
        y = monotone_map(y @ random_rotation(d, gen), gen)
        return Task(x, y, gaussian_mi_from_correlations(rhos), family)
    if family in ("copula_beta", "copula_gamma"):
        rho = float(correlation_for_mi(target / d))
        x, y = correlated_gaussian(n, d, d, np.full(d, rho), gen)
        ux, uy = stats.norm.cdf(x), stats.norm.cdf(y)
        if family == "copula_beta":
            x, y = stats.beta.ppf(ux, 2, 5), stats.beta.ppf(uy, 5, 2)
        else:
            x, y = stats.gamma.ppf(ux, 2, scale=1.0), stats.gamma.ppf(uy, 5, scale=0.5)
        return Task(x, y, gaussian_mi_from_correlations(np.full(d, rho)), family)
    if family == "bernoulli":
        per = min(target / d, 0.9 * np.log(2.0))
        q = _invert(lambda v: bernoulli_mi(v), per, 0.5, 1.0)
        x = gen.integers(0, 2, (n, d)).astype(np.float64)
        flip = gen.random((n, d)) > q
        return Task(x, np.where(flip, 1 - x, x), bernoulli_mi(q, d), family)
    if family == "poisson":
        grid_lam, grid_mi = _poisson_table()
        lam_u = float(np.interp(min(target / d, grid_mi[-1]), grid_mi, grid_lam))
        u = gen.poisson(lam_u, (n, d))
        x = (u + gen.poisson(2.0, (n, d))).astype(np.float64)
        y = (u + gen.poisson(2.0, (n, d))).astype(np.float64)
        return Task(x, y, poisson_shared_mi(lam_u, 2.0, 2.0, d), family)
    raise ValueError(f"unknown MI task family {family!r}; known: {', '.join(FAMILIES)}")


# --------------------------------------------------------------------------- estimators
def _standardize(z: np.ndarray) -> np.ndarray:
    z = np.asarray(z, dtype=np.float64)
    z = z.reshape(len(z), -1)
    sd = z.std(axis=0)
    return (z - z.mean(axis=0)) / np.where(sd > 0, sd, 1.0)


def ksg(x: np.ndarray, y: np.ndarray, k: int = 3, seed: int = 0) -> float:
    """KSG estimator 1 (max-norm) of I(X; Y) in nats.

    ``ψ(k) + ψ(n) - mean_i[ψ(n_x(i) + 1) + ψ(n_y(i) + 1)]`` where ``ε_i`` is the
    max-norm distance from ``(x_i, y_i)`` to its k-th joint neighbour and
    ``n_x(i)`` counts the other points with ``‖x_j - x_i‖_∞ < ε_i``. Columns are
    standardised and jittered by 1e-10 (as scikit-learn does) so ties in discrete
    data do not produce zero distances.
    """
    gen = np.random.default_rng(seed)
    x, y = _standardize(x), _standardize(y)
    n = len(x)
    if n <= k:
        raise ValueError(f"ksg: need more than k={k} samples, got {n}")
    x = x + 1e-10 * gen.standard_normal(x.shape)
    y = y + 1e-10 * gen.standard_normal(y.shape)
    joint = np.hstack([x, y])
    dist, _ = cKDTree(joint).query(joint, k=k + 1, p=np.inf)
    eps = np.nextafter(dist[:, -1], 0)
    nx = cKDTree(x).query_ball_point(x, eps, p=np.inf, return_length=True) - 1
    ny = cKDTree(y).query_ball_point(y, eps, p=np.inf, return_length=True) - 1
    return float(
        special.digamma(k)
        + special.digamma(n)
        - np.mean(special.digamma(nx + 1) + special.digamma(ny + 1))
    )


def canonical_correlations(x: np.ndarray, y: np.ndarray, floor: float = 1e-8) -> np.ndarray:
    """Sample canonical correlations of ``x`` and ``y`` (descending)."""
    x, y = _standardize(x), _standardize(y)
    n = len(x)

    def inv_sqrt(c: np.ndarray) -> np.ndarray:
        vals, vecs = np.linalg.eigh(c)
        return np.asarray((vecs / np.sqrt(np.maximum(vals, floor))) @ vecs.T)

    cxy = inv_sqrt(x.T @ x / n) @ (x.T @ y / n) @ inv_sqrt(y.T @ y / n)
    return np.clip(np.linalg.svd(cxy, compute_uv=False), 0.0, 1 - 1e-9)


def gaussian_estimate(x: np.ndarray, y: np.ndarray) -> float:
    """Gaussian (linear) plug-in MI ``-1/2 Σ log(1 - rho^_k²)`` from sample CCA."""
    return gaussian_mi_from_correlations(canonical_correlations(x, y))


def neural_mi(
    x: np.ndarray,
    y: np.ndarray,
    *,
    objective: Literal["mine", "infonce"] = "mine",
    steps: int = 500,
    batch: int = 256,
    hidden: int = 64,
    lr: float = 1e-3,
    ema: float = 0.01,
    seed: int = 0,
) -> float:
    """MINE or InfoNCE trained on ``(x, y)`` itself; returns its final estimate in nats.

    MINE critic: MLP ``[x, y] -> hidden -> hidden -> 1`` (ReLU); Adam, ``steps`` steps on
    minibatches of ``batch`` rows. MINE maximises the Donsker-Varadhan bound with
    the moving-average-corrected gradient and reports DV on all rows (10 shuffles
    as product-of-marginals samples). InfoNCE uses a separable critic
    ``T_ij = f(x_i)·g(y_j)`` (two such MLPs, 32-d embeddings), maximises ``log B +
    mean(T_ii - logsumexp_j T_ij)`` and reports it averaged over full-size batches
    (so it is capped at ``log B``).
    """
    import torch

    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    xt = torch.as_tensor(_standardize(x), dtype=torch.float32)
    yt = torch.as_tensor(_standardize(y), dtype=torch.float32)
    n, dx = xt.shape
    b = min(batch, n)
    dy = yt.shape[1]

    def mlp(inp: int, out: int) -> torch.nn.Sequential:
        return torch.nn.Sequential(
            torch.nn.Linear(inp, hidden),
            torch.nn.ReLU(),
            torch.nn.Linear(hidden, hidden),
            torch.nn.ReLU(),
            torch.nn.Linear(hidden, out),
        )

    if objective == "mine":
        critic = mlp(dx + dy, 1)
        nets: list[torch.nn.Module] = [critic]
    else:
        fx, fy = mlp(dx, 32), mlp(dy, 32)
        nets = [fx, fy]
    opt = torch.optim.Adam([p for m in nets for p in m.parameters()], lr=lr)

    def pair_scores(xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        return fx(xb) @ fy(yb).T

    def dv(xa: torch.Tensor, ya: torch.Tensor, shuffled: torch.Tensor) -> torch.Tensor:
        joint = critic(torch.cat([xa, ya], 1)).squeeze(-1)
        marg = critic(torch.cat([xa, shuffled], 1)).squeeze(-1)
        return joint.mean() - (torch.logsumexp(marg, 0) - np.log(len(marg)))

    moving = torch.tensor(1.0)
    for _ in range(steps):
        idx = torch.randperm(n, generator=gen)[:b]
        xb, yb = xt[idx], yt[idx]
        if objective == "mine":
            joint = critic(torch.cat([xb, yb], 1)).squeeze(-1)
            shuffled = yb[torch.randperm(b, generator=gen)]
            mean_exp = critic(torch.cat([xb, shuffled], 1)).squeeze(-1).exp().mean()
            moving = (1 - ema) * moving + ema * mean_exp.detach()
            loss = -(joint.mean() - mean_exp / moving)
        else:
            s = pair_scores(xb, yb)
            loss = -(s.diag() - torch.logsumexp(s, dim=1)).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        if objective == "mine":
            shuffles = [yt[torch.randperm(n, generator=gen)] for _ in range(10)]
            return float(torch.stack([dv(xt, yt, s) for s in shuffles]).mean())
        order = torch.randperm(n, generator=gen)
        vals = []
        for start in range(0, n - b + 1, b):
            idx = order[start : start + b]
            s = pair_scores(xt[idx], yt[idx])
            vals.append(float(np.log(b) + (s.diag() - torch.logsumexp(s, dim=1)).mean()))
        return float(np.mean(vals))

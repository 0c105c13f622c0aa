"""InfoAtlas: amortized mutual-information estimation in one forward pass (arXiv 2606.00241).

A set network reads the N samples ``(x_i, y_i)`` of a dataset and emits the weights of
a critic ``T(x, y)``; the estimate is the Donsker-Varadhan bound evaluated with that
critic, ``Î = mean_i T(x_i, y_i) - mean_r log mean_i exp T(x_i, y_{π_r(i)})``. Trained
once on synthetic episodes by maximising the bound, it then estimates MI for any new
dataset without per-dataset optimisation.

CPU-sized version (what is faithful and what is reconstructed is in
``docs/methods/infoatlas.md``):

1. Preprocessing (faithful in intent; :mod:`flowerbed.methods.infoatlas.algorithm_prep`):
   exact rank-Gaussian copula per column (the paper's soft rank, made exact), then
   per-side ZCA whitening with eigenvalue floor 1e-3, as the paper does for some
   checkpoints, then a per-side rotation to the
   sample's canonical (CCA) coordinates so pair ``k`` of X and Y carries the ``k``-th
   canonical correlation (an invertible per-side linear map, so MI is unchanged).
   Columns are zero-padded to ``max_dim`` per side. Rows are put in a canonical
   order (lexicographic on the rank matrix) before anything else, so the estimate is
   bit-for-bit invariant to the order of the samples, and exactly invariant to
   strictly increasing marginal transforms.
2. Encoder: Set Transformer (ISAB blocks with inducing points, then PMA pooling) over
   per-sample tokens; no positional encoding, so it is permutation invariant.
3. Hypernetwork: MLP from the pooled code plus ``(log n, dx, dy)`` to a residual on
   shared base weights of the critic, a 2-layer ReLU MLP on ``[x, x², y, y²]`` plus a
   per-canonical-pair Gaussian log-density-ratio term parametrised by a generated
   correlation ``rho_k`` (reconstructed: lets a tiny net represent the optimal
   critic of the Gaussian family exactly).
4. Objective: maximise DV. Reconstructed deviation: the critic generated from one
   half of an episode is scored on the other half (fresh samples from the same
   distribution), so the network is not rewarded for over-fitting its critic to the
   sample; estimation by default cross-fits the same way (two halves, one forward).
5. Synthetic episodes (reconstructed; the paper's generator is withheld): Gaussian
   with random canonical correlations, Gaussian mixtures, functional dependence
   ``y = f(x) + noise``, discrete/count/mixed families, label-like categorical y
   with class-dependent Gaussian x (mean and/or spread), each seen through random
   monotone marginal maps and per-side rotations; 15% are made independent by
   shuffling y.
6. Beyond ``max_dim``: k-sliced MI (average over random unit-norm projections).

Pure numpy/scipy/torch; no Flower, no Ray.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
import torch
from torch import nn

from flowerbed.methods.infoatlas.algorithm_prep import Prepared, as_2d, prepare

RHO_MAX = 0.999
N_SCALE = math.log(5000.0)


# --------------------------------------------------------------------------- network
@dataclass(frozen=True)
class NetConfig:
    """Sizes of the CPU InfoAtlas network."""

    max_dim: int = 16
    width: int = 64
    heads: int = 4
    inducing: int = 16
    blocks: int = 2
    seeds: int = 4
    hyper_hidden: int = 256
    critic_hidden: int = 32
    negatives: int = 8


class _MAB(nn.Module):
    """Set Transformer multihead attention block: ``LN(h + FF(h))``, ``h = LN(q + Att(q, kv))``."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.att = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, 2 * dim), nn.ReLU(), nn.Linear(2 * dim, dim))

    def forward(self, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        h = self.ln1(q + self.att(q, kv, kv, need_weights=False)[0])
        return self.ln2(h + self.ff(h))  # type: ignore[no-any-return]


class _ISAB(nn.Module):
    def __init__(self, dim: int, heads: int, inducing: int) -> None:
        super().__init__()
        self.points = nn.Parameter(torch.randn(inducing, dim) / math.sqrt(dim))
        self.mab1, self.mab2 = _MAB(dim, heads), _MAB(dim, heads)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.mab1(self.points.expand(len(x), -1, -1), x)
        return self.mab2(x, h)  # type: ignore[no-any-return]


class InfoAtlasNet(nn.Module):
    """Set encoder + hypernetwork emitting one critic per dataset.

    ``forward(z, context)`` maps prepared samples ``(B, n, 2D)`` and context
    ``(B, 3)`` to flat critic parameters ``(B, P)``; :meth:`critic` scores pairs
    with them. The output depends on the samples only as a set.
    """

    def __init__(self, cfg: NetConfig) -> None:
        super().__init__()
        self.cfg = cfg
        d, h, w = cfg.max_dim, cfg.critic_hidden, cfg.width
        self.embed = nn.Sequential(nn.Linear(5 * d, w), nn.ReLU(), nn.Linear(w, w))
        self.blocks = nn.ModuleList(_ISAB(w, cfg.heads, cfg.inducing) for _ in range(cfg.blocks))
        self.pool_seeds = nn.Parameter(torch.randn(cfg.seeds, w) / math.sqrt(w))
        self.pool = _MAB(w, cfg.heads)
        self.shapes = {"w1": (4 * d, h), "b1": (h,), "w2": (h,), "rho": (d,)}
        self.sizes = [math.prod(s) for s in self.shapes.values()]
        self.hyper = nn.Sequential(
            nn.Linear(cfg.seeds * w + 3, cfg.hyper_hidden),
            nn.ReLU(),
            nn.Linear(cfg.hyper_hidden, cfg.hyper_hidden),
            nn.ReLU(),
            nn.Linear(cfg.hyper_hidden, sum(self.sizes)),
        )
        last = self.hyper[-1]
        assert isinstance(last, nn.Linear)
        nn.init.normal_(last.weight, std=1e-2)
        nn.init.zeros_(last.bias)
        base = [torch.randn(4 * d, h) * 0.5, torch.randn(h) * 0.5, torch.randn(h) * 0.1]
        self.base = nn.Parameter(torch.cat([b.flatten() for b in base] + [torch.zeros(d)]))

    def features(self, z: torch.Tensor) -> torch.Tensor:
        """Per-sample token features ``[x, y, x*y, x², y²]`` over canonical pairs."""
        d = self.cfg.max_dim
        x, y = z[..., :d], z[..., d:]
        return torch.cat([x, y, x * y, x * x, y * y], dim=-1)

    def forward(self, z: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        """Critic parameters ``(B, P)`` for prepared samples ``z`` ``(B, n, 2D)``."""
        h = self.embed(self.features(z))
        for block in self.blocks:
            h = block(h)
        pooled = self.pool(self.pool_seeds.expand(len(h), -1, -1), h).flatten(1)
        return self.base + self.hyper(torch.cat([pooled, context], dim=1))

    def unpack(self, params: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """``(w1, b1, w2, rho)`` with shapes ``(B, 4D, H), (B, H), (B, H), (B, D)``."""
        w1, b1, w2, rho_raw = torch.split(params, self.sizes, dim=1)
        w1 = w1.reshape(len(params), 4 * self.cfg.max_dim, -1)
        return w1, b1, w2, RHO_MAX * torch.tanh(rho_raw)

    def critic(self, params: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """``T(x, y)`` for pairs ``z`` ``(B, m, 2D)`` with per-dataset ``params`` ``(B, P)``.

        ``T = w2 · relu(W1 [x, x², y, y²] + b1) + Σ_k log N2(x_k, y_k; rho_k) / (N(x_k) N(y_k))``.
        """
        return self.scores(params, z, None)

    def scores(
        self, params: torch.Tensor, z: torch.Tensor, perms: torch.Tensor | None
    ) -> torch.Tensor:
        """Critic on ``(x_i, y_i)`` ``(B, n)``, or on ``(x_i, y_{π_r(i)})`` ``(B, K, n)``.

        The first layer is applied to x and y separately and the permuted pairs
        only gather rows, so K negatives cost about as much as one pass.
        """
        d = self.cfg.max_dim
        w1, b1, w2, rho = self.unpack(params)
        x, y = z[..., :d], z[..., d:]
        hx = torch.bmm(torch.cat([x, x * x], -1), w1[:, : 2 * d]) + b1[:, None]
        hy = torch.bmm(torch.cat([y, y * y], -1), w1[:, 2 * d :])
        one = 1 - rho**2
        const = -0.5 * torch.log(one).sum(-1)[:, None]
        a, c = (rho**2 / (2 * one))[:, None], (rho / one)[:, None]
        qx, qy = (a * x * x).sum(-1), (a * y * y).sum(-1)
        if perms is None:
            mlp = (torch.relu(hx + hy) * w2[:, None]).sum(-1)
            return mlp + const - qx - qy + (c * x * y).sum(-1)
        hyp, yp = hy[:, perms], y[:, perms]
        mlp = (torch.relu(hx[:, None] + hyp) * w2[:, None, None]).sum(-1)
        cross = (c[:, None] * x[:, None] * yp).sum(-1)
        return mlp + const[:, None] - qx[:, None] - qy[:, perms] + cross


def context_of(n: int, dx: int, dy: int, max_dim: int) -> list[float]:
    """Global inputs of the hypernetwork: ``log n`` (scaled), ``dx / D``, ``dy / D``."""
    return [math.log(n) / N_SCALE, dx / max_dim, dy / max_dim]


def dv_bound(
    net: InfoAtlasNet, params: torch.Tensor, z: torch.Tensor, perms: torch.Tensor
) -> torch.Tensor:
    """Donsker-Varadhan bound ``(B,)`` of samples ``z`` ``(B, n, 2D)``.

    ``perms`` ``(K, n)`` re-pair y with x to draw product-of-marginals samples.
    """
    joint = net.scores(params, z, None).mean(dim=1)
    t = net.scores(params, z, perms)
    return joint - (torch.logsumexp(t, dim=-1) - math.log(z.shape[1])).mean(dim=1)


# --------------------------------------------------------------------------- estimation
def _halves(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    order = np.random.default_rng(seed).permutation(n)
    return np.sort(order[: n // 2]), np.sort(order[n // 2 : 2 * (n // 2)])


def estimate_prepared(
    net: InfoAtlasNet, batch: Sequence[Prepared], *, crossfit: bool = True, seed: int = 0
) -> np.ndarray:
    """MI estimates (nats) for prepared datasets of equal size, in one forward pass.

    ``crossfit``: the critic built from one half of the (canonically ordered)
    samples is scored on the other half and vice versa (the training objective);
    otherwise the critic is built from and scored on all samples (the paper).
    """
    n = batch[0].n
    if any(p.n != n for p in batch):
        raise ValueError("estimate_prepared needs datasets of equal size; use estimate_many")
    cfg = net.cfg
    z = torch.as_tensor(np.stack([p.z for p in batch]), dtype=torch.float32)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        if not crossfit:
            ctx = torch.tensor([context_of(n, p.dx, p.dy, cfg.max_dim) for p in batch])
            perms = torch.stack([torch.randperm(n, generator=gen) for _ in range(cfg.negatives)])
            return dv_bound(net, net(z, ctx), z, perms).numpy().astype(np.float64)
        a, b = _halves(n, seed)
        m = len(a)
        ctx = torch.tensor([context_of(m, p.dx, p.dy, cfg.max_dim) for p in batch] * 2)
        build = torch.cat([z[:, a], z[:, b]])
        score = torch.cat([z[:, b], z[:, a]])
        perms = torch.stack([torch.randperm(m, generator=gen) for _ in range(cfg.negatives)])
        est = dv_bound(net, net(build, ctx), score, perms).numpy().astype(np.float64)
        return np.asarray((est[: len(batch)] + est[len(batch) :]) / 2)


def estimate_many(
    net: InfoAtlasNet,
    pairs: Sequence[tuple[np.ndarray, np.ndarray]],
    *,
    crossfit: bool = True,
    seed: int = 0,
) -> np.ndarray:
    """MI estimates for many ``(x, y)`` pairs; equal sample sizes share one forward pass."""
    prepared = [prepare(x, y, net.cfg.max_dim) for x, y in pairs]
    out = np.empty(len(prepared))
    for n in sorted({p.n for p in prepared}):
        idx = [i for i, p in enumerate(prepared) if p.n == n]
        out[idx] = estimate_prepared(net, [prepared[i] for i in idx], crossfit=crossfit, seed=seed)
    return out


def sliced_mi(
    net: InfoAtlasNet,
    x: np.ndarray,
    y: np.ndarray,
    *,
    k: int | None = None,
    num_projections: int = 64,
    seed: int = 0,
    crossfit: bool = True,
) -> float:
    """k-sliced MI: mean estimate over random unit-norm projections of X and Y to k dims.

    Sliced MI is a different (smaller) quantity than I(X; Y); it is what the
    paper uses above ``max_dim``. With ``k >= dim`` a side is not projected.
    """
    x, y = as_2d(x, "x"), as_2d(y, "y")
    k = net.cfg.max_dim if k is None else min(k, net.cfg.max_dim)
    gen = np.random.default_rng(seed)

    def project(a: np.ndarray) -> np.ndarray:
        if a.shape[1] <= k:
            return a
        p = gen.standard_normal((a.shape[1], k))
        return a @ (p / np.linalg.norm(p, axis=0))

    pairs = [(project(x), project(y)) for _ in range(num_projections)]
    return float(np.mean(estimate_many(net, pairs, crossfit=crossfit, seed=seed)))


def estimate(
    net: InfoAtlasNet, x: np.ndarray, y: np.ndarray, *, crossfit: bool = True, seed: int = 0
) -> float:
    """MI estimate in nats of one dataset; sliced MI when a side exceeds ``max_dim``."""
    x, y = as_2d(x, "x"), as_2d(y, "y")
    if max(x.shape[1], y.shape[1]) > net.cfg.max_dim:
        return sliced_mi(net, x, y, crossfit=crossfit, seed=seed)
    return float(estimate_many(net, [(x, y)], crossfit=crossfit, seed=seed)[0])


# --------------------------------------------------------------------------- federated use
def aggregate(
    estimates: Sequence[np.ndarray],
    features: Sequence[np.ndarray],
    weights: Sequence[float],
    d: int,
) -> np.ndarray:
    """Weighted mean per global feature of client estimates over the clients that hold it.

    Client ``m`` sent ``estimates[m][j]`` for global feature ``features[m][j]``;
    features nobody holds get NaN.

    Examples
    --------
    >>> aggregate([np.array([1.0, 2.0]), np.array([3.0])], [np.array([0, 1]), np.array([0])],
    ...           [1.0, 3.0], 3).tolist()
    [2.5, 2.0, nan]
    """
    total, mass = np.zeros(d), np.zeros(d)
    for est, cols, w in zip(estimates, features, weights, strict=True):
        np.add.at(total, np.asarray(cols, dtype=np.int64), w * np.asarray(est, dtype=np.float64))
        np.add.at(mass, np.asarray(cols, dtype=np.int64), w)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(mass > 0, total / np.where(mass > 0, mass, 1.0), np.nan)


def ranking(scores: np.ndarray) -> np.ndarray:
    """Feature indices by decreasing score (NaN last; ties by index)."""
    s = np.where(np.isnan(scores), -np.inf, scores)
    return np.asarray(np.argsort(-s, kind="stable"))


# --------------------------------------------------------------------------- persistence
def save(net: InfoAtlasNet, path: str, meta: dict[str, object]) -> None:
    """Write config, weights (float32) and ``meta`` with ``torch.save``."""
    torch.save({"config": asdict(net.cfg), "state": net.state_dict(), "meta": meta}, path)


def load(path: str) -> tuple[InfoAtlasNet, dict[str, object]]:
    """A network written by :func:`save`, in eval mode, and its meta."""
    blob = torch.load(path, map_location="cpu", weights_only=True)
    net = InfoAtlasNet(NetConfig(**blob["config"]))
    net.load_state_dict(blob["state"])
    net.eval()
    return net, dict(blob.get("meta", {}))

"""HFM: path-decoupled hyperbolic flow matching (arXiv 2602.20479), and FMA (arXiv 2510.14543).

FMA (Jiang, Wang, Chen; ICLR 2026; code HKUST-LongGroup/FMA) learns a velocity
field that carries each frozen image feature ``x_0`` straight to its class's text
feature ``x_1`` (fixed coupling) in Euclidean space:
``x_t = (1-t) x_0 + t x_1 + g sqrt(t(1-t)) eps``, target
``u_t = x_1 - x_0 + g (1-2t) / (2 sqrt(t(1-t))) eps`` (``g = 0`` by default),
loss ``|v(x_t, t) - u_t|^2`` summed over dimensions; at test time ``k`` Euler
steps of 0.1, then the nearest class text feature.

HFM (Li et al., ICML 2026) moves the transport onto the Lorentz manifold
(:mod:`flowerbed.methods.hfm.algorithm_lorentz`); only its abstract is public, so the
formulas below are the reconstruction of the spec:

1. *centripetal embedding*: roots ``r_c = exp_o(rho_T t_c)``, leaves
   ``x = exp_o(rho_I f)`` with ``rho_I > rho_T`` (unit features ``t_c``, ``f``);
2. *geodesic flow matching*: ``x_t = gamma_{x->r_y}(t)``, target the geodesic's
   velocity (``log_{x_t}(r_y) / (1-t)``), velocity net output projected onto
   the tangent space at ``x_t``, loss ``|v - u_t|_L^2``;
3. *path-decoupled step-wise corridor loss*: roll the learned flow out in ``K``
   steps from the leaf (detached between steps) and at every step ask the own
   class's corridor point ``gamma_{x->r_y}(t_k)`` to be the nearest of all
   classes' corridor points, ``sum_k CE(softmax(-d(x_k, gamma_c(t_k)) / tau), y)``;
4. *adaptive diameter-based stop*: stop each test trajectory at the first step
   with ``d(o, x_k) <= rho_T + alpha D``, ``D`` the diameter of the root set;
   classify by the nearest root.

``geometry="euclidean"`` runs the same objectives with straight lines in
``R^D`` (the Euclidean counterpart); FMA is ``euclidean`` with both radii 1 and no
corridor loss. Every variant is a :class:`FlowConfig`; nothing here knows Flower.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from flowerbed.methods.hfm import algorithm_lorentz as lz

Geometry = Literal["lorentz", "euclidean"]
Velocity = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class FlowConfig:
    """One variant: geometry, radii, objectives and the stopping rule."""

    geometry: Geometry = "lorentz"
    c: float = 1.0
    rho_text: float = 0.5
    rho_image: float = 2.5
    corridor_weight: float = 0.1
    tau: float = 0.1
    corridor_samples: int = 0
    steps: int = 10
    noise: float = 0.0
    stop: Literal["adaptive", "fixed"] = "adaptive"
    alpha: float = 0.5

    @property
    def lorentz(self) -> bool:
        """Whether the flow lives on the hyperboloid."""
        return self.geometry == "lorentz"

    def point_dim(self, feature_dim: int) -> int:
        """Coordinates of one point: ``D + 1`` on the hyperboloid, ``D`` in ``R^D``."""
        return feature_dim + 1 if self.lorentz else feature_dim


#: FMA as stated from its code: Euclidean, unit features, no corridor, K fixed steps.
FMA = FlowConfig(geometry="euclidean", rho_text=1.0, rho_image=1.0, corridor_weight=0.0,
                 stop="fixed")

#: The compared variants: FMA, HFM and HFM's ablations (each a parameter choice).
VARIANTS: dict[str, FlowConfig] = {
    "fma": FMA,
    "hfm": FlowConfig(),
    "hfm_no_corridor": FlowConfig(corridor_weight=0.0),
    "hfm_fixed_steps": FlowConfig(stop="fixed"),
    "hfm_euclidean": FlowConfig(geometry="euclidean"),
}


def variant(name: str, **overrides: object) -> FlowConfig:
    """The preset ``name`` of :data:`VARIANTS` with some fields replaced."""
    if name not in VARIANTS:
        raise ValueError(f"unknown HFM variant {name!r}; known: {', '.join(VARIANTS)}")
    return replace(VARIANTS[name], **overrides)  # type: ignore[arg-type]


# --- geometry dispatch --------------------------------------------------------------------


def embed(u: torch.Tensor, rho: float, cfg: FlowConfig) -> torch.Tensor:
    """Points at distance ``rho`` from the origin in the direction of ``u`` (normalised)."""
    unit = F.normalize(u, dim=-1)
    return lz.expmap0(rho * unit, cfg.c) if cfg.lorentz else rho * unit


def dist(x: torch.Tensor, y: torch.Tensor, cfg: FlowConfig) -> torch.Tensor:
    """Geodesic (or Euclidean) distance over the last dimension; broadcasts."""
    return lz.dist(x, y, cfg.c) if cfg.lorentz else (x - y).norm(dim=-1)


def dist_to_origin(x: torch.Tensor, cfg: FlowConfig) -> torch.Tensor:
    """``d(o, x)``."""
    return lz.dist_to_origin(x, cfg.c) if cfg.lorentz else x.norm(dim=-1)


def path(x0: torch.Tensor, x1: torch.Tensor, t: torch.Tensor, cfg: FlowConfig,
         eps: torch.Tensor | None = None) -> torch.Tensor:
    """``x_t``: the geodesic (straight line, plus FMA's bridge noise) from ``x0`` to ``x1``."""
    if cfg.lorentz:
        return lz.geodesic(x0, x1, t, cfg.c)
    xt = (1 - t) * x0 + t * x1
    if eps is not None and cfg.noise > 0:
        xt = xt + cfg.noise * torch.sqrt(t * (1 - t)) * eps
    return xt


def target_velocity(x0: torch.Tensor, x1: torch.Tensor, t: torch.Tensor, cfg: FlowConfig,
                    eps: torch.Tensor | None = None) -> torch.Tensor:
    """``u_t = d x_t / dt`` (tangent at ``x_t`` on the hyperboloid)."""
    if cfg.lorentz:
        return lz.geodesic_velocity(x0, x1, t, cfg.c)
    u = x1 - x0
    if eps is not None and cfg.noise > 0:
        u = u + cfg.noise * (1 - 2 * t) / (2 * torch.sqrt(t * (1 - t))) * eps
    return u


def sq_norm(v: torch.Tensor, cfg: FlowConfig) -> torch.Tensor:
    """``|v|^2``: Lorentz norm of tangent vectors, or Euclidean."""
    return lz.inner(v, v) if cfg.lorentz else (v * v).sum(-1)


def velocity_at(net: Velocity, x: torch.Tensor, t: torch.Tensor, cfg: FlowConfig) -> torch.Tensor:
    """The net's velocity at ``x``: input the space part (and ``t``), output made tangent."""
    if not cfg.lorentz:
        return net(x, t)
    return lz.proj_tangent(x, net(x[..., 1:], t), cfg.c)


def contain(x: torch.Tensor, cfg: FlowConfig) -> torch.Tensor:
    """Pull points beyond radius ``2 max(rho_I, rho_T)`` back onto that sphere.

    On the hyperboloid this is ``exp_o(s log_o(x))`` with ``s = min(1, r_max / r)``,
    which also puts a float32 point back onto the manifold. It binds only when a
    roll-out heads for the boundary, where ``cosh`` of the radius overflows and
    the tangent projection amplifies the net's output by ``x_0^2`` (a FedAvg run
    once went to NaN that way); flows that go inward never meet it.
    """
    r_max = 2.0 * max(cfg.rho_image, cfg.rho_text)
    u = lz.logmap0(x, cfg.c) if cfg.lorentz else x
    shrink = (r_max / u.norm(dim=-1, keepdim=True).clamp_min(1e-12)).clamp(max=1.0)
    return lz.expmap0(shrink * u, cfg.c) if cfg.lorentz else shrink * u


def step(net: Velocity, x: torch.Tensor, t: torch.Tensor, dt: float, cfg: FlowConfig
         ) -> torch.Tensor:
    """One Euler step ``exp_x(dt v(x, t))`` (``x + dt v`` in ``R^D``), then :func:`contain`.

    A step is at most ``rho_I + rho_T`` long (no leaf is farther from a root), so
    a wild velocity cannot overshoot by more than one whole path.
    """
    v = dt * velocity_at(net, x, t, cfg)
    length = lz.tangent_norm(v) if cfg.lorentz else v.norm(dim=-1)
    cap = cfg.rho_image + cfg.rho_text
    v = v * (cap / length.clamp_min(1e-12)).clamp(max=1.0).unsqueeze(-1)
    return contain(lz.expmap(x, v, cfg.c) if cfg.lorentz else x + v, cfg)


# --- objectives ---------------------------------------------------------------------------


def fm_loss(net: Velocity, x0: torch.Tensor, x1: torch.Tensor, t: torch.Tensor,
            cfg: FlowConfig, eps: torch.Tensor | None = None) -> torch.Tensor:
    """Flow-matching loss ``mean_i |v(x_t, t) - u_t|^2`` (``t`` of shape ``(B, 1)``)."""
    xt = path(x0, x1, t, cfg, eps)
    u = target_velocity(x0, x1, t, cfg, eps)
    return sq_norm(velocity_at(net, xt, t, cfg) - u, cfg).mean()


def corridor_points(leaves: torch.Tensor, roots: torch.Tensor, t: float, cfg: FlowConfig
                    ) -> torch.Tensor:
    """``gamma_{x_i -> r_c}(t)`` for every leaf ``i`` and class ``c``: ``(B, C, dim)``."""
    x = leaves.unsqueeze(1).expand(-1, roots.shape[0], -1)
    r = roots.unsqueeze(0).expand(leaves.shape[0], -1, -1)
    return path(x, r, torch.full((*x.shape[:2], 1), t, dtype=x.dtype), cfg)


def corridor_loss(net: Velocity, leaves: torch.Tensor, y: torch.Tensor, roots: torch.Tensor,
                  cfg: FlowConfig, gen: torch.Generator | None = None) -> torch.Tensor:
    """Step-wise corridor loss ``sum_k CE(-d(x_k, gamma_c(t_k)) / tau, y)``, batch mean.

    ``x_{k+1} = step(x_k)`` from the leaf with ``x_k`` detached, so each term
    trains the velocity of one step. With ``cfg.corridor_samples = m > 0`` the
    sum is estimated without bias by ``K/m`` times the terms of ``m`` steps drawn
    from ``gen`` (the other steps of the roll-out run without gradients).
    """
    k_all, dt = cfg.steps, 1.0 / cfg.steps
    m = cfg.corridor_samples
    if 0 < m < k_all:
        chosen = set(torch.randperm(k_all, generator=gen)[:m].tolist())
        weight = k_all / m
    else:
        chosen, weight = set(range(k_all)), 1.0
    x, total = leaves, leaves.new_zeros(())
    for k in range(max(chosen) + 1):
        t = torch.full((len(x), 1), k * dt, dtype=x.dtype)
        if k not in chosen:
            with torch.no_grad():
                x = step(net, x, t, dt, cfg)
            continue
        x = step(net, x.detach(), t, dt, cfg)
        corr = corridor_points(leaves, roots, (k + 1) * dt, cfg)
        logits = -dist(x.unsqueeze(1), corr, cfg) / cfg.tau
        total = total + weight * F.cross_entropy(logits, y)
        x = x.detach()
    return total


# --- inference ----------------------------------------------------------------------------


@torch.no_grad()
def trajectory(net: Velocity, x0: torch.Tensor, cfg: FlowConfig) -> torch.Tensor:
    """``(K + 1, N, dim)``: the leaf and its ``K`` Euler steps of ``1/K``."""
    xs, dt = [x0], 1.0 / cfg.steps
    for k in range(cfg.steps):
        t = torch.full((len(x0), 1), k * dt, dtype=x0.dtype)
        xs.append(step(net, xs[-1], t, dt, cfg))
    return torch.stack(xs)


def diameter(roots: torch.Tensor, cfg: FlowConfig) -> float:
    """``D = max_{c != c'} d(r_c, r_c')``."""
    return float(dist(roots.unsqueeze(1), roots.unsqueeze(0), cfg).max())


def stop_steps(traj: torch.Tensor, roots: torch.Tensor, cfg: FlowConfig) -> torch.Tensor:
    """Per trajectory, the first ``k`` with ``d(o, x_k) <= rho_T + alpha D`` (else ``K``).

    ``cfg.stop == "fixed"`` always gives ``K``. Larger ``alpha`` can only stop
    earlier; ``alpha = 0`` stops only where the flow is back on the roots' sphere.
    """
    k_max = traj.shape[0] - 1
    if cfg.stop == "fixed":
        return torch.full((traj.shape[1],), k_max, dtype=torch.long)
    inside = dist_to_origin(traj, cfg) <= cfg.rho_text + cfg.alpha * diameter(roots, cfg)
    inside[0] = False  # the leaf itself is never a stop (it is outside by construction)
    inside[k_max] = True
    return inside.to(torch.int8).argmax(dim=0).long()


def root_logits(x: torch.Tensor, roots: torch.Tensor, cfg: FlowConfig) -> torch.Tensor:
    """``-d(x, r_c)``: nearest root first."""
    return -dist(x.unsqueeze(-2), roots, cfg)


def classify(traj: torch.Tensor, roots: torch.Tensor, cfg: FlowConfig
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Classes at the stop step, per-step classes ``(K+1, N)`` and stop steps of a trajectory."""
    per_step = root_logits(traj, roots, cfg).argmax(-1)
    k = stop_steps(traj, roots, cfg)
    chosen = per_step.gather(0, k.unsqueeze(0))[0]
    return chosen.numpy(), per_step.numpy(), k.numpy()


def select_step(per_step: np.ndarray, y: np.ndarray) -> int:
    """The Euler step ``k`` whose classes (``per_step[k]``) are most accurate on ``y``.

    Meant for a validation split (FMA's code picks its best ``k`` on the test set;
    here it is chosen on held-out training rows and then read on the test rows).
    Ties go to the smallest ``k`` (the shortest transport).
    """
    acc = (np.asarray(per_step) == np.asarray(y)[None]).mean(axis=1)
    return int(np.flatnonzero(acc == acc.max())[0])


def predict(net: Velocity, leaves: torch.Tensor, roots: torch.Tensor, cfg: FlowConfig
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`classify` of the flow from ``leaves``."""
    return classify(trajectory(net, leaves, cfg), roots, cfg)


def corridor_switches(traj: torch.Tensor, roots: torch.Tensor, cfg: FlowConfig) -> np.ndarray:
    """How often each trajectory's nearest corridor changes along steps ``1..K``.

    The corridors of sample ``i`` are the paths from its own leaf to every root;
    at step ``k`` the nearest is ``argmin_c d(x_k, gamma_c(t_k))`` (step 0 is the
    leaf, where every corridor starts, so it is skipped).
    """
    k_max = traj.shape[0] - 1
    nearest = []
    for k in range(1, k_max + 1):
        corr = corridor_points(traj[0], roots, k / k_max, cfg)
        nearest.append(dist(traj[k].unsqueeze(1), corr, cfg).argmin(-1))
    near = torch.stack(nearest)
    return (near[1:] != near[:-1]).sum(0).numpy()


# --- training -----------------------------------------------------------------------------


@dataclass(frozen=True)
class TrainConfig:
    """FMA's schedule: AdamW, one warm-up epoch, cosine decay; ``epochs x batches`` steps."""

    epochs: int = 200
    batch_size: int = 32
    lr: float = 2e-4
    weight_decay: float = 0.01
    seed: int = 0


def _schedule(opt: torch.optim.Optimizer, warmup: int, total: int
              ) -> torch.optim.lr_scheduler.LambdaLR:
    def factor(i: int) -> float:
        if i < warmup:
            return (i + 1) / warmup
        return 0.5 * (1 + math.cos(math.pi * (i - warmup) / max(1, total - warmup)))

    return torch.optim.lr_scheduler.LambdaLR(opt, factor)


def train(net: nn.Module, leaves: torch.Tensor, y: torch.Tensor, roots: torch.Tensor,
          cfg: FlowConfig, tcfg: TrainConfig) -> list[float]:
    """Train ``net`` on ``L_FM + corridor_weight L_cor``; mean loss per epoch.

    Each leaf is coupled with its own class's root; ``t ~ U(0, 1)`` per sample
    (kept in ``[1e-3, 1 - 1e-3]`` when FMA's bridge noise is on). ``leaves`` is
    ``(N, dim)``, or ``(V, N, dim)``: ``V`` augmented views of each sample, of
    which every epoch uses one per sample, drawn from the seeded generator (FMA
    re-encodes an augmented view of every shot each epoch).
    """
    n = len(y)
    if n == 0 or tcfg.epochs == 0:
        return []
    gen = torch.Generator().manual_seed(tcfg.seed % 2**63)
    bs = min(tcfg.batch_size, n)
    per_epoch = math.ceil(n / bs)
    opt = torch.optim.AdamW(net.parameters(), lr=tcfg.lr, weight_decay=tcfg.weight_decay)
    sched = _schedule(opt, per_epoch, tcfg.epochs * per_epoch)
    targets, losses = roots[y], []
    views = leaves if leaves.dim() == 3 else None
    for _ in range(tcfg.epochs):
        total = 0.0
        if views is not None:
            pick = torch.randint(len(views), (n,), generator=gen)
            leaves = views[pick, torch.arange(n)]
        for idx in torch.split(torch.randperm(n, generator=gen), bs):
            t = torch.rand((len(idx), 1), generator=gen, dtype=leaves.dtype)
            eps = None
            if cfg.noise > 0:
                t = t.clamp(1e-3, 1 - 1e-3)
                eps = torch.randn(leaves[idx].shape, generator=gen, dtype=leaves.dtype)
            loss = fm_loss(net, leaves[idx], targets[idx], t, cfg, eps)
            if cfg.corridor_weight > 0:
                loss = loss + cfg.corridor_weight * corridor_loss(net, leaves[idx], y[idx],
                                                                  roots, cfg, gen)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            total += float(loss.detach())
        losses.append(total / per_epoch)
    return losses

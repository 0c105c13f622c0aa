"""HFM / FMA: Lorentz maps against closed forms (and geoopt), flows against analytic oracles.

References are independent of the code under test: closed-form hyperbolic
distances and maps written out here in numpy, geoopt's Lorentz manifold where it
is installed, finite differences and torch autograd for derivatives, and oracle
velocity fields whose flow is known analytically.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from flowerbed.methods.hfm import algorithm as hfm
from flowerbed.methods.hfm import algorithm_lorentz as lz

CURVATURES = [1.0, 0.5, 2.0]


@pytest.fixture(autouse=True)
def _float64():
    """The maths tests run in float64 (restored afterwards for other test modules)."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(before)


def _tangent_at_origin(gen: np.random.Generator, n: int, dim: int, scale: float = 1.5
                       ) -> torch.Tensor:
    return torch.as_tensor(scale * gen.standard_normal((n, dim)) / math.sqrt(dim))


def _points(gen: np.random.Generator, n: int, dim: int, c: float) -> torch.Tensor:
    """Random points built by hand: ``x_0 = sqrt(1/c + |x_s|^2)``."""
    xs = gen.standard_normal((n, dim))
    x0 = np.sqrt(1 / c + (xs**2).sum(1, keepdims=True))
    return torch.as_tensor(np.concatenate([x0, xs], 1))


def _minkowski(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return -x[..., 0] * y[..., 0] + (x[..., 1:] * y[..., 1:]).sum(-1)


# --- Lorentz model --------------------------------------------------------------------------


@pytest.mark.parametrize("c", CURVATURES)
def test_expmap0_is_on_the_manifold_at_the_right_distance_and_logmap0_inverts_it(c):
    """<x, x>_L = -1/c; d(o, exp_o v) = |v| (closed form arccosh(sqrt c x_0)/sqrt c)."""
    gen = np.random.default_rng(0)
    v = _tangent_at_origin(gen, 50, 7)
    x = lz.expmap0(v, c).numpy()
    np.testing.assert_allclose(_minkowski(x, x), -1 / c, rtol=1e-12)
    assert (x[:, 0] > 0).all()
    r = np.linalg.norm(v.numpy(), axis=1)
    np.testing.assert_allclose(np.arccosh(np.sqrt(c) * x[:, 0]) / np.sqrt(c), r, rtol=1e-12)
    o = lz.origin(7, c).expand(50, -1)
    np.testing.assert_allclose(lz.dist(o, torch.as_tensor(x), c).numpy(), r, rtol=1e-10)
    np.testing.assert_allclose(lz.logmap0(torch.as_tensor(x), c).numpy(), v.numpy(), atol=1e-12)
    # the general maps at the origin agree with the origin shortcuts
    full = torch.cat([torch.zeros(50, 1), v], 1)
    np.testing.assert_allclose(lz.expmap(o, full, c).numpy(), x, atol=1e-12)


@pytest.mark.parametrize("c", CURVATURES)
def test_exp_log_round_trip_at_arbitrary_points_and_distance_closed_form(c):
    gen = np.random.default_rng(1)
    x, y = _points(gen, 40, 5, c), _points(gen, 40, 5, c)
    u = lz.logmap(x, y, c)
    np.testing.assert_allclose(lz.inner(x, u).numpy(), 0.0, atol=1e-9)  # tangent at x
    np.testing.assert_allclose(lz.expmap(x, u, c).numpy(), y.numpy(), rtol=1e-8, atol=1e-8)
    d_ref = np.arccosh(-c * _minkowski(x.numpy(), y.numpy())) / np.sqrt(c)
    np.testing.assert_allclose(lz.dist(x, y, c).numpy(), d_ref, rtol=1e-12)
    np.testing.assert_allclose(lz.tangent_norm(u).numpy(), d_ref, rtol=1e-8)
    # log as in the spec: d * P / |P|_L with P = y + c <x, y>_L x
    p = y.numpy() + c * _minkowski(x.numpy(), y.numpy())[:, None] * x.numpy()
    ref = d_ref[:, None] * p / np.sqrt(_minkowski(p, p))[:, None]
    np.testing.assert_allclose(u.numpy(), ref, rtol=1e-8, atol=1e-10)


def test_maps_are_finite_and_exact_for_coincident_points_in_float32():
    """y = x: log = 0, exp of 0 = x, d = 0, no NaN (the 0/0 of the closed forms)."""
    x = _points(np.random.default_rng(2), 8, 4, 1.0).float()
    u = lz.logmap(x, x)
    assert torch.isfinite(u).all() and float(u.abs().max()) < 1e-2
    np.testing.assert_allclose(lz.expmap(x, torch.zeros_like(x)).numpy(), x.numpy(), rtol=1e-6)
    assert float(lz.dist(x, x).max()) < 1e-2
    assert torch.isfinite(lz.expmap0(torch.zeros(3, 4))).all()


def test_gradients_stay_finite_at_coincident_points_in_float32():
    """d(x, x) and the exp map at v = 0 have infinite derivatives in closed form.

    A clamped ``arccosh`` at a rounded ``-c <x, x>_L <= 1`` gives 0 * inf = NaN in
    backward; that NaN once poisoned a FedAvg run (corridor point on the flow).
    """
    x = _points(np.random.default_rng(12), 64, 8, 1.0).float()
    xs = x[:, 1:].clone().requires_grad_(True)
    pts = lz.lift(xs)
    (lz.dist(pts, x).sum() + lz.dist(pts, pts.detach()).sum()).backward()
    assert torch.isfinite(xs.grad).all()
    v = torch.zeros(64, 9, dtype=torch.float32, requires_grad=True)
    lz.expmap(x, v).sum().backward()
    assert torch.isfinite(v.grad).all()


def test_tangent_projection_is_tangent_and_idempotent():
    gen = np.random.default_rng(3)
    x = _points(gen, 20, 6, 0.5)
    v = torch.as_tensor(gen.standard_normal((20, 7)))
    pv = lz.proj_tangent(x, v, 0.5)
    np.testing.assert_allclose(_minkowski(x.numpy(), pv.numpy()), 0.0, atol=1e-10)
    np.testing.assert_allclose(lz.proj_tangent(x, pv, 0.5).numpy(), pv.numpy(), atol=1e-10)


@pytest.mark.parametrize("c", CURVATURES)
def test_geodesic_end_points_constant_speed_and_velocity(c):
    """gamma(0) = x, gamma(1) = y, d(x, gamma(t)) = t d(x, y), |gamma'| = d; u_t tangent.

    The velocity matches a central finite difference of gamma and the spec's
    ``log_{x_t}(y) / (1 - t)``.
    """
    gen = np.random.default_rng(4)
    x, y = _points(gen, 30, 5, c), _points(gen, 30, 5, c)
    d = lz.dist(x, y, c)
    np.testing.assert_allclose(lz.geodesic(x, y, torch.zeros(30, 1), c).numpy(), x.numpy(),
                               atol=1e-10)
    np.testing.assert_allclose(lz.geodesic(x, y, torch.ones(30, 1), c).numpy(), y.numpy(),
                               rtol=1e-8, atol=1e-8)
    for t in (0.2, 0.5, 0.9):
        tt = torch.full((30, 1), t)
        xt = lz.geodesic(x, y, tt, c)
        np.testing.assert_allclose(_minkowski(xt.numpy(), xt.numpy()), -1 / c, rtol=1e-10)
        np.testing.assert_allclose(lz.dist(x, xt, c).numpy(), t * d.numpy(), rtol=1e-8)
        u = lz.geodesic_velocity(x, y, tt, c)
        np.testing.assert_allclose(lz.inner(xt, u).numpy(), 0.0, atol=1e-8)
        np.testing.assert_allclose(lz.tangent_norm(u).numpy(), d.numpy(), rtol=1e-8)
        h = 1e-5
        fd = (lz.geodesic(x, y, tt + h, c) - lz.geodesic(x, y, tt - h, c)) / (2 * h)
        np.testing.assert_allclose(u.numpy(), fd.numpy(), rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(u.numpy(), (lz.logmap(xt, y, c) / (1 - t)).numpy(),
                                   rtol=1e-7, atol=1e-7)


def test_against_geoopt_lorentz():
    """geoopt's Lorentz(k) has <x, x>_L = -k: curvature -1/k, so k = 1/c."""
    geoopt = pytest.importorskip("geoopt")
    gen = np.random.default_rng(5)
    for c in (1.0, 0.5):
        man = geoopt.Lorentz(k=1 / c)
        v = torch.cat([torch.zeros(10, 1), _tangent_at_origin(gen, 10, 4)], 1)
        x = man.expmap0(v)
        np.testing.assert_allclose(lz.expmap0(v[:, 1:], c).numpy(), x.detach().numpy(),
                                   rtol=1e-10)
        y = _points(gen, 10, 4, c)
        np.testing.assert_allclose(lz.dist(x, y, c).numpy(), man.dist(x, y).detach().numpy(),
                                   rtol=1e-8)
        np.testing.assert_allclose(lz.logmap(x, y, c).numpy(),
                                   man.logmap(x, y).detach().numpy(), rtol=1e-7, atol=1e-9)


def test_gradients_match_finite_differences():
    """torch.autograd.gradcheck through dist, exp and log (no clamp kills a gradient)."""
    gen = np.random.default_rng(6)
    x, y = _points(gen, 3, 3, 1.0), _points(gen, 3, 3, 1.0)
    v = lz.proj_tangent(x, torch.as_tensor(gen.standard_normal((3, 4))))
    xs = x[:, 1:].clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda s: lz.dist(lz.lift(s), y), (xs,))
    vv = v.clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda w: lz.expmap(x, w), (vv,))
    yy = y.clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda z: lz.logmap(x, z), (yy,))


# --- flows ----------------------------------------------------------------------------------


def _oracle(targets: torch.Tensor, cfg: hfm.FlowConfig):
    """``v(x, t) = log_x(r) / (1 - t)``: the field whose flow follows each geodesic exactly."""

    def v(inp: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        if cfg.lorentz:
            x = lz.lift(inp, cfg.c)
            return lz.logmap(x, targets, cfg.c) / (1 - t)
        return (targets - inp) / (1 - t)

    return v


def _world(n: int = 12, classes: int = 3, dim: int = 6, seed: int = 7):
    gen = np.random.default_rng(seed)
    f = torch.as_tensor(gen.standard_normal((n, dim)))
    text = torch.as_tensor(gen.standard_normal((classes, dim)))
    return f, text, torch.arange(n) % classes


def test_centripetal_embedding_puts_leaves_outside_roots():
    f, text, _ = _world()
    cfg = hfm.VARIANTS["hfm"]
    leaves, roots = hfm.embed(f, cfg.rho_image, cfg), hfm.embed(text, cfg.rho_text, cfg)
    o = lz.origin(f.shape[1], cfg.c)
    d_leaf, d_root = lz.dist(o, leaves, cfg.c), lz.dist(o, roots, cfg.c)
    np.testing.assert_allclose(d_leaf.numpy(), cfg.rho_image, rtol=1e-10)
    np.testing.assert_allclose(d_root.numpy(), cfg.rho_text, rtol=1e-10)
    assert float(d_leaf.min()) > float(d_root.max())
    # the direction is kept: log_o(leaf) is parallel to the feature
    cos = torch.nn.functional.cosine_similarity(lz.logmap0(leaves, cfg.c), f, dim=1)
    np.testing.assert_allclose(cos.numpy(), 1.0, atol=1e-12)


@pytest.mark.parametrize("name", ["hfm", "hfm_euclidean", "fma"])
def test_oracle_velocity_has_zero_loss_and_reaches_the_root(name):
    cfg = hfm.VARIANTS[name]
    f, text, y = _world()
    leaves, roots = hfm.embed(f, cfg.rho_image, cfg), hfm.embed(text, cfg.rho_text, cfg)
    t = torch.as_tensor(np.random.default_rng(8).uniform(0, 0.95, (len(y), 1)))
    # the oracle is evaluated at the path's points, so it must close over the targets
    loss = hfm.fm_loss(_oracle(roots[y], cfg), leaves, roots[y], t, cfg)
    assert float(loss) < 1e-16
    # a wrong field (towards another class's root) is penalised by its squared gap
    wrong = hfm.fm_loss(_oracle(roots[(y + 1) % 3], cfg), leaves, roots[y], t, cfg)
    assert float(wrong) > 1e-2
    traj = hfm.trajectory(_oracle(roots[y], cfg), leaves, cfg)
    np.testing.assert_allclose(traj[-1].numpy(), roots[y].numpy(), atol=1e-9)
    _, per_step, _ = hfm.predict(_oracle(roots[y], cfg), leaves, roots, cfg)
    assert (per_step[-1] == y.numpy()).all()


@pytest.mark.parametrize("name", ["hfm", "hfm_euclidean"])
def test_a_wild_velocity_field_stays_finite_and_inside_the_ball(name):
    """An outward field of size 1e3 (float32): steps are capped, points contained."""
    cfg = hfm.VARIANTS[name]
    f, text, y = _world()
    leaves = hfm.embed(f.float(), cfg.rho_image, cfg)
    roots = hfm.embed(text.float(), cfg.rho_text, cfg)
    w = torch.tensor(1e3, requires_grad=True)

    def wild(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        out = w * x
        return torch.cat([torch.zeros_like(out[:, :1]), out], 1) if cfg.lorentz else out

    traj = hfm.trajectory(wild, leaves, cfg)
    assert torch.isfinite(traj).all()
    radius = hfm.dist_to_origin(traj, cfg)
    assert float(radius.max()) <= 2 * cfg.rho_image + 1e-3
    loss = hfm.corridor_loss(wild, leaves, y, roots, cfg)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(w.grad)


def test_fma_path_end_points_and_target_is_the_time_derivative():
    """gamma = 0: x_0 at t = 0, x_1 at t = 1; with bridge noise the target is d x_t / dt."""
    gen = np.random.default_rng(9)
    x0, x1 = (torch.as_tensor(gen.standard_normal((5, 4))) for _ in range(2))
    eps = torch.as_tensor(gen.standard_normal((5, 4)))
    cfg = hfm.FMA
    np.testing.assert_allclose(hfm.path(x0, x1, torch.zeros(5, 1), cfg).numpy(), x0.numpy())
    np.testing.assert_allclose(hfm.path(x0, x1, torch.ones(5, 1), cfg).numpy(), x1.numpy())
    noisy = hfm.variant("fma", noise=0.3)
    t, h = torch.full((5, 1), 0.3), 1e-6
    fd = (hfm.path(x0, x1, t + h, noisy, eps) - hfm.path(x0, x1, t - h, noisy, eps)) / (2 * h)
    np.testing.assert_allclose(hfm.target_velocity(x0, x1, t, noisy, eps).numpy(), fd.numpy(),
                               rtol=1e-6, atol=1e-6)
    # by hand at t = 0.3: x1 - x0 + 0.3 (1 - 0.6) / (2 sqrt(0.21)) eps
    ref = x1 - x0 + 0.3 * 0.4 / (2 * math.sqrt(0.21)) * eps
    np.testing.assert_allclose(hfm.target_velocity(x0, x1, t, noisy, eps).numpy(), ref.numpy())


def test_corridor_loss_of_the_oracle_by_hand_and_its_sampled_estimate_is_unbiased():
    """Euclidean, 2 classes in R^2, one leaf at (2, 0); roots (1, 0) and (0, 1); K = 2, tau 1.

    Oracle steps land on the own corridor: x_1 = (1.5, 0), x_2 = (1, 0). The other
    corridor is at (1, 0.5) then (0, 1): distances sqrt(0.5) and sqrt 2, so the
    loss is log(1 + e^-0.707107) + log(1 + e^-1.414214) = 0.400830 + 0.217625.
    """
    cfg = hfm.FlowConfig(geometry="euclidean", steps=2, tau=1.0)
    leaf, roots, y = torch.tensor([[2.0, 0.0]]), torch.tensor([[1.0, 0.0], [0.0, 1.0]]), \
        torch.tensor([0])
    ref = math.log1p(math.exp(-math.sqrt(0.5))) + math.log1p(math.exp(-math.sqrt(2)))
    assert ref == pytest.approx(0.400830 + 0.217625, abs=2e-6)
    loss = hfm.corridor_loss(_oracle(roots[y], cfg), leaf, y, roots, cfg)
    assert float(loss) == pytest.approx(ref, rel=1e-9)
    one = hfm.FlowConfig(geometry="euclidean", steps=2, tau=1.0, corridor_samples=1)
    draws = {round(float(hfm.corridor_loss(_oracle(roots[y], one), leaf, y, roots, one,
                                           torch.Generator().manual_seed(s))), 9)
             for s in range(20)}
    # each draw is K times one step's term; the two possible draws average to the sum
    assert len(draws) == 2
    assert sum(draws) / 2 == pytest.approx(ref, rel=1e-8)


def test_corridor_gradient_matches_autograd_of_a_hand_written_loss():
    """One linear step v = W x on R^2 (K = 1): the loss is CE of distances to the roots."""
    cfg = hfm.FlowConfig(geometry="euclidean", steps=1, tau=0.5)
    w = torch.tensor([[-0.4, 0.1], [0.2, -0.3]], requires_grad=True)
    leaf, roots, y = torch.tensor([[2.0, 1.0]]), torch.tensor([[1.0, 0.0], [0.0, 1.0]]), \
        torch.tensor([1])
    loss = hfm.corridor_loss(lambda x, t: x @ w.T, leaf, y, roots, cfg)
    (g,) = torch.autograd.grad(loss, w)
    w2 = w.detach().clone().requires_grad_(True)
    x1 = leaf + leaf @ w2.T
    ref = -torch.log_softmax(-(x1 - roots).norm(dim=1) / 0.5, 0)[1]
    (g2,) = torch.autograd.grad(ref, w2)
    assert float(loss.detach()) == pytest.approx(float(ref.detach()), rel=1e-12)
    np.testing.assert_allclose(g.numpy(), g2.numpy(), rtol=1e-10)


def test_stop_step_is_monotone_in_alpha_and_full_transport_at_alpha_zero():
    """Oracle trajectories from leaves near their roots: d(o, x_k) falls monotonically."""
    gen = np.random.default_rng(10)
    text = torch.as_tensor(gen.standard_normal((4, 8)))
    y = torch.arange(20) % 4
    f = text[y] + 0.3 * torch.as_tensor(gen.standard_normal((20, 8)))
    steps = []
    for alpha in (0.0, 0.1, 0.3, 0.6, 1.0, 3.0):
        cfg = hfm.variant("hfm", alpha=alpha)
        leaves, roots = hfm.embed(f, cfg.rho_image, cfg), hfm.embed(text, cfg.rho_text, cfg)
        traj = hfm.trajectory(_oracle(roots[y], cfg), leaves, cfg)
        r = lz.dist_to_origin(traj, cfg.c)
        assert (r[1:] <= r[:-1] + 1e-9).all()  # the premise: the radius only shrinks
        steps.append(hfm.stop_steps(traj, roots, cfg).numpy())
        if alpha == 0.0:
            assert (steps[-1] == cfg.steps).all()
        # by hand: the first k >= 1 with d(o, x_k) <= rho_T + alpha D (else K)
        diam = max(float(lz.dist(roots[i], roots[j], cfg.c)) for i in range(4) for j in range(4))
        inside = (r <= cfg.rho_text + alpha * diam).numpy()
        ref = [next((k for k in range(1, cfg.steps + 1) if inside[k, i]), cfg.steps)
               for i in range(20)]
        np.testing.assert_array_equal(steps[-1], ref)
    assert all((b <= a).all() for a, b in itertools.pairwise(steps))
    assert steps[-1].max() < cfg.steps  # a large alpha does stop early


def test_corridor_switches_count_changes_of_the_nearest_corridor():
    """Euclidean R^2, leaf (0, 0), roots (1, 0), (0, 1), K = 3: corridors are t r_c.

    Trajectory (1/3, 0) -> (0, 2/3) -> (1, 0): nearest corridor 0, 1, 0 = 2 changes;
    a straight trajectory to (1, 0) has none.
    """
    cfg = hfm.FlowConfig(geometry="euclidean", steps=3)
    roots = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    zig = torch.tensor([[0.0, 0.0], [1 / 3, 0.0], [0.0, 2 / 3], [1.0, 0.0]])
    straight = torch.tensor([[0.0, 0.0], [1 / 3, 0.0], [2 / 3, 0.0], [1.0, 0.0]])
    traj = torch.stack([zig, straight], 1)
    np.testing.assert_array_equal(hfm.corridor_switches(traj, roots, cfg), [2, 0])


def test_training_lowers_the_loss_and_beats_the_untrained_flow():
    """FM loss only, on shots far from their text: the learned flow carries them home.

    The untrained field is 0, so its prediction is the zero-shot one at the leaf.
    """
    from flowerbed.methods.hfm import model as hv

    gen = np.random.default_rng(11)
    text = torch.as_tensor(gen.standard_normal((3, 8)))
    y = torch.arange(24) % 3
    f = text[y] + 2.5 * torch.as_tensor(gen.standard_normal((24, 8)))
    cfg = hfm.variant("hfm_fixed_steps", corridor_weight=0.0, steps=4)
    leaves, roots = hfm.embed(f, cfg.rho_image, cfg), hfm.embed(text, cfg.rho_text, cfg)
    net = hv.build(8, cfg.point_dim(8), 32, 1, 0, dtype=torch.float64)
    before, _, _ = hfm.predict(net, leaves, roots, cfg)
    losses = hfm.train(net, leaves, y, roots, cfg,
                       hfm.TrainConfig(epochs=60, batch_size=24, lr=1e-2))
    after, _, _ = hfm.predict(net, leaves, roots, cfg)
    assert losses[-1] < 0.5 * losses[0]
    assert (after == y.numpy()).mean() >= (before == y.numpy()).mean() + 0.15  # 0.83 vs 0.62


def test_velocity_net_starts_at_zero_and_round_trips_its_arrays():
    from flowerbed.methods.hfm import model as hv

    net = hv.build(5, 6, 16, 2, seed=3, dtype=torch.float64)
    x, t = torch.randn(4, 5), torch.rand(4, 1)
    assert float(net(x, t).detach().abs().max()) == 0.0
    arrays = hv.to_arrays(net)
    arrays = {k: v + 0.01 for k, v in arrays.items()}
    other = hv.load_arrays(hv.build(5, 6, 16, 2, seed=4, dtype=torch.float64), arrays)
    for k, v in hv.to_arrays(other).items():
        np.testing.assert_array_equal(v, arrays[k])
    assert hv.to_arrays(hv.build(5, 6, 16, 2, 3))["inp.weight"].tolist() == \
        hv.to_arrays(hv.build(5, 6, 16, 2, 3))["inp.weight"].tolist()


def test_time_embedding_closed_form():
    from flowerbed.methods.hfm.model import time_embedding

    e = time_embedding(torch.tensor([0.25]), 4)
    # half = 2, freqs (1, 0.01); arguments 250 and 2.5
    ref = [math.cos(250), math.cos(2.5), math.sin(250), math.sin(2.5)]
    np.testing.assert_allclose(e.numpy()[0], ref, rtol=1e-9)


# --- data, learner, scenarios ---------------------------------------------------------------


def test_hierarchy_dataset_and_vlm_agree():
    from flowerbed.methods.hfm.data import HierarchyParams, class_centre, hfm_hierarchy
    from flowerbed.methods.hfm.model_vlm import HierarchyVlm, HierarchyVlmParams

    p = HierarchyParams(supers=2, per_super=3, dim=16, train_per_class=4, test_per_class=50,
                        noise=0.3)
    ds = hfm_hierarchy(p, seed=0)
    assert ds.meta.num_classes == 6 and ds.x_train.shape == (24, 16)
    np.testing.assert_allclose(np.linalg.norm(ds.x_test, axis=1), 1.0, rtol=1e-6)
    centre = class_centre(0, 1, 2, 16, p.sibling)
    mean = ds.x_test[ds.y_test == 5].mean(0)
    assert mean @ centre / np.linalg.norm(mean) > 0.95
    vlm = HierarchyVlm(HierarchyVlmParams(dim=16, sibling=p.sibling, text_noise=0.0))
    np.testing.assert_allclose(vlm.encode_texts(["a photo of a h0-s1-c2."])[0], centre,
                               rtol=1e-6)
    with pytest.raises(ValueError, match="dim=16"):
        vlm.encode_images_uncached(np.ones((2, 8)), ds.meta)
    # sibling = 0 collapses every class of a super-class onto its centre
    a, b = class_centre(0, 0, 0, 16, 0.0), class_centre(0, 0, 1, 16, 0.0)
    np.testing.assert_allclose(a, b)


def _spec(**learner):
    return {
        "name": "hfm_tiny", "seed": 0, "num_clients": 2, "rounds": 2,
        "dataset": {"name": "hfm_hierarchy", "supers": 2, "per_super": 2, "dim": 8,
                    "train_per_class": 8, "test_per_class": 10, "noise": 0.3},
        "partition": {"name": "fewshot_dirichlet", "num_shots": 4, "alpha": 1.0},
        "clients": {"local_test_fraction": 0.0},
        "learner": {"name": "hfm", "vlm": {"name": "hfm_hierarchy", "dim": 8},
                    "width": 16, "depth": 1, "local_epochs": 2, "epochs": 4, **learner},
        "strategy": {"name": "fedavg", "fraction_evaluate": 0.0},
        "baselines": ["centralized"], "engine": {"name": "inline"},
    }


@pytest.mark.slow  # imports Flower's FedAvg: ~10 s of CPU, 45 s on the shared machine
def test_inline_fedavg_run_reports_every_metric(tmp_path):
    import flowerbed

    res = flowerbed.run(_spec(), output_dir=tmp_path).summary["results"]
    for source in ("federated", "centralized"):
        r = res[source]
        assert 0.0 <= r["test/accuracy"] <= 1.0
        assert r["test/zero_shot_accuracy"] == res["federated"]["test/zero_shot_accuracy"]
        assert "test/accuracy@10" in r and 1.0 <= r["test/mean_stop_step"] <= 10.0


def test_local_task_and_fma_variant_run(tmp_path):
    import flowerbed

    spec = _spec(variant="fma")
    spec |= {"strategy": {"name": "local"}, "baselines": ["centralized", "local_only"]}
    res = flowerbed.run(spec, output_dir=tmp_path).summary["results"]
    assert res["centralized"]["test/mean_stop_step"] == 10.0  # FMA: K fixed steps
    assert 0.0 <= res["federated"]["test/accuracy"] <= 1.0


def test_bad_variant_is_one_line_naming_the_field():
    from flowerbed.core.scenario import from_dict

    with pytest.raises(Exception) as err:
        from_dict(_spec(variant="hfx"))
    assert "variant" in str(err.value) and "Traceback" not in str(err.value)
    with pytest.raises(ValueError, match="unknown HFM variant"):
        hfm.variant("nope")


# --- the few-shot protocol of the experiment (issue #53) -----------------------------------


def _experiment():
    """``benchmarks/methods/hfm_experiment.py`` as a module (it is a script, not a package)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "methods" / "hfm_experiment.py"
    spec = importlib.util.spec_from_file_location("hfm_experiment_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_validation_rows_are_min_shots_4_per_class_outside_the_shots_and_seeded():
    from flowerbed.methods.hfm import data as hd

    y = np.repeat(np.arange(5), 12)
    shots = np.array([c * 12 + j for c in range(5) for j in (0, 3, 5, 7, 9, 11)])
    for k, per_class in ((1, 1), (4, 4), (6, 4)):
        val = hd.validation_rows(y, 5, k, shots, seed=3)
        assert np.array_equal(np.bincount(y[val], minlength=5), np.full(5, per_class))
        assert not set(val) & set(shots) and len(set(val)) == len(val)
        assert np.array_equal(val, hd.validation_rows(y, 5, k, shots, seed=3))
    assert not np.array_equal(hd.validation_rows(y, 5, 4, shots, 3),
                              hd.validation_rows(y, 5, 4, shots, 4))
    with pytest.raises(ValueError, match="validation needs 4 rows of class"):
        hd.validation_rows(y, 5, 4, np.arange(50), seed=0)


def test_select_step_is_the_validation_argmax_with_ties_to_the_shortest_transport():
    y = np.array([0, 1, 2, 3])
    per_step = np.array([[0, 1, 0, 0],     # 2 of 4
                         [0, 1, 2, 0],     # 3 of 4 (first of the best)
                         [9, 9, 9, 9],     # 0
                         [0, 1, 2, 1]])    # 3 of 4
    assert hfm.select_step(per_step, y) == 1
    assert hfm.select_step(per_step[[2, 0]], y) == 1


def test_the_validation_k_of_the_experiment_never_reads_the_test_rows():
    """Scrambling the test rows and labels changes the test scores, never the chosen k."""
    exp = _experiment()
    gen = np.random.default_rng(0)
    text = np.eye(3, 8)
    f_pool = text[np.repeat(np.arange(3), 6)] + 0.3 * gen.standard_normal((18, 8))
    d = {"f_pool": f_pool, "y_pool": np.repeat(np.arange(3), 6), "text": text,
         "f_test": f_pool[::2].copy(), "y_test": np.repeat(np.arange(3), 6)[::2].copy()}
    cfg = hfm.variant("fma")
    net = torch.nn.Linear(8, 8)  # a velocity field that is not the identity: k matters
    velocity = lambda x, t: net(x)  # noqa: E731
    val = np.array([1, 2, 7, 8, 13, 14])
    first = exp.read_flow(velocity, cfg, d, val)
    d["f_test"] = gen.standard_normal(d["f_test"].shape)
    d["y_test"] = gen.permutation(d["y_test"])
    second = exp.read_flow(velocity, cfg, d, val)
    assert first["k_val"] == second["k_val"]
    assert first["val_acc_per_step"] == second["val_acc_per_step"]
    assert not np.array_equal(first["acc_per_step"], second["acc_per_step"])
    per_step = [(hfm.root_logits(x, hfm.embed(torch.as_tensor(text), 1.0, cfg), cfg)
                 .argmax(-1).numpy() == d["y_pool"][val]).mean()
                for x in hfm.trajectory(velocity, hfm.embed(torch.as_tensor(f_pool[val]), 1.0,
                                                            cfg), cfg)]
    assert first["k_val"] == int(np.argmax(per_step))


def test_augmented_views_are_seeded_and_reduce_to_the_image_or_its_mirror():
    from flowerbed.methods.hfm import data as hd

    gen = np.random.default_rng(1)
    x = gen.uniform(size=(3, 7 * 5)).astype(np.float32)
    a = hd.augment_views(x, (7, 5), 4, seed=2)
    assert a.shape == (4, 3, 35)
    assert np.array_equal(a, hd.augment_views(x, (7, 5), 4, seed=2))
    assert not np.array_equal(a, hd.augment_views(x, (7, 5), 4, seed=3))
    assert not np.array_equal(a[0], a[1])  # each view is its own crop
    whole = hd.augment_views(x, (7, 5), 2, 0, scale=(1.0, 1.0), ratio=(5 / 7, 5 / 7), flip=0.0)
    np.testing.assert_allclose(whole, np.broadcast_to(x, whole.shape), atol=1e-6)
    mirror = hd.augment_views(x, (7, 5), 1, 0, scale=(1.0, 1.0), ratio=(5 / 7, 5 / 7), flip=1.0)
    np.testing.assert_allclose(mirror[0], x.reshape(3, 7, 5)[:, :, ::-1].reshape(3, 35),
                               atol=1e-6)


def test_crop_boxes_stay_inside_and_cover_the_stated_area_share():
    from flowerbed.methods.hfm import data as hd

    gen = np.random.default_rng(4)
    for _ in range(300):
        top, left, h, w = hd.crop_box(gen, 28, 28, (0.5, 1.0), (3 / 4, 4 / 3))
        assert 0 <= top and top + h <= 28 and 0 <= left and left + w <= 28
        # rounding each side moves the area by at most about one row and one column
        assert 0.5 * 784 - 2 * 28 <= h * w <= 784


def test_training_on_views_feeds_one_view_of_every_sample_per_epoch(monkeypatch):
    gen = np.random.default_rng(5)
    cfg = hfm.variant("fma")
    views = torch.as_tensor(gen.standard_normal((3, 10, 4)))
    views = views / views.norm(dim=-1, keepdim=True)
    y = torch.as_tensor(np.arange(10) % 2)
    roots = hfm.embed(torch.eye(2, 4), 1.0, cfg)
    seen: list[torch.Tensor] = []
    real = hfm.fm_loss

    def spy(net, x0, x1, t, cfg, eps=None):
        seen.append(x0.detach().clone())
        return real(net, x0, x1, t, cfg, eps)

    monkeypatch.setattr(hfm, "fm_loss", spy)
    from flowerbed.methods.hfm import model as hv

    net = hv.build(4, 4, 8, 1, seed=0, dtype=torch.float64)
    hfm.train(net, views, y, roots, cfg, hfm.TrainConfig(epochs=6, batch_size=4, seed=1))
    picks = []
    for epoch in range(6):
        rows = torch.cat(seen[3 * epoch:3 * epoch + 3])  # 10 samples in batches of 4, 4, 2
        assert len(rows) == 10
        match = (rows[:, None, None] == views[None]).all(-1)  # (rows, view, sample)
        hits = match.nonzero()
        assert len(hits) == 10 and sorted(hits[:, 2].tolist()) == list(range(10))
        picks.append(hits[:, 1])
    assert len(torch.unique(torch.cat(picks))) > 1  # views are drawn, not fixed
    again = hv.build(4, 4, 8, 1, seed=0, dtype=torch.float64)
    monkeypatch.setattr(hfm, "fm_loss", real)
    hfm.train(again, views, y, roots, cfg, hfm.TrainConfig(epochs=6, batch_size=4, seed=1))
    for p, q in zip(net.parameters(), again.parameters(), strict=True):
        assert torch.equal(p, q)

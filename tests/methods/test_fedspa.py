"""FedSPA: alignment loss by hand, client objective, partition, messages, one inline run.

References are independent of the code under test: logits and cross-entropies
computed by hand (numbers in the docstrings), closed-form class shares, and the
zero-shot classifier computed directly from the synthetic world's features.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from flowerbed.algorithms import adapter_training as at
from flowerbed.data.base import Dataset, DatasetMeta
from flowerbed.data.fewshot import (
    FewShotDirichletParams,
    class_shares,
    fewshot_dirichlet,
)
from flowerbed.methods.fedspa import algorithm as fs

SCENARIO = "scenarios/fedspa/synthetic.yaml"
QUICK = ["rounds=3", "strategy.local_epochs=2", "strategy.local_epochs_last=10",
         "strategy.server_epochs=10"]


def test_info_nce_matches_a_hand_computed_two_class_example():
    """q1 = (1, 0), q2 = (0, 1); keys (2, 0) and (1, 1) normalise to (1, 0) and (1, 1)/sqrt 2.

    At temperature 0.5 the logit matrix is [[2, sqrt 2], [0, sqrt 2]]; the targets
    are the diagonal, so CE_1 = log(1 + e^(sqrt 2 - 2)) = 0.442548 and
    CE_2 = log(1 + e^(-sqrt 2)) = 0.217622; the mean is 0.330085.
    """
    q = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    k = torch.tensor([[2.0, 0.0], [1.0, 1.0]])
    assert float(fs.info_nce(q, k, 0.5)) == pytest.approx(0.330085, abs=1e-6)
    # At the authors' temperature 0.01 the first row's margin is 29.29, the second's 70.71.
    ce1 = math.log1p(math.exp(-100 + 100 / math.sqrt(2)))
    ce2 = math.log1p(math.exp(-100 / math.sqrt(2)))
    assert float(fs.info_nce(q, k)) == pytest.approx((ce1 + ce2) / 2, rel=1e-4, abs=1e-12)


def test_alignment_loss_adds_the_stability_term_and_keeps_false_negatives():
    """Two queries of class 0 share the key T[0]: each row's logits tie, CE = log 2.

    Regulariser: T = [[1, 0], [0, 2]], T0 = [[1, 0], [0, 1]] gives sum(T * T0) = 3,
    so with lam = 0.2 and C = 2 the term is -0.2 * 3 / 2 = -0.3.
    """
    t = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    t0 = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    q = torch.tensor([[1.0, 0.0], [3.0, 0.5]])
    labels = torch.tensor([0, 0])
    loss = fs.alignment_loss(q, t, labels, t0, lam=0.2)
    assert float(loss) == pytest.approx(math.log(2) - 0.3, abs=1e-6)
    # Distinct classes: the hand-computed InfoNCE above plus the same term.
    q2, labels2 = torch.tensor([[1.0, 0.0], [0.0, 1.0]]), torch.tensor([0, 1])
    t2 = torch.tensor([[2.0, 0.0], [1.0, 1.0]])
    loss2 = fs.alignment_loss(q2, t2, labels2, t0, lam=0.2, temperature=0.5)
    assert float(loss2) == pytest.approx(0.330085 - 0.2 * (2 + 1) / 2, abs=1e-6)


def test_tip_logits_by_hand_and_alpha_zero_is_zero_shot():
    """f = (1, 0); T rows (0.6, 0.8), (1, 0); P rows (1, 0), (0, 1); scale 100, alpha 2, beta 3.

    clip = (60, 100); cache = 2 exp(-3 (1 - (1, 0))) = (2, 2 e^-3) = (2, 0.099574).
    """
    f = torch.tensor([[1.0, 0.0]])
    t = torch.tensor([[0.6, 0.8], [1.0, 0.0]])
    p = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    out = fs.tip_logits(f, t, p, alpha=2.0, beta=3.0, logit_scale=100.0)
    np.testing.assert_allclose(out.numpy(), [[62.0, 100.0 + 2 * math.exp(-3)]], rtol=1e-6)
    zero = fs.tip_logits(f, t, p, alpha=0.0, beta=3.0, logit_scale=100.0)
    np.testing.assert_allclose(zero.numpy(), [[60.0, 100.0]], rtol=1e-6)


def test_prototypes_move_toward_class_means_under_the_client_objective():
    """Ambiguous text features, prototypes started at the text rows: P_c turns toward class c."""
    gen = np.random.default_rng(0)
    d = 16
    means = np.eye(d)[:3] * 0.9 + 0.3  # three overlapping class means
    y = np.repeat(np.arange(3), 8)
    f = means[y] + 0.05 * gen.standard_normal((len(y), d))
    f /= np.linalg.norm(f, axis=1, keepdims=True)
    t = np.tile(f.mean(axis=0), (3, 1)) + 0.01 * gen.standard_normal((3, d))
    t /= np.linalg.norm(t, axis=1, keepdims=True)
    p0 = t.copy()
    cfg = at.TrainConfig(lr=5e-3, epochs=20, batch_size=8, seed=0)
    p1, losses = fs.train_prototypes(p0, t, f, y, cfg, alpha=5.0, beta=5.0, logit_scale=100.0)
    assert losses[-1] < losses[0]

    def cos(a: np.ndarray, b: np.ndarray) -> float:
        return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))

    for c in range(3):
        mean_c = f[y == c].mean(axis=0)
        assert 1 - cos(p1[c], mean_c) < 0.7 * (1 - cos(p0[c], mean_c))  # angle shrinks
        for j in set(range(3)) - {c}:
            assert cos(p1[c], f[y == j].mean(axis=0)) < cos(p0[c], f[y == j].mean(axis=0))
    assert p1.dtype == np.float32


def test_align_text_rows_are_unit_norm_and_move_toward_prototypes():
    gen = np.random.default_rng(1)
    t0 = gen.standard_normal((4, 8))
    t0 /= np.linalg.norm(t0, axis=1, keepdims=True)
    target = gen.standard_normal((4, 8))
    protos = np.concatenate([target + 0.05 * gen.standard_normal((4, 8)) for _ in range(3)])
    labels = np.tile(np.arange(4), 3)
    cfg = at.TrainConfig(lr=2e-2, epochs=30, batch_size=4, seed=0)
    t, info = fs.align_text(t0, t0, protos, labels, cfg, lam=0.0)
    np.testing.assert_allclose(np.linalg.norm(t, axis=1), 1.0, atol=1e-6)
    unit = target / np.linalg.norm(target, axis=1, keepdims=True)
    assert np.sum(t * unit, axis=1).mean() > np.sum(t0 * unit, axis=1).mean() + 0.2
    assert info["t_param_norm"] > 0


def test_init_prototypes_fall_back_to_text_rows_for_missing_classes():
    sums = np.array([[2.0, 4.0], [0.0, 0.0], [3.0, 0.0]])
    counts = np.array([2.0, 0.0, 3.0])
    t0 = np.array([[0.0, 1.0], [0.6, 0.8], [1.0, 0.0]])
    p0, missing = fs.init_prototypes(sums, counts, t0)
    np.testing.assert_allclose(p0, [[1.0, 2.0], [0.6, 0.8], [1.0, 0.0]])
    assert missing.tolist() == [False, True, False]


def test_weighted_average_refuses_all_zero_weights():
    out = at.weighted_average([np.ones(2), 3 * np.ones(2)], [1, 3])
    np.testing.assert_allclose(out, [2.5, 2.5])
    with pytest.raises(ValueError, match="0 examples"):
        at.weighted_average([np.ones(2)], [0])


def _labelled(n_train_per_class: int, n_test_per_class: int, classes: int) -> Dataset:
    y_tr = np.repeat(np.arange(classes), n_train_per_class)
    y_te = np.repeat(np.arange(classes), n_test_per_class)
    meta = DatasetMeta(name="toy", task="classification", num_features=1, num_classes=classes)
    return Dataset(np.zeros((len(y_tr), 1), np.float32), y_tr, np.zeros((len(y_te), 1),
                   np.float32), y_te, meta)


def test_fewshot_partition_uses_the_same_class_shares_for_train_and_test():
    """Client k gets floor(p_kc n_c) rows of class c plus at most the leftovers, in both splits."""
    data = _labelled(50, 300, classes=5)
    params = FewShotDirichletParams(num_shots=16, alpha=0.5)
    part = fewshot_dirichlet(params, data, 6, seed=3)
    shares = class_shares(5, 6, 0.5, seed=3)
    assert part.test_indices is not None
    for rows, y, n_c in ((part.indices, data.y_train, 16), (part.test_indices, data.y_test, 300)):
        counts = np.array([[np.sum(y[r] == c) for c in range(5)] for r in rows])  # (K, C)
        floor = np.floor(shares.T * n_c)
        assert (counts >= floor).all()
        np.testing.assert_array_equal(counts.sum(axis=0), n_c)  # every row once
        assert (counts - floor).sum(axis=0).max() < 6  # leftovers < K per class
    every = np.concatenate(part.test_indices)
    assert len(np.unique(every)) == len(every) == len(data.y_test)
    shots = np.concatenate(part.indices)
    assert np.bincount(data.y_train[shots]).tolist() == [16] * 5


def test_fewshot_partition_pools_limit_shots_and_test_rows():
    """Shots only from the first pool_rows training rows; only the first test_rows are split."""
    data = _labelled(40, 50, classes=2)  # train rows 0-39 class 0, 40-79 class 1
    y = data.y_train.copy()
    y[30:40], y[40:50] = 1, 0  # both classes appear among the first 50 rows
    data = Dataset(data.x_train, y, data.x_test, data.y_test, data.meta)
    part = fewshot_dirichlet(FewShotDirichletParams(num_shots=10, pool_rows=50, test_rows=60),
                             data, 3, seed=0)
    assert np.concatenate(part.indices).max() < 50
    assert part.test_pool().tolist() == list(range(60))


def test_fewshot_partition_names_a_class_without_enough_rows():
    data = _labelled(3, 10, classes=2)
    with pytest.raises(ValueError, match="class 0 has 3 training rows"):
        fewshot_dirichlet(FewShotDirichletParams(num_shots=4), data, 2, seed=0)


def _toy_learner():
    from flowerbed.core.scenario import load_scenario
    from flowerbed.data.federated import federated_data
    from flowerbed.methods.fedspa.learner import FedSpaLearner

    scenario = load_scenario(SCENARIO)
    learner = FedSpaLearner(scenario.component("learner"), scenario=scenario)
    return scenario, learner, federated_data(scenario)


def test_client_keeps_its_own_prototypes_and_messages_are_c_by_d_float32(tmp_path):
    """Round 2 with zero epochs returns exactly the client's own round-1 P (no averaging).

    The prototypes live in each client's state folder, so a new learner object
    (a worker process that died between rounds) continues from them.
    """
    from flowerbed.clients.learner import TaskContext
    from flowerbed.core.messages import Payload
    from flowerbed.methods.fedspa import learner as keys
    from flowerbed.methods.fedspa.learner import FedSpaLearner

    scenario, learner, fed = _toy_learner()
    meta = fed.dataset.meta
    t0 = learner.text_features(meta)
    c, d = t0.shape
    p0 = np.full((c, d), 0.1, np.float32)
    out = {}
    for r, epochs in ((1, 3), (2, 0)):
        if r == 2:
            learner = FedSpaLearner(scenario.component("learner"), scenario=scenario)
        for pid in (0, 1):
            arrays = {keys.TEXT: t0, **({keys.INIT_PROTOS: p0} if r == 1 else {})}
            config = {keys.ARM: "fedspa", keys.EPOCHS: epochs}
            task = TaskContext(scenario, pid, r, seed=pid * 10 + r, state_root=tmp_path)
            reply = learner.train_fedspa(fed.client(pid), Payload(arrays, config), task)
            protos = reply.arrays[keys.PROTOS]
            assert protos.dtype == np.float32 and protos.shape == (c, d)
            assert list(reply.arrays) == [keys.PROTOS]
            out[r, pid] = protos
    for pid in (0, 1):
        np.testing.assert_array_equal(out[2, pid], out[1, pid])
        saved = np.load(tmp_path / f"client_{pid}" / "fedspa" / "fedspa.npy")
        np.testing.assert_array_equal(saved, out[1, pid])
    assert not np.array_equal(out[1, 0], out[1, 1])


def test_results_unchanged_by_the_state_api_and_no_cache_state(tmp_path, monkeypatch):
    """The numbers before prototypes moved to the client-state API, bit for bit."""
    import json
    from pathlib import Path

    import flowerbed

    cache = tmp_path / "cache"
    monkeypatch.setenv("FLOWERBED_CACHE", str(cache))
    fixture = json.loads(
        (Path(__file__).parent / "fixtures" / "fedspa_before_state_api.json").read_text()
    )
    # The FedAvg and PromptFL arms keep no client state; their numbers moved when every
    # training arm got the same last round (recorded then, under equal_last_round).
    before = fixture["results"] | fixture["equal_last_round"]
    result = flowerbed.run(SCENARIO, [
        *QUICK, "strategy.baselines=[zero_shot, fedavg_linear, local_only, promptfl]",
    ], output_dir=tmp_path / "runs")
    res = result.summary["results"]
    assert set(res) == set(before)
    for source, metrics in before.items():
        for key, value in metrics.items():
            if key.startswith("align/"):
                # float32 optimiser state, equal up to rounding: the server loss, a float32
                # mean over 10 epochs, moved by 1.1e-5 (relative) on a CPU whose BLAS
                # kernels differ (AVX-512) from the one that wrote the fixture
                assert res[source][key] == pytest.approx(value, rel=1e-4), (source, key)
            else:
                assert res[source][key] == value, (source, key)
    assert not (cache / "fedspa_state").exists()
    assert (result.run_dir / "client_state" / "client_0" / "fedspa" / "fedspa.npy").is_file()


def test_zero_shot_head_matches_the_world_directly():
    """evaluate.fedspa with T0 scores argmax(f T0^T) on the client's share of the test split."""
    from flowerbed.clients.learner import TaskContext
    from flowerbed.core.messages import Payload
    from flowerbed.methods.fedspa import learner as keys

    scenario, learner, fed = _toy_learner()
    t0 = learner.text_features(fed.dataset.meta)
    total = 0
    for pid in range(scenario.num_clients):
        idx = fed.partition.test_indices[pid]  # type: ignore[attr-defined]
        x, y = fed.dataset.x_test[idx], fed.dataset.y_test[idx]
        payload = Payload({keys.TEXT: t0}, {keys.HEAD: "text"})
        reply = learner.evaluate_fedspa(fed.client(pid), payload, TaskContext(scenario, pid, 0, 0))
        assert reply.metrics["correct"] == np.sum((x @ t0.T).argmax(axis=1) == y)
        total += reply.num_examples
    assert total == len(fed.dataset.y_test)


def test_alpha_zero_without_server_epochs_is_zero_shot(tmp_path):
    import flowerbed

    result = flowerbed.run(SCENARIO, [
        *QUICK, "learner.alpha=0", "strategy.server_epochs=0", "strategy.baselines=[zero_shot]",
    ], output_dir=tmp_path)
    res = result.summary["results"]
    fed, zero = res["federated"], res["zero_shot"]
    assert fed["local_test/accuracy"] == zero["local_test/accuracy"]
    assert fed["test/accuracy"] == zero["test/accuracy"]
    curve = [r["fedspa/local_test/accuracy"] for r in result.rows
             if "fedspa/local_test/accuracy" in r]
    assert curve == [zero["local_test/accuracy"]] * 3


def test_inline_run_beats_zero_shot_and_reports_bytes(tmp_path):
    import flowerbed

    result = flowerbed.run(SCENARIO, [*QUICK, "strategy.baselines=[zero_shot, fedavg_linear]"],
                           output_dir=tmp_path)
    res = result.summary["results"]
    fed, zero, linear = res["federated"], res["zero_shot"], res["fedavg_linear"]
    assert fed["local_test/accuracy"] > zero["local_test/accuracy"] + 0.05
    assert fed["local_test/accuracy"] > linear["local_test/accuracy"]
    assert fed["test/accuracy"] > zero["test/accuracy"]
    c, d = 10, 64
    rows = [r for r in result.rows if r.get("phase") == "fedspa" and r.get("round", 0) > 0]
    down = [r["fedspa/comm/bytes_down_per_client"] for r in rows]
    assert down == [2 * c * d * 4, c * d * 4, c * d * 4]  # T, plus P0 in round 1
    assert all(r["fedspa/comm/bytes_up_per_client"] == c * d * 4 for r in rows)
    assert all(r["fedspa/align/t_row_norm_max_dev"] < 1e-5 for r in rows)
    assert linear["comm/bytes_up_per_client_round"] == (c * d + c) * 4


@pytest.mark.slow
@pytest.mark.ray
def test_simulation_engine_matches_inline(tmp_path):
    """Ray workers (prototypes kept on disk between rounds) give the inline run's numbers."""
    import flowerbed

    small = [*QUICK, "rounds=2", "num_clients=4", "strategy.baselines=[local_only]"]
    ray = ["engine.name=simulation", "engine.ray_num_cpus=2",
           "engine.client_resources.num_cpus=1"]
    inline = flowerbed.run(SCENARIO, small, output_dir=tmp_path / "inline").summary["results"]
    sim = flowerbed.run(SCENARIO, [*small, *ray], output_dir=tmp_path / "sim").summary["results"]
    for source in ("federated", "local_only"):
        for key in ("local_test/accuracy", "test/accuracy"):
            assert sim[source][key] == inline[source][key], (source, key)


@pytest.mark.slow
def test_every_training_arm_gets_the_same_last_round_epochs(tmp_path, monkeypatch):
    """QUICK: 3 rounds of 2 local epochs, then 10; the baselines' rounds read 2, 2, 10 too.

    The epochs each arm asks for are recorded at the federation (what the clients
    receive), and compared with the schedule written out here.
    """
    import flowerbed
    from flowerbed.methods.fedspa import learner as keys
    from flowerbed.strategies.federation import Federation

    asked: list[tuple[str, object]] = []
    original = Federation.ask

    def spy(self, message, payload, *args, **kwargs):
        if keys.EPOCHS in payload.config:
            arm = payload.config.get(keys.ARM, message)
            asked.append((arm, payload.config[keys.EPOCHS]))
        return original(self, message, payload, *args, **kwargs)

    monkeypatch.setattr(Federation, "ask", spy)
    flowerbed.run(SCENARIO, [*QUICK, "strategy.server_epochs=1"], output_dir=tmp_path)
    schedule = [2, 2, 10]
    arms = {a for a, _ in asked}
    assert arms == {"fedspa", "local_only", keys.LINEAR_MESSAGE, keys.PROMPT_MESSAGE}
    for arm in arms:
        assert [e for a, e in asked if a == arm] == schedule, arm

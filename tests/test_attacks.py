"""Poisoning attacks (``clients.attack``): the maths, who attacks, the client hook, a run."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import flwr.serverapp.strategy as flower
import numpy as np
import pytest
from conftest import tiny_scenario
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict

import flowerbed
from flowerbed.algorithms import attacks as maths
from flowerbed.clients import attacks as client_attacks
from flowerbed.clients.learner import TaskContext, client_seed
from flowerbed.core.attacks import malicious_clients
from flowerbed.core.messages import Payload
from flowerbed.core.scenario import ScenarioError, validate_scenario
from flowerbed.data.base import ClientData

# --- the transforms, by hand ------------------------------------------------------


def test_label_flip_maps_y_to_c_minus_one_minus_y():
    y = np.array([0, 1, 4, 9, 9], dtype=np.int64)
    got = maths.flip_labels(y, num_classes=10)
    assert got.tolist() == [9, 8, 5, 0, 0] and got.dtype == np.int64
    with pytest.raises(ValueError, match="outside"):
        maths.flip_labels(np.array([3]), num_classes=3)


def test_sign_flip_reverses_and_scales_the_update():
    """w = (1, -2), w_local = (2, -1): delta = (1, 1); scale 3 sends w - 3 delta = (-2, -5)."""
    g = {"w": np.array([1.0, -2.0], dtype=np.float32), "n": np.array([7])}
    local = {"w": np.array([2.0, -1.0], dtype=np.float32), "n": np.array([8])}
    sent = maths.sign_flip(g, local, scale=3.0)
    assert sent["w"].tolist() == [-2.0, -5.0] and sent["w"].dtype == np.float32
    assert sent["n"].tolist() == [8]  # an integer counter keeps the client's own value
    assert maths.sign_flip(g, local, scale=1.0)["w"].tolist() == [0.0, -3.0]


def test_gaussian_update_is_the_global_weights_plus_noise_of_the_given_std():
    g = {"w": np.full(200_000, 0.5)}
    sent = maths.gaussian_update(g, {"w": np.zeros(200_000)}, std=2.0,
                                 rng=np.random.default_rng(0))  # fmt: skip
    noise = sent["w"] - 0.5
    # Mean and std of 200 000 N(0, 4) draws: within 5 standard errors of 0 and 2.
    assert abs(noise.mean()) < 5 * 2.0 / math.sqrt(200_000)
    assert abs(noise.std() - 2.0) < 5 * 2.0 / math.sqrt(2 * 200_000)


def test_alie_z_max_is_the_papers_closed_form():
    """n = 10, m = 2: s = floor(10/2 + 1) - 2 = 4, z = Phi^-1(6/10) = 0.2533471031...

    n = 50, m = 12: s = 26 - 12 = 14, z = Phi^-1(36/50) = 0.5828415072...
    """
    assert maths.alie_z(10, 2) == pytest.approx(0.2533471031357997, abs=1e-12)
    assert maths.alie_z(50, 12) == pytest.approx(0.5828415072712162, abs=1e-12)
    with pytest.raises(ValueError, match="majority"):
        maths.alie_z(10, 6)


def test_alie_sends_mean_minus_z_std_of_the_honest_updates():
    """w = (1, 1); honest locals (2, 3) and (4, 3): deltas (1, 2), (3, 2).

    mean (2, 2), population std (1, 0); z = 1.5: w + mean - 1.5 std = (1.5, 3).
    """
    g = {"w": np.array([1.0, 1.0])}
    honest = [{"w": np.array([2.0, 3.0])}, {"w": np.array([4.0, 3.0])}]
    sent = maths.alie_update(g, honest, z=1.5, own=honest[0])
    assert sent["w"].tolist() == [1.5, 3.0]


# --- who attacks ----------------------------------------------------------------------


def _spec(**attack: Any) -> Any:
    return validate_scenario(tiny_scenario(clients={"attack": attack})).clients.attack


@pytest.mark.parametrize(("fraction", "n", "count"), [(0.2, 10, 2), (0.25, 10, 3),
                                                      (0.0, 10, 0), (1.0, 4, 4)])  # fmt: skip
def test_the_malicious_set_has_the_right_size_and_comes_from_the_root_seed(fraction, n, count):
    spec = _spec(name="sign_flip", fraction=fraction)
    chosen = malicious_clients(spec, n, root_seed=5)
    assert len(chosen) == count and len(set(chosen)) == count
    assert all(0 <= c < n for c in chosen) and list(chosen) == sorted(chosen)
    assert malicious_clients(spec, n, root_seed=5) == chosen
    # The same clients whatever the attack, given the fraction.
    assert malicious_clients(_spec(name="alie", fraction=fraction), n, 5) == chosen


def test_the_malicious_set_changes_with_the_root_seed():
    spec = _spec(name="label_flip", fraction=0.2)
    assert len({malicious_clients(spec, 10, seed) for seed in range(20)}) > 5


# --- the client hook, with a fake learner ------------------------------------------------


def _task(pid: int, attack: dict[str, Any], num_clients: int = 4) -> TaskContext:
    scenario = validate_scenario(tiny_scenario(num_clients=num_clients, clients={"attack": attack}))
    return TaskContext(scenario, pid, 3, client_seed(scenario, pid, "train", 3))


def _data(pid: int) -> ClientData:
    meta: Any = SimpleNamespace(task="classification", num_classes=10, name="toy")
    x, y = np.zeros((3, 1)), np.array([0, 1, 2])
    return ClientData(pid, x_train=x, y_train=y, x_test=x, y_test=y, meta=meta)


def _fake_train(data: Any, payload: Payload, ctx: TaskContext) -> Payload:
    """Client ``pid`` moves the weights by (pid + 1, 2 pid) and reports its labels' sum."""
    pid = data.partition_id
    assert ctx.partition_id == pid and ctx.seed == client_seed(ctx.scenario, pid, "train", 3)
    w = payload.arrays["w"] + np.array([pid + 1.0, 2.0 * pid])
    return Payload(arrays={"w": w}, metrics={"label_sum": float(data.y_train.sum())},
                   num_examples=3)  # fmt: skip


GLOBAL = Payload(arrays={"w": np.array([10.0, 10.0])})


def test_honest_and_malicious_replies_under_sign_flip():
    attack = {"name": "sign_flip", "fraction": 0.5, "scale": 2.0}
    bad = malicious_clients(_spec(**attack), 4, validate_scenario(tiny_scenario()).seed)
    for pid in range(4):
        reply = client_attacks.answer(_fake_train, "train", _data(pid), GLOBAL,
                                      _task(pid, attack), _data)  # fmt: skip
        honest = [10.0 + pid + 1, 10.0 + 2 * pid]
        # Malicious: 10 - 2 * delta.
        expected = [10.0 - 2 * (pid + 1), 10.0 - 4 * pid] if pid in bad else honest
        assert reply.arrays["w"].tolist() == expected, pid
        assert reply.metrics["attack/malicious"] == float(pid in bad)
        assert reply.num_examples == 3


def test_label_flip_trains_on_flipped_labels_only_on_malicious_clients():
    attack = {"name": "label_flip", "fraction": 0.5}
    bad = malicious_clients(_spec(**attack), 4, validate_scenario(tiny_scenario()).seed)
    for pid in range(4):
        reply = client_attacks.answer(_fake_train, "train", _data(pid), GLOBAL,
                                      _task(pid, attack), _data)  # fmt: skip
        # Labels (0, 1, 2) sum to 3; flipped to (9, 8, 7) they sum to 24.
        assert reply.metrics["label_sum"] == (24.0 if pid in bad else 3.0)


def test_alie_uses_the_colluders_honest_updates():
    """4 clients, 2 malicious (a, b): deltas (a+1, 2a) and (b+1, 2b).

    mean ((a+b)/2 + 1, a+b), population std (|a-b|/2, |a-b|); z = 0.5.
    """
    attack = {"name": "alie", "fraction": 0.5, "z": 0.5}
    a, b = malicious_clients(_spec(**attack), 4, validate_scenario(tiny_scenario()).seed)
    d = abs(a - b)
    expected = [10 + (a + b) / 2 + 1 - 0.5 * d / 2, 10 + (a + b) - 0.5 * d]
    for pid in (a, b):
        reply = client_attacks.answer(_fake_train, "train", _data(pid), GLOBAL,
                                      _task(pid, attack), _data)  # fmt: skip
        assert reply.arrays["w"].tolist() == pytest.approx(expected, abs=1e-12)


def test_attacks_leave_evaluation_queries_and_arrayless_training_alone():
    attack = {"name": "sign_flip", "fraction": 1.0}
    calls = []

    def handler(data: Any, payload: Payload, ctx: TaskContext) -> Payload:
        calls.append(data)
        return Payload(arrays={"w": np.array([1.0, 2.0])}, metrics={"m": 1.0})

    for message_type, payload in (("evaluate", GLOBAL), ("query.x", GLOBAL),
                                  ("train.local", GLOBAL), ("train", Payload())):  # fmt: skip
        reply = client_attacks.answer(handler, message_type, _data(0), payload,
                                      _task(0, attack), _data)  # fmt: skip
        assert reply.arrays["w"].tolist() == [1.0, 2.0] and reply.metrics == {"m": 1.0}


# --- the schema -----------------------------------------------------------------------------


@pytest.mark.parametrize(("attack", "line"), [
    ({"name": "sign_flip", "fraction": 0.2, "scal": 2},
     "clients.attack.scal: unknown field of attack 'sign_flip' (did you mean 'scale'?); "
     "allowed: fraction, scale"),
    ({"name": "sign_flp", "fraction": 0.2},
     "clients.attack.name: unknown attack 'sign_flp' (did you mean 'sign_flip'?); "
     "known: none, label_flip, sign_flip, gaussian, alie"),
    ({"name": "gaussian"}, "clients.attack.fraction: required field is missing"),
    ({"name": "alie", "fraction": 1.5},
     "clients.attack.fraction: input should be less than or equal to 1 (got 1.5)"),
    ({"name": "sign_flip", "fraction": 0.2, "scale": 0},
     "clients.attack.scale: input should be greater than 0 (got 0)"),
])  # fmt: skip
def test_the_schema_refuses_bad_attack_blocks_with_one_line(attack, line):
    with pytest.raises(ScenarioError) as err:
        validate_scenario(tiny_scenario(clients={"attack": attack}))
    assert err.value.problems == [line]


def test_no_attack_is_the_default_and_leaves_the_digest_alone():
    plain = validate_scenario(tiny_scenario())
    spelt = validate_scenario(tiny_scenario(clients={"attack": {"name": "none"}}))
    assert plain.clients.attack == spelt.clients.attack and plain.digest() == spelt.digest()
    attacked = validate_scenario(tiny_scenario(clients={"attack": {"name": "alie",
                                                                   "fraction": 0.5}}))  # fmt: skip
    assert attacked.digest() != plain.digest()


# --- robust aggregation, through Flower's own strategies ------------------------------


def _aggregate(strategy: Any, arrays: list[np.ndarray], monkeypatch: Any) -> np.ndarray:
    from flwr.supercore.task_identity import TaskIdentity

    for attr in ("_run_id", "_task_id", "_node_id"):  # what a ServerApp's run would set
        monkeypatch.setattr(TaskIdentity, attr, 1, raising=False)
    nodes = list(range(1, len(arrays) + 1))
    grid = SimpleNamespace(get_node_ids=lambda: nodes)
    x0 = ArrayRecord({"w": Array(np.zeros(2))})
    sent = list(strategy.configure_train(1, x0, ConfigRecord(), grid))
    by_node = {m.metadata.dst_node_id: m for m in sent}
    replies = [
        Message(RecordDict({"arrays": ArrayRecord({"w": Array(w)}),
                            "metrics": MetricRecord({"num-examples": 10})}),
                reply_to=by_node[node])
        for node, w in zip(nodes, arrays, strict=True)
    ]  # fmt: skip
    record, _ = strategy.aggregate_train(1, replies)
    return np.asarray(Payload.from_record_arrays(record)["w"])


def test_sign_flipping_moves_fedavg_but_not_fedmedian(monkeypatch):
    """10 clients from w = (0, 0): 8 honest updates (1 + k/100, -1 - k/100), k = 0..7.

    Clients 8 and 9 compute (1.08, -1.08), (1.09, -1.09) and sign-flip them
    with scale 10. FedAvg: ((8 + 0.28) - 10 (2.17)) / 10 = -1.342 on the first
    coordinate. Sorted, the first coordinates are -10.9, -10.8, 1.00, ..., 1.07:
    the median of ten is the mean of the 5th and 6th, (1.02 + 1.03) / 2 = 1.025,
    0.01 from the honest mean 1.035 (two ranks' worth), whatever the scale.
    """
    honest = [np.array([1 + k / 100, -1 - k / 100]) for k in range(8)]
    g = {"w": np.zeros(2)}
    flipped = [maths.sign_flip(g, {"w": np.array([1 + k / 100, -1 - k / 100])}, 10.0)["w"]
               for k in (8, 9)]  # fmt: skip
    replies = honest + flipped
    avg = _aggregate(flower.FedAvg(), replies, monkeypatch)
    median = _aggregate(flower.FedMedian(), replies, monkeypatch)
    assert avg.tolist() == pytest.approx([-1.342, 1.342], abs=1e-12)
    assert median.tolist() == pytest.approx([1.025, -1.025], abs=1e-12)
    benign = np.mean(honest, axis=0)
    assert np.abs(median - benign).max() < 0.02 and np.abs(avg - benign).max() > 2


# --- end to end ---------------------------------------------------------------------------


def _comparable(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Metric rows without wall-clock fields and without the attack's own record."""
    drop = ("time", "wall", "elapsed", "duration", "_s", "attack/")
    return [{k: v for k, v in r.items() if not any(d in k for d in drop)} for r in rows]


def test_fraction_zero_equals_the_clean_run_exactly():
    clean = flowerbed.run(tiny_scenario(baselines=[]), save=False)
    attack = {"name": "sign_flip", "fraction": 0.0, "scale": 5.0}
    zero = flowerbed.run(tiny_scenario(baselines=[], clients={"attack": attack}), save=False)
    assert zero.summary["results"] == clean.summary["results"]
    assert _comparable(zero.rows) == _comparable(clean.rows)


def test_an_inline_run_under_attack_records_the_malicious_clients(tmp_path: Path):
    attack = {"name": "sign_flip", "fraction": 0.5, "scale": 4.0}
    scenario = tiny_scenario(baselines=[], output_dir=str(tmp_path), clients={"attack": attack})
    attacked = flowerbed.run(scenario)
    clean = flowerbed.run(tiny_scenario(baselines=[]), save=False)
    bad = malicious_clients(_spec(**attack), 4, validate_scenario(scenario).seed)
    lines = [json.loads(x) for x in
             next(tmp_path.rglob("client_metrics.jsonl")).read_text().splitlines()]  # fmt: skip
    train = [x for x in lines if x["phase"].startswith("train")]
    assert {x["round"] for x in train} == {1, 2}
    assert {x["client"] for x in train if x["metrics"]["attack/malicious"] == 1.0} == set(bad)
    clients = json.loads(next(tmp_path.rglob("clients.json")).read_text())
    assert {c["partition_id"] for c in clients if c["malicious"]} == set(bad)
    # Half the clients pushing 4 times their update backwards: FedAvg loses.
    acc = attacked.final("federated")["test/accuracy"]
    assert acc < clean.final("federated")["test/accuracy"] - 0.1


@pytest.mark.slow
@pytest.mark.ray
def test_attacks_give_the_same_numbers_inline_and_in_simulation(tmp_path: Path):
    from flowerbed.platform import sweep as sw

    attacks = [{"name": "label_flip", "fraction": 0.34}, {"name": "gaussian", "fraction": 0.34},
               {"name": "alie", "fraction": 0.67}]  # fmt: skip
    engine = {"name": "simulation", "ray_num_cpus": 1, "client_resources": {"num_cpus": 1}}
    base = tiny_scenario(baselines=[], num_clients=3, rounds=2, engine=engine)
    plan = sw.expand({**base, "sweep": {"name": "attacks", "clients.attack": attacks}})
    swept = sw.run_sweep(plan, tmp_path)
    assert swept.simulation_starts == 1 and swept.count("failed") == 0
    for point, attack in zip(swept.points, attacks, strict=True):
        inline = flowerbed.run(
            tiny_scenario(baselines=[], num_clients=3, rounds=2, clients={"attack": attack}),
            save=False,
        )
        assert point.summary is not None
        assert point.summary["results"] == inline.summary["results"], attack["name"]


def test_an_attack_name_of_the_wrong_type_is_one_line():
    """Found by tests/test_input_fuzz.py: a list as the name raised TypeError (unhashable)."""
    from flowerbed.core.scenario import ScenarioError

    data = tiny_scenario(clients={"attack": {"name": [1, 2], "fraction": 0.2}})
    with pytest.raises(ScenarioError) as err:
        validate_scenario(data)
    assert err.value.problems == [
        "clients.attack.name: unknown attack [1, 2]; known: none, label_flip, sign_flip, gaussian, "
        "alie"
    ]

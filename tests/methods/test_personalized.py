"""FedPer, FedRep, FedBN, Ditto and fine-tuning: private parts stay private, maths by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from conftest import tiny_scenario

import flowerbed
from flowerbed.clients.learner import TaskContext
from flowerbed.core import registry
from flowerbed.core.messages import Payload
from flowerbed.core.scenario import Scenario, validate_scenario
from flowerbed.data.federated import federated_data
from flowerbed.methods.personalized import algorithm as pz
from flowerbed.methods.personalized.learner import STATE, PersonalConfig, PersonalSGDLearner
from flowerbed.methods.personalized.strategy import PersonalizedStrategy

LEARNER = {"name": "personal_sgd", "lr": 0.1, "batch_size": 32, "local_epochs": 1}
BN_MODEL = {"name": "mlp_bn", "hidden": [16]}
METHODS: dict[str, dict[str, Any]] = {
    "fedper": {},
    "fedrep": {"head_epochs": 2},
    "fedbn": {},
    "ditto": {"lam": 0.5},
    "finetune": {"epochs": 2},
}


def fast(**changes: Any) -> dict[str, Any]:
    """The tiny digits scenario on ``personal_sgd`` without baselines."""
    return tiny_scenario(**{"baselines": [], "learner": LEARNER, **changes})


def method_scenario(name: str, **changes: Any) -> dict[str, Any]:
    model = {"model": BN_MODEL} if name == "fedbn" else {}
    return fast(strategy={"name": name, **METHODS[name]}, **{**model, **changes})


def comparable(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    drop = ("time", "wall", "elapsed", "duration", "_s")
    return [{k: v for k, v in r.items() if not any(d in k for d in drop)} for r in rows]


class Client:
    """One client of a scenario, driven message by message like the ClientApp does."""

    def __init__(self, scenario: Scenario, pid: int, root: Path) -> None:
        self.learner: PersonalSGDLearner = registry.build(
            "learner", scenario.component("learner"), scenario=scenario
        )
        self.data = federated_data(scenario).client(pid)
        self.scenario, self.pid, self.root = scenario, pid, root

    def ctx(self, server_round: int) -> TaskContext:
        return TaskContext(self.scenario, self.pid, server_round, 100 + server_round, self.root)

    def train(self, arrays: dict[str, np.ndarray], cfg: PersonalConfig, r: int) -> Payload:
        return self.learner.train(self.data, Payload(arrays, cfg.to_config()), self.ctx(r))

    def state(self, key: str) -> np.ndarray:
        array = self.ctx(0).client_state(STATE).load_array(key)
        assert array is not None, key
        return array


def build_model(name: str, **params: Any) -> torch.nn.Module:
    spec = registry.get("model", name).params(name=name, **params)  # type: ignore[call-arg]
    model: torch.nn.Module = registry.build("model", spec, in_features=4, out_features=2)
    return model


def config(name: str, **params: Any) -> PersonalConfig:
    block = registry.get("strategy", name).params(name=name, **params)  # type: ignore[call-arg]
    return PersonalizedStrategy(block, scenario=None).config()  # type: ignore[arg-type]


def setup(
    tmp_path: Path, name: str, n: int = 2, **changes: Any
) -> tuple[list[Client], PersonalConfig, dict[str, np.ndarray], frozenset[str]]:
    scenario = validate_scenario(method_scenario(name, num_clients=n, **changes))
    clients = [Client(scenario, pid, tmp_path) for pid in range(n)]
    cfg = config(name, **METHODS[name])
    meta = clients[0].data.meta
    init = clients[0].learner.init_arrays(meta, 0)
    return clients, cfg, init, clients[0].learner.private_keys(cfg, meta)


# --- the maths ----------------------------------------------------------------------


def test_head_is_the_last_modules_and_merge_puts_shared_over_private_over_template():
    names = ["0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias"]
    assert pz.head_keys(names, 1) == {"4.weight", "4.bias"}
    assert pz.head_keys(names, 2) == {"2.weight", "2.bias", "4.weight", "4.bias"}
    with pytest.raises(ValueError, match="a body must remain"):
        pz.head_keys(names, 3)
    template = {k: np.full(1, i) for i, k in enumerate(names)}
    shared, private = pz.split(template, pz.head_keys(names, 1))
    assert list(shared) == names[:4] and list(private) == names[4:]
    merged = pz.merge(template, {"0.weight": np.array([9])}, {"4.bias": np.array([7])})
    assert [int(v[0]) for v in merged.values()] == [9, 1, 2, 3, 4, 7]
    with pytest.raises(ValueError, match="overlap"):
        pz.merge(template, {"4.bias": np.zeros(1)}, {"4.bias": np.zeros(1)})


def test_batchnorm_keys_are_every_array_of_the_batchnorm_layers_and_nothing_else():
    model = build_model("mlp_bn", hidden=[5, 3])
    stats = ("weight", "bias", "running_mean", "running_var", "num_batches_tracked")
    assert pz.batchnorm_keys(model) == {f"bn{i}.{s}" for i in (0, 1) for s in stats}
    plain = build_model("mlp", hidden=[5])
    assert pz.batchnorm_keys(plain) == frozenset()
    with pytest.raises(ValueError, match="BatchNorm"):
        pz.private_keys("fedbn", list(plain.state_dict()), head_layers=1, bn_keys=frozenset())


def test_ditto_objective_and_gradient_match_a_hand_computed_example():
    """F(v) = ‖v‖², v = (1, 2), w = (0, 1), λ = 0.5.

    h = F + λ/2‖v - w‖² = 5 + 0.25·(1 + 1) = 5.5; ∇h = 2v + λ(v - w) = (2.5, 4.5).
    """
    v = torch.tensor([1.0, 2.0], requires_grad=True)
    w = torch.tensor([0.0, 1.0])
    h = pz.ditto_objective((v**2).sum(), [v], [w], 0.5)
    h.backward()
    assert float(h.detach()) == pytest.approx(5.5)
    assert v.grad is not None and v.grad.tolist() == pytest.approx([2.5, 4.5])
    grad = pz.ditto_gradient(2 * np.array([1.0, 2.0]), np.array([1.0, 2.0]), w.numpy(), 0.5)
    assert grad.tolist() == pytest.approx([2.5, 4.5])


def test_ditto_minimiser_is_the_ridge_closed_form_and_tends_to_w():
    """F(v) = ½‖Av - b‖²: argmin h = (AᵀA + λI)⁻¹(Aᵀb + λw), → w as λ → ∞, → LS at λ = 0."""
    rng = np.random.default_rng(0)
    a, b, w = rng.normal(size=(6, 3)), rng.normal(size=6), rng.normal(size=3)
    for lam in (0.0, 0.7, 1e6):
        v, step = np.zeros(3), 1.0 / (np.linalg.norm(a, 2) ** 2 + lam)
        for _ in range(5000):
            v = v - step * pz.ditto_gradient(a.T @ (a @ v - b), v, w, lam)
        closed = np.linalg.solve(a.T @ a + lam * np.eye(3), a.T @ b + lam * w)
        assert v == pytest.approx(closed, abs=1e-6), lam
    assert closed == pytest.approx(w, abs=1e-5)  # λ = 1e6: the personal model is w
    least_squares = np.linalg.lstsq(a, b, rcond=None)[0]
    v0 = np.linalg.solve(a.T @ a, a.T @ b)
    assert v0 == pytest.approx(least_squares)  # λ = 0: pure local training's optimum


# --- the client steps ---------------------------------------------------------------


def test_fedbn_keeps_batchnorm_private_and_its_statistics_follow_the_local_data(tmp_path):
    """One full batch per epoch and a negligible lr: the weights stay the initial W₀, b₀.

    BatchNorm's running mean after e epochs from 0 with momentum m = 0.1 is
    (1 - 0.9ᵉ)·mean(W₀x + b₀) over the client's own rows; three epochs per
    round make it (1 - 0.9³) after round 1 and (1 - 0.9⁶) after round 2, per
    client, never the clients' average.
    """
    learner = {**LEARNER, "lr": 1e-12, "batch_size": 10_000, "local_epochs": 3}
    clients, cfg, init, private = setup(tmp_path, "fedbn", learner=learner)
    bn = {k for k in init if k.startswith("bn0.")}
    assert private == bn
    shared = {k: v for k, v in init.items() if k not in private}
    # A planted personal BatchNorm scale must survive the round (it is never averaged).
    clients[0].ctx(0).client_state(STATE).save_array("bn0.weight", np.full(16, 7.0, np.float32))
    replies = [c.train(shared, cfg, 1) for c in clients]
    for reply in replies:
        assert set(reply.arrays) == set(shared)  # no BatchNorm array reaches the server
    w0, b0 = init["fc0.weight"].astype(np.float64), init["fc0.bias"].astype(np.float64)
    local = [c.data.x_train.astype(np.float64).mean(axis=0) @ w0.T + b0 for c in clients]
    for c, mean in zip(clients, local, strict=True):
        assert c.state("bn0.running_mean") == pytest.approx((1 - 0.9**3) * mean, abs=1e-5)
    assert clients[0].state("bn0.weight") == pytest.approx(np.full(16, 7.0))
    assert clients[1].state("bn0.weight") == pytest.approx(np.ones(16))
    averaged = {k: (replies[0].arrays[k] + replies[1].arrays[k]) / 2 for k in shared}
    for c in clients:
        c.train(averaged, cfg, 2)
    for c, mean in zip(clients, local, strict=True):
        assert c.state("bn0.running_mean") == pytest.approx((1 - 0.9**6) * mean, abs=1e-5)
    pooled = (1 - 0.9**6) * (local[0] + local[1]) / 2
    assert np.abs(clients[0].state("bn0.running_mean") - pooled).max() > 1e-2


@pytest.mark.parametrize("name", ["fedper", "fedrep"])
def test_fedper_and_fedrep_never_send_the_head(tmp_path, name):
    clients, cfg, init, private = setup(tmp_path, name)
    assert private == {"2.weight", "2.bias"}  # mlp [16]: Linear 0, ReLU 1, Linear 2
    shared = {k: v for k, v in init.items() if k not in private}
    reply = clients[0].train(shared, cfg, 1)
    assert set(reply.arrays) == set(shared)
    trained_head = clients[0].state("2.weight")
    assert not np.array_equal(trained_head, init["2.weight"])
    # The next round starts from the client's own head, not from anything received.
    evaluated = clients[0].learner.personal_model(
        clients[0].data, Payload(reply.arrays, cfg.to_config()), clients[0].ctx(1)
    )
    assert np.array_equal(evaluated["2.weight"], trained_head)
    assert np.array_equal(evaluated["0.weight"], reply.arrays["0.weight"])


def test_fedrep_trains_the_head_with_the_body_frozen_then_the_body_with_the_head_frozen(
    tmp_path, monkeypatch
):
    """The optimiser leaves the body's parameters alone during the head epochs.

    BatchNorm's buffers move in train mode whatever the optimiser does; they
    belong to the frozen body, so the body phase must start from the received
    ones, not from those the head epochs left.
    """
    clients, cfg, init, head = setup(tmp_path, "fedrep", model=BN_MODEL)
    assert head == {"head.weight", "head.bias"}
    learner = clients[0].learner
    calls: list[tuple[dict[str, np.ndarray], dict[str, np.ndarray], int]] = []
    fit = learner.fit

    def spy(arrays: Any, *args: Any, **kwargs: Any) -> Any:
        out = fit(arrays, *args, **kwargs)
        calls.append((dict(arrays), out[0], kwargs["epochs"]))
        return out

    monkeypatch.setattr(learner, "fit", spy)
    shared = {k: v for k, v in init.items() if k not in head}
    reply = clients[0].train(shared, cfg, 1)
    (start, after_head, head_epochs), (body_in, body_out, body_epochs) = calls
    assert (head_epochs, body_epochs) == (2, 1)
    body = [k for k in init if k not in head]
    buffers = {k for k in body if "running" in k or "num_batches" in k}
    assert buffers and all(
        np.array_equal(after_head[k], start[k]) for k in body if k not in buffers
    )
    assert not all(np.array_equal(after_head[k], start[k]) for k in head)
    # The body phase starts from the tuned head and the received body, and keeps the head.
    assert all(np.array_equal(body_in[k], after_head[k]) for k in head)
    assert all(np.array_equal(body_in[k], start[k]) for k in body)
    assert all(np.array_equal(body_out[k], body_in[k]) for k in head)
    assert not np.array_equal(body_out["fc0.weight"], start["fc0.weight"])
    assert all(np.array_equal(reply.arrays[k], body_out[k]) for k in body)


def test_ditto_with_lambda_zero_is_pure_local_training_and_larger_lambda_stays_nearer_w(
    tmp_path,
):
    """λ = 0: v is what plain SGD from w on the local data gives; ‖v - w‖ falls with λ."""
    distances = []
    for lam in (0.0, 1.0, 10.0):
        clients, _, init, _ = setup(tmp_path / str(lam), "ditto")
        cfg = config("ditto", lam=lam)
        client = clients[0]
        reply = client.train(init, cfg, 1)
        v = {k: client.state("personal." + k) for k in init}
        # Ditto's global update is FedAvg's: plain SGD from w with the message's seed.
        plain_w, _ = client.learner.fit(
            init, client.data.x_train, client.data.y_train, client.data.meta, client.ctx(1).seed
        )
        assert all(np.array_equal(reply.arrays[k], plain_w[k]) for k in init)
        distances.append(float(np.sqrt(sum(((v[k] - init[k]) ** 2).sum() for k in init))))
        if lam == 0.0:
            from flowerbed.core.seeds import derive_seed

            local, _ = client.learner.fit(
                init,
                client.data.x_train,
                client.data.y_train,
                client.data.meta,
                derive_seed(client.ctx(1).seed, "ditto"),
            )
            assert all(np.allclose(v[k], local[k], atol=1e-7) for k in init)
    assert distances[0] > distances[1] > distances[2] > 0


# --- end to end ---------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(METHODS))
def test_every_method_runs_inline_with_personalized_and_global_accuracy(name):
    result = flowerbed.run(method_scenario(name), save=False)
    final = result.final("federated")
    assert 0.0 <= final["local_test/accuracy"] <= 1.0
    assert final["local_test/accuracy_client_min"] <= final["local_test/accuracy"]
    seen = [r["round"] for r in result.rows if "evaluate/local_test/accuracy" in r]
    assert seen == [1, 2]
    # The summary's personalized accuracy is the last round's example-weighted mean.
    last = [r for r in result.rows if "evaluate/local_test/accuracy" in r][-1]
    assert final["local_test/accuracy"] == pytest.approx(last["evaluate/local_test/accuracy"])
    has_global = name in ("ditto", "finetune")
    assert ("test/accuracy" in final) == has_global


def test_finetune_with_zero_epochs_is_fedavg_and_dittos_global_model_is_fedavgs():
    fedavg = flowerbed.run(fast(learner={**LEARNER, "name": "sgd"}), save=False)
    zero = flowerbed.run(fast(strategy={"name": "finetune", "epochs": 0}), save=False)
    reference = fedavg.final("federated")
    got = zero.final("federated")
    assert {k: got[k] for k in reference} == reference
    last = [r for r in fedavg.rows if "evaluate/local_test/accuracy" in r][-1]
    assert got["local_test/accuracy"] == pytest.approx(last["evaluate/local_test/accuracy"])
    ditto = flowerbed.run(fast(strategy={"name": "ditto", "lam": 2.0}), save=False)
    assert {k: ditto.final("federated")[k] for k in reference} == reference
    tuned = flowerbed.run(fast(strategy={"name": "finetune", "epochs": 3}), save=False)
    assert tuned.final("federated")["local_test/accuracy"] != got["local_test/accuracy"]


def test_a_personalized_strategy_refuses_another_learner():
    with pytest.raises(Exception, match="needs learner personal_sgd"):
        flowerbed.run(fast(strategy={"name": "fedper"}, learner={"name": "sgd"}), save=False)


@pytest.mark.slow
@pytest.mark.ray
def test_fedrep_gives_the_same_numbers_inline_and_in_simulation():
    engine = {"name": "simulation", "ray_num_cpus": 1, "client_resources": {"num_cpus": 1}}
    small = {"num_clients": 3, "model": BN_MODEL}
    inline = flowerbed.run(method_scenario("fedrep", **small), save=False)
    sim = flowerbed.run(method_scenario("fedrep", engine=engine, **small), save=False)
    assert sim.summary["results"] == inline.summary["results"]
    assert comparable(sim.rows) == comparable(inline.rows)

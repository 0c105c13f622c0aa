"""FedDyn: the local objective by hand, the state updates, the fixed point, end to end."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import tiny_scenario
from test_scaffold import learner_and_data, quadratic_problem

import flowerbed
from flowerbed.clients.learner import TaskContext
from flowerbed.core.messages import Payload
from flowerbed.methods.drift import algorithm_feddyn as feddyn
from flowerbed.methods.drift.learner import FEDDYN_ALPHA


def dyn(**changes):
    """The tiny digits scenario under FedDyn (learner sgd_drift), no baselines."""
    learner = {"name": "sgd_drift", "lr": 0.1, "batch_size": 32, "local_epochs": 1}
    base = {"baselines": [], "learner": learner, "strategy": {"name": "feddyn"}}
    return tiny_scenario(**{**base, **changes})


def test_regularizer_matches_a_hand_computed_example_and_its_gradient():
    """θ = (1, 2), θ^{t-1} = (0, 1), g = (0.5, -1), alpha = 0.1.

    -⟨g, θ⟩ = -(0.5 - 2) = 1.5 and alpha/2‖θ - θ^{t-1}‖² = 0.05·2 = 0.1, so 1.6;
    the gradient is -g + alpha(θ - θ^{t-1}) = (-0.4, 1.1).
    """
    theta = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
    anchor = {"w": torch.tensor([0.0, 1.0], dtype=torch.float64)}
    g = {"w": torch.tensor([0.5, -1.0], dtype=torch.float64)}
    value = feddyn.regularizer({"w": theta}, anchor, g, alpha=0.1)
    assert float(value.detach()) == pytest.approx(1.6)
    value.backward()
    np.testing.assert_allclose(theta.grad.numpy(), [-0.4, 1.1])


def test_state_updates_by_hand():
    """g' = g - alpha(θ_k - θ); h' = h - alpha/m Σ(θ_k - θ); θ' = mean θ_k - h'/alpha.

    g = (1, 0), θ_k = (3, 1), θ = (1, 1), alpha = 0.5: g' = (1 - 1, 0 - 0) = (0, 0).
    h = 0.2, θ = 1, θ_k ∈ {2, 4}, m = 4, alpha = 0.5: h' = 0.2 - 0.125·4 = -0.3,
    θ' = 3 + 0.6 = 3.6; the buffer ``n`` (no h entry) is the mean 5.
    """
    g = feddyn.client_state_update(
        {"w": np.array([1.0, 0.0])}, {"w": np.array([3.0, 1.0])}, {"w": np.array([1.0, 1.0])}, 0.5
    )
    np.testing.assert_allclose(g["w"], [0.0, 0.0])
    theta, h = feddyn.server_update(
        {"w": np.array([0.2])},
        {"w": np.array([1.0]), "n": np.array([0.0])},
        [
            {"w": np.array([2.0]), "n": np.array([4.0])},
            {"w": np.array([4.0]), "n": np.array([6.0])},
        ],
        alpha=0.5,
        num_clients=4,
    )
    assert float(h["w"][0]) == pytest.approx(-0.3) and set(h) == {"w"}
    assert float(theta["w"][0]) == pytest.approx(3.6) and float(theta["n"][0]) == 5.0


def test_feddyn_with_exact_local_solves_reaches_the_global_optimum_fedavg_does_not():
    """On f_i = ½(θ - b_i)ᵀA_i(θ - b_i) each local problem has a closed form.

    FedDyn's: (A_i + alpha·I)θ = A_i b_i + g_i + alpha·θ^{t-1}. FedAvg solving each local
    problem exactly lands on the mean of the b_i; FedDyn's fixed point is x*.
    """
    a, b, optimum = quadratic_problem(seed=3)
    alpha, n, d = 0.5, len(a), len(optimum)
    theta, h = {"w": np.zeros(d)}, {"w": np.zeros(d)}
    grads = [{"w": np.zeros(d)} for _ in range(n)]
    for _ in range(300):
        local = []
        for i in range(n):
            rhs = a[i] @ b[i] + grads[i]["w"] + alpha * theta["w"]
            th = {"w": np.linalg.solve(a[i] + alpha * np.eye(d), rhs)}
            grads[i] = feddyn.client_state_update(grads[i], th, theta, alpha)
            local.append(th)
        theta, h = feddyn.server_update(h, theta, local, alpha, n)
    assert np.linalg.norm(theta["w"] - optimum) < 1e-8
    assert np.linalg.norm(np.mean(b, axis=0) - optimum) > 0.3


def test_client_keeps_its_gradient_state_and_is_pulled_towards_the_server_model(tmp_path):
    s, learner, data = learner_and_data(dyn())
    server = learner.init_arrays(data.meta, 0)
    ctx = TaskContext(s, 0, 1, seed=5, state_root=tmp_path)
    reply = learner.train_feddyn(data, Payload(server, {FEDDYN_ALPHA: 0.01}), ctx)
    state = ctx.client_state("feddyn")
    for k in server:  # first round: g = 0 - alpha(θ_k - θ)
        np.testing.assert_allclose(
            state.load_array(k), -0.01 * (reply.arrays[k] - server[k]), rtol=1e-5, atol=1e-9
        )
    free = learner.fit(server, data.x_train, data.y_train, data.meta, 5)[0]
    pulled = learner.train_feddyn(data, Payload(server, {FEDDYN_ALPHA: 5.0}), ctx).arrays

    def dist(w):
        return sum(float(np.sum((w[k] - server[k]) ** 2)) for k in server)

    assert dist(pulled) < 0.25 * dist(free)


def test_feddyn_runs_inline_and_learns():
    result = flowerbed.run(dyn(rounds=3), save=False)
    acc = [r["server_eval/test/accuracy"] for r in result.rows if "server_eval/test/accuracy" in r]
    assert len(acc) == 4 and acc[-1] > acc[0] + 0.2
    assert [r["round"] for r in result.rows if "train/train/loss" in r] == [1, 2, 3]

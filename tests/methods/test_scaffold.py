"""SCAFFOLD: the control-variate maths on a quadratic problem, the client step, end to end."""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import tiny_scenario

import flowerbed
from flowerbed.clients.learner import TaskContext
from flowerbed.clients.torch_learner import SGDLearner
from flowerbed.core import registry
from flowerbed.core.messages import Payload
from flowerbed.core.scenario import ScenarioError, validate_scenario
from flowerbed.data.federated import federated_data
from flowerbed.methods.drift import algorithm_scaffold as scaffold
from flowerbed.methods.drift.learner import (
    CONTROL_PREFIX,
    LOCAL_STEPS,
    DriftSGDLearner,
    join_control,
    split_control,
)


def drift(**changes):
    """The tiny digits scenario with learner sgd_drift (plain SGD) and no baselines."""
    learner = {"name": "sgd_drift", "lr": 0.1, "batch_size": 32, "local_epochs": 1}
    base = {"baselines": [], "learner": learner, "strategy": {"name": "scaffold"}}
    return tiny_scenario(**{**base, **changes})


# --- a federated quadratic with heterogeneous optima ---------------------------------------


def quadratic_problem(seed=0, n=4, d=3):
    """f_i(x) = ½(x - b_i)ᵀA_i(x - b_i); the mean's minimiser is (ΣA_i)⁻¹ΣA_i b_i."""
    gen = np.random.default_rng(seed)
    a = [np.diag(gen.uniform(0.5, 5.0, d)) for _ in range(n)]
    b = [gen.normal(0, 3.0, d) for _ in range(n)]
    optimum = np.linalg.solve(sum(a), sum(ai @ bi for ai, bi in zip(a, b, strict=True)))
    return a, b, optimum


def local_sgd(x, a, b, steps, lr, correction=None):
    """``steps`` full-gradient steps on ½(y - b)ᵀA(y - b) (plus a constant correction)."""
    y = x.copy()
    grads = []
    for _ in range(steps):
        g = a @ (y - b)
        grads.append(g)
        y = y - lr * (g if correction is None else g + correction)
    return y, np.mean(grads, axis=0)


def run_scaffold(a, b, rounds, steps, lr, cohorts):
    """SCAFFOLD with the module's updates; returns x and every client's c_i and the server c."""
    n, d = len(a), len(b[0])
    x, c = {"w": np.zeros(d)}, {"w": np.zeros(d)}
    c_i = [{"w": np.zeros(d)} for _ in range(n)]
    for r in range(rounds):
        delta_y, delta_c = [], []
        for i in cohorts(r):
            correction = -c_i[i]["w"] + c["w"]
            y, _ = local_sgd(x["w"], a[i], b[i], steps, lr, correction)
            new = scaffold.client_control_update(c_i[i], c, x, {"w": y}, steps, lr)
            delta_y.append({"w": y - x["w"]})
            delta_c.append({"w": new["w"] - c_i[i]["w"]})
            c_i[i] = new
        x, c = scaffold.server_update(x, c, delta_y, delta_c, n, global_lr=1.0)
    return x["w"], c_i, c["w"]


def test_scaffold_reaches_the_global_optimum_where_fedavg_with_many_local_steps_drifts():
    a, b, optimum = quadratic_problem()
    steps, lr = 50, 0.05
    x_fedavg = np.zeros(3)
    for _ in range(200):
        x_fedavg = np.mean(
            [local_sgd(x_fedavg, ai, bi, steps, lr)[0] for ai, bi in zip(a, b, strict=True)], 0
        )
    x_scaffold, _, _ = run_scaffold(a, b, 200, steps, lr, lambda r: range(4))
    assert np.linalg.norm(x_scaffold - optimum) < 1e-8
    # FedAvg settles at a different fixed point, near the mean of the local optima.
    assert np.linalg.norm(x_fedavg - optimum) > 0.3


def test_partial_participation_keeps_c_the_mean_of_all_client_variates_and_converges():
    """c ← c + |S|/N·mean Δc keeps c = (1/N)Σc_i, and SCAFFOLD still reaches x*."""
    a, b, optimum = quadratic_problem(seed=1)
    gen = np.random.default_rng(0)
    cohorts = [sorted(gen.choice(4, size=2, replace=False)) for _ in range(400)]
    x, c_i, c = run_scaffold(a, b, 400, 20, 0.05, lambda r: cohorts[r])
    np.testing.assert_allclose(c, np.mean([ci["w"] for ci in c_i], axis=0), atol=1e-12)
    assert np.linalg.norm(x - optimum) < 1e-6


def test_option_two_is_the_mean_gradient_along_the_local_trajectory():
    """With plain SGD, (x - y)/(Kη) = mean(g - c_i + c), so c_i⁺ = mean of the raw gradients."""
    a, b, _ = quadratic_problem(seed=2)
    x = np.array([1.0, -2.0, 0.5])
    c_i, c = {"w": np.array([0.3, -0.1, 0.2])}, {"w": np.array([-0.5, 0.4, 0.0])}
    y, mean_grad = local_sgd(x, a[0], b[0], 7, 0.03, correction=c["w"] - c_i["w"])
    new = scaffold.client_control_update(c_i, c, {"w": x}, {"w": y}, 7, 0.03)
    np.testing.assert_allclose(new["w"], mean_grad, rtol=1e-12)


def test_server_update_by_hand():
    """x = 1 + 2·mean(1, 3) = 5; c = 1 + 2/5·mean(-1, 3) = 1.4; dtypes kept."""
    x = {"w": np.array([1.0], np.float32)}
    c = {"w": np.array([1.0], np.float32)}
    dy = [{"w": np.array([1.0])}, {"w": np.array([3.0])}]
    dc = [{"w": np.array([-1.0])}, {"w": np.array([3.0])}]
    new_x, new_c = scaffold.server_update(x, c, dy, dc, num_clients=5, global_lr=2.0)
    assert new_x["w"].dtype == np.float32 and new_c["w"].dtype == np.float32
    assert float(new_x["w"][0]) == 5.0 and float(new_c["w"][0]) == pytest.approx(1.4)


# --- the client step -------------------------------------------------------------------------


def learner_and_data(scenario):
    s = validate_scenario(scenario)
    learner = registry.build("learner", s.component("learner"), scenario=s)
    return s, learner, federated_data(s).client(0)


def test_client_step_corrects_gradients_and_keeps_its_variate_in_client_state(tmp_path):
    s, learner, data = learner_and_data(drift())
    assert isinstance(learner, DriftSGDLearner)
    x = learner.init_arrays(data.meta, 0)
    zeros = scaffold.zeros_like(x)
    ctx = TaskContext(s, 0, 1, seed=11, state_root=tmp_path)
    # Round 1: c = c_i = 0, so the steps are plain SGD's, and Δc_i = (x - y)/(K·lr).
    reply = learner.train_scaffold(data, Payload(arrays=join_control(x, zeros)), ctx)
    y, delta_c = split_control(reply.arrays)
    plain, _ = SGDLearner.fit(learner, x, data.x_train, data.y_train, data.meta, 11)
    for k in x:
        np.testing.assert_array_equal(y[k], plain[k])
    steps = math.ceil(data.num_train / 32)
    assert reply.metrics[LOCAL_STEPS] == steps
    for k in x:
        np.testing.assert_allclose(delta_c[k], (x[k] - y[k]) / (steps * 0.1), rtol=1e-5, atol=1e-6)
    # Round 2: c_i comes back from the state folder; with c = c_i the correction vanishes.
    c_i = {k: ctx.client_state("scaffold").load_array(k) for k in x}
    again = learner.train_scaffold(data, Payload(arrays=join_control(x, c_i)), ctx)
    y2, delta_c2 = split_control(again.arrays)
    for k in x:
        np.testing.assert_array_equal(y2[k], plain[k])
        np.testing.assert_allclose(c_i[k] + delta_c2[k], (x[k] - y2[k]) / (steps * 0.1),
                                   rtol=1e-5, atol=1e-6)  # fmt: skip
    # A non-zero correction moves the weights.
    shifted = {k: v + 0.5 for k, v in c_i.items()}
    moved, _ = split_control(
        learner.train_scaffold(data, Payload(join_control(x, shifted)), ctx).arrays
    )
    assert any(not np.allclose(moved[k], plain[k]) for k in x)


def test_client_steps_follow_g_minus_c_i_plus_c(tmp_path):
    """A correction c - c_i = 100 dwarfs the data gradients: y - x ≈ -K·lr·(c - c_i).

    Within 15 % (the data gradients grow with the weights); a wrong sign gives -1, a
    correction not applied 0, one applied twice 2.
    """
    s, learner, data = learner_and_data(drift())
    x = learner.init_arrays(data.meta, 0)
    c = {k: np.full_like(v, 150.0) for k, v in x.items()}
    ctx = TaskContext(s, 0, 1, seed=3, state_root=tmp_path)
    c_i = {k: np.full_like(v, 50.0) for k, v in x.items()}
    scaffold_state = ctx.client_state("scaffold")
    for k, v in c_i.items():
        scaffold_state.save_array(k, v)
    y, _ = split_control(learner.train_scaffold(data, Payload(join_control(x, c)), ctx).arrays)
    steps = math.ceil(data.num_train / 32)
    for k in x:
        np.testing.assert_allclose((y[k] - x[k]) / (-steps * 0.1 * 100.0), 1.0, atol=0.15)


def test_client_step_refuses_momentum(tmp_path):
    s, learner, data = learner_and_data(drift(learner={"name": "sgd_drift", "momentum": 0.9}))
    x = learner.init_arrays(data.meta, 0)
    with pytest.raises(ValueError, match="plain local SGD"):
        learner.train_scaffold(data, Payload(join_control(x, scaffold.zeros_like(x))),
                               TaskContext(s, 0, 1, 0, tmp_path))  # fmt: skip


def test_scaffold_needs_learner_sgd_drift():
    with pytest.raises(ScenarioError, match=r"train\.scaffold"):
        validate_scenario(tiny_scenario(strategy={"name": "scaffold"}))


# --- end to end -------------------------------------------------------------------------------


def test_scaffold_runs_inline_records_every_round_and_learns():
    result = flowerbed.run(drift(rounds=3), save=False)
    expected = {
        "server_eval/test/accuracy": [0, 1, 2, 3],
        "train/train/loss": [1, 2, 3],
        "evaluate/local_test/accuracy": [1, 2, 3],
    }
    for key, rounds in expected.items():
        seen = [r["round"] for r in result.rows if np.isfinite(r.get(key, np.nan))]
        assert seen == rounds, (key, seen)
    acc = [r["server_eval/test/accuracy"] for r in result.rows if "server_eval/test/accuracy" in r]
    assert acc[-1] > acc[0] + 0.2
    assert CONTROL_PREFIX not in "".join(result.final("federated"))


@pytest.mark.slow
@pytest.mark.ray
def test_scaffold_gives_the_same_numbers_inline_and_in_simulation(tmp_path):
    """Client state (c_i) lives in the run folder, so Ray workers continue where others left."""
    engine = {"name": "simulation", "ray_num_cpus": 1, "client_resources": {"num_cpus": 1}}
    block = {"name": "scaffold", "fraction_train": 0.7}
    inline = flowerbed.run(drift(num_clients=3, strategy=block), output_dir=tmp_path / "i")
    sim = flowerbed.run(
        drift(num_clients=3, strategy=block, engine=engine), output_dir=tmp_path / "s"
    )
    assert sim.summary["results"] == inline.summary["results"]

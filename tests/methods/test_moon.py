"""MOON: the model-contrastive loss by hand, the representation, the client step, end to end."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from conftest import tiny_scenario
from test_scaffold import learner_and_data

import flowerbed
from flowerbed.clients.learner import TaskContext
from flowerbed.clients.torch_learner import SGDLearner
from flowerbed.core.messages import Payload
from flowerbed.methods.drift import algorithm_moon as moon
from flowerbed.methods.drift.learner import MOON_MU, MOON_TEMPERATURE, representation


def moon_scenario(**changes):
    """The tiny digits scenario under MOON (learner sgd_drift), no baselines."""
    learner = {"name": "sgd_drift", "lr": 0.1, "batch_size": 32, "local_epochs": 1}
    base = {"baselines": [], "learner": learner, "strategy": {"name": "moon"}}
    return tiny_scenario(**{**base, **changes})


def test_contrastive_loss_matches_a_hand_computed_example():
    """Two rows, τ = 0.5.

    Row 1: sim(z, z_glob) = 1, sim(z, z_prev) = 0, so -log(e²/(e² + e⁰)) = log(1 + e⁻²).
    Row 2: z = (2, 2), z_glob = (1, 0), z_prev = (-1, -1): sims 1/√2 and -1, logits √2 and
    -2, so log(1 + e^(-2-√2)). The loss is their mean; μ scales it on top of L_sup.
    """
    z = torch.tensor([[1.0, 0.0], [2.0, 2.0]], dtype=torch.float64)
    z_glob = torch.tensor([[3.0, 0.0], [1.0, 0.0]], dtype=torch.float64)
    z_prev = torch.tensor([[0.0, 1.0], [-1.0, -1.0]], dtype=torch.float64)
    expected = 0.5 * (math.log1p(math.exp(-2)) + math.log1p(math.exp(-2 - math.sqrt(2))))
    assert float(moon.contrastive_loss(z, z_glob, z_prev, 0.5)) == pytest.approx(expected)
    total = moon.moon_loss(torch.tensor(0.7, dtype=torch.float64), z, z_glob, z_prev, 5.0, 0.5)
    assert float(total) == pytest.approx(0.7 + 5.0 * expected)


def test_contrastive_loss_is_log_two_when_global_and_previous_agree():
    z, other = torch.randn(4, 3), torch.randn(4, 3)
    assert float(moon.contrastive_loss(z, other, other)) == pytest.approx(math.log(2))


def test_representation_is_the_output_of_the_mlps_last_hidden_block():
    _, learner, data = learner_and_data(moon_scenario())
    arrays = learner.init_arrays(data.meta, 0)
    model = learner._load(data.meta, arrays)
    x = torch.as_tensor(data.x_train[:5], dtype=torch.float32)
    by_hand = torch.relu(
        x @ torch.as_tensor(arrays["0.weight"]).T + torch.as_tensor(arrays["0.bias"])
    )
    torch.testing.assert_close(representation(model, x), by_hand)
    with pytest.raises(ValueError, match=r"nn\.Sequential"):
        representation(torch.nn.Linear(3, 2), x)


def test_client_with_mu_zero_trains_as_sgd_and_keeps_its_previous_model(tmp_path):
    s, learner, data = learner_and_data(moon_scenario())
    glob = learner.init_arrays(data.meta, 0)
    ctx = TaskContext(s, 1, 1, seed=9, state_root=tmp_path)
    plain, _ = SGDLearner.fit(learner, glob, data.x_train, data.y_train, data.meta, 9)
    config = {MOON_MU: 0.0, MOON_TEMPERATURE: 0.5}
    reply = learner.train_moon(data, Payload(glob, config), ctx)
    for k in glob:
        np.testing.assert_array_equal(reply.arrays[k], plain[k])
        np.testing.assert_array_equal(ctx.client_state("moon").load_array(k), plain[k])
    # Next round, with μ > 0, the stored model is z_prev != z_glob: the term changes training.
    config = {MOON_MU: 5.0, MOON_TEMPERATURE: 0.5}
    moved = learner.train_moon(data, Payload(glob, config), ctx).arrays
    assert any(not np.allclose(moved[k], plain[k]) for k in glob)


def test_moon_runs_inline_through_fedavg_and_learns():
    result = flowerbed.run(moon_scenario(rounds=3), save=False)
    acc = [r["server_eval/test/accuracy"] for r in result.rows if "server_eval/test/accuracy" in r]
    assert len(acc) == 4 and acc[-1] > acc[0] + 0.2
    phases = {r["phase"] for r in result.rows if r.get("event") == "replies"}
    assert "train" in phases

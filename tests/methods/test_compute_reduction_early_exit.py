"""Tests of the early-exit rule, the ``early_exit_mlp`` model and the ``sgd_early_exit``
learner (docs/methods/compute_reduction.md, "Early exit in the federation")."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import tiny_sweep_scenario
from torch.nn import functional as F

import flowerbed
from flowerbed.methods.compute_reduction import algorithm_theory as ct
from flowerbed.methods.compute_reduction.model import EarlyExitMLPParams
from flowerbed.methods.compute_reduction.model_nets import EarlyExitMLP, MultiExitLoss

# --- the exit rule ----------------------------------------------------------------


def test_binary_margin_cascade_is_the_conditional_perceptron():
    """Two classes, logits (0, u) for the partial score and (0, v) for the full one:
    margin = |u|, argmax = class 1 iff u > 0, so the cascade is the conditional
    perceptron with sign(u) = +1 <-> class 1; tau = inf admits no early exit."""
    rng = np.random.default_rng(0)
    u, v = rng.standard_normal(2000), rng.standard_normal(2000)
    zeros = np.zeros_like(u)
    for tau in (0.0, 0.7, 2.0, np.inf):
        pred, used = ct.cascade_exit([np.c_[zeros, u], np.c_[zeros, v]], tau, rule="margin")
        ref, exited = ct.conditional_perceptron(u, v, tau)
        np.testing.assert_array_equal(used == 0, exited)
        np.testing.assert_array_equal(pred, (ref > 0).astype(int))
    assert not (used == 0).any()  # the last tau was inf


def test_confidence_cascade_on_hand_made_logits():
    """Softmax of (log 9, 0) is (0.9, 0.1); of (0, 0) is (0.5, 0.5).
    Threshold 0.8: input 0 leaves at head 0 (0.9 > 0.8), input 1 is unsure at
    head 0 and sure at head 1, input 2 is unsure everywhere and takes the final
    head. Threshold 1 (or more) admits no early exit."""
    s = np.log(9.0)
    heads = [
        np.array([[s, 0.0], [0.0, 0.0], [0.0, 0.0]]),
        np.array([[0.0, 0.0], [0.0, s], [0.0, 0.0]]),
        np.array([[0.0, 1.0], [1.0, 0.0], [0.0, 1.0]]),
    ]
    pred, used = ct.cascade_exit(heads, 0.8)
    assert pred.tolist() == [0, 1, 1] and used.tolist() == [0, 1, 2]
    pred, used = ct.cascade_exit(heads, 0.9)  # strict: 0.9 does not exceed 0.9
    assert used.tolist() == [2, 2, 2] and pred.tolist() == [1, 0, 1]
    pred, used = ct.cascade_exit(heads, 1.0)
    assert used.tolist() == [2, 2, 2]
    with pytest.raises(ValueError, match="exit rule"):
        ct.cascade_exit(heads, 0.5, rule="entropy")  # type: ignore[arg-type]


# --- the model --------------------------------------------------------------------


def test_exit_macs_and_outputs():
    """64 inputs, blocks 16-32-8, heads after blocks 1 and 2, 10 classes:
    blocks 64*16 = 1024, 16*32 = 512, 32*8 = 256; heads 160, 320; final 80.
    Exit 1: 1024+160; exit 2: 1024+512+160+320; final: all = 2352; no heads: 1872."""
    model = EarlyExitMLP(64, (16, 32, 8), (1, 2), 10)
    assert model.exit_macs == [1184, 2016, 2352] and model.base_macs == 1872
    x = torch.randn(5, 64)
    final = model(x)
    model.all_exits = True
    stacked = model(x)
    assert stacked.shape == (3, 5, 10)
    torch.testing.assert_close(stacked[-1], final)
    torch.testing.assert_close(stacked[0], model.heads[0](model.blocks[0](x)))


@pytest.mark.parametrize("exits", [(0,), (3,), (2, 1), (1, 1)])
def test_bad_exits_are_rejected(exits):
    """Exits must be increasing block numbers before the last block."""
    with pytest.raises(ValueError, match="exits must be"):
        EarlyExitMLPParams(hidden=(8, 8, 8), exits=exits)


def test_multi_exit_loss_is_the_weighted_sum_of_cross_entropies():
    """0.5 * CE(head 0) + 1 * CE(final), against F.cross_entropy per head."""
    torch.manual_seed(0)
    logits, y = torch.randn(2, 7, 4), torch.randint(0, 4, (7,))
    ref = 0.5 * F.cross_entropy(logits[0], y) + F.cross_entropy(logits[1], y)
    torch.testing.assert_close(MultiExitLoss([0.5, 1.0])(logits, y), ref)


# --- the learner ------------------------------------------------------------------


def _spec(**learner):
    return tiny_sweep_scenario(
        name="ee_tiny",
        model={"name": "early_exit_mlp", "hidden": [16, 32, 16], "exits": [1, 2]},
        learner={"name": "sgd_early_exit", **learner},
        strategy={"name": "fedavg", "fraction_evaluate": 0.0},
    )


def _learner_and_data(**learner):
    from flowerbed.core import registry
    from flowerbed.core.scenario import from_dict

    scenario = from_dict(_spec(**learner))
    lrn = registry.build("learner", scenario.learner, scenario=scenario)
    data = registry.build("dataset", scenario.dataset, seed=0)
    return lrn, data


def test_thresholds_bracket_the_full_model_and_the_first_head():
    """Untrained weights; blocks 64*16 + 16*32 + 32*16 = 2048 MACs, heads 160 and 320,
    final 160. Threshold 1: nobody exits, accuracy = full model, compute = 2688/2208
    (heads evaluated, never used). Threshold 0 (curve point): everybody leaves at
    head 1, accuracy = head-1 accuracy, compute = (1024 + 160)/2208."""
    lrn, data = _learner_and_data(exit_threshold=1.0, curve_thresholds=[0.0])
    arrays = lrn.init_arrays(data.meta, 0)
    m = lrn.score(arrays, data.x_test, data.y_test, data.meta)
    assert m["exit_fraction"] == 0.0 and m["exit_disagreement"] == 0.0
    assert m["accuracy"] == m["accuracy_full"]
    assert m["compute_fraction"] == pytest.approx(2688 / 2208)
    assert m["exit_fraction_at_0"] == 1.0
    assert m["accuracy_at_0"] == m["accuracy_exit1"]
    assert m["compute_fraction_at_0"] == pytest.approx(1184 / 2208)


def test_training_teaches_every_head():
    """Three epochs on digits with the multi-exit loss: both early heads and the
    final head beat chance (0.1) by far."""
    lrn, data = _learner_and_data(lr=0.1, momentum=0.9)
    arrays = lrn.init_arrays(data.meta, 0)
    trained, _ = lrn.fit(arrays, data.x_train, data.y_train, data.meta, seed=1, epochs=3)
    m = lrn.score(trained, data.x_test, data.y_test, data.meta)
    assert min(m["accuracy_exit1"], m["accuracy_exit2"], m["accuracy_full"]) > 0.6


def test_learner_needs_the_early_exit_model():
    """A plain MLP cannot be trained with the multi-exit loss: clear error."""
    from flowerbed.core import registry
    from flowerbed.core.scenario import from_dict

    spec = _spec()
    spec["model"] = {"name": "mlp", "hidden": [8]}
    scenario = from_dict(spec)
    lrn = registry.build("learner", scenario.learner, scenario=scenario)
    data = registry.build("dataset", scenario.dataset, seed=0)
    with pytest.raises(ValueError, match="early_exit_mlp"):
        lrn.init_arrays(data.meta, 0)


def test_tiny_inline_run_reports_exits_and_pruned_uploads():
    """One FedAvg round: early-exit metrics on the server test set, and the upload
    (s = 0.5 of 64*16+16 + 16*32+32 + 32*16+16 + 160+10 + 320+10 + 160+10 = 2782
    entries) keeps 2782 - ceil(1391) = 1391 update entries."""
    result = flowerbed.run(_spec(lr=0.1, upload_sparsity=0.5, curve_thresholds=[0.5]), save=False)
    final = result.final()
    for key in ("accuracy", "accuracy_full", "accuracy_exit1", "accuracy_exit2"):
        assert 0.0 <= final[f"test/{key}"] <= 1.0
    assert 1184 / 2208 <= final["test/compute_fraction_at_0.5"] <= 2688 / 2208
    train = [r for r in result.rows if r.get("phase") == "train"]
    assert train[-1]["train/train/upload_nonzero"] == 1391

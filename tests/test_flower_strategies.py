"""Flower's message-API strategies by name, FedProx's client half, the generated catalog."""

from __future__ import annotations

import contextlib
import inspect
import io
import math
from types import SimpleNamespace
from typing import Any

import flwr.serverapp.strategy as flower
import numpy as np
import pytest
import torch
from conftest import tiny_scenario
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict

import flowerbed
from flowerbed.clients.torch_learner import SGDLearner, proximal_term
from flowerbed.core import registry
from flowerbed.core.messages import Payload
from flowerbed.core.scenario import ScenarioError, validate_scenario
from flowerbed.data.federated import federated_data
from flowerbed.strategies import flower_strategies as fs
from flowerbed.strategies.flower_catalog import REQUIRED, STRATEGIES, WRAPPERS
from flowerbed.strategies.flower_fedavg import seeded_strategy

#: Every Flower strategy flowerbed runs through the generic driver, with the
#: parameters each needs on a 4-client toy (QFedAvg has no default lr).
RUNNABLE: dict[str, dict[str, Any]] = {
    "fedprox": {"proximal_mu": 0.1},
    "fedavgm": {"server_momentum": 0.5},
    "fedadam": {},
    "fedyogi": {},
    "fedadagrad": {},
    "qfedavg": {"client_learning_rate": 0.1},
    "krum": {"num_malicious_nodes": 1},
    "multikrum": {"num_nodes_to_select": 2},
    "bulyan": {},
    "fedmedian": {},
    "fedtrimmedavg": {},
}
#: Flower's exports that are not strategies.
NOT_STRATEGIES = {"Strategy", "Result"}


def fast(**changes: Any) -> dict[str, Any]:
    """The tiny digits scenario without baselines (only the federation runs)."""
    return tiny_scenario(**{"baselines": [], **changes})


def comparable(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Metric rows without the wall-clock fields, which differ between runs."""
    drop = ("time", "wall", "elapsed", "duration", "_s")
    return [{k: v for k, v in r.items() if not any(d in k for d in drop)} for r in rows]


# --- the catalog and the schemas ---------------------------------------------------


def test_catalog_equals_flowers_constructor_signatures():
    """The committed table is exactly what ``inspect.signature`` reads from Flower now."""
    for name, (cls_name, table) in STRATEGIES.items():
        params = [
            p for p in inspect.signature(getattr(flower, cls_name).__init__).parameters.values()
            if p.name != "self"
        ]  # fmt: skip
        assert [row[0] for row in table] == [p.name for p in params], name
        for (pname, ptype, default), p in zip(table, params, strict=True):
            expected = REQUIRED if p.default is inspect.Parameter.empty else p.default
            assert default == expected, (name, pname)
            annotation = str(p.annotation)
            assert ptype in annotation or (ptype == "callable" and "Callable" in annotation)


def test_every_flower_strategy_is_runnable_or_listed_as_unsupported_with_a_reason():
    from flowerbed.strategies import flower_xgb

    covered = {cls for cls, _ in (*STRATEGIES.values(), *WRAPPERS.values())}  # DP: test_flower_dp
    covered |= {flower_xgb.FedXgbBaggingStrategy.flower_class,
                flower_xgb.FedXgbCyclicStrategy.flower_class}
    reasons = " ".join(fs.UNSUPPORTED.values())
    for cls_name in set(flower.__all__) - NOT_STRATEGIES:
        assert cls_name in covered or cls_name in reasons, cls_name
    for name, reason in fs.UNSUPPORTED.items():
        with pytest.raises(registry.UnknownComponentError, match="is not available"):
            registry.get("strategy", name)
        assert "XGBoost" in reason or "DP wrapper" in reason
    assert set(RUNNABLE) | {"fedavg"} == set(STRATEGIES)


@pytest.mark.parametrize("name", sorted(RUNNABLE))
def test_schema_defaults_are_flowers_own(name):
    """Every exposed field defaults to Flower's default (read from the class, not the table)."""
    model = registry.get("strategy", name).params
    cls = getattr(flower, STRATEGIES[name][0])
    signature = inspect.signature(cls.__init__).parameters
    required = {f for f, info in model.model_fields.items() if info.is_required()}
    spec = model(name=name, **{f: RUNNABLE[name][f] for f in required if f != "name"})
    exposed = set(model.model_fields) - {"name"}
    assert exposed, name
    for field in exposed:
        flower_default = signature[field].default
        if flower_default is inspect.Parameter.empty:
            assert field in required
        else:
            assert getattr(spec, field) == flower_default, (name, field)
    # What the platform sets is not a user's field.
    assert not exposed & set(fs.PLATFORM_SET)


def test_list_shows_flowers_defaults():
    from flowerbed.platform.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["list", "strategy", "fedadam"]) == 0
    text = out.getvalue()
    for field, default in (("beta_2", "0.99"), ("eta", "0.1"), ("tau", "0.001")):
        line = next(x for x in text.splitlines() if f" {field} " in x)
        assert default in line, line


def test_a_typo_in_a_strategy_parameter_is_one_line_naming_it():
    with pytest.raises(ScenarioError) as info:
        validate_scenario(fast(strategy={"name": "fedadam", "etta": 0.1}))
    (line,) = [p for p in info.value.problems if p.startswith("strategy.")]
    assert line.startswith("strategy.etta: unknown field") and "did you mean 'eta'" in line
    assert "\n" not in line


def test_bad_values_and_missing_required_parameters_are_named():
    cases = [
        ({"name": "fedadam", "beta_1": 1.5}, "strategy.beta_1"),
        ({"name": "qfedavg"}, "strategy.client_learning_rate: required field is missing"),
        ({"name": "fedprox", "min_train_nodes": 9}, "strategy.min_train_nodes: 9 is more than"),
    ]
    for block, needle in cases:
        with pytest.raises(ScenarioError) as info:
            validate_scenario(fast(strategy=block))
        assert any(p.startswith(needle) for p in info.value.problems), info.value.problems


# --- FedAdam's server step, by hand -------------------------------------------------


def test_fedadam_server_update_is_a_hand_computed_adam_step(monkeypatch):
    """Two parameters, two clients weighted 1 and 3, round 1, Flower's defaults.

    x0 = (1, -2); clients send (2, -2) and (1, 0); the weighted mean is
    (1.25, -0.5), so Δ = (0.25, 1.5). m = (1 - β₁)Δ = (0.025, 0.15),
    v = (1 - β₂)Δ² = (0.000625, 0.0225), √v = (0.025, 0.15). Flower corrects
    the bias with the exponent ``server_round + 1`` (Kingma & Ba use t, the
    step count): η_t = η √(1 - β₂²) / (1 - β₁²) = 0.1 · √0.0199 / 0.19.
    x1 = x0 + η_t m / (√v + τ) = (1 + η_t · 0.025/0.026, -2 + η_t · 0.15/0.151).
    """
    from flwr.supercore.task_identity import TaskIdentity

    for attr in ("_run_id", "_task_id", "_node_id"):  # what a ServerApp's run would set
        monkeypatch.setattr(TaskIdentity, attr, 1, raising=False)
    eta, b1, b2, tau = 0.1, 0.9, 0.99, 0.001
    eta_t = eta * math.sqrt(1 - b2**2) / (1 - b1**2)
    expected = [1 + eta_t * 0.025 / (0.025 + tau), -2 + eta_t * 0.15 / (0.15 + tau)]

    recorded: list[Any] = []
    ctx = SimpleNamespace(recorder=SimpleNamespace(metrics=lambda *a: recorded.append(a)))
    view = SimpleNamespace(server_round=0)
    grid = SimpleNamespace(get_node_ids=lambda: [11, 12])
    strategy = seeded_strategy("FedAdam")(
        0, view, ctx, min_train_nodes=2, min_available_nodes=2  # type: ignore[arg-type]
    )
    x0 = ArrayRecord({"w": Array(np.array([1.0, -2.0]))})
    sent = list(strategy.configure_train(1, x0, ConfigRecord(), grid))  # type: ignore[arg-type]
    by_node = {m.metadata.dst_node_id: m for m in sent}
    client = {11: ([2.0, -2.0], 1), 12: ([1.0, 0.0], 3)}
    replies = [
        Message(
            RecordDict({
                "arrays": ArrayRecord({"w": Array(np.array(w))}),
                "metrics": MetricRecord({"num-examples": n, "loss": 0.5}),
            }),
            reply_to=by_node[node],
        )
        for node, (w, n) in client.items()
    ]  # fmt: skip
    arrays, _ = strategy.aggregate_train(1, replies)
    assert arrays is not None
    got = Payload.from_record_arrays(arrays)["w"]
    assert got.dtype == np.float64
    assert got.tolist() == pytest.approx(expected, rel=1e-12)
    assert recorded and recorded[0][1] == "train"  # the round's train metrics were recorded


# --- FedProx -------------------------------------------------------------------------


def test_fedprox_with_mu_zero_equals_fedavg_bit_for_bit():
    fedavg = flowerbed.run(fast(), save=False)
    prox = flowerbed.run(
        fast(strategy={
            "name": "fedprox", "proximal_mu": 0.0, "min_train_nodes": 1, "min_evaluate_nodes": 1,
        }),
        save=False,
    )  # fmt: skip
    assert prox.summary["results"] == fedavg.summary["results"]
    assert comparable(prox.rows) == comparable(fedavg.rows)
    # ``proximal-mu`` does reach the clients through Flower's train messages.
    pulled = flowerbed.run(fast(strategy={"name": "fedprox", "proximal_mu": 0.5}), save=False)
    assert pulled.final("federated") != fedavg.final("federated")


def _toy_learner() -> tuple[SGDLearner, Any, np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    scenario = validate_scenario(
        fast(learner={"name": "sgd", "lr": 0.2, "batch_size": 8, "local_epochs": 3})
    )
    learner = registry.build("learner", scenario.component("learner"), scenario=scenario)
    data = federated_data(scenario)
    meta = data.dataset.meta
    part = data.client(0)
    return learner, meta, part.x_train, part.y_train, learner.init_arrays(meta, 1)


def _distance(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> float:
    return float(np.sqrt(sum(((a[k] - b[k]) ** 2).sum() for k in a)))


def test_fedprox_term_keeps_the_client_closer_to_the_global_weights():
    learner, meta, x, y, w0 = _toy_learner()
    distances = [
        _distance(learner.fit(w0, x, y, meta, seed=5, proximal_mu=mu)[0], w0)
        for mu in (0.0, 0.5, 5.0)
    ]
    assert distances[0] > distances[1] > distances[2] > 0
    # The message path: ``proximal-mu`` in the train config is the same as the argument.
    payload = Payload(arrays=w0, config={"proximal-mu": 0.5})
    data = SimpleNamespace(x_train=x, y_train=y, meta=meta, num_train=len(y))
    reply = learner.train(data, payload, SimpleNamespace(seed=5))  # type: ignore[arg-type]
    direct, _ = learner.fit(w0, x, y, meta, seed=5, proximal_mu=0.5)
    assert all(np.array_equal(reply.arrays[k], direct[k]) for k in direct)


def test_proximal_term_is_half_mu_times_the_squared_distance():
    """w = (weight [[1], [3]], extra [-1]); anchor zeros: ‖w‖² = 1 + 9 + 1 = 11."""
    model = torch.nn.Linear(1, 2, bias=False)
    bias = torch.nn.Parameter(torch.tensor([-1.0]))
    model.register_parameter("extra", bias)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[1.0], [3.0]]))
    anchor = [torch.zeros_like(p) for p in model.parameters()]
    assert float(proximal_term(model, anchor, 0.4).detach()) == pytest.approx(0.5 * 0.4 * 11)


# --- every strategy end to end --------------------------------------------------------


@pytest.mark.parametrize("name", sorted(RUNNABLE))
def test_every_strategy_runs_inline_and_records_every_round(name):
    result = flowerbed.run(fast(strategy={"name": name, **RUNNABLE[name]}), save=False)
    final = result.final("federated")
    assert 0.0 <= final["test/accuracy"] <= 1.0 and np.isfinite(final["test/loss"])
    for key, rounds in (("server_eval/test/accuracy", [0, 1, 2]), ("train/train/loss", [1, 2])):
        seen = [r["round"] for r in result.rows if np.isfinite(r.get(key, np.nan))]
        assert seen == rounds, (name, key, seen)


def test_fedavgm_without_momentum_and_multikrum_selecting_everyone_are_fedavg():
    """Flower's own reductions: FedAvgM(lr 1, momentum 0) and MultiKrum(m = n) average."""
    reference = flowerbed.run(fast(), save=False).final("federated")
    for block in ({"name": "fedavgm"}, {"name": "multikrum", "num_nodes_to_select": 4}):
        got = flowerbed.run(fast(strategy=block), save=False).final("federated")
        assert got == pytest.approx(reference, rel=1e-5), block


@pytest.mark.slow
@pytest.mark.ray
def test_every_strategy_gives_the_same_numbers_inline_and_in_simulation(tmp_path):
    """One sweep over all strategies shares one Flower simulation (one Ray start-up)."""
    from flowerbed.platform import sweep as sw

    strategies = [{"name": n, **RUNNABLE[n]} for n in sorted(RUNNABLE)]
    engine = {"name": "simulation", "ray_num_cpus": 1, "client_resources": {"num_cpus": 1}}
    base = fast(num_clients=3, rounds=2, engine=engine)
    plan = sw.expand({**base, "sweep": {"name": "flower_strategies", "strategy": strategies}})
    swept = sw.run_sweep(plan, tmp_path)
    assert swept.simulation_starts == 1 and swept.count("failed") == 0
    for point, block in zip(swept.points, strategies, strict=True):
        inline = flowerbed.run(fast(num_clients=3, rounds=2, strategy=block), save=False)
        assert point.summary is not None
        assert point.summary["results"] == inline.summary["results"], block["name"]


def test_fedavg_keeps_integer_buffers_of_a_batchnorm_model():
    """Flower's average makes ``num_batches_tracked`` a float; round 2's int64 replies still fit."""
    import flowerbed

    result = flowerbed.run(
        {
            "name": "fedavg_bn", "num_clients": 3, "rounds": 2,
            "dataset": {"name": "digits"}, "partition": {"name": "iid"},
            "model": {"name": "mlp_bn", "hidden": [8]}, "learner": {"name": "sgd"},
            "strategy": {"name": "fedavg"}, "engine": "inline",
        },
        save=False,
    )
    failed = [r for r in result.rows if r.get("failed", 0)]
    assert not failed and result.final()["test/accuracy"] > 0.3

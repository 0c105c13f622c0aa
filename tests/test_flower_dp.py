"""Flower's DP wrappers by name: schema, ε accounting, noise, client clipping, end to end."""

from __future__ import annotations

import inspect
import math
from types import SimpleNamespace
from typing import Any

import flwr.serverapp.strategy as flower
import numpy as np
import pytest
from conftest import tiny_scenario
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.app.message_type import MessageType
from scipy.optimize import brentq
from scipy.stats import norm

import flowerbed
from flowerbed.algorithms.dp_accounting import (
    DEFAULT_ORDERS,
    GaussianAccountant,
    epsilon_from_rdp,
    gaussian_rdp,
)
from flowerbed.clients import dp_mods
from flowerbed.core import registry
from flowerbed.core.messages import Payload
from flowerbed.core.scenario import ScenarioError, validate_scenario
from flowerbed.strategies.flower_catalog import MEAN_AGGREGATING, REQUIRED, STRATEGIES, WRAPPERS

DP = ("dp_client_adaptive", "dp_client_fixed", "dp_server_adaptive", "dp_server_fixed")
#: Each wrapper's parameters on the 4-client toy: every client sampled, C small
#: enough that every update is clipped (so client- and server-side clipping matter).
BLOCKS: dict[str, dict[str, Any]] = {
    "dp_server_fixed": {"noise_multiplier": 0.8, "clipping_norm": 0.05, "num_sampled_clients": 4},
    "dp_client_fixed": {"noise_multiplier": 0.8, "clipping_norm": 0.05, "num_sampled_clients": 4},
    "dp_server_adaptive": {"noise_multiplier": 0.8, "num_sampled_clients": 4,
                           "clipped_count_stddev": 1.0},
    "dp_client_adaptive": {"noise_multiplier": 0.8, "num_sampled_clients": 4,
                           "clipped_count_stddev": 1.0},
}  # fmt: skip


def fast(**changes: Any) -> dict[str, Any]:
    return tiny_scenario(**{"baselines": [], **changes})


def dp(name: str, **changes: Any) -> dict[str, Any]:
    return {"name": name, **BLOCKS[name], **changes}


def problems(block: dict[str, Any], **changes: Any) -> list[str]:
    with pytest.raises(ScenarioError) as info:
        validate_scenario(fast(strategy=block, **changes))
    return [p for p in info.value.problems if p.startswith("strategy.")]


# --- catalog and schema ---------------------------------------------------------------


def test_wrapper_catalog_equals_flowers_constructor_signatures():
    for name, (cls_name, table) in WRAPPERS.items():
        params = [
            p for p in inspect.signature(getattr(flower, cls_name).__init__).parameters.values()
            if p.name != "self"
        ]  # fmt: skip
        assert [row[0] for row in table] == [p.name for p in params], name
        for (_, _, default), p in zip(table, params, strict=True):
            assert default == (REQUIRED if p.default is inspect.Parameter.empty else p.default)
    # The accountable inner strategies: Flower's class aggregates with FedAvg's own method.
    fedavg_own = {
        n for n, (c, _) in STRATEGIES.items()
        if getattr(flower, c).aggregate_train is flower.FedAvg.aggregate_train
    }  # fmt: skip
    assert set(MEAN_AGGREGATING) == fedavg_own == {"fedavg", "fedprox"}


@pytest.mark.parametrize("name", DP)
def test_schema_defaults_are_flowers_and_required_fields_are_named(name):
    model = registry.get("strategy", name).params
    cls = getattr(flower, WRAPPERS[name][0])
    signature = inspect.signature(cls.__init__).parameters
    spec: Any = model(**dp(name))
    for field in set(model.model_fields) - {"name", "inner", "delta", *BLOCKS[name]}:
        assert getattr(spec, field) == signature[field].default, (name, field)
    assert spec.inner.name == "fedavg"
    (line,) = problems({"name": name})[:1]
    assert "required field is missing" in line


def test_scenario_checks_are_one_line_each():
    base = dp("dp_server_fixed")
    cases = [
        ({**base, "num_sampled_clients": 10},
         "strategy.num_sampled_clients: 10, but fedavg samples 4"),
        ({**base, "inner": {"name": "fedavg", "fraction_train": 0.5}},
         "strategy.num_sampled_clients: 4, but fedavg samples 2"),
        ({**base, "inner": {"name": "fedadam"}}, "strategy.delta: ε is accounted only around"),
        ({**base, "noise_multiplier": 0.0}, "strategy.delta: noise_multiplier 0"),
        ({**base, "inner": {"name": "fedavg", "min_train_nodes": 9}},
         "strategy.inner.min_train_nodes: 9 is more than"),
        ({**base, "clipping_norm": 0.0}, "strategy.clipping_norm"),
        ({**base, "delta": 1.5}, "strategy.delta"),
        ({**base, "inner": {"name": "fedavg", "etta": 1}}, "strategy.inner.fedavg.etta"),
        (dp("dp_client_adaptive", clipped_count_stddev=None), "strategy.noise_multiplier: 0.8 is"),
    ]  # fmt: skip
    for block, needle in cases:
        found = problems(block)
        assert any(p.startswith(needle) for p in found), (needle, found)
        assert all("\n" not in p for p in found)
    # Unaccounted, any Flower strategy may be wrapped.
    ok = validate_scenario(fast(strategy={**base, "delta": None, "inner": {"name": "fedmedian"}}))
    assert getattr(ok.component("strategy"), "inner").name == "fedmedian"  # noqa: B009


# --- the accountant -------------------------------------------------------------------


def test_rdp_conversion_matches_a_hand_computed_order():
    """z = 1, one release, order 2 only: r = 2/(2·1) = 1.

    ε = r + log(1 - 1/2) - log(δ·2)/(2 - 1) = 1 - log 2 - log(2e-5) (Canonne et al. Prop. 12).
    """
    rdp = gaussian_rdp(1.0, (2.0,))
    assert rdp.tolist() == [1.0]
    eps, order = epsilon_from_rdp(rdp, (2.0,), 1e-5)
    assert eps == pytest.approx(1 - math.log(2) - math.log(2e-5), rel=1e-12) and order == 2.0
    # Composition adds the curves: T releases are T times one.
    assert gaussian_rdp(0.7, DEFAULT_ORDERS, 9) == pytest.approx(9 * gaussian_rdp(0.7))
    # A divergence below δ²: the Bretagnolle-Huber bound gives ε = 0.
    assert epsilon_from_rdp([1e-12], (2.0,), 1e-3)[0] == 0.0


def _exact_epsilon(mu: float, delta: float) -> float:
    """ε of a Gaussian with sensitivity/std μ at δ (Balle & Wang 2018, Theorem 8)."""

    def excess(eps: float) -> float:
        return norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2) - delta

    return brentq(excess, 0.0, 200.0)


@pytest.mark.parametrize(
    ("z", "rounds", "delta"), [(1.0, 10, 1e-5), (2.0, 50, 1e-6), (5.0, 100, 1e-5)]
)
def test_rdp_epsilon_bounds_the_exact_gaussian_epsilon_tightly(z, rounds, delta):
    """T Gaussian releases with multiplier z are one with multiplier z/√T (μ = √T/z).

    The RDP ε must be a valid bound (never below the exact ε) and, on these
    settings, within 15 % of it.
    """
    acc = GaussianAccountant()
    for _ in range(rounds):
        acc.compose(z)
    eps, _ = acc.epsilon(delta)
    exact = _exact_epsilon(math.sqrt(rounds) / z, delta)
    assert exact <= eps <= 1.15 * exact


@pytest.mark.parametrize(
    ("z", "rounds", "delta"), [(1.0, 10, 1e-5), (0.6, 3, 1e-3), (8.0, 200, 1e-7)]
)
def test_rdp_epsilon_equals_googles_dp_accounting_and_flowers_accountant(z, rounds, delta):
    """Reference: ``dp-accounting`` (``flwr[dp]``), through Flower's own ``RdpAccountant``."""
    dpa = pytest.importorskip("dp_accounting")
    from flwr.supercore import privacy_accounting as pa
    from flwr.supercore.privacy_accounting.rdp_accountant import RdpAccountant

    ref = dpa.rdp.RdpAccountant()
    ref.compose(dpa.GaussianDpEvent(z), rounds)
    config = pa.PrivacyConfig(
        delta, 10, pa.NeighboringRelation.ADD_OR_REMOVE_ONE, pa.SamplingMethod.NO_AMPLIFICATION
    )
    flowers = RdpAccountant(config)
    flowers.compose(pa.GaussianPrivacyEvent(z, 4, 10), rounds)
    acc = GaussianAccountant()
    acc.compose(z, rounds)
    assert acc.epsilon(delta)[0] == pytest.approx(ref.get_epsilon(delta), rel=1e-12)
    assert acc.epsilon(delta)[0] == pytest.approx(flowers.get_privacy_spent().epsilon, rel=1e-12)


# --- the server wrappers, by hand -----------------------------------------------------


def _wrapper(
    name: str, monkeypatch: Any, nodes: int = 4, **kwargs: Any
) -> tuple[Any, list[Any], Any]:
    """Flowerbed's seeded wrapper ``name`` around a seeded FedAvg over ``nodes`` nodes 11, 12..."""
    from flwr.supercore.task_identity import TaskIdentity

    from flowerbed.strategies.flower_dp_seeded import dp_wrapper
    from flowerbed.strategies.flower_fedavg import seeded_strategy

    for attr in ("_run_id", "_task_id", "_node_id"):
        monkeypatch.setattr(TaskIdentity, attr, 1, raising=False)
    recorded: list[Any] = []
    ctx = SimpleNamespace(recorder=SimpleNamespace(metrics=lambda *a: recorded.append(a)),
                          extra_results={})  # fmt: skip
    inner = seeded_strategy("FedAvg")(
        0, SimpleNamespace(server_round=0), ctx,  # type: ignore[arg-type]
        min_train_nodes=nodes, min_available_nodes=nodes,
    )  # fmt: skip
    delta = kwargs.pop("delta", None)
    wrapper = dp_wrapper(WRAPPERS[name][0], kwargs, delta, 10, inner)
    grid = SimpleNamespace(get_node_ids=lambda: list(range(11, 11 + nodes)))
    return wrapper, recorded, grid


def _round(wrapper: Any, grid: Any, x0: np.ndarray, updates: list[np.ndarray],
           weights: list[int], server_round: int = 1) -> np.ndarray:  # fmt: skip
    sent = list(wrapper.configure_train(server_round, ArrayRecord({"w": Array(x0)}),
                                        ConfigRecord(), grid))  # fmt: skip
    replies = [
        Message(RecordDict({
            "arrays": ArrayRecord({"w": Array(x0 + u)}),
            "metrics": MetricRecord({"num-examples": n, "loss": 0.5}),
        }), reply_to=m)
        for m, u, n in zip(sent, updates, weights, strict=True)
    ]  # fmt: skip
    arrays, _ = wrapper.aggregate_train(server_round, replies)
    return Payload.from_record_arrays(arrays)["w"]


def test_fixed_noise_has_flowers_std_and_epsilon_is_the_accountants(monkeypatch):
    """Updates of 1e-9: the aggregate is x0 plus N(0, (z·C/m)²) per coordinate.

    (Not 0: Flower divides by the update's norm.) Flower's ``compute_stdv`` is
    z·C/m (McMahan et al. 2018) = 1.5 · 2 / 4 = 0.75;
    with 40 000 coordinates the sample std is within 2 % of it (its own std is
    std/√(2n) ≈ 0.35 %). ε after the release is one Gaussian release with z = 1.5.
    """
    z, c, m, d = 1.5, 2.0, 4, 40_000
    kwargs: dict[str, Any] = {
        "noise_multiplier": z,
        "clipping_norm": c,
        "num_sampled_clients": m,
        "delta": 1e-5,
    }
    wrapper, recorded, grid = _wrapper("dp_server_fixed", monkeypatch, **kwargs)
    x0 = np.linspace(-1, 1, d)
    out = _round(wrapper, grid, x0, [np.full(d, 1e-9)] * m, [1, 2, 3, 4])  # unequal weights: made 1
    noise = out - x0
    assert noise.std() == pytest.approx(z * c / m, rel=0.02)
    assert abs(noise.mean()) < 4 * z * c / m / math.sqrt(d)
    expected = GaussianAccountant()
    expected.compose(z)
    (row,) = [r for r in recorded if r[1] == "privacy"]
    assert row[0] == 1 and row[2]["noise/std"] == pytest.approx(z * c / m)
    assert row[2]["rdp/epsilon"] == pytest.approx(expected.epsilon(1e-5)[0], rel=1e-12)
    # Seeded: the same round draws the same noise again.
    again, _, grid = _wrapper("dp_server_fixed", monkeypatch, **kwargs)
    assert np.array_equal(_round(again, grid, x0, [np.full(d, 1e-9)] * m, [1, 1, 1, 1]), out)


def test_server_clipping_bounds_each_update_and_the_mean_is_unweighted(monkeypatch):
    """No noise (z = 0): updates (6, 8) and (0.3, 0.4) clipped to C = 1 are (0.6, 0.8), (0.3, 0.4).

    Weights 1 and 3 are ignored (every sampled client counts 1): mean (0.45, 0.6).
    """
    wrapper, _, grid = _wrapper("dp_server_fixed", monkeypatch, nodes=2, noise_multiplier=0.0,
                                clipping_norm=1.0, num_sampled_clients=2)  # fmt: skip
    x0 = np.array([1.0, -1.0])
    out = _round(wrapper, grid, x0, [np.array([6.0, 8.0]), np.array([0.3, 0.4])], [1, 3])
    assert (out - x0).tolist() == pytest.approx([0.45, 0.6], rel=1e-12)


def test_adaptive_norm_follows_flowers_rule_as_it_is(monkeypatch):
    """z = 0, both updates (norm 5) clipped at C = 0.1: clipped fraction 1, target 0.5, lr 0.2.

    Flower's rule is C·exp(-lr·(clipped - target)) = 0.1·e^(-0.1): the norm
    shrinks although every update was clipped. Andrew et al. (2021) use the
    unclipped fraction in that formula (0.1·e^(+0.1)); docs/strategies/dp.md
    notes the difference. This test fails when Flower changes its rule.
    """
    wrapper, recorded, grid = _wrapper("dp_server_adaptive", monkeypatch, nodes=2,
                                       noise_multiplier=0.0, num_sampled_clients=2)  # fmt: skip
    x0 = np.zeros(2)
    out = _round(wrapper, grid, x0, [np.array([3.0, 4.0]), np.array([-3.0, 4.0])], [1, 1])
    assert out.tolist() == pytest.approx([0.0, 0.08], rel=1e-12)  # both clipped to norm 0.1
    assert wrapper.clipping_norm == pytest.approx(0.1 * math.exp(-0.2 * 0.5), rel=1e-12)
    (row,) = [r for r in recorded if r[1] == "privacy"]
    assert row[2]["clip/norm"] == 0.1


def test_adaptive_noise_uses_flowers_split_multiplier(monkeypatch):
    """Updates of 1e-9 (none clipped), z = 0.8, s_b = 1, m = 4 (Andrew et al. 2021, Flower's code).

    Flower noises the update sum with z_Δ = (z⁻² - (2 s_b)⁻²)^(-1/2) and, as its
    code does, with the norm after this round's update: std = z_Δ·C_new/m.
    """
    z, sigma_b, m, d = 0.8, 1.0, 4, 40_000
    kwargs: dict[str, Any] = {
        "noise_multiplier": z,
        "num_sampled_clients": m,
        "clipped_count_stddev": sigma_b,
    }
    wrapper, recorded, grid = _wrapper("dp_server_adaptive", monkeypatch, **kwargs)
    z_sum = (z**-2 - (2 * sigma_b) ** -2) ** -0.5
    x0 = np.zeros(d)
    out = _round(wrapper, grid, x0, [np.full(d, 1e-9)] * m, [1] * m)
    assert wrapper.noise_multiplier == pytest.approx(z_sum, rel=1e-12)
    assert out.std() == pytest.approx(z_sum * wrapper.clipping_norm / m, rel=0.02)
    (row,) = [r for r in recorded if r[1] == "privacy"]
    assert row[2]["clip/norm"] == 0.1 and "rdp/epsilon" not in row[2]


# --- the client mods ------------------------------------------------------------------


def _train_message(x0: np.ndarray, config: dict[str, Any]) -> Message:
    return Message(
        RecordDict({"arrays": ArrayRecord({"w": Array(x0)}), "config": ConfigRecord(config)}),
        dst_node_id=1,
        message_type=MessageType.TRAIN,
    )


def _learner_reply(update: np.ndarray) -> Any:
    def handle(msg: Message, context: Context) -> Message:
        x0 = Payload.from_record(msg.content).arrays["w"]
        return Message(Payload(arrays={"w": x0 + update}, num_examples=7).to_record(),
                       reply_to=msg)  # fmt: skip

    return handle


@pytest.mark.parametrize("strategy", ["dp_client_fixed", "dp_client_adaptive", "fedavg"])
def test_client_mods_clip_the_update_only_for_client_side_dp(monkeypatch, strategy):
    """Update (3, 4), norm 5, clipped to C = 2: (1.2, 1.6); (0.3, 0.4) stays as it is."""
    monkeypatch.setattr(dp_mods, "_strategy_name", lambda context: strategy)
    from flwr.supercore.task_identity import TaskIdentity

    for attr in ("_run_id", "_task_id", "_node_id"):
        monkeypatch.setattr(TaskIdentity, attr, 1, raising=False)
    x0 = np.array([1.0, 1.0])
    context = Context(run_id=1, node_id=1, node_config={}, state=RecordDict(), run_config={})
    for update, expected, clipped in (([3.0, 4.0], [1.2, 1.6], 1), ([0.3, 0.4], [0.3, 0.4], 0)):
        msg = _train_message(x0, {"clipping_norm": 2.0})
        reply = dp_mods.with_dp_mods(msg, context, _learner_reply(np.array(update)))
        got = Payload.from_record(reply.content)
        want = expected if strategy != "fedavg" else update
        assert (got.arrays["w"] - x0).tolist() == pytest.approx(want, rel=1e-12)
        assert got.num_examples == 7
        assert ("norm_bit" in got.metrics) == (strategy == "dp_client_adaptive")
        if strategy == "dp_client_adaptive":
            assert got.metrics["norm_bit"] == clipped


# --- end to end -----------------------------------------------------------------------


@pytest.mark.parametrize("name", DP)
def test_every_dp_strategy_runs_inline_recording_privacy_every_round(name):
    result = flowerbed.run(fast(strategy=dp(name)), save=False)
    final = result.final("federated")
    assert 0.0 <= final["test/accuracy"] <= 1.0 and np.isfinite(final["test/loss"])
    rows = [r for r in result.rows if r.get("phase") == "privacy"]
    assert [r["round"] for r in rows] == [1, 2]
    if name.endswith("fixed"):
        acc = GaussianAccountant()
        for t, row in enumerate(rows, 1):
            acc.compose(BLOCKS[name]["noise_multiplier"])
            assert row["privacy/rdp/epsilon"] == pytest.approx(acc.epsilon(1e-5)[0], rel=1e-12)
            # Written out: min over λ of tλ/(2z²) + log(1 - 1/λ) - log(δλ)/(λ - 1).
            by_hand = min(
                t * lam / (2 * 0.8**2) + math.log(1 - 1 / lam) - math.log(1e-5 * lam) / (lam - 1)
                for lam in DEFAULT_ORDERS
                if lam > 1.01
            )
            assert row["privacy/rdp/epsilon"] == pytest.approx(by_hand, rel=1e-9)
            assert row["privacy/noise/std"] == pytest.approx(0.8 * 0.05 / 4)
        assert (
            result.summary["results"]["privacy"]["rdp/epsilon"] == rows[-1]["privacy/rdp/epsilon"]
        )
    else:
        assert "privacy" not in result.summary["results"]
        assert all("privacy/rdp/epsilon" not in r for r in rows)


def test_client_side_clipping_gives_the_server_side_numbers():
    """Clipping w - wᵗ on the client (Flower's mod) or on the server is the same arithmetic.

    With C small enough that every update is clipped, a run whose clients did
    not clip would differ; the seeded noise is the same draw on both sides.
    """
    for side in ("fixed", "adaptive"):
        server = flowerbed.run(fast(strategy=dp(f"dp_server_{side}")), save=False)
        client = flowerbed.run(fast(strategy=dp(f"dp_client_{side}")), save=False)
        assert client.summary["results"] == server.summary["results"], side
    unclipped = flowerbed.run(fast(strategy=dp("dp_client_fixed", clipping_norm=1e6)), save=False)
    assert unclipped.final("federated") != client.final("federated")


@pytest.mark.slow
@pytest.mark.ray
def test_every_dp_strategy_gives_the_same_numbers_inline_and_in_simulation(tmp_path):
    """One sweep over the four wrappers shares one Flower simulation (one Ray start-up)."""
    from flowerbed.platform import sweep as sw

    blocks = [dp(n, num_sampled_clients=3) for n in DP]
    engine = {"name": "simulation", "ray_num_cpus": 1, "client_resources": {"num_cpus": 1}}
    base = fast(num_clients=3, rounds=2, engine=engine)
    plan = sw.expand({**base, "sweep": {"name": "flower_dp", "strategy": blocks}})
    swept = sw.run_sweep(plan, tmp_path)
    assert swept.simulation_starts == 1 and swept.count("failed") == 0
    for point, block in zip(swept.points, blocks, strict=True):
        inline = flowerbed.run(fast(num_clients=3, rounds=2, strategy=block), save=False)
        assert point.summary is not None
        assert point.summary["results"] == inline.summary["results"], block["name"]

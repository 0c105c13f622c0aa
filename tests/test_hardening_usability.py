"""Hardening, second round: outputs that explain themselves (issue, usability items).

- the Python API's :class:`Result` has per-round, per-client and event tables
  (pandas), the metrics named as :meth:`Result.final` names them;
- a run's summary says what its rows and columns are: the strategy's arms
  (``summary.json``'s ``legend``), a coverage metric's nominal level, why a
  row shows only ``-``;
- the progress line of an arm's own rounds past the scenario's says so
  instead of ``round 41/1``.

Every test here failed on the code before this round (each says how).
"""

from __future__ import annotations

import io
from typing import Any

import pytest
from conftest import tiny_scenario
from rich.console import Console

import flowerbed
from flowerbed.platform.progress import LiveProgress
from flowerbed.platform.report.summary_table import run_grid

pd = pytest.importorskip("pandas")


@pytest.fixture(scope="module")
def result() -> Any:
    """A 2-round tiny run kept in memory (no run folder)."""
    return flowerbed.run(tiny_scenario(rounds=2), save=False)


def test_per_round_names_metrics_as_final_does(result):
    """Before: no such table; ``rows`` named it ``server_eval/test/accuracy``, ``final()``
    ``test/accuracy``."""
    table = result.per_round()
    assert list(table.index) == [0, 1, 2] and table.index.name == "round"
    final = result.final("federated")
    for name, value in final.items():
        assert table.loc[2, name] == value  # the last round is the final result
    server = {r["round"]: r["server_eval/test/accuracy"] for r in result.rows
              if "server_eval/test/accuracy" in r}
    assert table["test/accuracy"].to_dict() == server


def test_per_client_rows_average_to_the_round_means(result):
    """Each round's ``local_test/accuracy`` is the example-weighted mean of the clients' rows."""
    clients = result.per_client()
    assert list(clients.columns[:4]) == ["round", "phase", "client", "num_examples"]
    table = result.per_round()
    for rnd in (1, 2):
        mine = clients[(clients["round"] == rnd) & (clients["phase"] == "evaluate")]
        assert sorted(mine["client"]) == [0, 1, 2, 3]
        weights = mine["num_examples"]
        mean = float((mine["local_test/accuracy"] * weights).sum() / weights.sum())
        assert table.loc[rnd, "local_test/accuracy"] == pytest.approx(mean, rel=1e-9)
    trained = clients[clients["phase"] == "train"]
    assert trained["train/loss"].notna().all()


def test_events_are_the_event_rows_only(result):
    events = result.events()
    assert set(events["event"]) >= {"connected", "replies"}
    assert len(events) == sum("event" in r for r in result.rows)


def test_a_saved_run_reads_its_client_rows_from_the_folder(tmp_path):
    saved = flowerbed.run(tiny_scenario(rounds=1, baselines=[]), output_dir=tmp_path)
    lines = (saved.run_dir / "client_metrics.jsonl").read_text().splitlines()
    assert len(saved.per_client()) == len(lines) == 8  # 4 clients x (train, evaluate)


# --- the summary explains its rows and columns ---------------------------------------------


def _summary(**extra: Any) -> dict[str, Any]:
    return {"scenario": "s", "seed": 0, "run_dir": "runs/s/1", **extra}


def test_declared_rows_and_metrics_are_defined_under_the_table():
    """Before: 'pooled_oracle, ... = arms the strategy reports', nothing more."""
    summary = _summary(
        results={"federated": {"test/cov": 1.0}, "pooled_oracle": {"test/cov": 0.9}},
        legend={"pooled_oracle": "all rows pooled", "test/cov": "share inside; nominal 0.95"},
    )
    legend = run_grid(summary, {"cov": "test/cov"}).legend
    assert "pooled_oracle = all rows pooled" in legend
    assert "cov = share inside; nominal 0.95" in legend
    assert not any("arms the strategy reports" in line for line in legend)


def test_a_row_with_no_value_in_any_column_says_what_it_has():
    """Before: a row of '-' and no word why (self_distill's ``personalized``)."""
    summary = _summary(results={"federated": {"test/mse": 1.0},
                                "personalized": {"local_test/mse": 0.5}})
    legend = run_grid(summary, {"mse": "test/mse"}).legend
    assert ("personalized: no value for these columns; it has local_test/mse (show it with "
            "flowerbed report runs/s/1 --metric local_test/mse)") in legend


def test_an_fqr_run_defines_its_arms_and_the_coverage_level():
    scenario = "scenarios/fqr/synthetic.yaml"
    small = ["engine=inline", "dataset.n_train=900", "dataset.n_test=600",
             "strategy.iterative_rounds=2"]
    run = flowerbed.run(scenario, small, save=False)
    legend = run.summary["legend"]
    assert set(run.summary["results"]) <= set(legend)  # every row is defined
    assert "nominal 0.95" in legend["test/ci_coverage"]


# --- progress past the scenario's rounds ------------------------------------------------------


def test_an_arms_own_rounds_are_not_shown_as_round_41_of_1():
    """Before: ``round 41/1`` for FQR's iterative FedAvg inside a one-round scenario."""
    buffer = io.StringIO()
    with LiveProgress("fqr", 1, ("pinball_mean",), console=Console(file=buffer)) as display:
        display({"round": 41, "phase": "fedavg_pinball",
                 "fedavg_pinball/test/pinball_mean": 0.4})
    text = buffer.getvalue()
    assert "round 41/1" not in text
    assert "round 41 (beyond rounds: 1, a comparison arm's own)" in text

"""``flowerbed inspect``: table + PNG for a scenario, CLI wiring, one-line errors."""

from __future__ import annotations

import numpy as np
from data_helpers import build_dataset  # noqa: F401 - loads plugins

from flowerbed.core.scenario import load_scenario
from flowerbed.data.federated import federated_data
from flowerbed.platform.cli import main
from flowerbed.platform.inspect import client_stats, inspect_scenario, spark


def test_inspect_writes_png_and_stats(tmp_path, capsys):
    scenario = load_scenario("scenarios/quickstart.yaml",
                             ["partition={name: label_and_domain_shift, alpha: 0.5}"])
    png = inspect_scenario(scenario, tmp_path)
    assert png.is_file() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    out = capsys.readouterr().out
    assert "label_and_domain_shift" in out and "d3:" in out
    rows = client_stats(federated_data(scenario))
    assert [r["num_train"] for r in rows] == [
        len(t) for t in federated_data(scenario).local_train
    ]
    assert all(r["counts"].sum() == r["num_train"] for r in rows)


def test_inspect_regression_uses_target_deciles(tmp_path):
    scenario = load_scenario("scenarios/quickstart.yaml",
                             ["dataset=diabetes", "partition=quantity_skew", "num_clients=4"])
    rows = client_stats(federated_data(scenario))
    assert rows[0]["bins"][0] == "q1" and len(rows[0]["counts"]) == 10
    assert inspect_scenario(scenario, tmp_path).is_file()


def test_cli_inspect_and_clear_error(tmp_path, capsys):
    assert main(["inspect", "scenarios/quickstart.yaml", "--set", "partition=iid",
                 "--output-dir", str(tmp_path)]) == 0
    assert list(tmp_path.glob("quickstart/inspect/*.png"))
    status = main(["inspect", "scenarios/quickstart.yaml", "--set", "partition=natural_id",
                   "--output-dir", str(tmp_path)])
    assert status == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("inspect failed:") and "\n" not in err


def test_spark_scales_to_the_largest_bin():
    assert spark(np.array([0, 1, 8])) == " ▁█"

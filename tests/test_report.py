"""Reports: numbers come from the summaries; CSV, markdown and PNGs are written."""

from __future__ import annotations

import csv
import json
import math
import statistics
from pathlib import Path

import pytest
import yaml
from conftest import tiny_sweep_scenario

from flowerbed.platform import report as rp
from flowerbed.platform import sweep as sw
from flowerbed.platform.cli import main

TINY = tiny_sweep_scenario(baselines=["centralized"])


def tiny(**sweep: object) -> dict:
    return {**TINY, "sweep": dict(sweep)}


def fake_run(folder: Path, alpha: float, seed: int, acc: dict[str, float], rounds: int = 2) -> None:
    """A run folder as Recorder + sweep write it, with chosen final accuracies."""
    folder.mkdir(parents=True)
    scenario = {
        "name": "fake",
        "seed": seed,
        "partition": {"name": "dirichlet", "alpha": alpha},
        "metrics": {"summary": ["accuracy"]},
    }
    (folder / "scenario.resolved.yaml").write_text(yaml.safe_dump(scenario))
    overrides = {"partition.alpha": alpha, "seed": seed}
    (folder / "overrides.yaml").write_text(yaml.safe_dump({"index": 0, "overrides": overrides}))
    results = {src: {"test/accuracy": v, "test/loss": 1 - v} for src, v in acc.items()}
    summary = {"scenario": "fake", "digest": "x", "seed": seed, "results": results}
    (folder / "summary.json").write_text(json.dumps(summary))
    rows = [
        {
            "round": r,
            "phase": "server_eval",
            "server_eval/test/accuracy": acc["federated"] * r / rounds,
        }
        for r in range(rounds + 1)
    ]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.fixture
def fake_sweep(tmp_path):
    root = tmp_path / "fake-sweep"
    values = {
        (0.1, 0): (0.80, 0.95),
        (0.1, 1): (0.84, 0.97),
        (1.0, 0): (0.90, 0.96),
        (1.0, 1): (0.93, 0.98),
    }
    for i, ((alpha, seed), (fed, cen)) in enumerate(values.items()):
        fake_run(root / f"{i:03d}-abc", alpha, seed, {"federated": fed, "centralized": cen})
    failed = root / "004-def"
    failed.mkdir()
    (failed / "status.json").write_text(
        json.dumps({"status": "failed", "error": "RuntimeError: boom"})
    )
    (failed / "overrides.yaml").write_text(
        yaml.safe_dump({"overrides": {"partition.alpha": 3.0, "seed": 0}})
    )
    return root


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path) as fh:
        return list(csv.DictReader(fh))


def test_mean_std_over_seeds_from_summaries(fake_sweep):
    report = rp.build_report(fake_sweep)
    assert report.keys == ["partition.alpha"] and report.metrics == ["test/accuracy"]
    files = rp.write_report(report)
    assert all(f.is_file() for f in files)
    rows = {
        (r["partition.alpha"], r["source"]): r for r in read_csv(fake_sweep / "report/summary.csv")
    }
    assert set(rows) == {
        ("0.1", "federated"),
        ("0.1", "centralized"),
        ("1.0", "federated"),
        ("1.0", "centralized"),
    }
    fed = rows[("0.1", "federated")]
    assert fed["n"] == "2"
    assert float(fed["test/accuracy mean"]) == pytest.approx(0.82)
    assert float(fed["test/accuracy std"]) == pytest.approx(statistics.stdev([0.80, 0.84]))
    assert float(rows[("1.0", "centralized")]["test/accuracy mean"]) == pytest.approx(0.97)


def test_run_table_markdown_and_failures(fake_sweep):
    rp.write_report(rp.build_report(fake_sweep, metrics=["accuracy", "loss"]), plots=False)
    runs = read_csv(fake_sweep / "report/runs.csv")
    assert (
        len(runs) == 8
    )  # 4 finished runs x (federated, centralized); the failed one is listed apart
    row = next(r for r in runs if r["run"] == "001-abc" and r["source"] == "federated")
    assert float(row["test/accuracy"]) == 0.84 and float(row["test/loss"]) == pytest.approx(0.16)
    md = (fake_sweep / "report/report.md").read_text()
    assert "| 0.1 | federated | 2 | 0.8200 ± 0.0283 |" in md
    assert "`004-def`: RuntimeError: boom" in md


def test_plots_are_pngs(fake_sweep):
    pytest.importorskip("matplotlib")
    files = rp.write_report(rp.build_report(fake_sweep))
    pngs = [f for f in files if f.suffix == ".png"]
    names = {f.name for f in pngs}
    assert {"curves_accuracy.png", "bars_accuracy.png", "000-abc_accuracy.png"} <= names
    assert (
        "![curves_accuracy](curves_accuracy.png)" in (fake_sweep / "report/report.md").read_text()
    )
    for png in pngs:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000


def test_group_by_any_scenario_key(fake_sweep):
    report = rp.build_report(fake_sweep, group_by=["partition.name"])
    (fed,) = [r for r in report.summary_table if r["source"] == "federated"]
    assert fed["n"] == 4 and fed["test/accuracy mean"] == pytest.approx(
        (0.80 + 0.84 + 0.90 + 0.93) / 4
    )


def test_single_run_report(tmp_path):
    fake_run(tmp_path / "run", 0.5, 0, {"federated": 0.9, "centralized": 0.95})
    report = rp.build_report(tmp_path / "run")
    (fed,) = [r for r in report.summary_table if r["source"] == "federated"]
    assert report.keys == ["partition.alpha"] and math.isnan(fed["test/accuracy std"])
    files = rp.write_report(report)
    assert (tmp_path / "run/report/runs.csv") in files


def test_cli_report_on_a_real_sweep(tmp_path, capsys):
    plan = sw.expand(tiny(**{"learner.lr": [0.05, 0.1]}, seeds=[0, 1], name="real"))
    result = sw.run_sweep(plan, tmp_path)
    assert result.count("ok") == 4
    capsys.readouterr()
    assert main(["report", str(result.root), "--metric", "accuracy", "--no-plots"]) == 0
    out = capsys.readouterr().out
    assert "learner.lr" in out and "federated" in out
    rows = read_csv(result.root / "report/summary.csv")
    for lr in (0.05, 0.1):
        accs = [
            r.summary["results"]["federated"]["test/accuracy"]
            for r in result.points
            if r.point.overrides["learner.lr"] == lr
        ]
        (row,) = [r for r in rows if r["learner.lr"] == str(lr) and r["source"] == "federated"]
        assert float(row["test/accuracy mean"]) == pytest.approx(statistics.mean(accs))
        assert float(row["test/accuracy std"]) == pytest.approx(statistics.stdev(accs))


def test_cli_report_missing_folder(tmp_path, capsys):
    assert main(["report", str(tmp_path / "nope")]) == 2
    assert "no such folder" in capsys.readouterr().err


def test_sweep_plan_limits_report_to_current_points(fake_sweep):
    plan = {"points": [{"folder": "000-abc"}, {"folder": "001-abc"}, {"folder": "009-unrun"}]}
    (fake_sweep / "sweep.json").write_text(json.dumps(plan))
    report = rp.build_report(fake_sweep)
    assert [r.name for r in report.runs] == ["000-abc", "001-abc"]


def test_plain_runs_of_different_scenarios_are_not_pooled(tmp_path):
    fake_run(tmp_path / "a", 0.5, 0, {"federated": 0.9})
    fake_run(tmp_path / "b", 0.7, 0, {"federated": 0.8})
    for name in ("a", "b"):
        (tmp_path / name / "overrides.yaml").unlink()
    report = rp.build_report(tmp_path)
    assert report.keys == ["run"] and [r["n"] for r in report.summary_table] == [1, 1]
    assert rp.build_report(tmp_path, group_by=["name"]).summary_table[0]["n"] == 2

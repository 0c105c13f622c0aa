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


def test_a_source_without_the_reported_metric_gets_no_row(tmp_path):
    """DP runs add a ``privacy`` result (epsilon, delta) that has no accuracy."""
    fake_run(tmp_path / "run", 0.5, 0, {"federated": 0.9})
    summary = json.loads((tmp_path / "run/summary.json").read_text())
    summary["results"]["privacy"] = {"epsilon": 3.2, "delta": 1e-5}
    (tmp_path / "run/summary.json").write_text(json.dumps(summary))
    report = rp.build_report(tmp_path / "run")
    assert [r["source"] for r in report.summary_table] == ["federated"]
    assert report.summary_table[0]["n"] == 1


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


def append_rows(path: Path, rows: list[dict]) -> None:
    with open(path, "a") as fh:
        fh.write("".join(json.dumps(r) + "\n" for r in rows))


def test_a_new_phase_over_rounds_gets_its_own_curve(tmp_path):
    pytest.importorskip("matplotlib")
    run = tmp_path / "run"
    fake_run(run, 0.5, 0, {"federated": 0.9, "centralized": 0.95}, rounds=3)
    recall = {1: 0.5, 2: 0.6, 3: 0.7}
    append_rows(
        run / "metrics.jsonl",
        [
            *({"round": r, "phase": "screen", "event": "replies", "ok": 2} for r in recall),
            *({"round": r, "phase": "screen", "screen/test/recall": v} for r, v in recall.items()),
            {"round": 3, "phase": "probe", "probe/val/score": 0.4, "probe/test/recall": 0.65},
            {"event": "baseline_start", "baseline": "centralized"},
        ],
    )
    (quantity, curves, levels), *others = rp.phase_curves(
        rp.load_run(run).rows, skip={"server_eval/test/accuracy"}
    )
    assert others == []  # probe's val/score: one round, no curve
    assert quantity == "test/recall" and curves == {"screen": recall}
    assert levels == {"probe": 0.65}  # a once-logged phase is a level beside the curve
    names = {f.name for f in rp.write_report(rp.build_report(run))}
    assert {"curves_accuracy.png", "phases_test_recall.png"} <= names
    assert not any("score" in n or n == "phases_test_accuracy.png" for n in names)
    png = run / "report/phases_test_recall.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "![phases_test_recall](phases_test_recall.png)" in (run / "report/report.md").read_text()


def test_phase_curves_of_a_sweep_go_under_runs(fake_sweep):
    pytest.importorskip("matplotlib")
    for r in (0, 1, 2):
        append_rows(
            fake_sweep / "000-abc/metrics.jsonl",
            [{"round": r, "phase": "train", "train/train/loss": 1.0 / (r + 1)}],
        )
    names = {f.relative_to(fake_sweep / "report").as_posix() for f in rp.write_report(
        rp.build_report(fake_sweep)
    )}
    assert "runs/000-abc_phases_train_loss.png" in names
    assert not any(n.startswith("phases_") for n in names)  # the top level is as before


#: A local-task run: client id -> (num_examples, psnr, ssim), written by hand.
CLIENTS = {0: (120, 27.1, 0.81), 1: (80, 25.4, 0.77), 2: (200, 29.0, 0.86),
           3: (50, 22.3, 0.69), 4: (150, 26.2, 0.80)}


def fake_local_run(folder: Path, clients: dict[int, tuple[int, float, float]]) -> None:
    """A run folder of strategy ``local``: per-client rows, summary with centralized."""
    folder.mkdir(parents=True)
    scenario = {"name": "local-fake", "seed": 0, "strategy": {"name": "local"},
                "metrics": {"summary": ["psnr"]}}
    (folder / "scenario.resolved.yaml").write_text(yaml.safe_dump(scenario))
    rows = [  # bare and split-qualified names, as clients may report either
        {"round": 1, "phase": "train.local", "client": c, "num_examples": n,
         "metrics": {"psnr": p, "test/ssim": s}}
        for c, (n, p, s) in reversed(clients.items())
    ]
    # another phase's rows in the same file must not be taken for the local task
    rows.append({"round": 1, "phase": "evaluate", "client": 0, "num_examples": 9,
                 "metrics": {"psnr": -1.0}})
    (folder / "client_metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    total = sum(n for n, _, _ in clients.values())
    fed = {"test/psnr": sum(n * p for n, p, _ in clients.values()) / total,
           "test/ssim": sum(n * s for n, _, s in clients.values()) / total}
    results = {"federated": fed, "centralized": {"test/psnr": 30.5, "test/ssim": 0.9}}
    (folder / "summary.json").write_text(json.dumps({"scenario": "local-fake", "results": results}))
    (folder / "metrics.jsonl").write_text(
        json.dumps({"round": 1, "phase": "train.local", "train.local/test/psnr": fed["test/psnr"]})
        + "\n"
    )


def test_local_client_rows_select_the_local_task(tmp_path):
    fake_local_run(tmp_path / "run", CLIENTS)
    rows = rp.local_client_rows(tmp_path / "run")
    assert [r["client"] for r in rows] == [0, 1, 2, 3, 4]
    assert all(r["phase"] == "train.local" for r in rows)
    assert rp.local_client_rows(tmp_path) == []  # no client_metrics.jsonl


def test_local_run_gets_a_client_table_and_bars(tmp_path):
    pytest.importorskip("matplotlib")
    run = tmp_path / "run"
    fake_local_run(run, CLIENTS)
    report = rp.build_report(run)
    files = rp.write_report(report)
    names = {f.name for f in files}
    assert {"clients.csv", "clients_psnr.png", "clients_ssim.png"} <= names
    for png in (run / "report/clients_psnr.png", run / "report/clients_ssim.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    table = read_csv(run / "report/clients.csv")
    assert [int(r["client"]) for r in table] == list(CLIENTS)
    for row in table:
        n, psnr, ssim = CLIENTS[int(row["client"])]
        assert int(row["num_examples"]) == n
        assert float(row["test/psnr"]) == psnr and float(row["test/ssim"]) == ssim
    psnr_mean = statistics.mean(p for _, p, _ in CLIENTS.values())
    lines = rp.client_lines(report.clients["run"], "test/psnr", report.runs[0].final())
    assert lines == {"mean over clients": pytest.approx(psnr_mean), "centralized": 30.5}
    md = (run / "report/report.md").read_text()
    assert "| client | num_examples | test/psnr | test/ssim |" in md
    assert "| 3 | 50 | 22.3000 | 0.6900 |" in md
    assert f"| mean over clients |  | {psnr_mean:.4f} |" in md
    assert "| centralized (pooled data) |  | 30.5000 | 0.9000 |" in md


def test_local_runs_of_a_sweep_keep_client_views_per_run(tmp_path):
    pytest.importorskip("matplotlib")
    fake_local_run(tmp_path / "sweep/000-a", CLIENTS)
    fake_local_run(tmp_path / "sweep/001-b", {c: (n, p + 1, s) for c, (n, p, s) in CLIENTS.items()})
    report = rp.build_report(tmp_path / "sweep")
    out = tmp_path / "sweep/report"
    names = {f.relative_to(out).as_posix() for f in rp.write_report(report)}
    assert {"runs/000-a_clients_psnr.png", "runs/001-b_clients.csv"} <= names
    assert not any(n.startswith("clients") for n in names)
    assert "## Clients" not in (out / "report.md").read_text()
    row = read_csv(out / "runs/001-b_clients.csv")[0]
    assert float(row["test/psnr"]) == CLIENTS[0][1] + 1

"""Hardening, second round: ``flowerbed report`` names what it cannot use (issue item 8).

- an unknown ``--metric`` or ``--group-by`` key is exit 2 with the known
  ones and a did-you-mean, not a table of ``-`` or a ``None`` group;
- a corrupt ``summary.json`` and unparseable ``metrics.jsonl`` lines are
  named (a warning each), not reported as "no summary" or skipped silently;
- a file given where a folder goes says so;
- plot legends and bar labels read a swept component block by its name and
  settings, not as JSON.

Every test here failed on the code before this round (each says how).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import tiny_scenario

import flowerbed
from flowerbed.platform.cli import main
from flowerbed.platform.report.plots import readable, readable_group
from flowerbed.platform.report.runs import RunInfo


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One finished tiny run (1 round), shared by the tests that only read it."""
    out = tmp_path_factory.mktemp("report")
    result = flowerbed.run(tiny_scenario(rounds=1, num_clients=2, partition="iid"),
                           output_dir=out)
    assert result.run_dir is not None
    return result.run_dir


def _report(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[str]]:
    status = main(["report", *args, "--no-plots", "--format", "csv"])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    return status, err


def test_an_unknown_metric_is_exit_2_with_the_known_ones(run_dir, capsys):
    """Before: exit 0 and a column of '-' labelled 'higher is better: test/f1_score'."""
    status, err = _report(capsys, str(run_dir), "--metric", "acuracy")
    assert status == 2
    assert err == [
        "--metric 'test/acuracy': no run has it (did you mean 'test/accuracy'?); known: "
        "local_test/accuracy, local_test/loss, test/accuracy, test/loss, train/loss"
    ]


def test_an_unknown_group_by_key_is_exit_2_with_a_did_you_mean(run_dir, capsys):
    """Before: exit 0 and one group named 'None'."""
    status, err = _report(capsys, str(run_dir), "--group-by", "strategy.nme")
    assert status == 2 and len(err) == 1
    assert err[0].startswith("--group-by 'strategy.nme': no run has it "
                             "(did you mean 'strategy.name'?); known: ")
    assert "learner.lr" in err[0]


def test_known_metric_and_key_still_report(run_dir, capsys):
    status, _ = _report(capsys, str(run_dir), "--metric", "local_test/accuracy",
                        "--group-by", "strategy.name")
    assert status == 0


def test_a_corrupt_summary_and_garbage_rows_are_named(run_dir, tmp_path, capsys):
    """Before: 'no summary.json', and unparseable lines skipped without a word."""
    broken = tmp_path / "broken"
    shutil.copytree(run_dir, broken)
    (broken / "summary.json").write_text("{not json")
    with (broken / "metrics.jsonl").open("a") as fh:
        fh.write("garbage\n[1, 2]\n")
    lines = len((broken / "metrics.jsonl").read_text().splitlines())
    status, err = _report(capsys, str(broken))
    assert status == 0  # the rows that can be read are still reported (partial)
    assert err[0].startswith(f"warning: {broken / 'summary.json'}: unreadable (JSONDecodeError")
    assert err[1] == (f"warning: {broken / 'metrics.jsonl'}: 2 line(s) are not JSON rows, "
                      f"skipped (line {lines - 1}, {lines})")
    assert "summary.json unreadable" in "\n".join(err[2:])


def test_a_file_given_for_a_folder_says_so(run_dir, capsys):
    """Before: '<file>: no such folder'."""
    status, err = _report(capsys, str(run_dir / "metrics.jsonl"))
    assert status == 2
    assert err == [f"{run_dir / 'metrics.jsonl'}: a file; give a run folder (it holds "
                   "scenario.resolved.yaml) or a folder of runs"]


def _point(value: Any) -> RunInfo:
    return RunInfo(Path("p"), {}, {"strategy": value}, None)


def test_legends_read_a_swept_block_by_name_and_settings():
    """Before: ``strategy={"name": "fedprox", "proximal_mu": 0.1}`` in legends and ticks."""
    block = {"name": "fedprox", "proximal_mu": 0.1}
    assert readable_group(_point(block), ["strategy"]) == "strategy=fedprox (proximal_mu=0.1)"
    assert readable_group(_point("fedavg"), ["strategy"]) == "strategy=fedavg"
    assert readable([0.5, {"name": "mlp", "hidden": [32, 16]}]) == "[0.5, mlp (hidden=[32, 16])]"

"""First-user audit: sweep digests, readable summary tables, compose paths, partial reports.

Each section pins one defect found by a first-user audit: a sweep that
resumes whatever its output folder is called, summary tables that never cut
a number, compose files that work wherever they are written, and reports of
runs that were killed before their ``summary.json``.
"""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import tiny_scenario, tiny_sweep_scenario

from flowerbed.core.scenario import from_dict, load_scenario
from flowerbed.platform import runner
from flowerbed.platform.cli import main
from flowerbed.platform.results import Result

ROOT = Path(__file__).parents[1]


# --------------------------------------------------------------------------- sweep digests


@pytest.mark.parametrize(
    "change",
    [
        {"output_dir": "/somewhere/else"},
        {"description": "a new description"},
        {"clients": {"keep_state": False}},
        {"engine": {"name": "simulation", "ray_num_cpus": 2, "client_resources": {"num_cpus": 2}}},
        {"engine": {"name": "deployment", "connection": "docker"}},
        {"metrics": {"summary": ["loss"]}},
    ],
)
def test_digest_ignores_what_does_not_change_results(change):
    assert from_dict(tiny_scenario(**change)).digest() == from_dict(tiny_scenario()).digest()


@pytest.mark.parametrize(
    "change",
    [
        {"seed": 4},
        {"rounds": 3},
        {"learner": {"name": "sgd", "lr": 0.2}},
        {"metrics": {"eval_every": 2}},
        {"federation": {"timeout": 5.0}},
        # clients then train on a GPU where one is visible: other floating-point results
        {"engine": {"name": "inline", "client_resources": {"num_gpus": 1}}},
    ],
)
def test_digest_follows_what_changes_results(change):
    assert from_dict(tiny_scenario(**change)).digest() != from_dict(tiny_scenario()).digest()


@pytest.fixture
def counted(monkeypatch, tmp_path):
    """Count the sweep points the inline engine actually runs (in ``tmp_path``: ``runs/``)."""
    monkeypatch.chdir(tmp_path)
    calls: list[int] = []
    real = runner.run_inline

    def wrapped(scenario, recorder):
        calls.append(scenario.seed)
        return real(scenario, recorder)

    monkeypatch.setattr(runner, "run_inline", wrapped)
    return calls


def _sweep_file(tmp_path: Path) -> Path:
    path = tmp_path / "s.yaml"
    data = {**tiny_sweep_scenario(), "sweep": {"name": "sw", "seeds": [0, 1]}}
    path.write_text(yaml.safe_dump(data))
    return path


def _folders(root: Path) -> set[str]:
    return {p.name for p in root.iterdir() if p.is_dir()}


def test_output_dir_flag_and_set_output_dir_resume_each_other(tmp_path, counted):
    path, out = _sweep_file(tmp_path), tmp_path / "out"
    assert main(["sweep", str(path), "--output-dir", str(out), "--quiet"]) == 0
    assert counted == [0, 1]
    before = _folders(out / "sw")
    assert main(["sweep", str(path), "--set", f"output_dir={out}", "--quiet"]) == 0
    assert counted == [0, 1]  # every point skipped
    assert _folders(out / "sw") == before  # and no second folder per point


def test_moved_sweep_folder_resumes_in_its_new_place(tmp_path, counted):
    path = _sweep_file(tmp_path)
    assert main(["sweep", str(path), "--set", f"output_dir={tmp_path / 'a'}", "--quiet"]) == 0
    before = _folders(tmp_path / "a" / "sw")
    shutil.move(str(tmp_path / "a" / "sw"), str(tmp_path / "b" / "sw"))
    moved = tmp_path / "b" / "sw"

    assert main(["sweep", str(path), "--set", f"output_dir={tmp_path / 'b'}", "--quiet"]) == 0
    assert main(["sweep", str(path), "--output-dir", str(tmp_path / "b"), "--quiet"]) == 0
    assert counted == [0, 1]
    assert _folders(moved) == before
    # resuming from the copy of the sweep file inside the moved folder also stays there
    assert main(["sweep", str(moved / "sweep.yaml"), "--quiet"]) == 0
    assert counted == [0, 1]
    assert _folders(moved) == before and not (tmp_path / "a" / "sw").exists()
    assert not (tmp_path / "runs").exists()


def test_renamed_sweep_folder_resumes_from_its_sweep_file(tmp_path, counted):
    path = _sweep_file(tmp_path)
    assert main(["sweep", str(path), "--output-dir", str(tmp_path), "--quiet"]) == 0
    before = _folders(tmp_path / "sw")
    shutil.move(str(tmp_path / "sw"), str(tmp_path / "renamed"))
    assert main(["sweep", str(tmp_path / "renamed" / "sweep.yaml"), "--quiet"]) == 0
    assert counted == [0, 1]
    assert _folders(tmp_path / "renamed") == before and not (tmp_path / "sw").exists()
    assert not (tmp_path / "runs").exists()


def test_a_sweep_over_engines_is_still_allowed():
    from flowerbed.platform import sweep as sw

    plan = sw.expand({**tiny_sweep_scenario(), "sweep": {"engine.name": ["inline", "simulation"]}})
    assert [p.scenario.engine.name for p in plan.points] == ["inline", "simulation"]
    assert plan.points[0].digest == plan.points[1].digest  # same numbers on every engine
    assert len({p.folder_name() for p in plan.points}) == 2


# --------------------------------------------------------------------------- summary tables

#: Twelve long metric names; the table of three sources is far wider than 80 columns.
WIDE = [
    "pinball_loss_quantile_0.9",
    "screen/spearman_rank_correlation",
    "accuracy_exit_head_1",
    "upload_bytes_per_client",
    "compute_fraction_mean",
    "rmse_normalised_target",
    "psnr_db",
    "coverage_at_90_percent",
    "f1_macro_average",
    "exit_fraction_first_head",
    "perplexity_validation",
    "wall_time_seconds",
]


def _wide_summary() -> dict[str, Any]:
    keys = {m: m if "/" in m else f"test/{m}" for m in WIDE}
    results = {}
    for s, source in enumerate(["federated", "centralized", "local_only"]):
        results[source] = {
            key: [3084123.25, 0.000012345, 0.93125, 203560.0][(i + s) % 4] * (1 + s)
            for i, key in enumerate(keys.values())
        }
    return {"scenario": "wide", "seed": 0, "results": results, "wall_time_s": 1.5}


def _grid():
    from flowerbed.platform.report.summary_table import run_grid

    summary = _wide_summary()
    return summary, run_grid(summary, {m: m if "/" in m else f"test/{m}" for m in WIDE})


def test_wide_summary_at_80_columns_shows_every_number_and_name_in_full():
    from flowerbed.platform.report.summary_table import format_number, render

    summary, grid = _grid()
    text = render(grid, "table", width=80)
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= 80
    for values in summary["results"].values():
        for value in values.values():
            assert format_number(value) in text
    for name in WIDE:
        assert name in text


def test_a_wide_summary_is_transposed_and_a_narrow_one_is_not():
    from flowerbed.platform.report.summary_table import render, run_grid

    _, grid = _grid()
    text = render(grid, "table", width=80)
    heads = [line for line in text.splitlines() if line.startswith("│ metric")]
    # one row per metric under a "metric" corner, the sources head the columns
    assert {"federated", "centralized", "local_only"} <= set(" ".join(heads).split())
    narrow = run_grid({"scenario": "n", "seed": 0, "results": {"federated": {"test/loss": 0.5}}},
                      {"loss": "test/loss"})
    lines = render(narrow, "table", width=80).splitlines()
    assert any("loss" in line for line in lines[:4])  # metrics head the columns
    assert any(line.startswith("│ federated") for line in lines)


def test_many_sources_wrap_into_several_tables_within_the_width():
    from flowerbed.platform.report.summary_table import format_number, render, run_grid

    results = {f"arm_with_a_long_name_{i}": {"test/loss": 1000.0 + i / 3} for i in range(9)}
    grid = run_grid({"scenario": "arms", "seed": 0, "results": results}, {"loss": "test/loss"})
    text = render(grid, "table", width=80)
    assert max(len(line) for line in text.splitlines()) <= 80 and "…" not in text
    for name, values in results.items():
        assert name in text and format_number(values["test/loss"]) in text


def test_run_cli_at_80_columns_cuts_nothing(tmp_path, monkeypatch, capsys):
    summary = _wide_summary()
    path = tmp_path / "wide.yaml"
    path.write_text(yaml.safe_dump(tiny_scenario(name="wide", metrics={"summary": WIDE})))
    fake = Result({**summary, "run_dir": str(tmp_path)}, [], tmp_path)
    monkeypatch.setattr(runner, "run", lambda *a, **k: fake)
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["run", str(path), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "…" not in out
    for name in WIDE:
        assert name in out
    assert "3084123.2500" in out and "lower is better" in out and "higher is better" in out


@pytest.mark.parametrize("fmt", ["json", "csv", "markdown"])
def test_machine_formats_parse_back_to_the_same_numbers(fmt):
    from flowerbed.platform.report.summary_table import render

    summary, grid = _grid()
    parsed = _parse(render(grid, fmt), fmt)
    for source, values in summary["results"].items():
        for name in WIDE:
            key = name if "/" in name else f"test/{name}"
            assert parsed[source][name] == values[key], (source, name)


def _parse(text: str, fmt: str) -> dict[str, dict[str, float]]:
    """Rows of a rendered summary by source: ``{source: {column: value}}``."""
    if fmt == "json":
        rows = json.loads(text)["rows"]
    elif fmt == "csv":
        rows = list(csv.DictReader(io.StringIO(text)))
    else:
        lines = [ln for ln in text.splitlines() if ln.startswith("|")]
        head = [c.strip() for c in lines[0].strip("|").split("|")]
        rows = [dict(zip(head, (c.strip() for c in ln.strip("|").split("|")), strict=True))
                for ln in lines[2:]]
    return {r["source"]: {k: float(v) for k, v in r.items() if k != "source"} for r in rows}


def test_legend_says_which_way_is_better_and_what_rows_mean():
    from flowerbed.platform.report.summary_table import direction, render, run_grid

    assert direction("test/pinball_loss") == "lower" and direction("train/upload_bytes") == "lower"
    assert direction("screen/spearman") == "higher" and direction("test/accuracy_exit1") == "higher"
    assert direction("test/exit_fraction") is None and direction("test/accuracy_std") is None
    results = {"federated": {"test/accuracy": 0.9, "test/loss": 0.3, "test/exit_fraction": 0.1},
               "centralized": {"test/accuracy": 0.95}, "personalized": {"test/accuracy": 0.8}}
    keys = {"accuracy": "test/accuracy", "loss": "test/loss", "exit_fraction": "test/exit_fraction"}
    text = render(run_grid({"scenario": "x", "seed": 0, "results": results}, keys), "table", 80)
    legend = text[text.index("higher is better: accuracy"):]
    assert "lower is better: loss" in legend and "exit_fraction" not in legend
    assert "federated = " in legend and "centralized = " in legend
    assert "personalized" in legend and "local_only" not in legend


def test_run_cli_format_json_is_the_summary(tmp_path, capsys):
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(tiny_sweep_scenario(baselines=["centralized"])))
    args = ["run", str(path), "--quiet", "--format", "json", "--output-dir", str(tmp_path)]
    assert main(args) == 0
    data = json.loads(capsys.readouterr().out)
    summary = json.loads(next(tmp_path.glob("tiny/*/summary.json")).read_text())
    rows = {r["source"]: r for r in data["rows"]}
    assert set(rows) == {"federated", "centralized"}
    for source, values in summary["results"].items():
        assert rows[source]["accuracy"] == values["test/accuracy"]


def test_run_and_report_accept_every_format():
    from flowerbed.platform.cli import build_parser
    from flowerbed.platform.report.summary_table import FORMATS

    parser = build_parser()
    for fmt in FORMATS:
        assert parser.parse_args(["run", "s.yaml", "--format", fmt]).format == fmt
        assert parser.parse_args(["report", "runs", "--format", fmt]).format == fmt
    with pytest.raises(SystemExit):
        parser.parse_args(["run", "s.yaml", "--format", "html"])


def test_summary_names_outside_the_results_come_from_the_last_round():
    from flowerbed.platform.report.summary_table import run_grid

    rows = [
        {"round": 1, "phase": "train", "train/train/upload_bytes": 100.0},
        {"round": 2, "phase": "train", "train/train/upload_bytes": 80.0},
        {"round": 2, "phase": "centralized", "centralized/train/upload_bytes": 1.0},
    ]
    summary = {"scenario": "x", "seed": 0, "results": {"federated": {"test/accuracy": 0.5}}}
    columns = {"accuracy": "test/accuracy", "train/upload_bytes": "train/upload_bytes"}
    grid = run_grid(summary, columns, rows)
    assert grid.records == [{"source": "federated", "accuracy": 0.5, "train/upload_bytes": 80.0}]


# --------------------------------------------------------------------------- compose paths


def _dockerfile_sources(dockerfile: Path) -> list[str]:
    """The source paths of every COPY line (``--chown`` flags dropped, target left out)."""
    sources = []
    for line in dockerfile.read_text().splitlines():
        if line.startswith("COPY "):
            words = [w for w in line.split()[1:] if not w.startswith("--")]
            sources += words[:-1]
    return sources


def _check_resolves(compose: Path, overlay: Path) -> None:
    """Every build context holds its Dockerfile and what it copies; every secret file exists."""
    base = compose.parent
    services = yaml.safe_load(compose.read_text())["services"]
    built = [s["build"] for s in services.values() if "build" in s]
    assert built
    for build in built:
        context = (base / build["context"]).resolve()
        dockerfile = context / build["dockerfile"]
        assert dockerfile.is_file(), dockerfile
        for source in _dockerfile_sources(dockerfile):
            assert (context / source).exists(), source
    for secret in yaml.safe_load(overlay.read_text())["secrets"].values():
        assert (overlay.parent / secret["file"]).resolve().is_file(), secret["file"]


def test_compose_written_outside_docker_resolves_every_path(tmp_path, capsys):
    certs = tmp_path / "certs"
    certs.mkdir()
    for name in ("ca.crt", "server.pem", "server.key"):
        (certs / name).write_text("x")
    out = tmp_path / "deploy" / "compose.yml"
    status = main(["deploy", "compose", "--nodes", "3", "--out", str(out), "--certs", str(certs)])
    assert status == 0
    _check_resolves(out, out.with_name("with-tls.yml"))
    assert "make-certs.sh" in capsys.readouterr().out


def test_compose_out_may_name_a_folder_and_certs_default_to_docker_certs(tmp_path):
    from flowerbed.platform.deploy.compose import write_compose

    folder = tmp_path / "elsewhere"
    folder.mkdir()
    assert main(["deploy", "compose", "--out", str(folder)]) == 0
    compose, overlay = folder / "compose.yml", folder / "with-tls.yml"
    services = yaml.safe_load(compose.read_text())["services"]
    context = (folder / services["superexec-serverapp"]["build"]["context"]).resolve()
    assert context == ROOT.resolve()
    secrets = yaml.safe_load(overlay.read_text())["secrets"]
    # where docker/make-certs.sh writes by default
    assert (folder / secrets["ca"]["file"]).resolve() == (ROOT / "docker/certs/ca.crt").resolve()
    # into a checkout's docker/ folder, the files are the committed ones
    project = tmp_path / "checkout"
    (project / "docker").mkdir(parents=True)
    shutil.copy(ROOT / "docker/Dockerfile", project / "docker/Dockerfile")
    written = write_compose(2, project / "docker", project=project)
    assert [p.read_text() for p in written] == [
        (ROOT / name).read_text()
        for name in ("docker/compose.yml", "docker/with-tls.yml", "docker/with-runs.yml")
    ]


# --------------------------------------------------------------------------- partial runs


def _killed_run(folder: Path, reached: int = 4, evaluated: int = 3, rounds: int = 10) -> None:
    """A run folder as a killed run leaves it: rows up to ``reached``, no ``summary.json``."""
    folder.mkdir(parents=True)
    scenario = {"name": "killed", "seed": 0, "rounds": rounds, "metrics": {"summary": ["accuracy"]}}
    (folder / "scenario.resolved.yaml").write_text(yaml.safe_dump(scenario))
    rows: list[dict[str, Any]] = [{"event": "connected", "clients": 2}]
    for r in range(reached + 1):
        if r:
            rows.append({"round": r, "phase": "train", "train/train/loss": 2.0 / r})
        if r <= evaluated:
            rows.append({"round": r, "phase": "server_eval", "server_eval/test/accuracy": 0.1 * r,
                         "server_eval/test/loss": 3.0 - r})
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_report_of_a_killed_run_shows_its_last_round_marked_partial(tmp_path, capsys):
    from flowerbed.platform import report as rp

    run = tmp_path / "killed" / "20260101-000000-abc"
    _killed_run(run)
    report = rp.build_report(run)
    (row,) = report.summary_table
    assert "partial" in row["source"] and "round 3 of 10" in row["source"]
    assert row["test/accuracy mean"] == pytest.approx(0.3)
    assert main(["report", str(run), "--no-plots"]) == 0
    out = capsys.readouterr().out
    assert "0.3000" in out and "partial" in out and "reached round 4 of 10" in out
    runs = list(csv.DictReader(io.StringIO((run / "report" / "runs.csv").read_text())))
    assert runs[0]["status"] == "partial" and float(runs[0]["test/accuracy"]) == pytest.approx(0.3)
    assert "reached round 4 of 10" in (run / "report" / "report.md").read_text()


def test_partial_runs_are_not_pooled_with_finished_ones(tmp_path):
    from flowerbed.platform import report as rp

    root = tmp_path / "runs"
    _killed_run(root / "b-killed")
    done = root / "a-done"
    _killed_run(done, reached=10, evaluated=10)
    results = {"federated": {"test/accuracy": 1.0, "test/loss": 0.1}}
    (done / "summary.json").write_text(json.dumps({"scenario": "killed", "results": results}))
    report = rp.build_report(root)
    by_source = {r["source"]: r for r in report.summary_table}
    assert by_source["federated"]["n"] == 1
    assert by_source["federated"]["test/accuracy mean"] == 1.0
    partial = next(r for s, r in by_source.items() if "partial" in s)
    assert partial["test/accuracy mean"] == pytest.approx(0.3)


def test_report_format_csv_prints_the_summary(tmp_path, capsys):
    run = tmp_path / "killed" / "run"
    _killed_run(run)
    assert main(["report", str(run), "--no-plots", "--format", "csv"]) == 0
    out = capsys.readouterr().out
    (row,) = list(csv.DictReader(io.StringIO(out)))
    assert float(row["test/accuracy mean"]) == pytest.approx(0.3)


# --------------------------------------------------------------------------- compute reduction


def _summary_of(path: str, overrides: list[str]) -> tuple[list[str], dict[str, Any]]:
    """Run a compute-reduction scenario on digits, tiny; its summary names and grid record."""
    import flowerbed
    from flowerbed.platform.report.summary_table import run_grid

    small = ["dataset={name: digits}", "num_clients=2", "rounds=1", "engine=inline", *overrides]
    result = flowerbed.run(ROOT / path, small, save=False)
    keys = load_scenario(ROOT / path, small).metrics.summary_keys()
    grid = run_grid(result.summary, keys, result.rows)
    return list(keys), grid.records[0]


@pytest.mark.parametrize(
    ("path", "overrides", "savings"),
    [
        ("scenarios/compute_reduction/fmnist.yaml", ["model.hidden=[8]"],
         {"train/upload_bytes", "train/upload_density"}),
        ("scenarios/compute_reduction/fmnist_early_exit.yaml",
         ["model.hidden=[8, 8, 8]", "learner.local_epochs=1", "learner.curve_thresholds=[0.5]"],
         {"train/upload_bytes", "train/upload_density", "exit_fraction", "compute_fraction"}),
    ],
)
def test_compute_reduction_summaries_show_the_savings(path, overrides, savings):
    names, record = _summary_of(path, overrides)
    assert savings <= set(names)
    missing = [n for n in names if record.get(n) is None]
    assert not missing, f"summary names the run does not report: {missing}"
    assert record["source"] == "federated"


def test_client_failure_reasons_read_as_one_line_on_every_engine():
    """Flower's error reasons, inline and wrapped by Ray, become ``Class: learner message``."""
    from flowerbed.strategies.federation import _short_reason

    inline = "<class 'builtins.ValueError'>:<'client 3 has no rows'>"
    assert _short_reason(inline) == "ValueError: client 3 has no rows"
    ray = ("<class 'ray.exceptions.RayTaskError(ClientAppException)'>:<'\n"
           "Exception ClientAppException occurred. Message: \n"
           "Traceback (most recent call last):\n  File \"x.py\", line 1\n"
           "ValueError: client 0 has no rows'>")
    assert _short_reason(ray) == "ClientAppException: ValueError: client 0 has no rows"
    assert _short_reason("node unavailable\n") == "node unavailable"


def test_a_published_folder_appears_whole_and_a_failed_build_leaves_nothing(tmp_path):
    from flowerbed.core.records import publish_folder

    out = tmp_path / "model"
    publish_folder(out, lambda d: (d / "weights.bin").write_bytes(b"old"))
    publish_folder(out, lambda d: (d / "weights.bin").write_bytes(b"new"), {"steps": 3})
    assert (out / "weights.bin").read_bytes() == b"new"
    assert json.loads((out / "flowerbed_source.json").read_text()) == {"steps": 3}

    def broken(d):
        (d / "weights.bin").write_bytes(b"half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        publish_folder(out, broken)
    assert (out / "weights.bin").read_bytes() == b"new"  # the old folder stays as it was
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # no temporary left

"""Sweeps: pure expansion, resumable run folders, failed points, one Ray start per group."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from conftest import tiny_sweep_scenario

from flowerbed.core.scenario import ScenarioError
from flowerbed.platform import runner
from flowerbed.platform import sweep as sw
from flowerbed.platform.cli import main

TINY = tiny_sweep_scenario()


def tiny(**sweep: object) -> dict:
    return {**TINY, "sweep": dict(sweep)}


# --------------------------------------------------------------------------- expansion


def test_grid_is_cartesian_product_in_key_order():
    plan = sw.expand(tiny(**{"learner.lr": [0.01, 0.1], "rounds": [1, 2]}))
    assert [p.overrides for p in plan.points] == [
        {"learner.lr": 0.01, "rounds": 1},
        {"learner.lr": 0.01, "rounds": 2},
        {"learner.lr": 0.1, "rounds": 1},
        {"learner.lr": 0.1, "rounds": 2},
    ]
    assert [p.scenario.rounds for p in plan.points] == [1, 2, 1, 2]
    assert plan.points[2].scenario.learner.lr == 0.1
    assert plan.keys == ("learner.lr", "rounds")
    assert len({p.digest for p in plan.points}) == 4


def test_explicit_grid_equals_bare_keys():
    bare = sw.expand(tiny(**{"learner.lr": [0.01, 0.1]}))
    spelt = sw.expand(tiny(grid={"learner.lr": [0.01, 0.1]}))
    assert [p.digest for p in bare.points] == [p.digest for p in spelt.points]


def test_zip_group_varies_together_and_combines_with_grid():
    plan = sw.expand(
        tiny(
            **{"learner.lr": [0.01, 0.1]}, zip=[{"rounds": [1, 3], "learner.local_epochs": [2, 1]}]
        )
    )
    assert len(plan.points) == 4
    pairs = {(p.scenario.rounds, p.scenario.learner.local_epochs) for p in plan.points}
    assert pairs == {(1, 2), (3, 1)}
    assert plan.keys == ("learner.lr", "rounds", "learner.local_epochs")


def test_seeds_are_the_innermost_axis_and_set_the_root_seed():
    plan = sw.expand(tiny(**{"partition.name": ["iid"]}, seeds=[3, 7], name="s"))
    assert [p.scenario.seed for p in plan.points] == [3, 7]
    assert [p.overrides for p in plan.points] == [
        {"partition.name": "iid", "seed": 3},
        {"partition.name": "iid", "seed": 7},
    ]
    assert plan.name == "s"


def test_no_sweep_block_is_one_point_and_default_name():
    plan = sw.expand(dict(TINY))
    assert len(plan.points) == 1 and plan.points[0].overrides == {}
    assert plan.name == "tiny-sweep"


def test_combinations_is_pure_and_ordered():
    spec = sw.parse_sweep({"a.b": [1, 2], "zip": [{"c": [5, 6], "d": [7, 8]}], "seeds": [0]})
    assert sw.combinations(spec) == [
        {"a.b": 1, "c": 5, "d": 7, "seed": 0},
        {"a.b": 1, "c": 6, "d": 8, "seed": 0},
        {"a.b": 2, "c": 5, "d": 7, "seed": 0},
        {"a.b": 2, "c": 6, "d": 8, "seed": 0},
    ]


def test_assign_keeps_component_shorthand_names():
    data = {"engine": "inline", "learner": "sgd"}
    sw.assign(data, "engine.ray_num_cpus", 2)
    sw.assign(data, "learner.lr", 0.5)
    assert data == {
        "engine": {"name": "inline", "ray_num_cpus": 2},
        "learner": {"name": "sgd", "lr": 0.5},
    }


def test_unknown_key_is_one_line_naming_point_and_field():
    with pytest.raises(ScenarioError) as info:
        sw.expand(tiny(**{"learner.lrr": [0.1, 0.2]}), source="s.yaml")
    lines = info.value.problems
    assert len(lines) == 1
    assert lines[0].startswith("point 0 [learner.lrr=0.1]: learner.lrr: unknown field")
    assert "did you mean 'lr'" in lines[0] and "also points 1" in lines[0]


def test_bad_value_names_only_the_bad_point():
    with pytest.raises(ScenarioError) as info:
        sw.expand(tiny(rounds=[1, 0], seeds=[0]))
    (line,) = info.value.problems
    assert line.startswith("point 1 [rounds=0 seed=0]: rounds:")


@pytest.mark.parametrize(
    ("block", "needle"),
    [
        ({"zip": [{"rounds": [1, 2], "learner.lr": [0.1]}]}, "sweep.zip: zip group 0"),
        ({"rounds": 3}, "sweep.grid.rounds: input should be a valid list (got 3)"),
        ({"rounds": []}, "'rounds' has an empty value list"),
        ({"seeds": [0, 0]}, "sweep.seeds: seeds must be a non-empty list"),
        ({"seed": [0, 1], "seeds": [2]}, "'seed' is swept as a key and by seeds"),
        ({"grid": {"rounds": [1]}, "zip": [{"rounds": [2]}]}, "keys swept twice: rounds"),
        ({"bad key!": [1]}, "is not a dotted scenario key"),
        ({"name": "has space"}, "sweep.name"),
    ],
)
def test_bad_sweep_blocks(block, needle):
    with pytest.raises(ScenarioError) as info:
        sw.expand({**TINY, "sweep": block})
    assert any(needle in line for line in info.value.problems), info.value.problems


def test_duplicate_points_are_rejected():
    with pytest.raises(ScenarioError, match="same resolved scenario as point 0"):
        sw.expand(tiny(rounds=[1, 1.0]))


def test_set_edits_base_or_sweep_and_refuses_swept_keys():
    plan = sw.expand(tiny(seeds=[0]), ["rounds=2", "sweep.seeds=[4, 5]", "sweep.learner.lr=[0.2]"])
    assert [(p.scenario.rounds, p.scenario.seed, p.scenario.learner.lr) for p in plan.points] == [
        (2, 4, 0.2),
        (2, 5, 0.2),
    ]
    with pytest.raises(ScenarioError, match="is a sweep axis"):
        sw.expand(tiny(rounds=[1, 2]), ["rounds=3"])


def test_groups_share_engine_clients_and_resources():
    plan = sw.expand(tiny(**{"engine.name": ["simulation", "inline"], "num_clients": [2, 3]}))
    groups = sw.group_points(plan.points)
    assert [len(g) for g in groups] == [1, 1, 1, 1]
    plan = sw.expand(tiny(**{"engine.name": ["simulation"]}, seeds=[0, 1, 2]))
    assert [len(g) for g in sw.group_points(plan.points)] == [3]


# --------------------------------------------------------------------------- running


@pytest.fixture
def counted(monkeypatch):
    """Wrap the inline engine: count points run; fail those whose seed is in ``fail``."""
    calls: list[int] = []
    fail: set[int] = set()
    real = runner.run_inline

    def wrapped(scenario, recorder):
        calls.append(scenario.seed)
        if scenario.seed in fail:
            raise RuntimeError(f"injected failure for seed {scenario.seed}")
        return real(scenario, recorder)

    monkeypatch.setattr(runner, "run_inline", wrapped)
    return calls, fail


def test_resume_reruns_only_the_unfinished_point(tmp_path, counted):
    calls, _ = counted
    plan = sw.expand(tiny(seeds=[0, 1], name="resume"))
    first = sw.run_sweep(plan, tmp_path)
    assert [r.status for r in first.points] == ["ok", "ok"] and calls == [0, 1]
    folders = [r.folder for r in first.points]
    assert folders[0] == tmp_path / "resume" / f"000-{plan.points[0].digest}"
    for f in folders:
        assert {"scenario.resolved.yaml", "summary.json", "metrics.jsonl", "overrides.yaml"} <= {
            p.name for p in f.iterdir()
        }
    assert yaml.safe_load((folders[1] / "overrides.yaml").read_text())["overrides"] == {"seed": 1}
    kept_mtime = (folders[0] / "summary.json").stat().st_mtime_ns
    (folders[1] / "summary.json").unlink()

    second = sw.run_sweep(plan, tmp_path)
    assert [r.status for r in second.points] == ["skipped", "ok"]
    assert calls == [0, 1, 1]
    assert (folders[0] / "summary.json").stat().st_mtime_ns == kept_mtime
    assert (folders[1] / "previous" / "1" / "metrics.jsonl").is_file()  # old attempt kept aside
    assert second.points[0].summary == first.points[0].summary
    rows = (folders[1] / "metrics.jsonl").read_text().splitlines()
    assert sum('"connected"' in r for r in rows) == 1  # a fresh log, not appended
    state = json.loads((tmp_path / "resume" / "sweep.json").read_text())
    assert [p["state"] for p in state["points"]] == ["done", "done"]


def test_failed_point_is_recorded_and_sweep_goes_on(tmp_path, counted, capsys):
    calls, fail = counted
    fail.add(1)
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(tiny(seeds=[0, 1, 2], name="fails")))
    status = main(["sweep", str(path), "--output-dir", str(tmp_path), "--quiet"])
    assert status == 1 and calls == [0, 1, 2]
    root = tmp_path / "fails"
    failed = next(root.glob("001-*"))
    assert "injected failure for seed 1" in (failed / "error.txt").read_text()
    info = json.loads((failed / "status.json").read_text())
    assert info["status"] == "failed" and "injected failure" in info["error"]
    assert not (failed / "summary.json").exists()
    assert all(
        (d / "summary.json").is_file() for d in (next(root.glob("000-*")), next(root.glob("002-*")))
    )
    assert "1 failed" in capsys.readouterr().err

    fail.clear()
    assert main(["sweep", str(path), "--output-dir", str(tmp_path), "--quiet"]) == 0
    assert calls == [0, 1, 2, 1]
    assert (failed / "summary.json").is_file() and (
        failed / "previous" / "1" / "error.txt"
    ).is_file()


def test_dry_run_prints_plan_and_creates_nothing(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(tiny(**{"learner.lr": [0.01, 0.1]}, seeds=[0, 1], name="dry")))
    assert main(["sweep", str(path), "--dry-run", "--output-dir", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "sweep dry: 4 points" in out and "learner.lr" in out and out.count("new") == 4
    assert not (tmp_path / "out").exists()


def test_invalid_sweep_file_fails_before_running(tmp_path, counted, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(tiny(**{"learner.lrr": [0.1]})))
    assert main(["sweep", str(path), "--output-dir", str(tmp_path / "out")]) == 2
    assert "point 0 [learner.lrr=0.1]: learner.lrr: unknown field" in capsys.readouterr().err
    assert counted[0] == [] and not (tmp_path / "out").exists()


def test_example_sweep_plans(tmp_path):
    plan = sw.load_plan(Path(__file__).parents[1] / "scenarios/sweeps/quickstart_alpha.yaml")
    assert plan.name == "quickstart_alpha" and len(plan.points) == 4
    assert {(p.scenario.partition.alpha, p.scenario.seed) for p in plan.points} == {
        (0.1, 0),
        (0.1, 1),
        (1.0, 0),
        (1.0, 1),
    }
    assert all(p.scenario.engine.name == "inline" for p in plan.points)


# --------------------------------------------------------------------------- Ray


@pytest.mark.slow
@pytest.mark.ray
def test_simulation_sweep_starts_ray_once_and_matches_inline(tmp_path, monkeypatch):
    import flwr.simulation

    starts = []
    real = flwr.simulation.run_simulation

    def counting(*args, **kwargs):
        starts.append(kwargs.get("num_supernodes"))
        return real(*args, **kwargs)

    monkeypatch.setattr(flwr.simulation, "run_simulation", counting)
    sim_overrides = ["engine.name=simulation", "engine.ray_num_cpus=2"]
    sim = sw.run_sweep(sw.expand(tiny(seeds=[0, 1], name="sim"), sim_overrides), tmp_path)
    assert [r.status for r in sim.points] == ["ok", "ok"], [r.error for r in sim.points]
    assert starts == [2] and sim.simulation_starts == 1
    inline = sw.run_sweep(sw.expand(tiny(seeds=[0, 1], name="inl")), tmp_path)
    assert starts == [2]
    for s, i in zip(sim.points, inline.points, strict=True):
        assert s.summary["engine"] == "simulation" and i.summary["engine"] == "inline"
        assert s.summary["results"] == i.summary["results"]

"""Hardening (first-user audit): data and validation defects, each refused in one clear line.

- user tables with missing cells are refused by default (file, column, count);
  ``missing: drop | mean`` say what to do instead, and the dropped rows are
  logged and recorded in ``clients.json``;
- impossible partitions name the field and the limit (``num_clients=200
  exceeds the 112 training rows of iris``) when the data is built, before any
  client runs, or at validation when the params alone show it;
- a strategy whose learner lacks its handlers, or a model fed data it cannot
  read, is refused by ``validate`` in one line naming both components;
- duplicate YAML keys, widths of zero and malformed summary names are refused
  with their key path.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from conftest import tiny_scenario

from flowerbed.core import registry
from flowerbed.core.plugins import component_source, load_plugins
from flowerbed.core.scenario import (
    MetricsConfig,
    ScenarioError,
    apply_overrides,
    from_dict,
    read_yaml,
    summary_problem,
    validate_scenario,
)
from flowerbed.data.base import Dataset, DatasetMeta, DataSourceError
from flowerbed.data.federated import federated_data
from flowerbed.platform.cli import main

load_plugins()


def dataset(name: str, seed: int = 0, **params: Any) -> Dataset:
    spec = registry.get("dataset", name).params(name=name, **params)
    built: Dataset = registry.build("dataset", spec, seed=seed)
    return built


def partition(name: str, data: Dataset, num_clients: int, **params: Any) -> Any:
    spec = registry.get("partition", name).params(name=name, **params)
    return registry.build("partition", spec, data=data, num_clients=num_clients, seed=0)


def problems(data: dict[str, Any]) -> list[str]:
    with pytest.raises(ScenarioError) as info:
        validate_scenario(data)
    return info.value.problems


# --- 2. rows silently dropped from user tables -----------------------------------------------


def _table(tmp_path: Path, kind: str, frame: Any) -> str:
    path = tmp_path / f"t.{kind}"
    if kind == "csv":
        frame.to_csv(path, index=False)
    else:
        frame.to_parquet(path)
    return str(path)


def _frame(n: int = 100, missing_x: int = 22, missing_y: int = 0) -> Any:
    """``n`` rows, ``missing_x`` of them with an empty ``x2`` cell, ``missing_y`` without label."""
    import pandas as pd

    gen = np.random.default_rng(0)
    frame = pd.DataFrame({
        "x1": gen.standard_normal(n), "x2": gen.standard_normal(n),
        "label": np.where(np.arange(n) % 2, "cat", "dog").astype(object),
    })
    frame.loc[: missing_x - 1, "x2"] = np.nan
    if missing_y:
        frame.loc[n - missing_y :, "label"] = None
    return frame


@pytest.mark.parametrize("kind", ["csv", "parquet"])
def test_table_with_missing_features_is_refused_naming_file_column_and_count(tmp_path, kind):
    path = _table(tmp_path, kind, _frame())
    with pytest.raises(DataSourceError) as info:
        dataset(kind, path=path, target="label")
    message = str(info.value)
    assert path in message and "'x2'" in message and "22" in message
    assert "missing" in message and "\n" not in message


@pytest.mark.parametrize("kind", ["csv", "parquet"])
def test_table_with_empty_targets_is_refused(tmp_path, kind):
    path = _table(tmp_path, kind, _frame(missing_x=0, missing_y=7))
    with pytest.raises(DataSourceError, match=r"'label'.*\b7\b"):
        dataset(kind, path=path, target="label")


def test_csv_empty_cells_and_infinities_count_as_missing(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("a,b,y\n1,2,0\n,3,1\n4,inf,0\n5,6,1\n7,8,0\n")
    with pytest.raises(DataSourceError) as info:
        dataset("csv", path=str(path), target="y")
    assert "'a': 1" in str(info.value) and "'b': 1" in str(info.value)


def test_missing_defaults_to_error():
    from flowerbed.data.table_data import TableParams

    assert TableParams(path="x.csv", target="y").missing == "error"


@pytest.mark.parametrize("kind", ["csv", "parquet"])
def test_missing_drop_drops_logs_and_counts(tmp_path, kind, caplog):
    path = _table(tmp_path, kind, _frame(missing_y=3))
    # The CLI stops "flowerbed" propagating to the root logger: listen on it directly.
    logger = logging.getLogger("flowerbed")
    logger.addHandler(caplog.handler)
    try:
        with caplog.at_level(logging.WARNING, logger="flowerbed"):
            data = dataset(kind, path=path, target="label", missing="drop")
    finally:
        logger.removeHandler(caplog.handler)
    assert len(data.y_train) + len(data.y_test) == 100 - 22 - 3
    assert any("25" in r.getMessage() and path in r.getMessage() for r in caplog.records)
    from flowerbed.data.table_data import dropped_rows

    assert dropped_rows(data.meta) == 25


def test_missing_mean_fills_features_with_training_means(tmp_path):
    path = _table(tmp_path, "csv", _frame(missing_y=3))
    data = dataset("csv", path=path, target="label", missing="mean", standardize=False)
    assert len(data.y_train) + len(data.y_test) == 97  # rows without a label cannot be filled
    assert np.isfinite(data.x_train).all() and np.isfinite(data.x_test).all()
    from flowerbed.data.table_data import dropped_rows

    assert dropped_rows(data.meta) == 3


def test_complete_table_reports_no_dropped_rows(tmp_path):
    from flowerbed.data.table_data import dropped_rows

    data = dataset("csv", path=_table(tmp_path, "csv", _frame(missing_x=0)), target="label")
    assert dropped_rows(data.meta) == 0
    assert dropped_rows(dataset("iris").meta) is None


def test_dropped_rows_are_recorded_in_clients_json(tmp_path):
    from flowerbed.platform.server import client_table
    from flowerbed.strategies.base import ServerContext

    path = _table(tmp_path, "csv", _frame())
    scenario = from_dict(tiny_scenario(
        dataset={"name": "csv", "path": path, "target": "label", "missing": "drop"},
        partition="iid", num_clients=2, baselines=[],
    ))
    rows = client_table(ServerContext(scenario, None))  # type: ignore[arg-type]
    assert [r["dataset_dropped_rows"] for r in rows] == [22, 22]
    complete = from_dict(tiny_scenario(partition="iid", num_clients=2))
    assert "dataset_dropped_rows" not in client_table(ServerContext(complete, None))[0]  # type: ignore[arg-type]


# --- 5. impossible partitions --------------------------------------------------------------

ROW_PARTITIONERS = [
    "iid", "dirichlet", "pathological", "shard", "size_skew", "quantity_skew",
    "feature_subsets", "domain_shift", "label_and_domain_shift", "fewshot_dirichlet",
]


@pytest.fixture(scope="module")
def iris() -> Dataset:
    return dataset("iris")


@pytest.mark.parametrize("name", ROW_PARTITIONERS)
def test_more_clients_than_rows_names_num_clients_and_the_limit(iris, name):
    with pytest.raises(ValueError, match=r"num_clients=200 exceeds the \d+ .*rows"):
        partition(name, iris, 200)


def test_federated_data_checks_num_clients_before_partitioning():
    scenario = from_dict(tiny_scenario(num_clients=100_000, partition="iid"))
    with pytest.raises(ValueError, match="num_clients=100000 exceeds the 1347 training rows of "
                                         "digits"):
        federated_data(scenario)


@pytest.mark.parametrize(
    ("name", "clients", "params", "needle"),
    [
        ("pathological", 4, {"num_classes_per_partition": 5},
         r"partition\.num_classes_per_partition=5 exceeds the 3 classes of iris"),
        ("pathological", 100, {"num_classes_per_partition": 3},
         r"partition\.num_classes_per_partition=3.*num_clients=100.*class"),
        ("shard", 20, {"num_shards_per_partition": 10},
         r"partition\.num_shards_per_partition=10 x num_clients=20 .*112 training rows"),
        ("shard", 5, {"num_shards_per_partition": 2, "shard_size": 20},
         r"partition\.shard_size=20 .* needs 200 training rows; iris has 112"),
        ("dirichlet", 20, {"min_partition_size": 10},
         r"partition\.min_partition_size=10 x num_clients=20 needs 200 training rows; iris has "
         r"112"),
        ("dirichlet", 20, {"alpha": 0.01, "min_partition_size": 3},
         r"partition\.min_partition_size=3.*partition\.alpha=0\.01"),
        ("label_and_domain_shift", 20, {"min_partition_size": 10},
         r"partition\.min_partition_size=10 x num_clients=20"),
        ("quantity_skew", 60, {"min_size": 2},
         r"partition\.min_size=2 x num_clients=60 needs 120 training rows; iris has 112"),
        ("size_skew", 20, {"law": "exponential"},
         r"partition\.law=exponential.*num_clients=20"),
        ("feature_subsets", 2, {"subsets": [[0, 9], [1, 2, 3]]},
         r"partition\.subsets\[0\]: column 9 .* 4 features of iris"),
        ("feature_subsets", 2, {"subsets": [[0], [1]]},
         r"partition\.subsets.*features \[2, 3\]"),
        ("feature_subsets", 4, {"features_per_client": 1, "shuffle_features": False},
         None),  # four clients, four features, one each: possible
        ("fewshot_dirichlet", 3, {"num_shots": 100},
         r"partition\.num_shots=100 .*class 0 has 38 training rows"),
        ("domain_shift", 2, {"space": "image"}, r"partition\.space=image"),
        ("natural_id", 3, {}, r"natural_id .*'iris' has none"),
    ],
)
def test_impossible_partition_names_the_field_and_the_limit(iris, name, clients, params, needle):
    if needle is None:
        assert len(partition(name, iris, clients, **params).indices) == clients
        return
    with pytest.raises(ValueError, match=needle) as info:
        partition(name, iris, clients, **params)
    assert type(info.value).__name__ != "IndexError" and "\n" not in str(info.value)


def test_natural_id_with_fewer_ids_than_clients_names_num_clients(tmp_path):
    import pandas as pd

    frame = pd.DataFrame({"x": np.arange(30.0), "y": [0, 1] * 15, "site": [1, 2, 3] * 10})
    path = _table(tmp_path, "csv", frame)
    data = dataset("csv", path=path, target="y", group="site")
    with pytest.raises(ValueError, match=r"num_clients=5 .*3 natural ids.*set num_clients: 3"):
        partition("natural_id", data, 5)


def test_statically_impossible_partitions_are_refused_at_validation():
    bad = tiny_scenario(num_clients=4, partition={"name": "feature_subsets",
                                                   "subsets": [[0, 1], [2]]})
    assert problems(bad) == ["partition.subsets: lists 2 clients; num_clients=4"]
    (msg,) = problems(tiny_scenario(partition={"name": "feature_subsets", "subsets": [[0], []]}))
    assert msg.startswith("partition.subsets[1]")
    (msg,) = problems(tiny_scenario(num_clients=4, partition={"name": "domain_shift",
                                                               "num_domains": 6}))
    assert msg.startswith("partition.num_domains: 6 domains for num_clients=4")


def test_run_with_too_many_clients_fails_at_data_build_in_one_line(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(tiny_scenario(
        dataset="iris", num_clients=200, partition="iid", baselines=[], output_dir=str(tmp_path)
    )))
    assert main(["validate", str(path)]) == 0  # the row count is known once the data is built
    capsys.readouterr()
    assert main(["run", str(path), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "num_clients=200 exceeds the 112 training rows of iris" in err
    assert "Traceback" not in err and "IndexError" not in err
    (run_dir,) = (p for p in (tmp_path / "tiny").iterdir() if p.is_dir())
    assert not (run_dir / "clients.json").exists()  # failed before any client was set up


# --- 6. mismatched components ---------------------------------------------------------------


def test_fqr_with_sgd_is_one_line_naming_both():
    found = problems(tiny_scenario(strategy="fqr", baselines=[]))
    assert len(found) == 1
    assert found[0].startswith("strategy: ") and "'fqr'" in found[0] and "'sgd'" in found[0]
    assert "query.fqr_fit" in found[0]


@pytest.mark.parametrize("data", ["iris", "digits", {"name": "csv", "path": "t.csv",
                                                       "target": "y"}])
def test_transformer_on_tabular_data_is_one_line_naming_both(data, tmp_path):
    if isinstance(data, dict):  # validation checks that the table exists
        (tmp_path / data["path"]).write_text("x,y\n1,0\n")
        data = {**data, "path": str(tmp_path / data["path"])}
    found = problems(tiny_scenario(dataset=data, model="transformer", baselines=[]))
    assert len(found) == 1
    name = data if isinstance(data, str) else data["name"]
    assert found[0].startswith("model: ") and "'transformer'" in found[0]
    assert f"'{name}'" in found[0] and "vocab_size" not in found[0]


def test_models_accept_the_data_they_are_meant_for():
    tokens = {"name": "multiscale_majority", "n_train": 40, "n_test": 20}
    from_dict(tiny_scenario(dataset=tokens, model={"name": "transformer", "vocab_size": 12},
                            partition="iid"))
    from_dict(tiny_scenario(dataset="iris", model="linear"))
    from_dict(tiny_scenario(dataset=tokens, model="mlp", partition="iid"))


def _project(kind: str) -> list[registry.Entry]:
    return [e for e in registry.entries(kind) if component_source(kind, e.name) != "?"]


def _offered() -> set[str]:
    caps: set[str] = set()
    for entry in registry.entries("learner"):
        caps |= set(entry.target.capabilities())
    return caps


def _needs(entry: registry.Entry) -> set[str]:
    return {c for r in entry.requires for c in ((r,) if isinstance(r, str) else r)}


@pytest.mark.parametrize("entry", _project("strategy"), ids=lambda e: e.name)
def test_every_strategy_declares_what_it_needs_of_the_learner(entry):
    assert entry.requires, f"strategy {entry.name!r} declares no requires"
    unknown = _needs(entry) - _offered() - set(registry.CAPABILITY_TEXT)
    assert not unknown, f"strategy {entry.name!r} needs {unknown}, which no learner offers"


@pytest.mark.parametrize("entry", _project("model"), ids=lambda e: e.name)
def test_every_model_declares_the_data_it_reads(entry):
    assert entry.requires, f"model {entry.name!r} declares no data kind"
    assert _needs(entry) <= set(registry.DATA_TEXT)


def test_every_dataset_provides_a_known_data_kind():
    for entry in registry.entries("dataset"):
        assert entry.provides and set(entry.provides) <= set(registry.DATA_TEXT), entry.name


# --- 7. mistakes accepted in silence ---------------------------------------------------------


def _write(tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


BASE = "name: x\ndataset: digits\nlearner:\n  name: sgd\n  lr: 0.1\nstrategy: fedavg\n"


@pytest.mark.parametrize(
    ("text", "path", "line"),
    [
        (BASE + "rounds: 2\nrounds: 3\n", "rounds", 8),
        (BASE.replace("  lr: 0.1\n", "  lr: 0.1\n  lr: 0.5\n"), "learner.lr", 6),
        (BASE + "baselines:\n  - {name: centralized, name: local_only}\n", "baselines[0].name", 8),
        (BASE + "dataset: iris\n", "dataset", 7),
        (BASE + "sweep:\n  grid:\n    seed: [0, 1]\n    seed: [2]\n", "sweep.grid.seed", 10),
    ],
)
def test_duplicate_yaml_keys_are_refused_with_line_and_key_path(tmp_path, text, path, line):
    with pytest.raises(ScenarioError) as info:
        read_yaml(_write(tmp_path, text))
    (msg,) = info.value.problems
    assert msg.startswith(f"{path}: duplicate key") and f"line {line}" in msg


def test_duplicate_keys_in_a_sweep_file_are_refused(tmp_path):
    from flowerbed.platform.sweep.plan import load_plan

    text = yaml.safe_dump(tiny_scenario()) + "sweep:\n  grid:\n    seed: [0]\n    seed: [1]\n"
    with pytest.raises(ScenarioError, match=r"sweep\.grid\.seed: duplicate key"):
        load_plan(_write(tmp_path, text))


def test_duplicate_keys_in_a_set_value_are_refused():
    with pytest.raises(ScenarioError, match="duplicate key"):
        apply_overrides(tiny_scenario(), ["learner={name: sgd, name: fedavg}"])


def test_cli_validate_names_a_duplicate_key(tmp_path, capsys):
    path = _write(tmp_path, yaml.safe_dump(tiny_scenario()) + "seed: 9\n")
    assert main(["validate", str(path)]) == 1
    err = capsys.readouterr().err
    assert "seed: duplicate key" in err and "Traceback" not in err


def test_merge_keys_and_anchors_are_not_duplicates(tmp_path):
    text = ("base: &b {lr: 0.1, batch_size: 8}\nname: x\ndataset: digits\nstrategy: fedavg\n"
            "learner:\n  <<: *b\n  name: sgd\n  lr: 0.2\n")
    data = read_yaml(_write(tmp_path, text))
    assert data["learner"] == {"lr": 0.2, "batch_size": 8, "name": "sgd"}


@pytest.mark.parametrize(
    ("model", "path"),
    [
        ({"name": "mlp", "hidden": [0]}, "model.hidden[0]"),
        ({"name": "mlp", "hidden": [16, -4]}, "model.hidden[1]"),
        ({"name": "mlp", "hidden": []}, "model.hidden"),
        ({"name": "early_exit_mlp", "hidden": [8, 0, 8]}, "model.hidden[1]"),
        ({"name": "transformer", "hipe_sigmas": []}, "model"),
    ],
)
def test_zero_negative_or_missing_layer_widths_are_refused(model, path):
    found = problems(tiny_scenario(model=model, baselines=[]))
    assert any(p.startswith(f"{path}:") for p in found), found


def test_malformed_summary_names_are_refused_at_validation():
    (msg,) = problems(tiny_scenario(metrics={"summary": ["accuracy", "test/"]}))
    assert msg.startswith("metrics.summary[1]:")


def test_summary_names_no_phase_produced_are_listed_with_those_that_exist():
    config = MetricsConfig(summary=("accuracy", "acuracy", "local_test/f1"))
    summary = {"results": {"federated": {"test/accuracy": 0.9, "test/loss": 0.3},
                           "centralized": {"test/accuracy": 0.95}}}
    rows = [{"round": 1, "phase": "evaluate", "evaluate/local_test/accuracy": 0.8},
            {"round": 1, "phase": "train", "event": "replies", "ok": 2}]
    line = summary_problem(config, summary, rows)
    assert line is not None and "\n" not in line
    assert "'acuracy'" in line and "'local_test/f1'" in line and "'accuracy'" not in line
    assert "test/accuracy" in line and "local_test/accuracy" in line  # what exists
    assert summary_problem(MetricsConfig(), summary, rows) is None


def test_run_with_an_unknown_summary_name_saves_everything_and_warns(tmp_path, capsys):
    """A finished run with a typo in what to display exits 0 with a warning (was: exit 1)."""
    path = tmp_path / "s.yaml"
    scenario = tiny_scenario(num_clients=2, rounds=1, baselines=[], output_dir=str(tmp_path),
                             metrics={"summary": ["accuracy", "acuracy"]})
    path.write_text(yaml.safe_dump(scenario))
    status = main(["run", str(path), "--quiet"])
    err = capsys.readouterr().err
    (run_dir,) = (p for p in (tmp_path / "tiny").iterdir() if p.is_dir())
    assert json.loads((run_dir / "summary.json").read_text())["results"]
    assert status == 0 and "'acuracy'" in err
    (line,) = [ln for ln in err.splitlines() if "acuracy" in ln]
    assert line.startswith("warning: metrics.summary: no phase produced 'acuracy'")
    assert "test/accuracy" in line  # the metrics the run did produce, to pick from


def test_dataset_meta_is_unchanged_for_complete_tables(tmp_path):
    data = dataset("csv", path=_table(tmp_path, "csv", _frame(missing_x=0)), target="label")
    assert isinstance(data.meta, DatasetMeta) and data.meta.source.startswith("user csv file")


def test_cli_validate_data_finds_a_partition_that_cannot_be_drawn(tmp_path, capsys):
    scenario = tiny_scenario(partition={"name": "dirichlet", "alpha": 0.05,
                                        "min_partition_size": 300})
    path = _write(tmp_path, yaml.safe_dump(scenario))
    assert main(["validate", str(path)]) == 0  # the schema alone cannot know the data
    capsys.readouterr()
    assert main(["validate", "--data", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "data: partition.min_partition_size=300 not met" in err


def test_cli_validate_data_reports_the_client_sizes(tmp_path, capsys):
    path = _write(tmp_path, yaml.safe_dump(tiny_scenario()))
    assert main(["validate", "--data", str(path)]) == 0
    out = capsys.readouterr().out
    sizes = [len(rows) for rows in federated_data(from_dict(tiny_scenario())).local_train]
    assert f"4 clients, {min(sizes)}-{max(sizes)} training rows each" in out
    # Independent of the partition code: the default Dirichlet minimum (10 rows) holds,
    # and no client holds more than the dataset's rows.
    low, high = (int(v) for v in out.split("clients, ")[1].split(" training")[0].split("-"))
    assert 10 <= low <= high <= 1797

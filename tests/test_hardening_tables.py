"""Hardening, second round: a user's own table never silently changes (issue items 1, 3, 4).

- text natural ids (site names) are a normal ``group`` column: the run works,
  the data cache stores them, ``clients.json`` keeps each client's name;
- a column the features would use that holds text, or numbers beyond
  ``float32``, is refused naming the file, the column and its first bad rows;
  dropping such a column happens only when the scenario asks for it (listed
  ``features``, or ``drop_non_numeric: true``), and is logged;
- nonsense is refused: a one-class or continuous classification target, a
  text regression target, ``target`` equal to ``group``, a file pandas cannot
  read, a boolean given for a number.

Every test here failed on the code before this round (each says how).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import tiny_scenario

from flowerbed.core import registry
from flowerbed.core.plugins import load_plugins
from flowerbed.core.scenario import ScenarioError, from_dict, validate_scenario
from flowerbed.data import federated_cache
from flowerbed.data.base import Dataset, DatasetMeta, DataSourceError, Partition
from flowerbed.platform.cli import main

load_plugins()

SITES = ("hosp_A", "hosp_B", "hosp_C")


def _frame(n: int = 90, seed: int = 0) -> Any:
    """``n`` rows: numeric ``f0..f2``, a text label and a text site column."""
    import pandas as pd

    gen = np.random.default_rng(seed)
    x = gen.standard_normal((n, 3))
    frame = pd.DataFrame(x, columns=["f0", "f1", "f2"])
    frame["label"] = np.where(x[:, 0] > 0, "sick", "healthy")
    frame["site"] = [SITES[i % len(SITES)] for i in range(n)]
    return frame


def _write(tmp_path: Path, frame: Any, kind: str = "csv") -> str:
    path = tmp_path / f"t.{kind}"
    if kind == "csv":
        frame.to_csv(path, index=False)
    else:
        frame.to_parquet(path)
    return str(path)


def _build(path: str, kind: str = "csv", **params: Any) -> Dataset:
    spec = registry.get("dataset", kind).params(
        name=kind, path=path, **{"target": "label", "group": "site", **params}
    )
    built: Dataset = registry.build("dataset", spec, seed=0)
    return built


def _refused(path: str, **params: Any) -> str:
    with pytest.raises(DataSourceError) as info:
        _build(path, **params)
    text = str(info.value)
    assert "\n" not in text and path in text, text
    return text


# --- 1. text natural ids ----------------------------------------------------------------


def test_text_natural_ids_survive_the_data_cache(tmp_path, monkeypatch):
    """Site names are an object column in pandas; ``np.save(allow_pickle=False)`` refused it.

    Before: ``ValueError: Object arrays cannot be saved when allow_pickle=False``.
    """
    monkeypatch.setenv("FLOWERBED_CACHE", str(tmp_path / "cache"))
    groups = np.array(["hosp_A", "hosp_B", 3], dtype=object)
    meta = DatasetMeta("t", "classification", 1, 2)
    x, y = np.zeros((3, 1), np.float32), np.array([0, 1, 0])
    data = Dataset(x, y, x, y, meta, groups)
    part = Partition([np.array([0]), np.array([1, 2])])
    federated_cache.write("k", data, part, part.indices, [np.array([], np.int64)] * 2)
    stored = federated_cache.read("k")
    assert stored is not None
    assert stored[0].groups_train is not None
    assert stored[0].groups_train.tolist() == ["hosp_A", "hosp_B", "3"]


@pytest.mark.parametrize("kind", ["csv", "parquet"])
def test_run_with_site_names_as_natural_ids_keeps_the_names(tmp_path, kind, capsys):
    """End to end on both table formats: the run ends (exit 0), ``clients.json`` names each site."""
    path = _write(tmp_path, _frame(), kind)
    scenario = tiny_scenario(
        num_clients=3, rounds=1, baselines=[], partition={"name": "natural_id"},
        dataset={"name": kind, "path": path, "target": "label", "group": "site"},
        output_dir=str(tmp_path / "runs"),
    )
    file = tmp_path / "s.yaml"
    file.write_text(json.dumps(scenario))
    assert main(["run", str(file), "--quiet"]) == 0, capsys.readouterr().err
    (clients_file,) = (tmp_path / "runs").glob("*/*/clients.json")
    clients = json.loads(clients_file.read_text())
    assert [c["domain"] for c in clients] == [f"id {s}" for s in SITES]


# --- 3. text and huge cells in feature columns --------------------------------------------


@pytest.mark.parametrize("kind", ["csv", "parquet"])
def test_a_few_text_cells_in_a_feature_column_are_refused_naming_rows(tmp_path, kind):
    """Before: the column silently left the default features (``inspect``: 2/3 features).

    (Parquet holds such a column as text throughout: numbers written as strings.)
    """
    frame = _frame()
    frame["f1"] = frame["f1"].astype(str if kind == "parquet" else object)
    frame.loc[[4, 60], "f1"] = ["n/a?", "abc"]
    path = _write(tmp_path, frame, kind)
    text = _refused(path, kind=kind)
    assert "'f1'" in text and "row 5: 'n/a?'" in text and "row 61: 'abc'" in text
    assert "drop_non_numeric" in text


def test_a_wholly_text_column_is_refused_unless_dropping_is_asked_for(tmp_path, caplog):
    """Before: a text column left the default features without a line."""
    frame = _frame()
    frame["note"] = "hello"
    path = _write(tmp_path, frame)
    assert "'note'" in _refused(path)
    with caplog.at_level(logging.WARNING, logger="flowerbed.data"):
        data = _build(path, drop_non_numeric=True)
    assert data.meta.feature_names == ("f0", "f1", "f2")
    assert any("'note'" in r.getMessage() and "left out" in r.getMessage()
               for r in caplog.records)


def test_listing_the_features_leaves_other_columns_out_deliberately(tmp_path):
    frame = _frame()
    frame["note"] = "hello"
    data = _build(_write(tmp_path, frame), features=["f0", "f2"])
    assert data.meta.feature_names == ("f0", "f2")


def test_a_listed_feature_with_text_is_refused_even_with_drop_non_numeric(tmp_path):
    frame = _frame()
    frame["f2"] = frame["f2"].astype(object)
    frame.loc[7, "f2"] = "x"
    text = _refused(_write(tmp_path, frame), features=["f0", "f2"], drop_non_numeric=True)
    assert "'f2'" in text and "row 8: 'x'" in text


def test_values_beyond_float32_are_refused_instead_of_overflowing(tmp_path):
    """Before: +-1e308 overflowed the z-scoring (a RuntimeWarning) and zeroed the feature."""
    frame = _frame()
    frame.loc[[2, 3], "f0"] = [1e308, -1e308]
    text = _refused(_write(tmp_path, frame))
    assert "'f0'" in text and "row 3: 1e+308" in text and "row 4: -1e+308" in text


# --- 4. nonsense targets, roles and files -----------------------------------------------------


def test_a_one_class_target_is_refused(tmp_path):
    """Before: accepted, accuracy 1.0 and loss 0.0."""
    frame = _frame()
    frame["label"] = "healthy"
    assert "one class ('healthy'" in _refused(_write(tmp_path, frame))


def test_a_continuous_target_under_classification_is_refused(tmp_path):
    """Before: 90 distinct floats became 90 classes."""
    frame = _frame()
    frame["label"] = np.random.default_rng(1).standard_normal(len(frame))
    text = _refused(_write(tmp_path, frame))
    assert "non-integer" in text and "task: regression" in text


def test_an_id_column_as_classification_target_is_refused(tmp_path):
    frame = _frame()
    frame["label"] = np.arange(len(frame))
    text = _refused(_write(tmp_path, frame))
    assert f"{len(frame)} distinct values" in text


def test_integer_class_codes_are_classes(tmp_path):
    """Integer codes (also written as 0.0 / 1.0) stay a valid classification target."""
    frame = _frame()
    frame["label"] = (frame["f0"] > 0).astype(float)
    assert _build(_write(tmp_path, frame)).meta.num_classes == 2


def test_a_text_target_under_regression_names_the_column(tmp_path):
    """Before: ``ValueError: could not convert string to float: 'sick'``, no file or column."""
    text = _refused(_write(tmp_path, _frame()), task="regression")
    assert "target column 'label'" in text and "row 1:" in text


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"", "the file is empty"),  # before: EmptyDataError: No columns to parse from file
        (b"\x89PNG\x00\x01\xff\xfe", "not UTF-8"),  # before: a raw UnicodeDecodeError
        (b"f0,f1,label\n", "no data rows"),  # before: "feature columns must be numeric"
    ],
)
def test_unreadable_or_empty_files_are_one_line_naming_the_file(tmp_path, content, needle):
    path = tmp_path / "t.csv"
    path.write_bytes(content)
    assert needle in _refused(str(path))


def test_a_folder_given_as_the_table_is_named_as_a_folder(tmp_path):
    """Before: a folder was reported as 'file not found'."""
    assert "is a folder" in _refused(str(tmp_path))


def _problems(**dataset: Any) -> list[str]:
    with pytest.raises(ScenarioError) as info:
        validate_scenario(tiny_scenario(dataset={"name": "csv", **dataset}))
    return info.value.problems


def test_validate_refuses_a_missing_table_and_one_column_in_two_roles(tmp_path):
    """Before: ``validate`` said ok to both (the file was first opened by ``run``)."""
    path = _write(tmp_path, _frame())
    missing = str(tmp_path / "nope.csv")
    assert _problems(path=missing, target="label") == [f"dataset.path: {missing}: no such file"]
    (line,) = _problems(path=path, target="site", group="site")
    assert line.startswith("dataset.group: 'site' is also the target")
    (line,) = _problems(path=path, target="label", features=["f0", "label"])
    assert line == "dataset.features: lists 'label', the target column"


# --- 4. booleans are not numbers ------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"rounds": True}, "rounds: input should be a valid integer (got true, a boolean)"),
        ({"learner": {"name": "sgd", "lr": True}},
         "learner.lr: input should be a valid number (got true, a boolean)"),
        ({"model": {"name": "mlp", "hidden": [16, False]}},
         "model.hidden[1]: input should be a valid integer (got false, a boolean)"),
    ],
)
def test_a_boolean_is_not_a_number(changes, problem):
    """Before: ``rounds: true`` ran one round and ``lr: true`` trained at 1.0."""
    with pytest.raises(ScenarioError) as info:
        validate_scenario(tiny_scenario(**changes))
    assert info.value.problems == [problem]


def test_booleans_still_go_where_booleans_belong():
    scenario = from_dict(tiny_scenario(clients={"keep_state": False}))
    assert scenario.clients.keep_state is False

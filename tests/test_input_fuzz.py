"""Property-based scenario input: every invalid scenario is one ``ScenarioError``, never a crash.

Each test starts from fully resolved valid scenarios (every default spelt
out, so every nesting level is reachable), breaks one thing, and checks that
validation raises :class:`ScenarioError` with one single-line problem per
issue, one of which names the broken field's YAML path. Validation only:
nothing runs, so the ~800 generated cases take seconds.
"""

from __future__ import annotations

import builtins
import copy
import functools
import io
import os
import string
import tempfile
import typing
from pathlib import Path
from typing import Any

import annotated_types as at
import pytest
import yaml
from conftest import tiny_scenario
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from flowerbed.core import registry
from flowerbed.core.plugins import load_plugins
from flowerbed.core.scenario import (
    COMPONENT_FIELDS,
    ScenarioError,
    apply_overrides,
    from_dict,
    read_yaml,
    validate_scenario,
)
from flowerbed.platform.cli import main

Path_ = tuple[Any, ...]


def fast(examples: int, *checks: HealthCheck) -> settings:
    """Validation-only budget: ``examples`` cases, no deadline (the machine is shared)."""
    return settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, *checks],
    )


#: Valid scenarios covering several strategies, learners, datasets and engines.
BASES = [
    tiny_scenario(),
    tiny_scenario(
        engine={"name": "simulation", "ray_num_cpus": 2, "client_resources": {"num_cpus": 0.5}},
        learner={"name": "faulty_sgd", "fail_clients": [1], "fault": "nan"},
        strategy={"name": "oneshot_average"},
        baselines=["centralized", "local_only"],
        clients={"availability": {"dropout": 0.2}},
    ),
    tiny_scenario(dataset={"name": "iris"}, partition={"name": "iid"}, model={"name": "linear"}),
]


@functools.cache
def resolved() -> list[dict[str, Any]]:
    """The base scenarios with every default filled in."""
    return [from_dict(b).to_dict() for b in BASES]


def yaml_path(path: Path_) -> str:
    """``("model", "hidden", 0)`` -> ``model.hidden[0]`` (how problems name fields)."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def walk(node: Any, path: Path_ = ()) -> list[tuple[Path_, Any]]:
    """Every (path, value) below ``node``, containers included, root excluded."""
    found: list[tuple[Path_, Any]] = []
    items = node.items() if isinstance(node, dict) else enumerate(node)
    for key, value in items:
        found.append(((*path, key), value))
        if isinstance(value, (dict, list)) and value:
            found.extend(walk(value, (*path, key)))
    return found


def get(data: Any, path: Path_) -> Any:
    for part in path:
        data = data[part]
    return data


def replaced(data: dict[str, Any], path: Path_, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(data)
    get(out, path[:-1])[path[-1]] = value
    return out


def field_info(scenario: BaseModel, path: Path_) -> Any:
    """The pydantic ``FieldInfo`` behind a path of the validated scenario (None for items)."""
    obj: Any = scenario
    info = None
    for part in path:
        if isinstance(obj, BaseModel) and isinstance(part, str):
            info = type(obj).model_fields[part]
            obj = getattr(obj, part)
        else:
            info, obj = None, obj[part]
    return info


def assert_one_line_problems(data: Any, path: str) -> list[str]:
    """Validation fails with single-line problems, one of which names ``path``."""
    with pytest.raises(ScenarioError) as info:
        validate_scenario(data)
    found = info.value.problems
    assert found, "a ScenarioError must list its problems"
    assert all("\n" not in p and p for p in found), found
    assert "Traceback" not in str(info.value)
    assert any(path in p for p in found), (path, found)
    return found


# --- generated mutations ------------------------------------------------------------

IDENT = st.from_regex(r"\A[a-z][a-z0-9_]{0,14}\Z")
base_index = st.integers(0, len(BASES) - 1)


def _wrong_values(value: Any) -> list[Any]:
    """Values of a type the field cannot take, given the valid value it holds."""
    if isinstance(value, bool):
        return ["maybe", [1], {"bad": 1}]
    if isinstance(value, (int, float)):
        return ["abc", [1], {"bad": 1}, "1e"]
    if isinstance(value, str):
        return [[1, 2], {"bad": 1}]
    if isinstance(value, list):
        return ["abc", 7, {"bad": 1}] if value else [7, "abc"]
    if isinstance(value, dict):
        return [5, "", [1]] if "name" not in value else [5, [1]]
    return [{"bad": [1]}]  # a None default: Optional[...] never takes a dict with this key


@st.composite
def wrong_type(draw: st.DrawFn) -> tuple[dict[str, Any], str]:
    data = resolved()[draw(base_index)]
    path, value = draw(st.sampled_from(walk(data)))
    return replaced(data, path, draw(st.sampled_from(_wrong_values(value)))), yaml_path(path)


def _dict_paths(data: dict[str, Any]) -> list[Path_]:
    return [(), *(p for p, v in walk(data) if isinstance(v, dict))]


@st.composite
def unknown_key(draw: st.DrawFn) -> tuple[dict[str, Any], str]:
    data = resolved()[draw(base_index)]
    path = draw(st.sampled_from(_dict_paths(data)))
    node = get(data, path)
    key = draw(IDENT.filter(lambda k: k not in node))
    out = copy.deepcopy(data)
    get(out, path)[key] = draw(st.integers() | st.text(max_size=5))
    return out, yaml_path((*path, key))


def _component_paths(data: dict[str, Any]) -> list[Path_]:
    paths: list[Path_] = [(f,) for f in COMPONENT_FIELDS if isinstance(data.get(f), dict)]
    paths += [("baselines", i) for i in range(len(data["baselines"]))]
    return [*paths, ("engine",)]


@st.composite
def unknown_name(draw: st.DrawFn) -> tuple[dict[str, Any], str]:
    data = resolved()[draw(base_index)]
    path = draw(st.sampled_from(_component_paths(data)))
    taken = {n for kind in registry.KINDS for n in registry.names(kind)}
    bad = draw(
        (IDENT | st.text(string.printable, min_size=1, max_size=12)).filter(
            lambda n: n not in taken and n not in ("inline", "simulation", "deployment")
        )
    )
    return replaced(data, (*path, "name"), bad), yaml_path((*path, "name"))


@functools.cache
def _required_paths(index: int) -> list[Path_]:
    """Fields a scenario cannot omit: top-level ones, and the tag of multi-choice components.

    A field the schema fills in before validating (``partition`` defaults to
    ``iid``) is required by the model yet may be omitted, so each is tried.
    """
    data = resolved()[index]
    model = type(from_dict(data))
    top = [
        (n,)
        for n, f in model.model_fields.items()
        if f.is_required() and n in data and _fails_without(data, n)
    ]
    tags = [
        (*p, "name")
        for p in _component_paths(data)
        if p[0] != "engine" and len(registry.names(_kind(p[0]))) > 1
    ]
    return top + tags


def _fails_without(data: dict[str, Any], key: str) -> bool:
    try:
        validate_scenario({k: v for k, v in data.items() if k != key})
    except ScenarioError:
        return True
    return False


def _kind(field: str) -> str:
    return COMPONENT_FIELDS.get(field, "baseline")


@st.composite
def missing_field(draw: st.DrawFn) -> tuple[dict[str, Any], str]:
    index = draw(base_index)
    data = resolved()[index]
    path = draw(st.sampled_from(_required_paths(index)))
    out = copy.deepcopy(data)
    del get(out, path[:-1])[path[-1]]
    # A missing component tag is reported on the component (``learner.name: missing``).
    return out, yaml_path(path)


@functools.cache
def _bounded_leaves(index: int) -> list[tuple[Path_, Any]]:
    """Numeric fields with bounds (``gt``, ``ge``, ``lt``, ``le``) and each bound."""
    data = resolved()[index]
    scenario = from_dict(data)
    out = []
    for path, value in walk(data):
        info = field_info(scenario, path)
        metadata = getattr(info, "metadata", [])
        bounds = [m for m in metadata if isinstance(m, at.Gt | at.Ge | at.Lt | at.Le)]
        if bounds and (value is None or isinstance(value, (int, float))):
            out.extend((path, b) for b in bounds)
    return out


def _outside(bound: Any, step: float) -> float:
    """A number violating ``bound`` by ``step`` (>= 0; strict bounds accept 0)."""
    if isinstance(bound, at.Gt):
        return bound.gt - step
    if isinstance(bound, at.Ge):
        return bound.ge - step - 1
    if isinstance(bound, at.Lt):
        return bound.lt + step
    return bound.le + step + 1


@st.composite
def out_of_range(draw: st.DrawFn) -> tuple[dict[str, Any], str]:
    index = draw(base_index)
    data = resolved()[index]
    path, bound = draw(st.sampled_from(_bounded_leaves(index)))
    value = _outside(bound, draw(st.integers(0, 10**6)))
    return replaced(data, path, value), yaml_path(path)


# --- the properties -------------------------------------------------------------------


@fast(150)
@given(wrong_type())
def test_wrong_type_anywhere_names_the_field(case):
    assert_one_line_problems(*case)


@fast(120)
@given(unknown_key())
def test_unknown_key_at_any_level_names_the_key(case):
    data, path = case
    found = assert_one_line_problems(data, path)
    assert any(p.startswith(f"{path}: unknown field") for p in found), found


@fast(80)
@given(unknown_name())
def test_unknown_component_or_engine_name_is_named(case):
    data, path = case
    found = assert_one_line_problems(data, path)
    assert any("unknown" in p or "not available" in p for p in found), found


@fast(40)
@given(missing_field())
def test_missing_required_field_is_named(case):
    data, path = case
    found = assert_one_line_problems(data, path)
    assert any("missing" in p for p in found), found


@fast(120)
@given(out_of_range())
def test_out_of_range_value_is_named(case):
    assert_one_line_problems(*case)


@st.composite
def several_wrong_types(draw: st.DrawFn) -> tuple[dict[str, Any], list[str]]:
    """2-4 wrong-typed fields, each under a different top-level key (so none hides another)."""
    data = resolved()[draw(base_index)]
    leaves = walk(data)
    tops = draw(
        st.lists(
            st.sampled_from(sorted({str(p[0]) for p, _ in leaves})),
            min_size=2,
            max_size=4,
            unique=True,
        )
    )
    out, paths = data, []
    for top in tops:
        path, value = draw(st.sampled_from([(p, v) for p, v in leaves if p[0] == top]))
        out = replaced(out, path, draw(st.sampled_from(_wrong_values(value))))
        paths.append(yaml_path(path))
    return out, paths


@fast(60)
@given(several_wrong_types())
def test_several_problems_are_all_reported(case):
    """Problems in different places are all listed at once, each naming its field."""
    data, paths = case
    for path in paths:
        assert_one_line_problems(data, path)


# --- YAML text and files ----------------------------------------------------------------

BREAKERS = ["key: [unclosed", "key: 'unterminated", "a: b: c", "{", "- item", "  : x", "]"]


def _load(text: bytes) -> None:
    """read_yaml + validate, as ``flowerbed validate`` does, on a throwaway file."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "s.yaml"
        path.write_bytes(text)
        validate_scenario(read_yaml(path), str(path))


@fast(80)
@given(base_index, st.sampled_from(BREAKERS), st.integers(0, 200))
def test_malformed_yaml_is_one_error_naming_the_line(index, breaker, where):
    lines = yaml.safe_dump(resolved()[index], sort_keys=False).splitlines()
    at_line = where % (len(lines) + 1)
    text = "\n".join([*lines[:at_line], breaker, *lines[at_line:]]) + "\n"
    with pytest.raises(ScenarioError) as info:
        _load(text.encode())
    found = info.value.problems
    assert all("\n" not in p for p in found)
    assert any(p.startswith("line ") or ":" in p for p in found), found


@fast(80)
@given(st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_arbitrary_file_content_never_escapes_as_another_exception(blob):
    """Bytes that are not UTF-8, not YAML, or not a mapping all end as ScenarioError."""
    with pytest.raises(ScenarioError) as info:
        _load(blob)
    assert all("\n" not in p for p in info.value.problems)


def test_deeply_nested_and_non_utf8_files_are_scenario_errors():
    for blob, needle in [(b"[" * 1000, "nested too deeply"), (b"name: \xff\xfe\n", "not UTF-8")]:
        with pytest.raises(ScenarioError, match=needle):
            _load(blob)


@fast(50)
@given(
    st.lists(IDENT, min_size=1, max_size=3).map(".".join),
    st.sampled_from(["abc", "-1", "[1, 2]", "{a: 1}", "", "1e9"]),
)
def test_set_overrides_never_crash(key, value):
    """``--set`` onto unknown or scalar paths is a ScenarioError or a valid scenario."""
    try:
        from_dict(apply_overrides(resolved()[0], [f"{key}={value}"]))
    except ScenarioError as exc:
        assert all("\n" not in p for p in exc.problems)
        assert any(key.split(".")[0] in p for p in exc.problems), exc.problems


# --- the CLI ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (yaml.safe_dump(tiny_scenario(rounds=0)), "rounds: "),
        (yaml.safe_dump({**tiny_scenario(), "learner": {"name": "sgd", "lr": "x"}}), "learner.lr"),
        (yaml.safe_dump(tiny_scenario(strategy="fedavgg")), "strategy.name: unknown"),
        ("name: x\nlearner: [\n", "malformed YAML"),
        ("- 1\n- 2\n", "must be a YAML mapping"),
    ],
)
@pytest.mark.parametrize(("command", "status"), [("validate", 1), ("run", 2)])
def test_cli_reports_bad_files_without_traceback(tmp_path, capsys, text, needle, command, status):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    assert main([command, str(path)]) == status
    out = capsys.readouterr()
    assert needle in out.err and "Traceback" not in out.err + out.out


@fast(30, HealthCheck.function_scoped_fixture)
@given(case=st.one_of(wrong_type(), unknown_key(), unknown_name(), out_of_range()))
def test_cli_validate_on_generated_bad_files(capsys, case):
    data, path = case
    with tempfile.TemporaryDirectory() as folder:
        file = Path(folder) / "bad.yaml"
        file.write_text(yaml.safe_dump(data, sort_keys=False))
        assert main(["validate", str(file)]) == 1
    err = capsys.readouterr().err
    assert path in err and "Traceback" not in err


# --- the file system ----------------------------------------------------------------------
#
# Each case breaks one path a command needs (the scenario file, or the output folder
# a run writes into) and must give exit 2 and one line naming that path, before any
# data is built: never a traceback, never a problem found after minutes of work.

FS_COMMANDS = ["run", "validate", "sweep", "inspect"]


def _valid_file(folder: Path) -> Path:
    path = folder / "ok.yaml"
    path.write_text(yaml.safe_dump({**tiny_scenario(), "sweep": {"seeds": [0, 1]}}))
    return path


def _plain_file(folder: Path) -> Path:
    path = folder / "plain"
    path.write_text("not a folder\n")
    return path


def _unwritable_folder(folder: Path) -> Path:
    """A folder nobody may create entries in: chmod 555, or for root a kernel file system."""
    if os.geteuid() != 0:
        target = folder / "read_only"
        target.mkdir()
        target.chmod(0o555)
        return target / "runs"
    for candidate in (Path("/sys/flowerbed-fuzz"), Path("/proc/flowerbed-fuzz")):
        try:
            candidate.mkdir()
        except OSError:
            return candidate
        candidate.rmdir()
    pytest.skip("no read-only place to write to (root on a writable /sys and /proc)")


def _unreadable(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """chmod 000, or, for root (who reads anything), an ``open`` that refuses this one file."""
    if os.geteuid() != 0:
        path.chmod(0)
        return
    real_open = builtins.open

    def refusing_open(file: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(file, (str, os.PathLike)) and os.fspath(file) == str(path):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", refusing_open)


def _scenario_case(kind: str, folder: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    if kind == "folder":
        path = folder / "scenario.yaml"
        path.mkdir()
    elif kind == "missing":
        path = folder / "missing.yaml"
    elif kind == "below_a_file":
        path = _plain_file(folder) / "scenario.yaml"
    else:
        path = _valid_file(folder)
        _unreadable(path, monkeypatch)
    return path


def _output_case(kind: str, folder: Path) -> Path:
    if kind == "file":
        return _plain_file(folder)
    if kind == "below_a_file":
        return _plain_file(folder) / "runs"
    return _unwritable_folder(folder)


@pytest.fixture
def no_data(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail loudly if a command builds data before checking its paths."""
    import flowerbed.data.federated as federated
    import flowerbed.platform.inspect as inspect_cmd

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("data was built before the paths were checked")

    monkeypatch.setattr(federated, "federated_data", refuse)
    monkeypatch.setattr(inspect_cmd, "federated_data", refuse)


def _assert_one_line_naming(capsys: pytest.CaptureFixture[str], path: Path) -> str:
    out = capsys.readouterr()
    lines = [ln for ln in out.err.splitlines() if ln.strip()]
    assert len(lines) == 1, out.err
    assert str(path) in lines[0], lines
    assert "Traceback" not in out.err + out.out
    return lines[0]


@pytest.mark.usefixtures("no_data")
@pytest.mark.parametrize("kind", ["folder", "missing", "below_a_file", "unreadable"])
@pytest.mark.parametrize("command", FS_COMMANDS)
def test_unusable_scenario_path_is_one_line_and_exit_2(
    tmp_path, capsys, monkeypatch, command, kind
):
    path = _scenario_case(kind, tmp_path, monkeypatch)
    assert main([command, str(path)]) == 2
    _assert_one_line_naming(capsys, path)


@pytest.mark.usefixtures("no_data")
@pytest.mark.parametrize("how", ["--set", "--output-dir"])
@pytest.mark.parametrize("kind", ["file", "below_a_file", "read_only"])
@pytest.mark.parametrize("command", FS_COMMANDS)
def test_unusable_output_folder_is_one_line_and_exit_2(tmp_path, capsys, command, kind, how):
    if how == "--output-dir" and command == "validate":
        pytest.skip("validate has no --output-dir")
    scenario = _valid_file(tmp_path)
    root = _output_case(kind, tmp_path)
    given = ["--set", f"output_dir={root}"] if how == "--set" else ["--output-dir", str(root)]
    assert main([command, str(scenario), *given]) == 2
    _assert_one_line_naming(capsys, root)
    assert not any(p.name == "tiny" for p in tmp_path.rglob("tiny")), "no run folder expected"


def test_validate_checks_every_file_and_exits_with_the_worst_status(tmp_path, capsys):
    good = _valid_file(tmp_path)
    folder = tmp_path / "folder.yaml"
    folder.mkdir()
    assert main(["validate", str(good), str(folder)]) == 2
    out = capsys.readouterr()
    assert f"{good}: ok" in out.out and str(folder) in out.err


# --- data and component mistakes ---------------------------------------------------------
#
# Each case makes a mistake found only beside the data or another component: a table
# with empty cells, a partition the rows cannot give, two components that cannot work
# together, a key written twice. Each must end as one clear line naming the field (or
# both components), never as a traceback from deep inside a library.


def _table_file(folder: Path, x: Any, y: Any) -> Path:
    import pandas as pd

    frame = pd.DataFrame({f"f{j}": x[:, j] for j in range(x.shape[1])})
    frame["target"] = y
    path = folder / "t.csv"
    frame.to_csv(path, index=False)
    return path


@st.composite
def holey_table(draw: st.DrawFn) -> tuple[Any, Any]:
    """A regression table of 4-30 rows, 1-3 features, with at least one empty cell."""
    import numpy as np

    n, d = draw(st.integers(4, 30)), draw(st.integers(1, 3))
    gen = np.random.default_rng(draw(st.integers(0, 2**16)))
    x, y = gen.standard_normal((n, d)), gen.standard_normal(n)
    holes = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, d)), min_size=1,
                          max_size=n))
    for row, col in holes:
        if col == d:
            y[row] = np.nan
        else:
            x[row, col] = draw(st.sampled_from([np.nan, np.inf, -np.inf]))
    return x, y


@fast(60)
@given(holey_table(), st.sampled_from(["error", "drop", "mean"]))
def test_tables_with_missing_values_are_refused_dropped_or_filled(table, missing):
    import numpy as np

    from flowerbed.data.base import DataSourceError

    x, y = table
    bad_x, bad_y = ~np.isfinite(x), np.isnan(y)
    with tempfile.TemporaryDirectory() as folder:
        path = _table_file(Path(folder), x, y)
        spec = registry.get("dataset", "csv").params(
            name="csv", path=str(path), target="target", task="regression", missing=missing
        )
        try:
            data = registry.build("dataset", spec, seed=0)
        except DataSourceError as exc:
            text = str(exc)
            assert "\n" not in text and str(path) in text
            if missing == "error":
                for j in np.flatnonzero(bad_x.any(axis=0)):
                    assert f"'f{j}': {int(bad_x[:, j].sum())}" in text, text
                if bad_y.any():
                    assert f"'target': {int(bad_y.sum())}" in text, text
            return
    assert missing != "error", "a table with empty cells loaded under missing: error"
    kept = ~bad_y if missing == "mean" else ~(bad_y | bad_x.any(axis=1))
    assert len(data.y_train) + len(data.y_test) == int(kept.sum())
    assert np.isfinite(data.x_train).all() and np.isfinite(data.x_test).all()
    from flowerbed.data.table_data import dropped_rows

    assert dropped_rows(data.meta) == len(y) - int(kept.sum())


@st.composite
def stray_text_table(draw: st.DrawFn) -> tuple[Any, dict[int, list[int]], Any]:
    """A regression table, 1-4 feature columns, some holding stray text or huge numbers.

    Returns the frame, ``{column: text rows}`` and ``{column: huge rows}``.
    """
    import numpy as np
    import pandas as pd

    n, d = draw(st.integers(4, 30)), draw(st.integers(1, 4))
    gen = np.random.default_rng(draw(st.integers(0, 2**16)))
    frame = pd.DataFrame(gen.standard_normal((n, d)), columns=[f"f{j}" for j in range(d)])
    frame["target"] = gen.standard_normal(n)
    text: dict[int, list[int]] = {}
    huge: dict[int, list[int]] = {}
    for j in range(d):
        kind = draw(st.sampled_from(["clean", "text", "huge"]))
        rows = sorted(set(draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=n))))
        if kind == "text":
            frame[f"f{j}"] = frame[f"f{j}"].astype(object)
            for i in rows:
                frame.loc[i, f"f{j}"] = draw(st.sampled_from(["n/a?", "abc", "1,5", "--"]))
            text[j] = rows
        elif kind == "huge":
            for i in rows:
                frame.loc[i, f"f{j}"] = draw(st.sampled_from([1e39, -1e308, 3.5e38]))
            huge[j] = rows
    return frame, text, huge


@fast(60)
@given(stray_text_table(), st.booleans())
def test_tables_with_text_or_huge_cells_are_refused_or_dropped_deliberately(table, drop):
    """A column with text (or numbers a float32 cannot hold) never leaves silently.

    Refused naming the file, the column and its first bad row; with
    ``drop_non_numeric: true`` exactly the text columns leave the features.
    """
    from flowerbed.data.base import DataSourceError

    frame, text, huge = table
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "t.csv"
        frame.to_csv(path, index=False)
        spec = registry.get("dataset", "csv").params(
            name="csv", path=str(path), target="target", task="regression",
            drop_non_numeric=drop,
        )
        kept = [f"f{j}" for j in range(frame.shape[1] - 1) if j not in text]
        try:
            data = registry.build("dataset", spec, seed=0)
        except DataSourceError as exc:
            message = str(exc)
            assert "\n" not in message and str(path) in message, message
            if "no numeric feature column" in message:  # every column was text, all dropped
                assert drop and not kept, message
                return
            named = [j for j in (*text, *huge) if f"column 'f{j}'" in message]
            assert len(named) == 1, message
            (j,) = named
            rows = text.get(j) if j in text and not drop else huge.get(j)
            assert rows is not None, message
            assert f"row {rows[0] + 1}:" in message, message
            return
    assert not huge and (drop or not text), (text, huge)
    assert list(data.meta.feature_names) == kept


@fast(60)
@given(base_index, st.data())
def test_a_boolean_for_a_number_anywhere_is_named(index, data):
    """``true`` where a number goes is refused at its path, never read as 1."""
    scenario = resolved()[index]
    validated = from_dict(scenario)
    numbers = [
        path for path, value in walk(scenario)
        if isinstance(value, (int, float)) and not isinstance(value, bool)
        and (info := field_info(validated, path)) is not None
        and bool not in typing.get_args(info.annotation) and info.annotation is not bool
    ]
    path = data.draw(st.sampled_from(numbers))
    found = assert_one_line_problems(replaced(scenario, path, data.draw(st.booleans())),
                                     yaml_path(path))
    assert any("a boolean" in p for p in found), found


#: Partitioners that split rows of any labelled dataset (natural_id needs group ids).
SPLITTERS = ["iid", "dirichlet", "pathological", "shard", "size_skew", "quantity_skew",
             "feature_subsets", "domain_shift", "label_and_domain_shift", "fewshot_dirichlet"]


def _toy(n: int, classes: int, seed: int) -> Any:
    import numpy as np

    from flowerbed.data.base import Dataset, DatasetMeta

    gen = np.random.default_rng(seed)
    y = np.arange(n) % classes  # every class present
    x = gen.standard_normal((n, 3)).astype(np.float32)
    meta = DatasetMeta(name="toy", task="classification", num_features=3, num_classes=classes)
    return Dataset(x, y.astype(np.int64), x[:4], y[:4].astype(np.int64), meta)


@st.composite
def hard_partition(draw: st.DrawFn) -> tuple[str, dict[str, Any], int, int, int]:
    """A partitioner, extreme params, and a client count from 1 to three times the rows."""
    name = draw(st.sampled_from(SPLITTERS))
    fields = registry.get("partition", name).params.model_fields
    knobs = {
        "min_partition_size": st.integers(0, 40), "num_classes_per_partition": st.integers(1, 6),
        "num_shards_per_partition": st.integers(1, 30), "min_size": st.integers(0, 20),
        "shard_size": st.none() | st.integers(1, 20), "num_shots": st.integers(1, 20),
        "features_per_client": st.none() | st.integers(1, 4),
        "alpha": st.sampled_from([0.01, 0.5, 100.0]), "num_domains": st.none() | st.integers(1, 5),
    }
    for choice in ("law", "class_assignment_mode"):  # every value of the Literal
        if choice in fields:
            knobs[choice] = st.sampled_from(typing.get_args(fields[choice].annotation))
    params = {k: draw(v) for k, v in knobs.items() if k in fields}
    n = draw(st.integers(6, 60))
    return name, params, n, draw(st.integers(2, 5)), draw(st.integers(1, 3 * n))


@fast(80)
@given(hard_partition())
def test_impossible_partitions_name_the_field_and_the_limit(case):
    name, params, n, classes, clients = case
    spec = registry.get("partition", name).params(name=name, **params)
    try:
        part = registry.build("partition", spec, data=_toy(n, classes, 0), num_clients=clients,
                              seed=0)
    except ValueError as exc:  # PartitionError or a task refusal, never IndexError & co
        text = str(exc)
        assert "\n" not in text and ("partition." in text or "num_clients=" in text), text
        if clients > n:
            assert f"num_clients={clients} exceeds the {n} training rows" in text, text
        return
    assert clients <= n, f"{name} gave {clients} clients from {n} rows"
    assert len(part.indices) == clients


def _validates_alone(kind: str, name: str) -> bool:
    """Whether the component's params validate with their defaults (no required field)."""
    try:
        registry.get(kind, name).params(name=name)
    except ValueError:
        return False
    return True


@st.composite
def component_pair(draw: st.DrawFn) -> tuple[str, str, str]:
    """Strategy x learner, or model x dataset, among those valid with default params."""
    load_plugins()
    if draw(st.booleans()):
        first = draw(st.sampled_from([n for n in registry.names("strategy")
                                      if _validates_alone("strategy", n)]))
        second = draw(st.sampled_from([n for n in registry.names("learner")
                                       if _validates_alone("learner", n)]))
        return "strategy", first, second
    first = draw(st.sampled_from(registry.names("model")))
    second = draw(st.sampled_from([n for n in registry.names("dataset")
                                   if _validates_alone("dataset", n)]))
    return "model", first, second


def _mismatch(field: str, first: str, second: str) -> bool:
    """Whether the declarations say the pair cannot work (computed apart from the code tested)."""
    if field == "model":
        needs = set(registry.get("model", first).requires)
        return not needs & set(registry.get("dataset", second).provides)
    wanted = registry.get("strategy", first).requires
    target = registry.get("learner", second).target
    if not wanted or not hasattr(target, "capabilities"):
        return False
    offered = set(target.capabilities())
    return not any(set((r,) if isinstance(r, str) else r) <= offered for r in wanted)


@fast(80)
@given(component_pair())
def test_mismatched_components_are_one_line_naming_both(pair):
    field, first, second = pair
    other = "learner" if field == "strategy" else "dataset"
    data = tiny_scenario(**{field: {"name": first}, other: {"name": second}}, baselines=[])
    try:
        validate_scenario(data)
        lines: list[str] = []
    except ScenarioError as exc:
        lines = [p for p in exc.problems if p.startswith(f"{field}: ")]
    if not _mismatch(field, first, second):
        assert not lines, lines
        return
    assert len(lines) == 1, lines
    assert f"'{first}'" in lines[0] and f"'{second}'" in lines[0] and "\n" not in lines[0]


def _node_at(node: yaml.Node, path: Path_) -> yaml.Node:
    for part in path:
        if isinstance(node, yaml.MappingNode):
            node = next(v for k, v in node.value if k.value == str(part))
        else:
            node = node.value[part]
    return node


def with_duplicate(data: dict[str, Any], path: Path_) -> str:
    """``data`` as YAML text with the key at ``path`` written a second time, last in its block."""
    node = yaml.SafeDumper(io.StringIO()).represent_data(data)
    parent = _node_at(node, path[:-1])
    pair = next(p for p in parent.value if p[0].value == str(path[-1]))
    parent.value.append(copy.deepcopy(pair))
    return yaml.serialize(node, Dumper=yaml.SafeDumper)


def _key_paths(data: dict[str, Any]) -> list[Path_]:
    """Every path that ends at a mapping key (not at a list item)."""
    return [p for p, _ in walk(data) if isinstance(p[-1], str)]


@fast(80)
@given(base_index, st.data())
def test_duplicate_keys_anywhere_are_one_line_with_the_key_path(index, drawn):
    data = resolved()[index]
    path = drawn.draw(st.sampled_from(_key_paths(data)))
    with tempfile.TemporaryDirectory() as folder:
        file = Path(folder) / "s.yaml"
        file.write_text(with_duplicate(data, path))
        with pytest.raises(ScenarioError) as info:
            read_yaml(file)
    (problem,) = info.value.problems
    assert problem.startswith(f"{yaml_path(path)}: duplicate key at line "), problem

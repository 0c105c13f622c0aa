"""Scenario schema: strict validation with one-line errors that name the YAML path."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import tiny_scenario

from flowerbed.core.scenario import (
    ScenarioError,
    apply_overrides,
    from_dict,
    load_scenario,
    read_yaml,
    validate_scenario,
)

QUICKSTART = Path(__file__).parents[1] / "scenarios" / "quickstart.yaml"


def problems(data: dict) -> list[str]:
    with pytest.raises(ScenarioError) as info:
        validate_scenario(data)
    return info.value.problems


def test_quickstart_validates_with_defaults_filled_in():
    s = load_scenario(QUICKSTART)
    assert s.num_clients == 10
    assert s.partition.alpha == 0.3
    assert s.engine.client_resources.num_cpus == 1
    assert s.federation.timeout == 600.0  # default written once, in the model
    assert [b.name for b in s.baselines] == ["centralized", "local_only"]


def test_typo_in_component_key_names_path_and_suggests():
    (msg,) = problems(tiny_scenario(strategy={"name": "fedavg", "fractoin_train": 0.5}))
    assert msg.startswith("strategy.fractoin_train: unknown field")
    assert "did you mean 'fraction_train'" in msg
    assert "\n" not in msg


def test_typo_in_top_level_key():
    data = tiny_scenario()
    data["seeed"] = 1
    (msg,) = problems(data)
    assert msg.startswith("seeed: unknown field") and "'seed'" in msg


def test_wrong_type_names_nested_path():
    (msg,) = problems(tiny_scenario(learner={"name": "sgd", "lr": "fast"}))
    assert msg.startswith("learner.lr: ") and "valid number" in msg


def test_out_of_range_value():
    (msg,) = problems(tiny_scenario(strategy={"name": "fedavg", "fraction_train": 2}))
    assert msg.startswith("strategy.fraction_train: ") and "less than or equal to 1" in msg


def test_unknown_component_name_lists_known_names():
    (msg,) = problems(tiny_scenario(strategy={"name": "fedavgg"}))
    assert msg.startswith("strategy.name: unknown strategy 'fedavgg'")
    assert "did you mean 'fedavg'" in msg and "known: " in msg and "fedavg" in msg


def test_unknown_baseline_in_list_names_index():
    (msg,) = problems(tiny_scenario(baselines=["centralized", "oracle"]))
    assert msg.startswith("baselines[1].name: unknown baseline 'oracle'")
    assert "centralized" in msg and "local_only" in msg


def test_missing_required_field():
    data = tiny_scenario()
    del data["learner"]
    assert problems(data) == ["learner: required field is missing"]


def test_every_problem_reported_at_once():
    data = tiny_scenario(rounds=0, num_clients="many", engine={"name": "ray"})
    found = problems(data)
    assert len(found) == 3
    assert {p.split(":")[0] for p in found} == {"rounds", "num_clients", "engine.name"}


def test_string_shorthand_for_components():
    s = from_dict(tiny_scenario(learner="sgd", strategy="fedavg"))
    assert s.learner.lr == 0.05 and s.strategy.fraction_train == 1.0


def test_scenario_is_frozen():
    s = from_dict(tiny_scenario())
    with pytest.raises(Exception, match="frozen"):
        s.rounds = 5  # type: ignore[misc]


def test_overrides_parse_yaml_values_and_create_blocks():
    data = apply_overrides(
        tiny_scenario(learner="sgd"), ["learner.lr=0.5", "rounds=7", "model.hidden=[4, 4]"]
    )
    assert data["learner"] == {"name": "sgd", "lr": 0.5}
    assert data["rounds"] == 7 and data["model"]["hidden"] == [4, 4]


def test_override_without_equals_is_a_clear_error():
    with pytest.raises(ScenarioError, match=r"expected key\.path=value"):
        apply_overrides({}, ["rounds"])


def test_override_into_a_value_names_the_key():
    with pytest.raises(ScenarioError) as info:
        apply_overrides(tiny_scenario(rounds=10), ["rounds.x=3"])
    assert info.value.problems == [
        "--set 'rounds.x=3': rounds is 10, a value, not a section; it has no key 'x'"
    ]


def test_digest_is_stable_and_sensitive():
    a = from_dict(tiny_scenario())
    assert a.digest() == from_dict(tiny_scenario()).digest()
    assert a.digest() != from_dict(tiny_scenario(seed=4)).digest()


def test_resolved_yaml_round_trips(tmp_path):
    s = from_dict(tiny_scenario())
    path = tmp_path / "s.yaml"
    path.write_text(s.to_yaml())
    assert load_scenario(path) == s


def test_malformed_yaml_names_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\n  learner: [\n")
    with pytest.raises(ScenarioError) as info:
        read_yaml(path)
    (msg,) = info.value.problems
    assert msg.startswith("line 2, column") and "malformed YAML" in msg


def test_missing_file_and_non_mapping(tmp_path):
    with pytest.raises(ScenarioError, match="file not found"):
        read_yaml(tmp_path / "nope.yaml")
    path = tmp_path / "list.yaml"
    path.write_text("- 1\n- 2\n")
    with pytest.raises(ScenarioError, match="must be a YAML mapping"):
        read_yaml(path)

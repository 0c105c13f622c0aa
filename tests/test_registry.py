"""Registry: explicit names, duplicate and unknown-name errors, and every entry usable."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from flowerbed.core import registry
from flowerbed.core.plugins import load_plugins
from flowerbed.core.registry import Params, UnknownComponentError, register, unregister

ROOT = Path(__file__).parents[1]
load_plugins()


def test_duplicate_registration_is_refused():
    with pytest.raises(ValueError, match="already registered"):
        register("strategy", "fedavg")(object)


def test_unknown_name_lists_known_names():
    with pytest.raises(UnknownComponentError) as info:
        registry.get("strategy", "nope")
    assert "unknown strategy 'nope'; known: " in str(info.value)
    assert "fedavg" in str(info.value)


def test_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="unknown registry kind"):
        register("widget", "x")


def test_registered_params_get_a_name_literal():
    class P(Params):
        k: int = 3

    @register("baseline", "throwaway", params=P)
    def throwaway(params, *, ctx):
        """A throwaway baseline."""

    try:
        entry = registry.get("baseline", "throwaway")
        assert entry.summary == "A throwaway baseline."
        assert entry.params(name="throwaway").k == 3
        with pytest.raises(ValueError):
            entry.params(name="other")
    finally:
        unregister("baseline", "throwaway")


@pytest.mark.parametrize("kind", registry.KINDS)
def test_every_entry_has_defaults_a_docstring_and_a_use(kind):
    """Each name validates with defaults, is described, and is used by a scenario or test."""
    used = "\n".join(
        p.read_text() for p in [*ROOT.glob("scenarios/**/*.yaml"), *ROOT.glob("tests/**/*.py")]
    )
    for entry in registry.entries(kind):
        assert entry.summary, f"{kind} {entry.name} has no docstring"
        required = [
            n for n, f in entry.params.model_fields.items() if f.is_required() and n != "name"
        ]
        if not required:
            entry.params(name=entry.name)
        assert entry.name in used, f"{kind} {entry.name!r} appears in no scenario or test"


def test_every_scenario_file_validates():
    from flowerbed.core.scenario import load_scenario

    files = sorted(ROOT.glob("scenarios/**/*.yaml"))
    assert files
    for path in files:
        data = yaml.safe_load(path.read_text())
        if "sweep" in data:
            continue  # sweep files are validated point by point in test_sweep
        load_scenario(path)


def test_a_tagged_union_outside_the_registry_gets_one_line_not_a_key_error():
    """A nested discriminated union (not a registry kind) names its tags instead of crashing."""
    from typing import Annotated, Literal, Union

    from pydantic import BaseModel, Field, ValidationError

    from flowerbed.core.scenario_checks import validation_line as _message

    class A(BaseModel):
        name: Literal["a"] = "a"

    class B(BaseModel):
        name: Literal["b"] = "b"

    class M(BaseModel):
        u: Annotated[Union[A, B], Field(discriminator="name")]  # noqa: UP007

    lines = []
    for data in ({"u": {"name": "c"}}, {"u": {}}):
        with pytest.raises(ValidationError) as err:
            M.model_validate(data)
        lines.append(_message(err.value.errors()[0], M, data))
    assert lines == ["u.name: unknown 'c'; known: 'a', 'b'", "u.name: required field is missing"]

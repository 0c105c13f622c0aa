"""What is wrong with a scenario, one line per problem, each naming its YAML path.

Two sources: pydantic's validation errors, turned into lines with known names
and did-you-mean hints (:func:`validation_line`), and problems only visible
across components, such as a strategy whose needs the learner does not meet
(:func:`capability_problems`, :func:`component_problems`).
"""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING, Any

from flowerbed.core import registry

if TYPE_CHECKING:
    from flowerbed.core.scenario import ScenarioBase

#: Scenario fields that name a registered component, mapped to their registry kind.
COMPONENT_FIELDS = {
    "dataset": "dataset",
    "partition": "partition",
    "model": "model",
    "learner": "learner",
    "strategy": "strategy",
}
LIST_COMPONENT_FIELDS = {"baselines": "baseline", "sinks": "sink"}


def _tag_at(data: Any, loc: tuple[Any, ...], i: int) -> bool:
    """Whether ``loc[i]`` is a discriminated-union tag pydantic inserted (not a key)."""
    node = data
    for item in loc[:i]:
        if isinstance(node, dict):
            node = node.get(item)
        elif isinstance(node, list) and isinstance(item, int) and item < len(node):
            node = node[item]
        else:
            return False
    return isinstance(node, dict) and node.get("name") == loc[i] and loc[i] not in node


def _path(loc: tuple[Any, ...], data: Any = None) -> str:
    """Join a pydantic location into a YAML path, dropping union tags."""
    parts: list[str] = []
    for i, item in enumerate(loc):
        if i and isinstance(item, str) and _tag_at(data, loc, i):
            continue
        if isinstance(item, int):
            parts[-1:] = [f"{parts[-1]}[{item}]"] if parts else [f"[{item}]"]
        else:
            parts.append(str(item))
    return ".".join(parts) or "(top level)"


def _known_fields(model: type[Any], loc: tuple[Any, ...], data: Any) -> list[str]:
    """Field names allowed where ``loc`` points (for did-you-mean hints on typos)."""
    target: Any = model
    rest = list(loc[:-1])
    kind = COMPONENT_FIELDS.get(loc[0]) or LIST_COMPONENT_FIELDS.get(loc[0])
    if kind and isinstance(data, dict):
        node = data.get(loc[0])
        rest = rest[1:]
        if isinstance(node, list) and rest and isinstance(rest[0], int) and rest[0] < len(node):
            node, rest = node[rest[0]], rest[1:]
        if not isinstance(node, dict) or "name" not in node:
            return []
        try:
            target = registry.get(kind, str(node["name"])).params
        except KeyError:
            return []
        rest = [r for r in rest if r != node["name"]]
    for key in rest:
        field = getattr(target, "model_fields", {}).get(key)
        target = getattr(field, "annotation", None)
    return sorted(getattr(target, "model_fields", {}))


def validation_line(err: dict[str, Any], model: type[Any], data: Any) -> str:
    """One pydantic error as one line naming its YAML path (known names, did-you-mean)."""
    loc = tuple(err["loc"])
    path = _path(loc, data)
    kind_field = str(loc[0]) if loc else ""
    etype = err["type"]
    kind = COMPONENT_FIELDS.get(kind_field) or LIST_COMPONENT_FIELDS.get(kind_field, "")
    # A single registered component is a plain model, not a union: its bad
    # name arrives as a literal error on ``name`` instead of a tag error.
    single_name = etype == "literal_error" and kind and loc[-1] == "name"
    if etype in ("union_tag_invalid", "union_tag_not_found") and not kind:
        # A tagged union that is not a registry kind: pydantic lists its tags.
        if etype == "union_tag_not_found":
            return f"{path}.name: required field is missing"
        expected = str(err["ctx"].get("expected_tags", ""))
        return f"{path}.name: unknown {err['ctx']['tag']!r}; known: {expected}"
    if etype == "union_tag_invalid" or single_name:
        tag = err["ctx"]["tag"] if etype == "union_tag_invalid" else err["input"]
        if single_name:
            path = path.removesuffix(".name")
        known = registry.names(kind)
        hint = registry.hints(kind).get(tag)
        if hint:
            return f"{path}.name: {kind} {tag!r} is not available: {hint}"
        close = difflib.get_close_matches(str(tag), known, n=1)
        mean = f" (did you mean {close[0]!r}?)" if close else ""
        return f"{path}.name: unknown {kind} {tag!r}{mean}; known: {', '.join(known)}"
    if etype == "union_tag_not_found":
        return f"{path}.name: missing; known {kind}s: {', '.join(registry.names(kind))}"
    if etype == "unknown_nested_field":  # a validator's own bad key, named by its path
        return f"{path}.{err['ctx']['field']}: {err['msg']}"
    if etype == "extra_forbidden":
        allowed = [f for f in _known_fields(model, loc, data) if f != "name"]
        close = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
        mean = f" (did you mean {close[0]!r}?)" if close else ""
        return f"{path}: unknown field{mean}; allowed: {', '.join(allowed)}"
    if etype == "missing":
        return f"{path}: required field is missing"
    if etype == "literal_error" and loc and loc[-1] == "name" and loc[0] == "engine":
        return f"{path}: unknown engine {err['input']!r}; known: inline, simulation, deployment"
    msg = str(err["msg"])
    msg = msg[0].lower() + msg[1:] if msg else msg
    return (
        f"{path}: {msg} (got {err['input']!r})"
        if "input" in err and not isinstance(err["input"], (dict, list))
        else f"{path}: {msg}"
    )


def capability_problems(scenario: ScenarioBase) -> list[str]:
    """One line per pair of components that cannot work together, naming both.

    A strategy or baseline whose needs the learner does not meet, a model
    that cannot read the dataset's rows (both from declarations: see
    :attr:`flowerbed.core.registry.Entry.requires`), a learner that trains a
    ``model:`` block the scenario lacks, and checkpoints asked of a strategy
    that cannot save them.
    """
    found = []
    why = registry.missing_capability("strategy", scenario.strategy, scenario.learner)
    if why:
        found.append(f"strategy: {why}")
    for i, spec in enumerate(scenario.baselines):
        why = registry.missing_capability("baseline", spec, scenario.learner)
        if why:
            found.append(f"baselines[{i}]: {why}")
    if scenario.model is not None:
        why = registry.missing_data("model", scenario.model, scenario.dataset)
        if why:
            found.append(f"model: {why}")
    learner = registry.get("learner", registry.name_of(scenario.learner)).target
    if scenario.model is None and getattr(learner, "needs_model", False):
        name = registry.name_of(scenario.learner)
        found.append(f"model: learner {name!r} needs a 'model:' block (e.g. model: mlp)")
    return found + checkpoint_problems(scenario)


def checkpoint_problems(scenario: ScenarioBase) -> list[str]:
    """``checkpoint.every`` asked of a strategy that cannot save checkpoints (its class says)."""

    def saves(target: Any) -> bool:
        return bool(getattr(target, "checkpointing", False))

    name = registry.name_of(scenario.strategy)
    if not scenario.checkpoint.every or saves(registry.get("strategy", name).target):
        return []
    able = [e.name for e in registry.entries("strategy") if saves(e.target)]
    return [
        f"checkpoint.every: strategy {name!r} does not save checkpoints "
        f"(strategies that do: {', '.join(able)}); set checkpoint.every: 0"
    ]


def component_problems(scenario: ScenarioBase) -> list[str]:
    """Problems a component's params show only beside the rest of the scenario.

    A component's params model may define ``scenario_problems(scenario)``,
    returning lines relative to its block (``subsets: lists 2 clients;
    num_clients=4``); each is reported under the component's field, or under
    ``<field>[<index>]`` in a list (a sink whose package is missing). A sink
    listed twice is one more problem.
    """
    found = []
    for field in COMPONENT_FIELDS:
        check = getattr(getattr(scenario, field), "scenario_problems", None)
        if callable(check):
            found += [f"{field}.{problem}" for problem in check(scenario)]
    for field in LIST_COMPONENT_FIELDS:
        for i, spec in enumerate(getattr(scenario, field)):
            check = getattr(spec, "scenario_problems", None)
            if callable(check):
                found += [f"{field}[{i}].{problem}" for problem in check(scenario)]
    return found + _repeated_sinks(scenario)


def _repeated_sinks(scenario: ScenarioBase) -> list[str]:
    """One line per sink listed twice (each writes its files once per run)."""
    first: dict[str, int] = {}
    found = []
    for i, spec in enumerate(scenario.sinks):
        name = registry.name_of(spec)
        if name in first:
            where = f"first at sinks[{first[name]}]"
            found.append(f"sinks[{i}]: sink {name!r} is listed twice ({where})")
        first.setdefault(name, i)
    return found

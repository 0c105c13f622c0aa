"""Scenario schema: strict, frozen pydantic models built from the registry."""

from __future__ import annotations

import difflib
import functools
import hashlib
import json
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import Field, ValidationError, create_model, field_validator, model_validator

from flowerbed.core import registry
from flowerbed.core.availability import AvailabilityParams
from flowerbed.core.registry import Params

#: Scenario fields that name a registered component, mapped to their registry kind.
COMPONENT_FIELDS = {
    "dataset": "dataset",
    "partition": "partition",
    "model": "model",
    "learner": "learner",
    "strategy": "strategy",
}
LIST_COMPONENT_FIELDS = {"baselines": "baseline"}


class ScenarioError(ValueError):
    """A scenario that cannot be loaded; one line per problem, each naming its path."""

    def __init__(self, problems: list[str], source: str = "scenario") -> None:
        self.problems = problems
        self.source = source
        super().__init__("\n".join(problems))

    def __str__(self) -> str:
        head = f"{self.source}: {len(self.problems)} problem(s)"
        return "\n".join([head, *(f"  {p}" for p in self.problems)])


class ClientResources(Params):
    """Resources Ray reserves for each simulated client (fractions allowed)."""

    num_cpus: float = Field(1.0, gt=0)
    num_gpus: float = Field(0.0, ge=0)


class Engine(Params):
    """How the federation executes: Flower simulation on Ray, in one process, or deployed.

    ``deployment`` runs ``flwr run`` against the SuperLink named ``connection``
    in ``<flwr_home>/config.toml`` (default ``$FLWR_HOME``, else ``~/.flwr``).
    """

    name: Literal["simulation", "inline", "deployment"] = "simulation"
    client_resources: ClientResources = ClientResources()
    ray_num_cpus: int | None = Field(None, ge=1, description="CPUs Ray may use (default: all)")
    connection: str = Field(
        "flowerbed-local", description="SuperLink connection name (deployment engine)"
    )
    flwr_home: str | None = Field(
        None, description="folder holding the CLI's config.toml (deployment engine)"
    )


class FederationConfig(Params):
    """Round-level messaging rules shared by every strategy."""

    timeout: float = Field(600.0, gt=0, description="seconds to wait for replies")
    min_replies: float = Field(
        1,
        gt=0,
        description="minimum successful replies per ask; a value < 1 is a fraction",
    )


class ClientsConfig(Params):
    """Per-client data handling and availability common to all datasets."""

    local_test_fraction: float = Field(0.2, ge=0, lt=1)
    availability: AvailabilityParams = AvailabilityParams()
    keep_state: bool = Field(
        True,
        description="keep each client's persistent state folder after the run "
        "(run folder's client_state/, or the SuperNode's state-dir); false deletes it at the end",
    )


class MetricsConfig(Params):
    """Which metrics the summary table shows and how often the server evaluates."""

    summary: tuple[str, ...] = ("accuracy", "loss")
    eval_every: int = Field(1, ge=1)

    def summary_keys(self) -> dict[str, str]:
        """Each summary name -> its metric key: a bare name is ``test/<name>``."""
        return {k: k if "/" in k else f"test/{k}" for k in self.summary}


class ScenarioBase(Params):
    """Fields every scenario has; component fields are added by :func:`scenario_model`."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    description: str = ""
    seed: int = Field(0, ge=0)
    num_clients: int = Field(10, ge=1)
    rounds: int = Field(1, ge=1)
    engine: Engine = Engine()
    federation: FederationConfig = FederationConfig()
    clients: ClientsConfig = ClientsConfig()
    metrics: MetricsConfig = MetricsConfig()
    output_dir: str = "runs"
    # Component fields; :func:`scenario_model` narrows each to the union of the
    # registered parameter models, discriminated by ``name``.
    dataset: Params
    partition: Params
    model: Params | None = None
    learner: Params
    strategy: Params
    baselines: list[Params] = []

    @field_validator("engine", mode="before")
    @classmethod
    def _engine_shorthand(cls, value: Any) -> Any:
        return {"name": value} if isinstance(value, str) else value

    @model_validator(mode="before")
    @classmethod
    def _component_shorthand(cls, data: Any) -> Any:
        """Accept ``learner: mlp`` for ``learner: {name: mlp}``."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        # Written here, not as a field default, so it is validated like any block.
        data.setdefault("partition", {"name": "iid"})
        for key in COMPONENT_FIELDS:
            if isinstance(data.get(key), str):
                data[key] = {"name": data[key]}
        for key in LIST_COMPONENT_FIELDS:
            if isinstance(data.get(key), list):
                data[key] = [{"name": v} if isinstance(v, str) else v for v in data[key]]
        return data

    def component(self, field: str) -> Params:
        """The validated params of component ``field`` (e.g. ``"learner"``)."""
        value: Params = getattr(self, field)
        return value

    def to_dict(self) -> dict[str, Any]:
        """Plain data (the form written to ``scenario.resolved.yaml``)."""
        return self.model_dump(mode="json")

    def to_yaml(self) -> str:
        """The fully resolved scenario, every default spelt out."""
        return yaml.safe_dump(self.to_dict(), sort_keys=False)

    def digest(self) -> str:
        """Short content hash of the resolved scenario (stable across processes)."""
        text = json.dumps(self.to_dict(), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:10]


# ``Scenario`` is the static type code annotates with; instances are of the
# dynamic subclass built from the registry, so components validate by name.
Scenario = ScenarioBase


def _union(kind: str) -> Any:
    models = [e.params for e in registry.entries(kind)]
    if not models:
        return Params
    if len(models) == 1:
        return models[0]
    return Annotated[Union[tuple(models)], Field(discriminator="name")]  # noqa: UP007


@functools.cache
def scenario_model() -> type[ScenarioBase]:
    """The scenario model for everything registered (plugins are imported first)."""
    from flowerbed.core.plugins import load_plugins

    load_plugins()
    fields: dict[str, Any] = {
        "dataset": (_union("dataset"), ...),
        "partition": (_union("partition"), ...),
        "model": (_union("model") | None, None),
        "learner": (_union("learner"), ...),
        "strategy": (_union("strategy"), ...),
        "baselines": (list[_union("baseline")], []),  # type: ignore[misc]
    }
    model: type[ScenarioBase] = create_model(  # type: ignore[call-overload]
        "Scenario", __base__=ScenarioBase, **fields
    )
    return model


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


def _message(err: dict[str, Any], model: type[Any], data: Any) -> str:
    loc = tuple(err["loc"])
    path = _path(loc, data)
    kind_field = str(loc[0]) if loc else ""
    etype = err["type"]
    kind = COMPONENT_FIELDS.get(kind_field) or LIST_COMPONENT_FIELDS.get(kind_field, "")
    # A single registered component is a plain model, not a union: its bad
    # name arrives as a literal error on ``name`` instead of a tag error.
    single_name = etype == "literal_error" and kind and loc[-1] == "name"
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


def validate_scenario(data: Any, source: str = "scenario") -> ScenarioBase:
    """Validate plain data into a scenario or raise :class:`ScenarioError`."""
    model = scenario_model()
    if not isinstance(data, dict):
        raise ScenarioError(["(top level): a scenario must be a YAML mapping"], source)
    try:
        scenario = model.model_validate(data)
    except ValidationError as exc:
        problems = [_message(dict(e), model, data) for e in exc.errors()]
        raise ScenarioError(list(dict.fromkeys(problems)), source) from None
    problems = capability_problems(scenario)
    if problems:
        raise ScenarioError(problems, source)
    return scenario


def capability_problems(scenario: ScenarioBase) -> list[str]:
    """One line per strategy or baseline whose needs the scenario's learner does not meet."""
    found = []
    why = registry.missing_capability("strategy", scenario.strategy, scenario.learner)
    if why:
        found.append(f"strategy: {why}")
    for i, spec in enumerate(scenario.baselines):
        why = registry.missing_capability("baseline", spec, scenario.learner)
        if why:
            found.append(f"baselines[{i}]: {why}")
    return found


def parse_override(text: str) -> tuple[list[str], Any]:
    """Split ``a.b.c=value`` into a key path and a YAML-parsed value."""
    if "=" not in text:
        raise ScenarioError([f"--set {text!r}: expected key.path=value"], "--set")
    key, _, raw = text.partition("=")
    path = key.strip().split(".")
    if not all(path):
        raise ScenarioError([f"--set {text!r}: empty key in {key!r}"], "--set")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return path, value


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Return a copy of ``data`` with each ``key.path=value`` applied."""
    out = json.loads(json.dumps(data))
    for text in overrides:
        path, value = parse_override(text)
        node = out
        for key in path[:-1]:
            child = node.get(key)
            if isinstance(child, str):
                # ``engine: inline`` / ``learner: sgd`` shorthand: keep the name.
                child = {"name": child}
            if not isinstance(child, dict):
                child = {}
            node[key] = child
            node = child
        node[path[-1]] = value
    return out


def read_yaml(path: str | Path) -> dict[str, Any]:
    """Read a scenario file into plain data, with errors that name the file."""
    p = Path(path)
    if not p.is_file():
        raise ScenarioError([f"file not found: {p}"], str(p))
    try:
        data = yaml.safe_load(p.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ScenarioError([f"{where}malformed YAML: {problem}"], str(p)) from None
    except UnicodeDecodeError as exc:
        raise ScenarioError([f"byte {exc.start}: not UTF-8 text ({exc.reason})"], str(p)) from None
    except RecursionError:
        raise ScenarioError(["(top level): malformed YAML: nested too deeply"], str(p)) from None
    if data is None:
        raise ScenarioError(["(top level): the file is empty"], str(p))
    if not isinstance(data, dict):
        raise ScenarioError(["(top level): a scenario must be a YAML mapping"], str(p))
    data.pop("sweep", None)
    return data


def load_scenario(path: str | Path, overrides: list[str] | None = None) -> ScenarioBase:
    """Load a scenario YAML file, apply ``--set`` overrides and validate it.

    Examples
    --------
    >>> s = load_scenario("scenarios/quickstart.yaml", ["rounds=2"])  # doctest: +SKIP
    >>> s.rounds  # doctest: +SKIP
    2
    """
    data = apply_overrides(read_yaml(path), overrides or [])
    return validate_scenario(data, str(path))


def from_dict(data: dict[str, Any], overrides: list[str] | None = None) -> ScenarioBase:
    """Validate a scenario given as a Python mapping (the API's entry point)."""
    return validate_scenario(apply_overrides(data, overrides or []))

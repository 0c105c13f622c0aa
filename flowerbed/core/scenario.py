"""Scenario schema: strict, frozen pydantic models built from the registry."""

from __future__ import annotations

import difflib
import functools
import hashlib
import json
import os
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import (
    AfterValidator,
    Field,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)

from flowerbed.core import registry
from flowerbed.core.attacks import AttackParams, NoAttack
from flowerbed.core.availability import AvailabilityParams
from flowerbed.core.checkpoints import CheckpointConfig
from flowerbed.core.registry import Params
from flowerbed.core.sinks import JSONL

#: Scenario fields that name a registered component, mapped to their registry kind.
COMPONENT_FIELDS = {
    "dataset": "dataset",
    "partition": "partition",
    "model": "model",
    "learner": "learner",
    "strategy": "strategy",
}
LIST_COMPONENT_FIELDS = {"baselines": "baseline", "sinks": "sink"}


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
    backend: Literal["auto", "process", "ray"] = Field(
        "auto",
        description="what runs the simulation's clients: local worker processes or Ray actors; "
        "auto: Ray when RAY_ADDRESS (or `flowerbed up`) names a cluster or a client asks for "
        "a GPU, else processes",
    )
    client_resources: ClientResources = ClientResources()
    ray_num_cpus: int | None = Field(
        None, ge=1, description="CPUs the simulation may use, either backend (default: all)"
    )
    connection: str = Field(
        "flowerbed-local", description="SuperLink connection name (deployment engine)"
    )
    flwr_home: str | None = Field(
        None, description="folder holding the CLI's config.toml (deployment engine)"
    )
    clients: Literal["auto", "nodes", "virtual"] = Field(
        "auto",
        description="how clients map to Flower nodes (simulation, inline): nodes, one node per "
        "client; virtual, a few worker nodes and the client id in each message; auto: virtual "
        "above 1,000 clients (see flowerbed.core.population); deployment always uses nodes",
    )

    @model_validator(mode="after")
    def _gpus_need_ray(self) -> Engine:
        if self.backend == "process" and self.client_resources.num_gpus > 0:
            raise ValueError(
                "engine.backend=process does not place clients on GPUs "
                "(engine.client_resources.num_gpus > 0): use backend ray or auto"
            )
        return self

    @model_validator(mode="after")
    def _virtual_clients_simulated(self) -> Engine:
        if self.name == "deployment" and self.clients == "virtual":
            raise ValueError(
                "engine.clients=virtual: a deployment keeps one SuperNode per client; "
                "use clients: auto or nodes"
            )
        return self

    def simulation_backend(self) -> str:
        """``process`` or ``ray``: what runs a ``simulation`` run's clients (``auto`` resolved).

        Read while the run starts, after ``flowerbed up``'s head has been put
        in ``RAY_ADDRESS``.
        """
        if self.backend != "auto":
            return self.backend
        if os.environ.get("RAY_ADDRESS") or self.client_resources.num_gpus > 0:
            return "ray"
        return "process"


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

    local_test_fraction: float = Field(
        0.2, ge=0, lt=1, description="share of each client's rows held out for its own evaluation"
    )
    availability: AvailabilityParams = AvailabilityParams()
    keep_state: bool = Field(
        True,
        description="keep each client's persistent state folder after the run "
        "(run folder's client_state/, or the SuperNode's state-dir); false deletes it at the end",
    )
    attack: AttackParams = Field(
        NoAttack(),
        description="malicious clients and their attack (see flowerbed.core.attacks)",
    )


def _metric_name(name: str) -> str:
    """A summary name: ``metric`` or ``split/metric``, no empty or space-padded part."""
    if any(not part or part != part.strip() for part in name.split("/")):
        raise ValueError(f"{name!r} is not a metric name (empty or space-padded part)")
    return name


class MetricsConfig(Params):
    """Which metrics the summary table shows and how often the server evaluates."""

    summary: tuple[Annotated[str, AfterValidator(_metric_name)], ...] = Field(
        ("accuracy", "loss"),
        description="metrics the summary table shows: a bare name is the test metric "
        "(accuracy: test/accuracy), split/name another split's or phase's",
    )
    eval_every: int = Field(1, ge=1, description="server evaluation every N rounds (and the last)")

    def summary_keys(self) -> dict[str, str]:
        """Each summary name -> its metric key: a bare name is ``test/<name>``."""
        return {k: k if "/" in k else f"test/{k}" for k in self.summary}


def produced_metrics(summary: dict[str, Any], rows: list[dict[str, Any]]) -> set[str]:
    """Metric keys (``split/metric``) a finished run produced, in any phase or result.

    ``summary`` is ``summary.json``'s content; ``rows`` are ``metrics.jsonl``'s
    rows, whose values are named ``<phase>/<split>/<metric>``.
    """
    results = (summary.get("results") or {}).values()
    found = {k for values in results if isinstance(values, dict) for k in values}
    for row in rows:
        if "event" not in row:
            found |= {k.split("/", 1)[1] for k in row if k.count("/") >= 2}
    return found


def summary_problem(
    config: MetricsConfig, summary: dict[str, Any], rows: list[dict[str, Any]]
) -> str | None:
    """One line naming the ``metrics.summary`` names no phase of the run produced, or ``None``.

    Which metrics a run produces depends on its strategy, learner and data,
    so this is checked once the run is over (everything is saved by then);
    the line lists what the run does have, to pick from.
    """
    produced = produced_metrics(summary, rows)
    missing = [name for name, key in config.summary_keys().items() if key not in produced]
    if not missing:
        return None
    names = ", ".join(repr(n) for n in missing)
    return (
        f"metrics.summary: no phase produced {names}; "
        f"this run has: {', '.join(sorted(produced)) or '(no metrics)'}"
    )


class ScenarioBase(Params):
    """Fields every scenario has; component fields are added by :func:`scenario_model`."""

    name: str = Field(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$",
        description="the scenario's name: its run folders go to <output_dir>/<name>/",
    )
    description: str = Field("", description="free text about the scenario (not in the digest)")
    seed: int = Field(0, ge=0, description="the root seed every random choice derives from")
    num_clients: int = Field(10, ge=1, description="clients (partitions) in the federation")
    rounds: int = Field(1, ge=1, description="server rounds of a round-based strategy")
    engine: Engine = Engine()
    federation: FederationConfig = FederationConfig()
    clients: ClientsConfig = ClientsConfig()
    metrics: MetricsConfig = MetricsConfig()
    checkpoint: CheckpointConfig = CheckpointConfig()
    output_dir: str = Field("runs", description="root folder of run folders")
    # Component fields; :func:`scenario_model` narrows each to the union of the
    # registered parameter models, discriminated by ``name``.
    dataset: Params = Field(description="where the rows come from")
    partition: Params = Field(description="how the training rows are split over the clients")
    model: Params | None = Field(
        None, description="the network a weights learner trains (none for learners without one)"
    )
    learner: Params = Field(description="what runs on each client")
    strategy: Params = Field(description="what runs on the server")
    baselines: list[Params] = Field(
        [], description="run beside the federation, on identical data and seeds"
    )
    #: Where rows go besides ``metrics.jsonl`` (``jsonl``, always on: added
    #: when not listed, so the resolved scenario names every sink).
    sinks: list[Params] = Field([], description="where rows go besides the run folder")

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
        sinks = data.get("sinks", [])
        if isinstance(sinks, list) and not any(
            isinstance(s, dict) and s.get("name") == JSONL for s in sinks
        ):
            # Appended, not prepended: the listed sinks keep their indices in errors.
            data["sinks"] = [*sinks, {"name": JSONL}]
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
        """Short hash of what decides the run's numbers (stable across processes).

        Left out, because they never change a result: where the run folder
        goes (``output_dir``), ``description``, ``clients.keep_state``, the
        summary table's columns (``metrics.summary``), where results are
        tracked besides the run folder (``sinks``), checkpoints (a resumed
        run ends bit for bit where an uninterrupted one does) and the engine (inline,
        simulation and deployment give the same numbers: see
        ``tests/test_simulation.py`` and ``tests/test_deploy.py``). Whether
        clients ask for a GPU stays in: on a GPU they compute differently.
        So a sweep resumes however its output folder is spelt or wherever
        it was moved, and equal digests mean equal results.
        """
        data = self.to_dict()
        for key in ("output_dir", "description", "engine", "sinks", "checkpoint"):
            data.pop(key, None)
        data["clients"].pop("keep_state", None)
        if data["clients"].get("attack") == {"name": "none"}:
            data["clients"].pop("attack")  # digests from before attacks existed still hold
        data["metrics"].pop("summary", None)
        data["clients_use_gpu"] = self.engine.client_resources.num_gpus > 0
        text = json.dumps(data, sort_keys=True)
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
        "sinks": (list[_union("sink")], []),  # type: ignore[misc]
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
    problems = capability_problems(scenario) + component_problems(scenario)
    if problems:
        raise ScenarioError(problems, source)
    return scenario


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


class DuplicateKeyError(yaml.YAMLError):
    """A mapping that writes one key twice (PyYAML would silently keep the last value)."""

    def __init__(self, path: str, line: int, first: int) -> None:
        self.path, self.line, self.first = path, line, first
        super().__init__(f"{path}: duplicate key at line {line} (first at line {first})")

    def problem(self) -> str:
        """The one-line problem, naming the key path and both lines."""
        return (
            f"{self.path}: duplicate key at line {self.line} (first at line {self.first}); "
            "write each key once"
        )


def _key_path(parent: str, key: Any) -> str:
    return f"{parent}.{key}" if parent else str(key)


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key written twice in one mapping.

    The check runs on the composed node tree, before any value is built, so it
    knows each key's path and line; merge keys (``<<: *base``) and the keys
    they bring in are not duplicates.
    """

    def construct_document(self, node: yaml.Node) -> Any:
        self._check_unique(node, "", set())
        return super().construct_document(node)

    def _check_unique(self, node: yaml.Node, path: str, seen: set[int]) -> None:
        if id(node) in seen:  # an alias: already checked where its anchor is
            return
        seen.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                self._check_unique(item, f"{path}[{i}]", seen)
        elif isinstance(node, yaml.MappingNode):
            lines: dict[Any, int] = {}
            for key_node, value_node in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self._key(key_node)
                line = key_node.start_mark.line + 1
                if key in lines:
                    raise DuplicateKeyError(_key_path(path, key), line, lines[key])
                lines[key] = line
                self._check_unique(value_node, _key_path(path, key), seen)

    def _key(self, node: yaml.Node) -> Any:
        """A key as the loader will build it (``1`` and ``"1"`` differ), or its text."""
        if isinstance(node, yaml.ScalarNode):
            try:
                return self.construct_object(node)
            except yaml.YAMLError:
                return node.value
        return f"<{node.tag} at line {node.start_mark.line + 1}>"  # a complex key: never equal


def load_yaml(text: str) -> Any:
    r"""``yaml.safe_load`` that raises :class:`DuplicateKeyError` for a key written twice.

    Examples
    --------
    >>> load_yaml("a: 1\nb: {c: 2}")
    {'a': 1, 'b': {'c': 2}}
    >>> load_yaml("a: 1\nb: {c: 2, c: 3}")
    Traceback (most recent call last):
    ...
    flowerbed.core.scenario.DuplicateKeyError: b.c: duplicate key at line 2 (first at line 2)
    """
    return yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader: builds plain data only


def parse_override(text: str) -> tuple[list[str], Any]:
    """Split ``a.b.c=value`` into a key path and a YAML-parsed value."""
    if "=" not in text:
        raise ScenarioError([f"--set {text!r}: expected key.path=value"], "--set")
    key, _, raw = text.partition("=")
    path = key.strip().split(".")
    if not all(path):
        raise ScenarioError([f"--set {text!r}: empty key in {key!r}"], "--set")
    try:
        value = load_yaml(raw) if raw.strip() else ""
    except DuplicateKeyError as exc:
        raise ScenarioError([f"--set {text!r}: {exc.problem()}"], "--set") from None
    except yaml.YAMLError:
        value = raw
    return path, value


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Return a copy of ``data`` with each ``key.path=value`` applied."""
    out = json.loads(json.dumps(data))
    for text in overrides:
        path, value = parse_override(text)
        node = out
        for depth, key in enumerate(path[:-1]):
            child = node.get(key)
            if isinstance(child, str):
                # ``engine: inline`` / ``learner: sgd`` shorthand: keep the name.
                child = {"name": child}
            elif child is not None and not isinstance(child, dict):
                where = ".".join(path[: depth + 1])
                raise ScenarioError(
                    [
                        f"--set {text!r}: {where} is {json.dumps(child)}, a value, not a "
                        f"section; it has no key {path[depth + 1]!r}"
                    ],
                    "--set",
                )
            if child is None:
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
        data = load_yaml(p.read_text())
    except DuplicateKeyError as exc:
        raise ScenarioError([exc.problem()], str(p)) from None
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
